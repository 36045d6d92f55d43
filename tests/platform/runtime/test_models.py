"""The model families reproduce the reference logits through the production loader."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from ripple.errors import RippleError
from ripple.platform.runtime.loading import load_model

FAMILIES = ["llada-tiny", "dream-tiny"]


def _logits(lm, ids, **kw):
    pos = torch.arange(ids.shape[1])[None].expand_as(ids)
    return lm.model(ids, pos, **kw).logits


@pytest.mark.parametrize("name", FAMILIES)
def test_golden_logits_match(golden, name):
    lm = load_model(str(golden / name), dtype="float32", device="cpu")
    exp = load_file(golden / name / "expected.safetensors")
    got = _logits(lm, exp["input_ids"])
    assert got.shape == exp["logits"].shape
    assert (got - exp["logits"]).abs().max().item() < 1e-4


@pytest.mark.parametrize("name", FAMILIES)
def test_sharded_copy_loads_identically(golden, tmp_path, name):
    src = golden / name
    tensors = load_file(src / "model.safetensors")
    keys = sorted(tensors)
    half = len(keys) // 2
    shards = {"model-00001-of-00002.safetensors": keys[:half], "model-00002-of-00002.safetensors": keys[half:]}
    weight_map = {}
    for fname, ks in shards.items():
        save_file({k: tensors[k].contiguous() for k in ks}, tmp_path / fname, metadata={"format": "pt"})
        weight_map.update({k: fname for k in ks})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    shutil.copy(src / "config.json", tmp_path / "config.json")
    exp = load_file(src / "expected.safetensors")
    a = _logits(load_model(str(src), "float32", "cpu"), exp["input_ids"])
    b = _logits(load_model(str(tmp_path), "float32", "cpu"), exp["input_ids"])
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_dtypes_load_and_stay_close(golden, name, dtype):
    lm = load_model(str(golden / name), dtype=dtype, device="cpu")
    assert lm.model.embed.weight.dtype == getattr(torch, dtype)
    exp = load_file(golden / name / "expected.safetensors")
    got = _logits(lm, exp["input_ids"]).float()
    ref = exp["logits"]
    # low precision on random weights: close in relative terms and mostly the same top-1
    assert (got - ref).abs().max().item() < 0.2 * ref.abs().max().item()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean().item() > 0.85


@pytest.mark.parametrize("name", FAMILIES)
def test_boolean_and_additive_masks_agree(golden, name):
    lm = load_model(str(golden / name), "float32", "cpu")
    ids = load_file(golden / name / "expected.safetensors")["input_ids"][:1]
    T = ids.shape[1]
    allowed = torch.rand(T, T, generator=torch.Generator().manual_seed(0)) > 0.3
    allowed |= torch.eye(T, dtype=torch.bool)
    additive = torch.zeros(T, T).masked_fill(~allowed, float("-inf"))
    a = _logits(lm, ids, attn_mask=allowed[None, None])
    b = _logits(lm, ids, attn_mask=additive[None, None])
    full = _logits(lm, ids)
    assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(a, full, atol=1e-3)  # the mask really restricts attention


@pytest.mark.parametrize("name", FAMILIES)
def test_explicit_position_ids_are_used(golden, name):
    lm = load_model(str(golden / name), "float32", "cpu")
    ids = load_file(golden / name / "expected.safetensors")["input_ids"][:1]
    pos = torch.arange(ids.shape[1])[None]
    base = lm.model(ids, pos).logits
    shuffled = lm.model(ids, pos.flip(-1)).logits
    assert not torch.allclose(base, shuffled, atol=1e-3)
    # RoPE is relative: a constant offset leaves bidirectional attention unchanged
    assert torch.allclose(base, lm.model(ids, pos + 7).logits, atol=1e-4)


def test_special_ids_come_from_config(golden):
    lm = load_model(str(golden / "llada-tiny"), "float32", "cpu")
    cfg = json.loads((golden / "llada-tiny" / "config.json").read_text())
    assert lm.mask_id == cfg["mask_token_id"]
    assert cfg["eos_token_id"] in lm.eos_ids
    assert lm.max_positions == cfg["max_sequence_length"]
    assert lm.shift == 0 and load_model(str(golden / "dream-tiny"), "float32", "cpu").shift == 1


def test_block_opening_is_declared_by_the_family(golden):
    """Dream's block-opening commit (Fast-dLLM's Dream generation) is a family property, which the
    engine reads from the loaded model; a shifted family without it is rejected."""
    from dataclasses import replace

    from ripple.platform.runtime.engine import Engine
    from ripple.platform.runtime.models import get_family

    assert get_family("Dream").opening_commit and not get_family("llada").opening_commit
    for name, expected in (("llada-tiny", False), ("dream-tiny", True)):
        assert Engine.from_loaded(load_model(str(golden / name), "float32", "cpu")).opening_commit is expected
    with pytest.raises(ValueError, match="needs opening_commit"):
        replace(get_family("Dream"), opening_commit=False)


def _copy(src, dst):
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst


def test_bad_checkpoints_raise_one_line_errors(golden, tmp_path):
    with pytest.raises(RippleError, match="no config.json"):
        load_model(str(tmp_path), "float32", "cpu")
    d = _copy(golden / "llada-tiny", tmp_path / "a")
    (d / "config.json").write_text("{not json")
    with pytest.raises(RippleError, match="not valid JSON"):
        load_model(str(d), "float32", "cpu")
    d = _copy(golden / "llada-tiny", tmp_path / "b")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RippleError, match="unsupported model_type 'gpt2'.*dream, fast_dllm_qwen, llada"):
        load_model(str(d), "float32", "cpu")
    d = _copy(golden / "llada-tiny", tmp_path / "c")
    (d / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(RippleError, match="corrupt"):
        load_model(str(d), "float32", "cpu")
    d = _copy(golden / "llada-tiny", tmp_path / "d")
    (d / "model.safetensors").unlink()
    with pytest.raises(RippleError, match="no \\*.safetensors"):
        load_model(str(d), "float32", "cpu")


def test_hub_id_resolves_through_the_hub_cache(golden, tmp_path):
    """A hub id loads from the Hugging Face cache layout (offline here), like a downloaded model."""
    import os
    import subprocess
    import sys

    repo = tmp_path / "hub" / "models--golden-org--llada-tiny"
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(golden / "llada-tiny" / f, snap / f)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    argv = ["generate", "--model", "golden-org/llada-tiny", "--input-ids", "5,6,7", "--decoder", "default",
            "--gen-length", "8", "--block-length", "8", "--json"]
    proc = subprocess.run([sys.executable, "-m", "ripple.cli", *argv], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    local = subprocess.run([sys.executable, "-m", "ripple.cli", *argv[:2], str(golden / "llada-tiny"), *argv[3:]],
                           capture_output=True, text=True)
    assert json.loads(proc.stdout)["tokens"] == json.loads(local.stdout)["tokens"]
    missing = subprocess.run([sys.executable, "-m", "ripple.cli", *argv[:2], "nobody/absent", *argv[3:]],
                             capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "neither a local directory nor reachable" in missing.stderr
