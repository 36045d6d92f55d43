"""The field's decoders reproduce their authors' code through `ripple generate`:
dInfer's Threshold, Hierarchy and CreditDecoding inside dInfer's own loops on llada-tiny and
llada2-tiny (`dinfer_trajectories.json`), and PC-Sampler, DUS and SlowFast on llada-tiny
(`newer_decoders_trajectories.json`): output, every decoding forward's commits in order, and NFE
(Ripple makes no forward on a full block, nor a separate prefill or closing store forward)."""
import json
from math import inf, nan

import pytest

from ripple.cli import main

# the authors' keyword names -> Ripple's (../shared/golden/README.md; None -> the neutral value)
DINFER = {"threshold": "dinfer_threshold", "hierarchy": "hierarchy", "credit": "credit"}
RENAME = {"threshold": "tau", "low_threshold": "low_tau", "credit_alpha": "alpha", "boost_gamma": "gamma",
          "decay_beta": "beta", "lambda": "lambda", "alpha": "alpha", "steps": "steps", "base": "base",
          "confidence_threshold": "remask_tau", "k_exploration_steps": "explore_steps",
          "cycle_len_confidence_threshold": "span_tau", "cycle_length_stability_window": "window",
          "cycle_length_stability_std_dev_threshold": "span_std", "high_confidence_threshold": "fill_tau"}
NONE_IS = {"threshold": 1.0, "low_threshold": 0.0}


def _log(case):
    raw = case["steps_log"]
    return raw if isinstance(raw, list) else eval(raw, {"__builtins__": {}}, {"inf": inf, "nan": nan})


def _sets(params):
    out = []
    for key, value in params.items():
        out += ["--set", f"{RENAME[key]}={NONE_IS[key] if value is None else value}"]
    return out


def _run(capsys, tmp_path, argv):
    trace = tmp_path / "trace.jsonl"
    assert main([*argv, "--dtype", "float32", "--device", "cpu", "--json", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    return out, [json.loads(line) for line in trace.read_text().splitlines()]


def _dinfer_cases(golden):
    return [c for ck in ("llada-tiny", "llada2-tiny")
            for c in json.loads((golden / ck / "dinfer_trajectories.json").read_text())["cases"]]


def test_dinfer_cases_cover_the_three_decoders_and_their_rules(golden):
    cases = _dinfer_cases(golden)
    assert len(cases) == 32 and {c["decoder"] for c in cases} == set(DINFER)
    assert {c["cache"] for c in cases} == {"none", "prefix", "dual"}
    assert any(c["eos_stop"] for c in cases)  # the end-of-sequence stop fires somewhere
    assert sum(c["mask_id_exclusion_decisive"] for c in cases) == 2  # Threshold's mask-id exclusion decides


def test_dinfer_trajectories_forward_for_forward(golden, capsys, tmp_path):
    failed = []
    for case in _dinfer_cases(golden):
        ck, P, G = case["checkpoint"], case["prompt_length"], case["gen_length"]
        argv = ["generate", "--model", str(golden / ck), "--input-ids", ",".join(map(str, case["prompt"])),
                "--decoder", DINFER[case["decoder"]], *_sets(case["params"]), "--gen-length", str(G),
                "--block-length", str(case["block_length"]), "--cache", case["cache"]]
        if ck == "llada-tiny":  # llada2-tiny aligns to 0 and stops at an end-of-sequence by its family rule
            argv += ["--block-align", "absolute", "--stop-at-eos"]
        out, events = _run(capsys, tmp_path, argv)
        # the reference's decoding forwards: those whose block still held masks (not the prefill,
        # closing-store or wasted ones); commits at absolute positions -> response positions
        ref = [[[p - P, t] for p, t in e["committed"]] for e in _log(case) if (e["masked_before"] or 0) > 0]
        mine = [e["committed"] for e in events if e["phase"] in ("step", "resolve")]
        generated = case["generated"][:G]
        if case["eos_stop"]:  # equal up to the end of the block where dInfer's stop fired: its last decoded one
            upto = [e for e in _log(case) if (e["masked_before"] or 0) > 0][-1]["block"][1] - P
            same = out["tokens"][:upto] == generated[:upto] and upto < G
        else:
            same = out["tokens"] == generated
        if not (same and mine == ref and out["nfe"] == len(ref)):
            failed.append(f"{ck} {case['case']}: tokens {'equal' if same else 'differ'}, nfe {out['nfe']} "
                          f"(reference's decoding forwards {len(ref)}), commits {'equal' if mine == ref else 'differ'}")
    assert not failed, "\n".join(failed)


def _newer_cases(golden):
    return json.loads((golden / "llada-tiny" / "newer_decoders_trajectories.json").read_text())["cases"]


def test_newer_cases_cover_the_three_decoders_and_their_rules(golden):
    cases = _newer_cases(golden)
    assert len(cases) == 26 and {c["decoder"] for c in cases} == {"pc_sampler", "dus", "slow_fast"}
    assert any(c["masks_in_output"] for c in cases if c["decoder"] == "dus")  # DUS leaves masks somewhere
    assert any(len(c["nfe_per_block"]) > 1 and c["masks_in_output"] for c in cases)  # ... in a multi-block run


@pytest.mark.parametrize("decoder", ["pc_sampler", "dus", "slow_fast"])
def test_newer_trajectories_forward_for_forward(golden, capsys, tmp_path, decoder):
    mask = json.loads((golden / "llada-tiny" / "config.json").read_text())["mask_token_id"]
    failed = []
    for case in [c for c in _newer_cases(golden) if c["decoder"] == decoder]:
        G, L = case["gen_length"], case["block_length"]
        argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", ",".join(map(str, case["prompt"])),
                "--decoder", decoder, *_sets(case["params"]), "--gen-length", str(G), "--block-length", str(L),
                "--cache", "none"]
        if decoder == "pc_sampler":
            argv += ["--set", f"prior={golden / 'llada-tiny' / 'pc_sampler_p_baseline.json'}"]
        out, events = _run(capsys, tmp_path, argv)
        log = _log(case)
        decided = [e for e in events if e["phase"] == "step"]
        mine = [e["committed"] for e in decided]
        nfe = case["nfe"]
        if decoder == "slow_fast":  # its explore forwards on a block that is already full are not made
            ref_log = []
            for b in sorted({e["block"] for e in log}):
                forwards = [e for e in log if e["block"] == b]
                last = max(i for i, e in enumerate(forwards) if e["committed"])
                ref_log += forwards[:last + 1]
            log, nfe = ref_log, len(ref_log)
        ref = [e["committed"] for e in log]
        same = out["tokens"] == case["output"]
        if decoder == "dus":
            leftover = sum(mask in case["output"][b * L:(b + 1) * L] for b in range(G // L))
            nfe += leftover  # one forward per block whose last level left masks
            same = mask not in out["tokens"] and all(
                a == b for a, b in zip(out["tokens"], case["output"]) if b != mask)
            same &= [e["taken_back"] for e in decided] == [e["remasked"] for e in log]
            same &= sum(e["phase"] == "fill" for e in events) == leftover
        if not (same and mine == ref and out["nfe"] == nfe):
            failed.append(f"{case['case']} prompt {case['prompt'][:3]}...: tokens {'equal' if same else 'differ'}, "
                          f"nfe {out['nfe']} (expected {nfe}), commits {'equal' if mine == ref else 'differ'}")
    assert not failed, "\n".join(failed)
