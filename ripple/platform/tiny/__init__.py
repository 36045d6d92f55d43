"""The tiny embedded model: its tokenizer and its CPU training recipe."""
