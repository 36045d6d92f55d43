"""Bad input: one clear line on stderr, exit status 2, nothing on stdout, no traceback."""
import subprocess
import sys

import pytest

from ripple.cli import main


def _gen(golden, *extra, ids="5,6,7", model=None):
    return ["generate", "--model", model or str(golden / "llada-tiny"), f"--input-ids={ids}",
            "--gen-length", "32", "--block-length", "8", *extra]


CASES = [
    (["--decoder", "confidense"], "unknown decoder 'confidense' (did you mean 'confidence'?); registered: default, confidence"),
    (["--decoder", "confidence", "--set", "tau=1.5"], "tau=1.5 is invalid; accepted: float in [0.0, 1.0]"),
    (["--decoder", "confidence", "--set", "tau=abc"], "tau='abc' is not a number"),
    (["--decoder", "confidence", "--set", "lambda=0.1"], "no hyperparameter 'lambda'; accepted: tau, factor"),
    (["--decoder", "default", "--cache", "full"], "unknown cache policy 'full'; accepted: none, prefix, dual"),
    (["--decoder", "default", "--gen-length", "30"], "gen_length 30 is not divisible by block_length 8"),
    (["--decoder", "default", "--gen-length", "256"], "exceeds the model's 256 positions"),
]


@pytest.mark.parametrize("extra,message", CASES)
def test_bad_input_exits_2_with_one_line(golden, capsys, extra, message):
    assert main(_gen(golden, *extra)) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.count("\n") == 1 and message in cap.err


@pytest.mark.parametrize("ids", ["1,,2", "a,b", "", "1;2", "-3,4"])
def test_malformed_input_ids(golden, capsys, ids):
    assert main(_gen(golden, "--decoder", "default", ids=ids)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--input-ids" in err


def test_out_of_vocabulary_ids(golden, capsys):
    assert main(_gen(golden, "--decoder", "default", ids="5,999")) == 2
    assert "outside the model's vocabulary of 160" in capsys.readouterr().err


def test_missing_and_corrupt_checkpoints(golden, tmp_path, capsys):
    assert main(_gen(golden, "--decoder", "default", model=str(tmp_path / "nope"))) == 2
    assert "not found" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{broken")
    assert main(_gen(golden, "--decoder", "default", model=str(tmp_path))) == 2
    assert "config.json is not valid JSON" in capsys.readouterr().err
    (tmp_path / "config.json").write_text('{"model_type": "mamba"}')
    assert main(_gen(golden, "--decoder", "default", model=str(tmp_path))) == 2
    assert "unsupported model_type 'mamba' in config.json; supported: dream, llada" in capsys.readouterr().err


def test_prompt_without_tokenizer(golden, capsys):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--prompt", "hi", "--decoder", "default",
            "--gen-length", "8", "--block-length", "8"]
    assert main(argv) == 2
    assert "has no tokenizer files; pass --input-ids" in capsys.readouterr().err


def test_subprocess_prints_no_traceback(golden):
    proc = subprocess.run([sys.executable, "-m", "ripple.cli", *_gen(golden, "--decoder", "rpss")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_argparse_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--model", "x"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
