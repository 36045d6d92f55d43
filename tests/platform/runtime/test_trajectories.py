"""`ripple generate` reproduces the reference LLaDA / Fast-dLLM trajectories on llada-tiny."""
import json
import subprocess
import sys


from ripple.cli import main


def _cases(golden):
    return json.loads((golden / "llada-tiny" / "trajectories.json").read_text())


def _argv(golden, case):
    parts = case["case"].split("-")
    cache = parts[-1] if parts[-1] in ("prefix", "dual") else "none"
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
            "--decoder", parts[0], "--gen-length", str(case["gen_length"]), "--block-length",
            str(case["block_length"]), "--cache", cache, "--dtype", "float32", "--device", "cpu", "--json"]
    if parts[0] == "confidence":
        argv += ["--set", f"tau={parts[1]}"]
    return argv


def test_every_case_is_covered(golden):
    names = {c["case"] for c in _cases(golden)}
    assert {"default", "confidence-0.9", "confidence-0.5", "confidence-0.3",
            "confidence-0.5-prefix", "confidence-0.5-dual", "default-prefix"} <= names


def test_trajectories_token_for_token(golden, capsys):
    for case in _cases(golden):
        assert main(_argv(golden, case)) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["tokens"] == case["output"], case["case"]
        assert out["nfe"] == case["nfe"], case["case"]
        assert out["generated_tokens"] <= case["gen_length"]
        assert out["tps"] > 0 and out["canvas_tps"] >= out["tps"]


def test_console_script_matches_one_case(golden):
    case = next(c for c in _cases(golden) if c["case"] == "confidence-0.3")
    proc = subprocess.run([sys.executable, "-m", "ripple.cli", *_argv(golden, case)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["tokens"], out["nfe"]) == (case["output"], case["nfe"])
    for key in ("text", "decode_seconds", "generated_tokens", "tps", "canvas_tps"):
        assert key in out
