"""KLASS, EB-Sampler and WINO reproduce their authors' decoding loops on llada-tiny
(`../shared/golden/llada-tiny/baseline_trajectories.json`), via `ripple generate`."""
import json

from ripple.cli import main


def _cases(golden):
    return json.loads((golden / "llada-tiny" / "baseline_trajectories.json").read_text())


def _argv(golden, case):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
            "--decoder", case["decoder"], "--gen-length", str(case["gen_length"]), "--block-length",
            str(case["block_length"]), "--cache", "none", "--dtype", "float32", "--device", "cpu", "--json"]
    for key, value in case["params"].items():
        argv += ["--set", f"{key}={value}"]
    return argv


def test_cases_cover_every_baseline_and_exercise_the_rules(golden):
    cases = _cases(golden)
    assert len(cases) == 28
    assert {c["decoder"] for c in cases} == {"klass", "eb_sampler", "wino"}
    for name in ("klass", "eb_sampler", "wino"):  # each rule acts: some case needs fewer forwards than tokens
        assert any(c["nfe"] < c["gen_length"] for c in cases if c["decoder"] == name), name


def test_baseline_trajectories_token_for_token(golden, capsys):
    failed = []
    for i, case in enumerate(_cases(golden)):
        assert main(_argv(golden, case)) == 0
        out = json.loads(capsys.readouterr().out)
        if (out["tokens"], out["nfe"]) != (case["output"], case["nfe"]):
            failed.append(f"case {i}: {case['decoder']} {case['params']} nfe {out['nfe']} (reference {case['nfe']})")
    assert not failed, "\n".join(failed)
