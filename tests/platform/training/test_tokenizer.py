"""The tiny model's BPE tokenizer, loaded the way the platform loads any tokenizer."""
import json
import string

import pytest
from transformers import AutoTokenizer

from ripple.platform.training.tokenizer import build_tokenizer
from ripple.tasks import get_task


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bpe-tokenizer")
    build_tokenizer(out, vocab_size=384, per_task=3000)
    return out


@pytest.fixture(scope="module")
def tok(tok_dir):
    return AutoTokenizer.from_pretrained(str(tok_dir))


def test_the_three_files_are_written(tok_dir):
    assert {p.name for p in tok_dir.iterdir()} == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    special = json.loads((tok_dir / "special_tokens_map.json").read_text())
    assert special["mask_token"] == "<|mask|>" and special["eos_token"] == "<|eos|>"


def test_special_tokens_have_ids_0_to_3(tok):
    assert [tok.pad_token, tok.bos_token, tok.eos_token, tok.mask_token] == ["<|pad|>", "<|bos|>", "<|eos|>", "<|mask|>"]
    assert [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.mask_token_id] == [0, 1, 2, 3]
    assert len(tok) <= 384


def test_nothing_added_and_words_merge_but_digits_do_not(tok):
    text = "Q: Sam has 17 pens.\ndef f(x):\n    return x*12"
    ids = tok(text)["input_ids"]
    assert tok(text, add_special_tokens=True)["input_ids"] == ids
    assert not {tok.bos_token_id, tok.eos_token_id, tok.mask_token_id} & set(ids)
    assert len(ids) < 0.7 * len(text)  # words merge
    pieces = tok.convert_ids_to_tokens(tok("1234")["input_ids"])
    assert pieces == ["1", "2", "3", "4"]


def test_decode_round_trips_task_texts_exactly(tok):
    texts = ["x .  , !", "\tindented\n\n  two spaces ", string.printable[:-5], "unseen wörds ☃"]
    for name in ("arith", "pyfunc"):
        for ex in get_task(name).examples("test", 300):
            texts += [ex.prompt, ex.reference, ex.prompt + ex.reference]
    for text in texts:
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text


def test_special_tokens_are_skipped_on_decode(tok):
    ids = [tok.bos_token_id] + tok("a b")["input_ids"] + [tok.mask_token_id, tok.eos_token_id, tok.pad_token_id]
    assert tok.decode(ids, skip_special_tokens=True) == "a b"
    assert tok("<|mask|>")["input_ids"] == [tok.mask_token_id]


def test_building_is_deterministic(tok_dir, tmp_path):
    build_tokenizer(tmp_path, vocab_size=384, per_task=3000)
    assert (tmp_path / "tokenizer.json").read_text() == (tok_dir / "tokenizer.json").read_text()
