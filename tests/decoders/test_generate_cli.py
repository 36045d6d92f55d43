"""Every baseline decoder runs end to end through `ripple generate` on both golden families,
under each cache policy it supports."""
import json

import pytest

from ripple.cli import main
from ripple.decoders import get

BASELINES = ["klass", "eb_sampler", "wino", "lopa"]
CASES = [(d, m, c) for d in BASELINES for m in ("llada-tiny", "dream-tiny") for c in get(d).supported_caches]


@pytest.mark.parametrize("decoder,model,cache", CASES)
def test_generate(golden, capsys, decoder, model, cache):
    mask_id = json.loads((golden / model / "config.json").read_text())["mask_token_id"]
    argv = ["generate", "--model", str(golden / model), "--input-ids", "51,109,11,50,61,38,2,148", "--decoder", decoder,
            "--gen-length", "24", "--block-length", "8", "--cache", cache, "--dtype", "float32", "--device", "cpu",
            "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 24 and mask_id not in out["tokens"]
    assert out["decoder"] == decoder and out["cache"] == cache
    assert 3 <= out["nfe"] <= 24  # per block: the opening, then at most one forward per net commit
    assert (out["lookahead_nfe"] > 0) == get(decoder).uses_lookahead
