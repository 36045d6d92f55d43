"""The Python API (ripple/api.py) against the command line it underlies: the same tokens, NFE and text
as `ripple generate --json`, the same cell as `ripple eval --json`, batches equal to single prompts,
and every bad input the command refuses raised as a RippleError carrying the line it prints."""
import ast
import json
from pathlib import Path

import pytest

import ripple
from ripple.cli import build_parser, decode_kwargs, main, parse_ids
from ripple.errors import RippleError
from tests.test_cli import CASES as GENERATE_CASES, _gen

TIMING = ("decode_seconds", "tps", "canvas_tps", "throughput")  # wall-clock figures: never equal twice


def _untimed(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


@pytest.mark.parametrize("model", ["ripple-tiny", "ripple-tiny-bd"])
def test_generate_equals_the_command_for_every_cache(capsys, model):
    for cache in ("none", "prefix", "dual"):
        argv = ["generate", "--model", model, "--prompt", "12+7=", "--decoder", "rps", "--gen-length", "32",
                "--block-length", "16", "--cache", cache, "--set", "tau_pivot=0.5", "--json"]
        assert main(argv) == 0
        printed = json.loads(capsys.readouterr().out)
        out = ripple.generate(model, "12+7=", "rps", gen_length=32, block_length=16, cache=cache, tau_pivot=0.5)
        assert _untimed(out.to_dict()) == _untimed(printed)
        assert printed["text"] is not None and len(printed["tokens"]) == 32 and printed["cache"] == cache


def test_a_batch_of_prompts_equals_single_prompts():
    lm = ripple.load("ripple-tiny")
    prompts = ["3+4=", [5, 6, 7, 8], "10*2="]
    batch = ripple.generate(lm, prompts, "confidence", gen_length=32, block_length=16, cache="prefix")
    singles = [ripple.generate(lm, p, "confidence", gen_length=32, block_length=16, cache="prefix") for p in prompts]
    assert isinstance(batch, list) and len(batch) == 3
    assert [(b.tokens, b.nfe, b.text, b.prompt) for b in batch] == [(s.tokens, s.nfe, s.text, s.prompt) for s in singles]


def test_evaluate_equals_the_command(capsys, tmp_path):
    samples = tmp_path / "samples.jsonl"
    argv = ["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "confidence", "--limit", "10",
            "--samples-out", str(samples), "--json"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    result = ripple.evaluate("ripple-tiny", "arith", "confidence", limit=10)
    assert _untimed(result.summary) == _untimed(printed) and result.n == 10
    assert (result.accuracy_lo, result.accuracy_hi) == result.interval and result.accuracy_lo <= result.accuracy
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    mine = result.samples.select("sample_id", "completion", "correct", "nfe", "generated_tokens").to_dicts()
    assert mine == [{k: r[k] for k in mine[0]} for r in rows]
    assert result.mcnemar(result) == 1.0


def test_lengths_default_from_the_generation_config_else_one_default(golden, capsys):
    from ripple.platform.experiments.calls import default_lengths

    assert default_lengths("ripple-tiny") == (ripple.api.DEFAULT_GEN_LENGTH, ripple.api.DEFAULT_BLOCK_LENGTH)
    assert default_lengths(golden / "diffusion-gemma-tiny") == (16, ripple.api.DEFAULT_BLOCK_LENGTH)  # max_new_tokens
    assert default_lengths("ripple-tiny", 64) == (64, 16)
    assert main(["generate", "--model", "ripple-tiny", "--prompt", "1+1=", "--decoder", "confidence", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["gen_length"], printed["block_length"], len(printed["tokens"])) == (48, 16, 48)


# ---------------------------------------------------------------------------- bad input
def _api_call(argv: list[str]):
    """The API call a command line stands for (what the command itself calls)."""
    args = build_parser().parse_args(argv)
    if args.command == "generate":
        prompt = args.prompt if args.input_ids is None else parse_ids(args.input_ids)
        return lambda: ripple.generate(args.model, prompt, args.decoder, chat=args.chat, **decode_kwargs(args))
    if args.command == "eval":
        return lambda: ripple.evaluate(args.model, args.task, args.decoder, limit=args.limit, chat=args.chat or False,
                                       **decode_kwargs(args))
    return lambda: ripple.grid(args.spec, limit=args.limit, workers=args.workers, store=args.store)


def _bad_inputs(golden: Path, tmp: Path) -> list[list[str]]:
    (tmp / "broken").mkdir()
    (tmp / "broken" / "config.json").write_text("{broken")
    (tmp / "mamba").mkdir()
    (tmp / "mamba" / "config.json").write_text('{"model_type": "mamba"}')
    gen = [_gen(golden, *extra) for extra, _ in GENERATE_CASES]
    gen += [_gen(golden, "--decoder", "default", ids="5,999"), _gen(golden, "--decoder", "default", ids="5,150,7"),
            _gen(golden, "--decoder", "default", model=str(tmp / "nope")),
            _gen(golden, "--decoder", "default", model=str(tmp / "broken")),
            _gen(golden, "--decoder", "default", model=str(tmp / "mamba")),
            ["generate", "--model", str(golden / "llada-tiny"), "--prompt", "hi", "--decoder", "default",
             "--gen-length", "8", "--block-length", "8"],
            ["generate", "--model", "ripple-tiny", "--input-ids", "5,6", "--chat", "--decoder", "default"],
            ["generate", "--model", "ripple-tiny", "--prompt", "x", "--decoder", "renoise"],
            ["generate", "--model", "ripple-tiny", "--prompt", "", "--decoder", "rps"]]
    evals = [["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "default", "--limit", "0"],
             ["eval", "--model", "ripple-tiny", "--task", "arithm", "--decoder", "default"],
             ["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "confidence", "--gen-length", "30",
              "--block-length", "8"],
             ["eval", "--model", str(golden / "llada-tiny"), "--task", "arith", "--decoder", "default"]]
    grids = [["grid", "no-such-spec"], ["grid", "demo", "--limit", "0"], ["grid", "demo", "--workers", "0"]]
    return gen + evals + grids


def test_every_bad_input_the_command_refuses_raises_the_same_line_from_the_api(golden, tmp_path, capsys):
    cases = _bad_inputs(golden, tmp_path)
    assert len(cases) == len(GENERATE_CASES) + 16
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        with pytest.raises(RippleError) as raised:
            _api_call(argv)()
        assert err == f"ripple {argv[0]}: error: {raised.value}\n", argv


def test_a_decoder_argument_that_is_no_decoder_is_one_line():
    with pytest.raises(RippleError, match="decoder must be a registered name or a Scheduler"):
        ripple.generate("ripple-tiny", "1+1=", 42)
    with pytest.raises(RippleError, match="prompts takes a text, a list of token ids"):
        ripple.generate("ripple-tiny", [], "default")


@pytest.fixture
def no_load(monkeypatch):
    """Loading weights fails the test: a refusal must come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the weights loaded before the bad input was refused")

    monkeypatch.setattr("ripple.platform.runtime.loading.load_model", forbidden)


@pytest.mark.parametrize("prompts,which", [("", "the prompt"), ([[]], "the prompt"), ([[5, 6], ""], "prompt 2 of 2"),
                                           (["1+1=", []], "prompt 2 of 2"), ([[], "1+1="], "prompt 1 of 2")])
def test_an_empty_prompt_raises_before_the_weights_load(no_load, prompts, which):
    with pytest.raises(RippleError) as raised:
        ripple.generate("ripple-tiny", prompts, "rps")
    assert str(raised.value) == f"{which} is empty; a prompt needs at least one token (--prompt text or --input-ids)"


def test_evaluate_checks_its_seed_and_the_tokenizer_before_the_weights_load(golden, no_load):
    for seed in ("x", True, 1.5):
        with pytest.raises(RippleError, match="seed must be an integer, got "):
            ripple.evaluate("ripple-tiny", "arith", "default", limit=1, seed=seed)
    with pytest.raises(RippleError, match="llada-tiny' has no tokenizer; tasks need one to build prompts$"):
        ripple.evaluate(str(golden / "llada-tiny"), "arith", "default", limit=1)


def test_without_a_decoder_the_family_decides_and_settings_go_to_that_decoder(golden):
    from ripple.platform.experiments.calls import resolve_decoder

    assert resolve_decoder(None, "ripple-tiny").name == "rps"
    assert resolve_decoder(None, "ripple-tiny", {"tau": 0.8}).params.tau == 0.8
    assert resolve_decoder(None, golden / "diffusion-gemma-tiny").name == "renoise"
    with pytest.raises(RippleError, match="rps hyperparameter tau=2.0 is invalid"):
        resolve_decoder(None, "ripple-tiny", {"tau": 2})


# ---------------------------------------------------------------------------- shape
ROOT = Path(ripple.__file__).parent


def test_the_command_line_is_a_shell_of_short_functions_and_the_test_kit_does_not_use_it():
    tree = ast.parse((ROOT / "cli.py").read_text())
    long = [(f.name, f.end_lineno - f.lineno + 1) for f in ast.walk(tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.end_lineno - f.lineno + 1 > 80]
    assert long == []
    for module in ("testing.py", "platform/experiments/harness.py"):
        imports = [n for n in ast.walk(ast.parse((ROOT / module).read_text())) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in imports if (n.module or "").split(".")[-1] == "cli" or (n.module or "") == "ripple.cli"]
