"""Training of the embedded ripple-tiny model: its BPE tokenizer and `ripple train-tiny`."""
