"""The field's decoders from the command line: every bad value is one line and exit 2, PC-Sampler's
prior is data (`ripple prior` builds one; a missing, malformed or foreign prior is refused)."""
import json

import pytest

from ripple.cli import main

BAD = [("dinfer_threshold", "tau", "1.5"), ("hierarchy", "tau", "-0.1"), ("hierarchy", "low_tau", "2"),
       ("credit", "tau", "1.01"), ("credit", "alpha", "-1"), ("credit", "gamma", "0"), ("credit", "beta", "1.5"),
       ("pc_sampler", "lambda", "-0.5"), ("pc_sampler", "alpha", "0"), ("pc_sampler", "steps", "-3"),
       ("dus", "base", "1"), ("dus", "remask_tau", "1.2"), ("slow_fast", "explore_steps", "0"),
       ("slow_fast", "span_tau", "1.5"), ("slow_fast", "window", "0"), ("slow_fast", "span_std", "-1"),
       ("slow_fast", "fill_tau", "2"), ("dus", "base", "two")]


def _generate(golden, decoder, *sets, extra=()):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", "51,109,11,50,61,38,2,148",
            "--decoder", decoder, "--gen-length", "16", "--block-length", "8", "--dtype", "float32", "--json"]
    for item in sets:
        argv += ["--set", item]
    return argv + list(extra)


def _refused(capsys, argv, *words):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1, cap.err
    for word in words:
        assert word in cap.err, cap.err
    return cap.err


@pytest.mark.parametrize("decoder,key,value", BAD)
def test_a_bad_value_of_every_new_hyperparameter_is_one_line(golden, capsys, decoder, key, value):
    _refused(capsys, _generate(golden, decoder, f"{key}={value}"), key, "accepted")


def test_ripple_prior_builds_a_prior_that_pc_sampler_reads(capsys, tmp_path, golden):
    out = tmp_path / "prior.json"
    assert main(["prior", "--model", "ripple-tiny", "--task", "arith", "--task", "pyfunc", "--limit", "40",
                 "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    prior = json.loads(out.read_text())
    assert prior["num_token"] == sum(prior["p_baseline_dict"].values()) > 0 and prior["vocab_size"] == 512
    assert main(["generate", "--model", "ripple-tiny", "--prompt", "12+7=", "--decoder", "pc_sampler", "--set",
                 f"prior={out}", "--gen-length", "16", "--block-length", "8", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 16
    # the authors' own JSON-lines route: one field of each line
    lines = tmp_path / "q.jsonl"
    lines.write_text('{"question": "1+1=?"}\n{"question": "2+2=?"}\n')
    assert main(["prior", "--model", "ripple-tiny", "--jsonl", str(lines), "--out", str(tmp_path / "q.json")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "q.json").read_text())["num_token"] > 0
    lines.write_text('{"text": "no question"}\n')
    _refused(capsys, ["prior", "--model", "ripple-tiny", "--jsonl", str(lines), "--out", str(tmp_path / "r.json")],
             "line 1", "'question'")
    assert not (tmp_path / "r.json").exists()


def test_a_missing_malformed_or_foreign_prior_is_one_line(golden, capsys, tmp_path):
    _refused(capsys, _generate(golden, "pc_sampler", f"prior={tmp_path / 'nope.json'}"), "does not exist",
             "ripple prior")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _refused(capsys, _generate(golden, "pc_sampler", f"prior={bad}"), "malformed")
    bad.write_text('{"num_token": 10, "token_frequency_dict": {"3": 4}}')  # the script's key, not load_baseline's
    _refused(capsys, _generate(golden, "pc_sampler", f"prior={bad}"), "malformed", "p_baseline_dict")
    bad.write_text('{"num_token": 10, "p_baseline_dict": {"3": 4, "900": 2}}')  # llada-tiny has 160 ids
    _refused(capsys, _generate(golden, "pc_sampler", f"prior={bad}"), "another vocabulary", "160")
    bad.write_text('{"num_token": 10, "p_baseline_dict": {"3": 4}, "vocab_size": 512}')
    _refused(capsys, _generate(golden, "pc_sampler", f"prior={bad}"), "another vocabulary", "160")
    # steps that do not split evenly over the blocks
    prior = golden / "llada-tiny" / "pc_sampler_p_baseline.json"
    _refused(capsys, _generate(golden, "pc_sampler", f"prior={prior}", "steps=5"), "steps=5", "number of blocks (2")


def test_block_align_takes_response_or_absolute(golden, capsys):
    with pytest.raises(SystemExit) as info:
        main(_generate(golden, "dinfer_threshold", extra=["--block-align", "start"]))
    assert info.value.code == 2 and "--block-align" in capsys.readouterr().err
    assert main(_generate(golden, "dinfer_threshold", extra=["--block-align", "absolute", "--gen-length", "12"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 12  # blocks 8-16 and 16-20: the first holds the prompt, the last is cut short


def test_without_a_prior_pc_sampler_calibrates_uniformly_and_says_so_once(golden, capsys, caplog, tmp_path):
    """A model that ships no prior: the position-aware rule alone (f = 1 / V), one warning."""
    import logging

    with caplog.at_level(logging.WARNING, logger="ripple.decoders.pc_sampler"):
        assert main(_generate(golden, "pc_sampler")) == 0
        assert main(_generate(golden, "pc_sampler")) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    warned = [r.getMessage() for r in caplog.records if "ships no pc_sampler_prior.json" in r.getMessage()]
    assert len(warned) <= 1 and plain[0]["tokens"] == plain[1]["tokens"]
    # a prior that counts every id alike is the same calibration as none
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({"num_token": 160, "p_baseline_dict": {str(i): 1 for i in range(160)}}))
    assert main(_generate(golden, "pc_sampler", f"prior={flat}")) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == plain[0]["tokens"]
