"""`python -m ripple.bench --load-memory DIR`'s prompt: ordinary text, so `ripple generate` neither refuses it (a
mask id in a prompt is a hole) nor stops on it, on every checkpoint (ripple-tiny's mask id is 3: the ids 1..16 of
old were refused)."""
import json
import shutil

import pytest

from ripple.bench.load_memory import prompt_ids
from ripple.platform.runtime.loading import EMBEDDED, load_tokenizer, read_config


@pytest.mark.parametrize("name", ["ripple-tiny", "llada-tiny", "dream-tiny", "fast-dllm-v2-tiny"])
def test_the_prompt_holds_no_special_id(name, golden):
    path = EMBEDDED.get(name) or golden / name
    ids = prompt_ids(path)
    tok = load_tokenizer(path)  # the golden checkpoints have none: config.json's ids then
    special = set(tok.all_special_ids) if tok is not None else set()
    for key, value in read_config(path).items():
        if key.endswith("token_id") and value is not None:
            special |= set(value) if isinstance(value, list) else {value}
    assert special  # every one names at least its mask or end id
    assert len(ids) == 16 and not special & set(ids)


def test_without_a_tokenizer_the_lowest_ids_config_names_as_no_special_token(tmp_path):
    shutil.copy(EMBEDDED["ripple-tiny"] / "config.json", tmp_path / "config.json")
    cfg = read_config(tmp_path)
    special = {v for k, v in cfg.items() if k.endswith("token_id") and v is not None}
    assert 3 in special  # ripple-tiny's mask id
    ids = prompt_ids(tmp_path)
    assert ids == [i for i in range(1, 16 + len(special) + 1) if i not in special][:16]
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "eos_token_id": [1, 2]}))
    assert prompt_ids(tmp_path)[:2] == [i for i in range(4, 6) if i not in special]
