"""The qwen2 causal family (APD's verifier): Ripple's logits against transformers' Qwen2ForCausalLM on the
golden qwen2-verifier-tiny checkpoint, cached and padded forwards against plain ones, and the refusals
that keep a causal LM away from the decoders (and a dLLM away from `load_causal`).

The golden files store no verifier logits (shared/golden/README.md, "qwen2-verifier-tiny/": weights and
configs only; the APD cases store ids), so the reference here is transformers itself, run on the same file."""
import subprocess
import sys

import pytest
import torch

from ripple.errors import RippleError
from ripple.platform.runtime.causal import causal_forward, next_token_logits
from ripple.platform.runtime.loading import config_noise, load_causal, load_model

TOL = 1e-5


@pytest.fixture(scope="module")
def verifier(golden):
    return golden / "qwen2-verifier-tiny"


@pytest.fixture(scope="module")
def ours(verifier):
    return load_causal(str(verifier), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def reference(verifier):
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM.from_pretrained(str(verifier), dtype=torch.float32).eval()


def _ids(seed: int, shape: tuple[int, int], vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def test_loads_as_a_causal_lm(ours, verifier):
    import json

    cfg = json.loads((verifier / "config.json").read_text())
    assert ours.causal and ours.model_type == "qwen2" and ours.mask_id is None
    assert ours.eos_ids == (cfg["eos_token_id"],)
    assert ours.model.vocab_size == cfg["vocab_size"]


@pytest.mark.parametrize("seed,shape", [(0, (1, 1)), (1, (1, 17)), (2, (3, 40)), (3, (2, 128))])
def test_logits_equal_transformers_qwen2(ours, reference, seed, shape):
    ids = _ids(seed, shape, ours.model.vocab_size)  # [B, L]
    got = next_token_logits(ours, ids)  # [B, L, V]
    with torch.no_grad():
        want = reference(ids).logits  # [B, L, V]
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert float((got - want).abs().max()) <= TOL
    assert float(want.std()) > 1.0  # the random weights' logits spread (README: sd about 2.3): not a vacuous match


def test_left_padding_matches_each_row_alone(ours, reference):
    """A left-padded batch gives each row the logits it has alone (positions count real tokens only), as
    transformers gives them with position ids from the attention mask."""
    V = ours.model.vocab_size
    rows = [_ids(10, (1, 9), V)[0], _ids(11, (1, 14), V)[0], _ids(12, (1, 5), V)[0]]
    L = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, L - len(r):] = r
        mask[b, L - len(r):] = 1
    got = next_token_logits(ours, ids, mask)  # [B, L, V]
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        padded_ref = reference(ids, attention_mask=mask, position_ids=positions).logits
    for b, r in enumerate(rows):
        alone = next_token_logits(ours, r[None])[0]  # [len, V]
        assert float((got[b, L - len(r):] - alone).abs().max()) <= TOL
        assert float((got[b, L - len(r):] - padded_ref[b, L - len(r):]).abs().max()) <= TOL
    assert torch.isfinite(got).all()


def test_cached_extension_equals_one_forward(ours, reference):
    """A prefix forward, then chunks on its cache (APD's verifier steps), give the logits of one forward
    (to float32 rounding: attention over fewer fresh queries sums in another order; seen 1.1e-5 on
    logits of about 10)."""
    ids = _ids(20, (2, 30), ours.model.vocab_size)
    with torch.no_grad():
        want = reference(ids).logits
    out = causal_forward(ours, ids[:, :11])
    pieces = [out.logits]
    for a, b in ((11, 12), (12, 20), (20, 30)):
        out = causal_forward(ours, ids[:, a:b], past=out.kv)
        pieces.append(out.logits)
    assert out.kv.length == 30
    assert float((torch.cat(pieces, 1) - want).abs().max()) <= 5 * TOL


def test_future_tokens_do_not_change_earlier_rows(ours):
    ids = _ids(30, (1, 20), ours.model.vocab_size)
    other = ids.clone()
    other[0, 12:] = (other[0, 12:] + 1) % ours.model.vocab_size
    a, b = next_token_logits(ours, ids), next_token_logits(ours, other)
    assert torch.equal(a[:, :12], b[:, :12]) and not torch.allclose(a[:, 12:], b[:, 12:])


def test_decoders_refuse_a_causal_lm(verifier, golden):
    with pytest.raises(RippleError, match=r"is a causal LM \(qwen2\), not a diffusion LM: no decoder decodes it"):
        load_model(str(verifier), "float32", "cpu")
    with pytest.raises(RippleError, match="not a diffusion LM"):
        config_noise(str(verifier))
    with pytest.raises(RippleError, match=r"is a diffusion LM \(dream\), not a causal LM; causal model_types: qwen2"):
        load_causal(str(golden / "dream-tiny"), "float32", "cpu")
    with pytest.raises(RippleError, match="need a causal LM"):
        next_token_logits(load_model(str(golden / "dream-tiny"), "float32", "cpu"), torch.tensor([[5, 6]]))


@pytest.mark.parametrize("decoder", [[], ["--decoder", "confidence"]])
def test_generate_refuses_a_causal_lm_in_one_line(verifier, decoder):
    proc = subprocess.run([sys.executable, "-m", "ripple.cli", "generate", "--model", str(verifier),
                           "--input-ids", "5,6,7", *decoder], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a causal LM (qwen2), not a diffusion LM" in lines[0]
    assert "diffusion model_types:" in lines[0] and "Traceback" not in proc.stderr


def test_a_grid_spec_refuses_a_causal_lm_before_any_worker(verifier):
    from ripple.platform.experiments.spec import parse_spec

    raw = {"models": [str(verifier)], "tasks": ["arith"], "gen_lengths": [16], "block_lengths": [16],
           "decoders": ["default"]}
    with pytest.raises(RippleError, match=r"^grid spec t: model .* is a causal LM \(qwen2\), not a diffusion LM"):
        parse_spec(raw, "t")
