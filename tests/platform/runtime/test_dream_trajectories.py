"""`ripple generate` reproduces Fast-dLLM's Dream block decoding on dream-tiny
(`../shared/golden/dream-tiny/trajectories.json`): the block-opening forward commits the
block's first position, and under a cache the recomputed window starts at the block start."""
import json

from ripple.cli import main


def _cases(golden):
    return json.loads((golden / "dream-tiny" / "trajectories.json").read_text())


def test_cases_cover_every_cache_policy(golden):
    cases = _cases(golden)
    assert len(cases) == 16
    assert {c["cache"] for c in cases} == {"none", "prefix", "dual"}
    assert {c["params"]["tau"] for c in cases} == {0.9, 0.5, 0.3}


def test_dream_trajectories_token_for_token(golden, capsys, tmp_path):
    failed = []
    for case in _cases(golden):
        trace = tmp_path / f"{case['case']}.jsonl"
        argv = ["generate", "--model", str(golden / "dream-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
                "--decoder", case["decoder"], "--gen-length", str(case["gen_length"]), "--block-length",
                str(case["block_length"]), "--cache", case["cache"], "--dtype", "float32", "--device", "cpu",
                "--json", "--trace", str(trace)]
        for key, value in case["params"].items():
            argv += ["--set", f"{key}={value}"]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        if (out["tokens"], out["nfe"]) != (case["output"], case["nfe"]):
            failed.append(f"{case['case']}: nfe {out['nfe']} (reference {case['nfe']})")
        events = [json.loads(line) for line in trace.read_text().splitlines()]
        opens = [e for e in events if e["phase"] == "open"]  # one opening commit per block, at its first position
        L = case["block_length"]
        assert [e["committed"][0][0] for e in opens] == list(range(0, case["gen_length"], L)), case["case"]
    assert not failed, "\n".join(failed)
