"""train-tiny: LLaDA's SFT objective really trains, checkpoints resume exactly."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from ripple.platform.runtime.loading import load_model
from ripple.platform.training.train import PRESETS, train

from tests.clitools import run_cli


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """A 20-step micro run (it builds its BPE tokenizer, the run's costliest part, as every fresh run does)."""
    root = tmp_path_factory.mktemp("micro")
    return root, train(PRESETS["micro"](str(root / "m"), steps=20), progress=False)


def test_micro_run_lowers_the_loss_and_exports_a_loadable_llada_checkpoint(micro):
    tmp_path, summary = micro
    curve = json.loads((tmp_path / "m" / "training" / "curve.json").read_text())
    first = sum(c["loss"] for c in curve[:2]) / 2
    last = sum(c["loss"] for c in curve[-2:]) / 2
    assert last < 0.8 * first, curve
    assert summary["final_loss"] == curve[-1]["loss"]
    # the summary travels with the model: its output folder by name, not the training machine's path
    assert json.loads((tmp_path / "m" / "training_summary.json").read_text())["config"]["out"] == "m"
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["model_type"] == "llada"
    assert "model.transformer.blocks.0.ff_proj.weight" in load_file(tmp_path / "m" / "model.safetensors")
    lm = load_model(str(tmp_path / "m"), "float32", "cpu")  # the loader every checkpoint goes through
    assert lm.tokenizer is not None and lm.mask_id == lm.tokenizer.mask_token_id
    assert json.loads((tmp_path / "m" / "learning_curve.json").read_text()) == curve
    from PIL import Image

    with Image.open(tmp_path / "m" / "learning_curve.png") as img:
        img.verify()
        assert img.format == "PNG"


def test_the_data_stream_follows_the_mix_and_never_repeats_an_index():
    from ripple.platform.training.train import stream_source

    sources = [stream_source((2, 1), k) for k in range(300)]
    assert [t for t, _ in sources[:6]] == [0, 0, 1, 0, 0, 1]
    for task in (0, 1):
        indices = [i for t, i in sources if t == task]
        assert indices == list(range(len(indices)))  # each task reads its split in order, no gaps or repeats
    assert sum(t == 0 for t, _ in sources) == 200


STEPS = 60  # checkpoints every 10: a kill 0.3 s after the first lands 50 steps before the end


def _cmd(out):
    return [sys.executable, "-m", "ripple.cli", "train-tiny", "--out", str(out), "--preset", "micro",
            "--steps", str(STEPS)]


def test_killed_run_resumes_to_the_same_weights(tmp_path, micro):
    env = {**os.environ, "TQDM_DISABLE": "1"}
    for run in ("a", "b"):  # the micro run's tokenizer (same vocabulary, seed and tasks): neither run rebuilds it
        shutil.copytree(micro[0] / "m" / "training" / "tokenizer", tmp_path / run / "training" / "tokenizer")
    proc = subprocess.Popen(_cmd(tmp_path / "a"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    state = tmp_path / "a" / "training" / "state.pt"
    deadline = time.time() + 120
    while not state.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state.exists() and not (tmp_path / "a" / "model.safetensors").exists(), "kill came too late to test resume"
    step_at_kill = torch.load(state, weights_only=False)["step"]
    assert 0 < step_at_kill < STEPS
    resumed = subprocess.run(_cmd(tmp_path / "a"), capture_output=True, text=True, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at step {step_at_kill}" in resumed.stdout
    straight = subprocess.run(_cmd(tmp_path / "b"), capture_output=True, text=True, env=env)
    assert straight.returncode == 0
    a = load_file(tmp_path / "a" / "model.safetensors")
    b = load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_bad_training_input(tmp_path):
    proc = run_cli(["train-tiny", "--out", str(tmp_path), "--preset", "huge"])
    assert proc.returncode == 2 and "unknown preset 'huge'; accepted: tiny, micro, tiny-bd, micro-bd" in proc.stderr
    proc = run_cli(["train-tiny", "--out", str(tmp_path), "--steps", "0"])
    assert proc.returncode == 2 and "--steps must be positive" in proc.stderr
