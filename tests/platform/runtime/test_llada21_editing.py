"""LLaDA2.1 token editing: the 16 block-causal runs of inclusionAI's LLaDA2.1 `generate` on
llada2-tiny (../shared/golden/llada2-tiny/editing_trajectories.json), through `ripple generate`
with the documented mapping, forward for forward (commits and edits from the decode trace)."""
import json

import pytest

from ripple.cli import main


def _cases(golden):
    data = json.loads((golden / "llada2-tiny" / "editing_trajectories.json").read_text())
    return [c for c in data["cases"] if c["attention"] == "block_causal"]


def _argv(golden, case, cache, trace):
    """generate(threshold=T, editing_threshold=E, max_post_steps=M, num_to_transfer=K, eos_early_stop=S)."""
    edit = case["editing_threshold"]
    argv = ["generate", "--model", str(golden / "llada2-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
            "--decoder", "confidence", "--set", f"tau={case['threshold']}",
            "--set", f"max_post_steps={case['max_post_steps']}", "--set", f"k={case['num_to_transfer']}",
            "--gen-length", str(case["gen_length"]), "--block-length", str(case["block_length"]),
            "--cache", cache, "--dtype", "float32", "--device", "cpu", "--json", "--trace", str(trace)]
    if edit is not None:  # "off" in the reference: no T2T at all, Ripple's default edit_tau 1.0
        argv += ["--set", f"edit_tau={edit}"]
    return argv + (["--eos-early-stop"] if case["eos_early_stop"] else [])


def _last_block(case):
    """The block after which Ripple stops: the first whose final tokens hold an EOS in the response
    (the family rule), else the last block the reference decoded."""
    P, B, eos = len(case["prompt"]), case["block_length"], case["eos_id"]
    x = case["final_x"]
    for b in sorted(int(k) for k in case["nfe_per_block"]):
        if eos in x[P:(b + 1) * B]:
            return b
    return max(int(k) for k in case["nfe_per_block"])


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_llada21_block_causal_runs_forward_for_forward(golden, cache, capsys, tmp_path):
    cases = _cases(golden)
    assert len(cases) == 16
    stopped_early = 0
    for case in cases:
        trace = tmp_path / f"{case['case']}.jsonl"
        assert main(_argv(golden, case, cache, trace)) == 0
        out = json.loads(capsys.readouterr().out)
        P, where = len(case["prompt"]), (case["case"], cache)
        cut = case["generated"]  # the reference's output, cut after its first EOS
        assert out["tokens"][:len(cut)] == cut, where
        last = _last_block(case)
        ref_log = [s for s in case["steps_log"] if s["block"] <= last]
        assert out["nfe"] == sum(n for b, n in case["nfe_per_block"].items() if int(b) <= last), where
        stopped_early += last < max(int(b) for b in case["nfe_per_block"])
        # one decision per forward of the reference, in order: the step events of the trace
        events = [json.loads(line) for line in trace.read_text().splitlines()]
        steps = [e for e in events if e["phase"] in ("step", "post")]
        assert len(steps) == len(ref_log), where
        for ours, ref in zip(steps, ref_log):
            assert sorted(ours["committed"]) == sorted([p - P, t] for p, t in ref["committed"]), (where, ref)
            assert sorted(ours.get("edited", [])) == sorted([p - P, o, n] for p, o, n in ref["edited"]), (where, ref)
            assert ours["phase"] == ("step" if ref["phase"] == "fill" else "post"), (where, ref)
        assert out["edits"] == sum(len(s["edited"]) for s in ref_log), where
    # the reference decodes on after the block holding the first EOS in some runs: Ripple stops there
    assert stopped_early >= 1


def test_editing_and_post_forwards_happen_in_the_public_runs(golden):
    """The cases exercise what the rule adds: edits during filling and in post forwards, blocks ending
    on a no-edit post forward and at max_post_steps."""
    cases = _cases(golden)
    ends = [end for c in cases for end in c["block_end"].values()]
    assert "no_edit" in ends and "max_post_steps" in ends
    assert any(s["edited"] and s["phase"] == "fill" for c in cases for s in c["steps_log"])
    assert any(s["edited"] and s["phase"] == "post" for c in cases for s in c["steps_log"])


def test_shipped_llada21_grid_validates_with_a_dry_run(capsys):
    assert main(["grid", "llada2.1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "experiment llada2.1, 40 cells" in out and "models: inclusionAI/LLaDA2.1-mini" in out
    for name in ("default", "confidence(edit_tau=0.5, max_post_steps=16, tau=0.7)",
                 "confidence(edit_tau=0.0, max_post_steps=16, tau=0.5)", "confidence(tau=0.95)", "klass",
                 "eb_sampler", "wino", "lopa", "rps, rps(edit_tau=0.5, max_post_steps=16)"):
        assert name in out
    assert "gen_lengths: 256" in out and "block_lengths: 32" in out
