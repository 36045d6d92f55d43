"""RPS reproduces the independent reference trajectories on llada-tiny, via `ripple generate`."""
import json

import pytest

from ripple.cli import main


def _cases(golden):
    return json.loads((golden / "llada-tiny" / "rps_trajectories.json").read_text())


def test_rps_trajectories_token_for_token(golden, capsys):
    cases = _cases(golden)
    assert len(cases) >= 4
    for case in cases:
        argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
                "--decoder", "rps", "--gen-length", str(case["gen_length"]), "--block-length",
                str(case["block_length"]), "--cache", case["cache"], "--dtype", "float32", "--device", "cpu", "--json"]
        for key, value in case["params"].items():
            argv += ["--set", f"{key}={value}"]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["tokens"] == case["output"] and out["nfe"] == case["nfe"], case["params"]
        assert out["lookahead_nfe"] > 0


@pytest.mark.parametrize("model", ["llada-tiny", "dream-tiny"])
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_rps_runs_with_every_cache_on_both_families(golden, capsys, tmp_path, model, cache):
    trace = tmp_path / "trace.jsonl"
    argv = ["generate", "--model", str(golden / model), "--input-ids", "12,40,77,3,90,15", "--decoder", "rps",
            "--set", "lambda=0.2", "--set", "tau_pivot=0.5", "--set", "k_max=10", "--set", "r=0.1",
            "--gen-length", "32", "--block-length", "8", "--cache", cache, "--json", "--trace", str(trace)]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert 150 not in out["tokens"] and len(out["tokens"]) == 32
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    resolves = [e for e in events if e["phase"] == "resolve"]
    assert len(resolves) == out["lookahead_nfe"] > 0
    for e in resolves:
        assert {"pivot", "candidates", "chosen"} <= e.keys()
        assert all({"token", "entropy", "plausibility", "score"} <= c.keys() for c in e["candidates"])
