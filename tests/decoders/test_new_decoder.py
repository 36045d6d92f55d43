"""Adding a decoder is a one-file change: a module dropped into `ripple/decoders/` registers itself and
runs through `ripple generate`, `ripple grid` with `decoders: all` and the shared invariant tests."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

REPO = Path(__file__).resolve().parents[2]
THROWAWAY = '''"""`two_at_a_time`: commit the two most confident masked positions per step (a test decoder)."""
from dataclasses import dataclass

import torch

from .base import BlockState, Commit, Plan, Scheduler, greedy
from .params import HyperParams
from .registry import register


@dataclass(frozen=True)
class TwoParams(HyperParams):
    pass


@register
class TwoAtATime(Scheduler):
    name = "two_at_a_time"
    Params = TwoParams

    def step(self, state: BlockState) -> Plan:
        tokens, conf = greedy(state)
        k = min(2, int(state.masked.sum()))
        where = torch.sort(conf, descending=True, stable=True).indices[:k]
        return Plan(Commit(where, tokens[where]))
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the package and the invariant tests with one new module in ripple/decoders/."""
    root = tmp_path_factory.mktemp("plugin")
    shutil.copytree(REPO / "ripple", root / "ripple", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "ripple" / "decoders" / "two_at_a_time.py").write_text(THROWAWAY)
    (root / "tests" / "decoders").mkdir(parents=True)
    for rel in ("tests/__init__.py", "tests/conftest.py", "tests/decoders/__init__.py",
                "tests/decoders/test_invariants.py"):
        shutil.copy(REPO / rel, root / rel)
    return root


def run(tree: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    from tests.conftest import shared_dir

    env = {**os.environ, "PYTHONPATH": str(tree), "TQDM_DISABLE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "OMP_NUM_THREADS": "1", "RIPPLE_SHARED": str(shared_dir())}
    proc = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_a_dropped_in_decoder_runs_through_generate_grid_and_the_invariant_tests(tree, tmp_path):
    listed = run(tree, "-c", "import ripple, ripple.decoders as d; print(ripple.__file__); print(','.join(d.names()))")
    where, names = listed.stdout.split()
    names = names.split(",")
    assert where.startswith(str(tree)) and "two_at_a_time" in names and names[0] == "default" and names[-1] == "rps"

    out = run(tree, "-m", "ripple.cli", "generate", "--model", "ripple-tiny", "--prompt", "Write a function f(x) that "
              "returns x times 3 plus 4.\n", "--decoder", "two_at_a_time", "--gen-length", "16", "--block-length",
              "8", "--json")
    result = json.loads(out.stdout)
    assert result["decoder"] == "two_at_a_time" and result["nfe"] == 8  # two commits per forward, 16 positions

    spec = tmp_path / "all.yaml"
    spec.write_text("experiment: plugin\nmodels: [ripple-tiny]\ntasks: {pyfunc: {limit: 1}}\ndecoders: all\n"
                    "gen_lengths: [16]\nblock_lengths: [8]\ncaches: [none]\nworkers: {cpus: 1}\n")
    run(tree, "-m", "ripple.cli", "grid", str(spec), "--store", str(tmp_path / "store"), "--no-tracking",
        "--workers", "1")
    records = pl.concat([pl.read_parquet(p) for p in (tmp_path / "store" / "plugin" / "records").glob("*.parquet")])
    assert "two_at_a_time" in set(records["decoder"]) and records["error"].null_count() == records.height

    tests = run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/decoders/test_invariants.py",
                "-k", "two_at_a_time")
    assert "failed" not in tests.stdout and "error" not in tests.stdout
    assert int(tests.stdout.split(" passed")[0].split()[-1]) >= 12  # scripted and tiny-model invariants
