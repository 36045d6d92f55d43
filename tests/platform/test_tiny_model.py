"""The shipped ripple-tiny checkpoint: loads like any checkpoint and really solves its tasks."""
import json
import subprocess
import sys

import pytest

from ripple.cli import main
from ripple.decoders import build, names
from ripple.platform.engine import GenerationConfig
from ripple.platform.evaluate import evaluate_cell
from ripple.platform.loading import EMBEDDED, load_model
from ripple.tasks import get_task


@pytest.fixture(scope="module")
def tiny():
    return load_model("ripple-tiny", "float32", "cpu")


def test_checkpoint_is_small_and_in_llada_format(tiny):
    path = EMBEDDED["ripple-tiny"]
    assert (path / "model.safetensors").stat().st_size <= 25 * 2**20
    assert json.loads((path / "config.json").read_text())["model_type"] == "llada"
    assert (path / "README.md").exists()  # the model card
    assert tiny.model_type == "llada" and tiny.tokenizer is not None
    assert tiny.mask_id == tiny.tokenizer.mask_token_id and tiny.tokenizer.eos_token_id in tiny.eos_ids


def test_generate_from_prompt_text(capsys):
    prompt = "Q: Sam has 7 pens. He buys 5 more, then gives away 3. How many now?\nA: "
    assert main(["generate", "--model", "ripple-tiny", "--prompt", prompt, "--decoder", "default",
                 "--gen-length", "48", "--block-length", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["text"].startswith("7+5=12\n12-3=9\n#### 9")
    assert out["generated_tokens"] < 48 and out["nfe"] == 48


def test_chat_needs_a_template(capsys):
    assert main(["generate", "--model", "ripple-tiny", "--prompt", "hi", "--chat", "--decoder", "default",
                 "--gen-length", "16", "--block-length", "16"]) == 2
    assert "has no chat template" in capsys.readouterr().err


@pytest.mark.parametrize("task,floor", [("arith", 60.0), ("pyfunc", 40.0)])
def test_scores_well_above_chance_on_a_small_sample(tiny, task, floor):
    cell = evaluate_cell(tiny, get_task(task), build("default"), GenerationConfig(48, 16), limit=20, progress=False)
    assert cell.accuracy >= floor


def test_eval_command_json(capsys):
    assert main(["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "confidence", "--limit", "5",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 5 and {"accuracy", "mean_nfe", "tps", "canvas_tps"} <= out.keys()
    assert 0 <= out["accuracy"] <= 100 and out["mean_nfe"] < 48


def test_eval_bad_input(capsys):
    assert main(["eval", "--model", "ripple-tiny", "--task", "arth", "--decoder", "default"]) == 2
    assert "unknown task 'arth' (did you mean 'arith'?)" in capsys.readouterr().err
    assert main(["eval", "--model", "ripple-tiny", "--task", "arith", "--decoder", "default", "--limit", "0"]) == 2
    assert "--limit must be a positive" in capsys.readouterr().err


def test_demo_prints_every_decoder(capsys):
    assert main(["demo", "--limit", "2"]) == 0
    table = capsys.readouterr().out
    for name in names():
        assert f"| arith   | {name:<11} |" in table and f"| pyfunc  | {name:<11} |" in table


@pytest.mark.slow
def test_acceptance_scores_on_200_held_out_problems(tiny):
    """Issue 3: default >= 80 % (arith) / 60 % (pyfunc); confidence within 3 points at <= half the NFE."""
    cfg = GenerationConfig(48, 16)
    for task, floor in (("arith", 80.0), ("pyfunc", 60.0)):
        t = get_task(task)
        default = evaluate_cell(tiny, t, build("default"), cfg, limit=200, progress=False)
        conf = evaluate_cell(tiny, t, build("confidence", {"tau": "0.9"}), cfg, limit=200, progress=False)
        assert default.accuracy >= floor, (task, default.accuracy)
        assert abs(conf.accuracy - default.accuracy) <= 3.0, (task, default.accuracy, conf.accuracy)
        assert conf.mean_nfe <= 0.5 * default.mean_nfe, (task, conf.mean_nfe)
