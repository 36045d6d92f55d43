"""A grid never resumes over samples that other weights decoded: records carry the digest of the
checkpoint that decoded them, and a re-run after the checkpoint changed (a retrained ripple-tiny,
an overwritten directory) is refused with one line until `--fresh` or a new experiment."""
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file, save_file

from ripple.platform.experiments.store import ResultStore
from ripple.platform.runtime.loading import EMBEDDED, weights_digest

from tests.platform.gridtools import env, grid_cmd, run_grid, write_spec

pytestmark = pytest.mark.slow


def test_a_changed_checkpoint_is_refused_until_fresh(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(EMBEDDED["ripple-tiny"], ckpt)
    spec = write_spec(tmp_path / "g.yaml", f"experiment: w\nmodels: [{ckpt}]\ntasks: [arith]\nlimit: 2\n"
                                            "decoders: [confidence]\ngen_lengths: [48]\nblock_lengths: [16]\n"
                                            "workers: {cpus: 1, count: 1}\n")
    store_dir = tmp_path / "store"
    first = weights_digest(ckpt)
    assert run_grid(str(spec), "--store", str(store_dir), "--no-tracking")["computed"] == 2
    assert set(ResultStore(store_dir, "w").read()["weights"]) == {first}

    weights = load_file(ckpt / "model.safetensors")  # "retrain": one weight moves
    name = sorted(weights)[0]
    weights[name] = weights[name] + torch.full_like(weights[name], 1e-3)
    save_file(weights, ckpt / "model.safetensors", metadata={"format": "pt"})
    second = weights_digest(ckpt)
    assert second != first

    proc = subprocess.run(grid_cmd(str(spec), "--store", str(store_dir), "--no-tracking"), capture_output=True,
                          text=True, env=env(), timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"ripple grid: error: experiment 'w' holds 2 samples of {ckpt} decoded by other weights "
                                   f"({first}; {ckpt} is now {second}): re-run with --fresh to recompute them, "
                                   "or give a new --experiment")
    assert set(ResultStore(store_dir, "w").read()["weights"]) == {first}  # nothing was touched

    out = run_grid(str(spec), "--store", str(store_dir), "--no-tracking", "--fresh")
    assert out["computed"] == 2 and set(ResultStore(store_dir, "w").read()["weights"]) == {second}
    assert run_grid(str(spec), "--store", str(store_dir), "--no-tracking")["skipped"] == 2  # resumes as before
