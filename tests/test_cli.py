"""Bad input: one clear line on stderr, exit status 2, nothing on stdout, no traceback; and what the
command runs when a setting is left out (the decoder: the API's default)."""
import json
import subprocess
import sys

import pytest

from ripple.cli import main
from ripple.errors import RippleError


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
    assert "unsupported model_type 'mamba' in config.json; supported: diffusion_gemma, dream, fast_dllm_qwen, llada" in capsys.readouterr().err


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


# Bad paths and prompts are refused before any work starts: no model loads, no Ray starts.
UNWRITABLE = "/proc/ripple-nowhere"  # procfs takes no new files, not even from root


@pytest.fixture
def no_work(monkeypatch):
    """Make loading a model or running a grid or sweep (which starts Ray) fail the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the bad path was refused")

    for target in ("ripple.platform.runtime.loading.load_model", "ripple.platform.experiments.grid.run_grid",
                   "ripple.sweeps.run.run_sweep", "ripple.dashboards.report.build_report"):
        monkeypatch.setattr(target, forbidden)


def _refused(argv, capsys, *texts):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and all(text in cap.err for text in texts), cap.err


@pytest.mark.parametrize("where,text", [("missing/samples.jsonl", "directory missing does not exist"),
                                        (f"{UNWRITABLE}.jsonl", "cannot write in /proc"),
                                        (".", "is a directory")])
def test_eval_refuses_a_bad_samples_out_before_the_model_loads(tmp_path, monkeypatch, capsys, no_work, where, text):
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "default", "--samples-out", where]
    _refused(argv, capsys, f"ripple eval: error: --samples-out {where}: {text}")


def _bad_stores(tmp_path):
    (tmp_path / "a-file").write_text("")
    return [(UNWRITABLE, "cannot write in /proc"), (f"{UNWRITABLE}/deeper", f"directory {UNWRITABLE} does not exist"),
            (str(tmp_path / "a-file" / "store"), "a-file is not a directory")]


@pytest.mark.parametrize("command", [["grid", "demo"], ["sweep", "tiny-demo"]])
def test_grid_and_sweep_refuse_a_store_they_cannot_write_before_ray_starts(tmp_path, capsys, no_work, command):
    for store, text in _bad_stores(tmp_path):
        _refused([*command, "--store", store, "--no-tracking"], capsys, f"ripple {command[0]}: error: --store {store}", text)


def test_report_refuses_an_out_it_cannot_write(tmp_path, capsys, no_work):
    for out, text in _bad_stores(tmp_path):
        _refused(["report", "demo", "--store", str(tmp_path), "--out", out], capsys, f"ripple report: error: --out {out}", text)


def test_a_writable_store_that_does_not_exist_yet_is_accepted(tmp_path, monkeypatch, capsys):
    def run_grid(spec, store, **kwargs):
        raise RippleError(f"run_grid reached with {store}")

    monkeypatch.setattr("ripple.platform.experiments.grid.run_grid", run_grid)
    store = tmp_path / "store"
    _refused(["grid", "demo", "--store", str(store), "--no-tracking"], capsys, f"run_grid reached with {store}")
    assert not store.exists()  # checked, not created


def test_input_ids_with_the_mask_id_are_refused_before_the_model_loads(golden, capsys, no_work):
    _refused(_gen(golden, "--decoder", "default", ids="5,150,7"), capsys, "--input-ids contains the model's mask id 150")


def test_a_bad_store_is_one_line_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "ripple.cli", "grid", "demo", "--store", UNWRITABLE],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"ripple grid: error: --store {UNWRITABLE} (to be created): cannot write in /proc")


@pytest.mark.parametrize("command", ["grid", "sweep"])
def test_help_names_every_shipped_spec(capsys, command):
    from ripple.platform.experiments.spec import GRIDS_DIR, shipped_names
    from ripple.sweeps.spec import SPECS_DIR

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # undo argparse's wrapping
    for name in shipped_names(GRIDS_DIR if command == "grid" else SPECS_DIR):
        assert name in text, name


def test_an_empty_prompt_is_refused_before_the_model_loads(capsys, no_work):
    """--prompt "" (text) and --input-ids "" (ids) are one line and exit 2; no weights load."""
    empty = "ripple generate: error: the prompt is empty; a prompt needs at least one token (--prompt text or --input-ids)"
    _refused(["generate", "--model", "ripple-tiny", "--prompt", "", "--decoder", "rps"], capsys, empty)
    _refused(["generate", "--model", "ripple-tiny", "--prompt", ""], capsys, empty)  # without --decoder too
    _refused(["generate", "--model", "ripple-tiny", "--input-ids", "", "--decoder", "rps"], capsys,
             "--input-ids expects comma-separated token ids like 1,2,3, got ''")


def test_eval_refuses_a_model_without_tokenizer_before_it_loads(golden, capsys, no_work):
    _refused(["eval", "--model", str(golden / "llada-tiny"), "--task", "arith", "--decoder", "default"], capsys,
             f"ripple eval: error: model '{golden / 'llada-tiny'}' has no tokenizer; tasks need one to build prompts")


# ---------------------------------------------------------------------------- the default decoder
def test_generate_and_eval_without_decoder_run_the_api_s_default(capsys):
    """No --decoder: the decoder `ripple.generate` / `ripple.evaluate` run without one (RPS on ripple-tiny),
    the same tokens and the same cell."""
    import ripple
    from ripple.decoders import DEFAULT_DECODER

    assert main(["generate", "--model", "ripple-tiny", "--prompt", "1+1=", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    api = ripple.generate("ripple-tiny", "1+1=")
    assert printed["decoder"] == api.decoder == DEFAULT_DECODER == "rps"
    assert (printed["tokens"], printed["params"], printed["nfe"]) == (list(api.tokens), api.params, api.nfe)
    assert main(["eval", "--model", "ripple-tiny", "--task", "arith", "--limit", "5", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    cell = ripple.evaluate("ripple-tiny", "arith", limit=5)
    assert summary["decoder"] == cell.decoder == "rps" and summary["n"] == cell.n == 5
    assert (summary["params"], summary["accuracy"], summary["mean_nfe"]) == (cell.params, cell.accuracy, cell.mean_nfe)


def test_without_decoder_a_uniform_noise_family_runs_its_own(golden, capsys):
    """RPS decodes mask families only: on DiffusionGemma the default is renoise, from the command and the API."""
    import ripple

    model = str(golden / "diffusion-gemma-tiny")
    assert main(["generate", "--model", model, "--input-ids", "5,6,7", "--device", "cpu", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    api = ripple.generate(model, [5, 6, 7], device="cpu")
    assert printed["decoder"] == api.decoder == "renoise" and printed["tokens"] == list(api.tokens)


@pytest.mark.parametrize("command", ["generate", "eval"])
def test_help_names_the_default_decoder(capsys, command):
    from ripple.decoders import DEFAULT_DECODER, default_decoder

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (f"default: {DEFAULT_DECODER}, or the family's own where RPS cannot decode it: "
            f"{default_decoder('uniform')} on a uniform-noise family") in text
    assert default_decoder("mask") == DEFAULT_DECODER
