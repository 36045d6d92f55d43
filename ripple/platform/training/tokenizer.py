"""A small byte-level BPE tokenizer for the tiny embedded model, in Hugging Face format.

Trained deterministically on the synthetic tasks' train splits. Words merge into single
tokens, which roughly halves sequence length against characters (and so training and
decoding cost), while digits stay one token each so arithmetic remains digit by digit.
Byte-level pieces make decoding round-trip any text exactly, indentation included.
Nothing is added to encoded text automatically: the engine places special tokens itself.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD, BOS, EOS, MASK = "<|pad|>", "<|bos|>", "<|eos|>", "<|mask|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, MASK)  # ids 0..3, in this order
CORPUS_TASKS = ("arith", "pyfunc", "freefunc")


def corpus(seed: int = 0, per_task: int = 20_000, tasks: tuple[str, ...] = CORPUS_TASKS):
    """Prompt + reference texts from the first `per_task` train examples of each task."""
    from ...tasks import get_task

    for name in tasks:
        task = get_task(name, seed=seed)
        for ex in islice(task.iter_examples("train"), per_task):
            yield ex.prompt + ex.reference


def build_tokenizer(out_dir: Path, vocab_size: int = 512, seed: int = 0, per_task: int = 20_000,
                    tasks: tuple[str, ...] = CORPUS_TASKS) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json to `out_dir`, trained on
    the train splits of `tasks` (the tasks the model is trained on)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(seed, per_task, tasks), trainer)
    tok.save(str(out_dir / "tokenizer.json"))
    special = {"pad_token": PAD, "bos_token": BOS, "eos_token": EOS, "mask_token": MASK}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # would turn "x ." into "x." on decode
        "model_input_names": ["input_ids", "attention_mask"],
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
