"""Decoders and tasks from other distributions (ripple/plugins.py), through the guides' own code:
each guide's files are written to an empty folder and its commands run in a virtual environment
layered on this one (so the plugin is installed for real, and other tests never see it); broken
plugins are refused one at a time while everything else keeps working."""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import pytest

import ripple
from tests.platform.gridtools import seed_mlflow

PROJECT = Path(ripple.__file__).resolve().parents[1]
DOCS = PROJECT / "docs"
BLOCK = re.compile(r"```(\w+)(?: file=(\S+))?\n(.*?)```", re.S)

pytestmark = pytest.mark.slow


class Env:
    """A venv with --system-site-packages whose .pth makes this checkout and its packages importable."""

    def __init__(self, root: Path):
        self.root = root
        self.venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(self.venv)],
                       check=True)
        site = next(self.venv.glob("lib/python*/site-packages"))
        paths = [str(PROJECT), *[p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]]
        (site / "ripple-under-test.pth").write_text("\n".join(paths) + "\n")
        self.python = str(self.venv / "bin" / "python")
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "RAY_USAGE_STATS_ENABLED": "0",
                    "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
        self.env.pop("RAY_ADDRESS", None)

    def argv(self, line: str) -> list[str]:
        """A guide's command with its program mapped into this environment."""
        words = shlex.split(line)
        program = {"pip": [self.python, "-m", "pip"], "python": [self.python], "ripple": [self.python, "-m", "ripple.cli"]}
        return program[words[0]] + words[1:]

    def run(self, line: str, cwd: Path, ok: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(line), cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if ok:
            _check(line, proc)
        return proc

    def run_ripple(self, lines: list[str], cwd: Path, ok: bool = True,
                   timeout: int = 900) -> list[subprocess.CompletedProcess]:
        """`ripple` commands in order, in one process of this environment: each calls `ripple.cli.main`
        with its own exit status and its own stdout and stderr (file descriptors 1 and 2, so whatever
        writes there, logging and Ray included, is caught), and none pays the interpreter's start-up and
        imports again. The process starts after the plugin is installed, so it finds it as a fresh one would."""
        out = cwd / ".ripple-batch.json"
        batch = subprocess.run([self.python, "-c", _BATCH, str(out), json.dumps(lines)], cwd=cwd, env=self.env,
                               capture_output=True, text=True, timeout=timeout)
        assert batch.returncode == 0, f"{lines}\n{batch.stdout[-2000:]}\n{batch.stderr[-3000:]}"
        done = json.loads(out.read_text())
        out.unlink()
        procs = [subprocess.CompletedProcess(self.argv(r["line"]), r["returncode"], r["stdout"], r["stderr"])
                 for r in done]
        assert [p.args for p in procs] == [self.argv(line) for line in lines]
        for line, proc in zip(lines, procs):
            if ok:
                _check(line, proc)
        return procs


def _check(line: str, proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


# `Env.run_ripple`'s process: argv[1] is where the results go, argv[2] the command lines (JSON).
_BATCH = """
import json, os, shlex, sys, tempfile, traceback
from ripple.cli import main
done = []
for line in json.loads(sys.argv[2]):
    words = shlex.split(line)
    assert words[0] == "ripple", line
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            try:
                code = main(words[1:])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os.dup2(saved[0], 1); os.dup2(saved[1], 2); os.close(saved[0]); os.close(saved[1])
        text = []
        for f in (out, err):
            f.seek(0)
            text.append(f.read().decode("utf-8", "replace"))
    done.append({"line": line, "returncode": code, "stdout": text[0], "stderr": text[1]})
with open(sys.argv[1], "w") as f:
    json.dump(done, f)
"""


@pytest.fixture(scope="module")
def env(mlflow_db):
    root = Path(tempfile.mkdtemp(prefix="ripple-plugins-"))
    seed_mlflow(root, mlflow_db)  # the guides' grids track there
    try:
        yield Env(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_guide(guide: Path, env: Env, folder: Path, then: tuple[str, ...] = ()) -> dict[str, subprocess.CompletedProcess]:
    """Write the guide's files and run its commands in order, as a reader would, then the test's own
    `then` commands; command -> result. A run of `ripple` commands with no other command between them
    shares one process (`Env.run_ripple`); the guide's files are written first, since no command
    reads or writes them but the ones that name them."""
    folder.mkdir(parents=True)
    lines = []
    for lang, name, body in BLOCK.findall(guide.read_text()):
        if name:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(body)
        elif lang == "sh":
            lines += [line for line in body.splitlines() if line.strip()]
    results, pending = {}, []
    for line in [*lines, *then, None]:
        if line is not None and line.split()[0] == "ripple":
            pending.append(line)
            continue
        results.update(zip(pending, env.run_ripple(pending, folder)) if pending else ())
        pending = []
        if line is not None:
            results[line] = env.run(line, folder)
    return results


def test_the_decoder_guide_from_an_empty_folder_to_a_leaderboard_row(env):
    folder = env.root / "decoder-guide"
    done = run_guide(DOCS / "adding-a-decoder.md", env, folder, then=("ripple decoders --json",))
    listed = done.pop("ripple decoders --json")
    out = {line.split()[0] + " " + line.split()[1]: r.stdout for line, r in done.items()}
    try:
        assert "1 passed" in out["python -m"]  # the plugin's own suite, on ripple.testing's checks
        row = next(r for r in json.loads(listed.stdout) if r["decoder"] == "lowest_entropy")
        assert row["provider"] == "ripple-lowest-entropy==0.1.0"
        assert row["hyperparameters"] == [{"name": "max_entropy", "default": 0.5, "accepted": "float in [0.0, inf]",
                                           "search": [0.1, 2.0], "doc": row["hyperparameters"][0]["doc"]}]
        assert "ripple-lowest-entropy==0.1.0" in out["ripple decoders"]
        # the grid's records carry the distribution and version; built-in rows would carry none
        frame = pl.read_parquet(sorted((folder / "results").rglob("*.parquet")))
        assert frame.height == 4 and set(frame["decoder"]) == {"lowest_entropy"} and frame["error"].is_null().all()
        assert set(frame["plugins"]) == {json.dumps({"decoder": "ripple-lowest-entropy==0.1.0"}, separators=(",", ":"))} \
            or {json.loads(p)["decoder"] for p in frame["plugins"]} == {"ripple-lowest-entropy==0.1.0"}
        board = (folder / "results" / "leaderboard" / "leaderboard.md").read_text()
        assert "| lowest_entropy |" in board
        assert "max_entropy" in out["ripple sweep"]
        eval_line = next(line for line in done if line.startswith("ripple eval"))
        assert "accuracy" in done[eval_line].stdout
    finally:
        env.run("pip uninstall -y ripple-lowest-entropy", folder)
    gone = env.run("ripple generate --model ripple-tiny --prompt 1+1= --decoder lowest_entropy --gen-length 16 "
                   "--block-length 8", folder, ok=False)
    assert gone.returncode == 2 and "unknown decoder 'lowest_entropy'" in gone.stderr


def test_the_task_guide_runs_a_plugin_task_in_eval_and_a_grid(env):
    folder = env.root / "task-guide"
    done = run_guide(DOCS / "adding-a-task.md", env, folder)
    try:
        listed = next(r for line, r in done.items() if line.strip() == "ripple tasks")
        assert re.search(r"capitals\s+exact_match\s+ripple-capitals==0\.2\.0", listed.stdout)
        frame = pl.read_parquet(sorted((folder / "results").rglob("*.parquet")))
        assert frame.height == 8 and set(frame["task"]) == {"capitals"} and frame["error"].is_null().all()
        assert {json.loads(p)["task"] for p in frame["plugins"]} == {"ripple-capitals==0.2.0"}
    finally:
        env.run("pip uninstall -y ripple-capitals", folder)


BROKEN = {
    "import-error": ("bad_import", "raise ImportError('no such backend: cuda_magic')\n", "ImportError: no such backend"),
    "wrong-class": ("not_a_decoder", "class NotADecoder:\n    name = 'not_a_decoder'\n", "not a subclass"),
    "collision": ("rps", "from ripple.decoders.confidence import Confidence\n\n\nclass Rps(Confidence):\n    name = 'rps'\n",
                  "built-in decoder"),
    "bad-dataclass": ("bad_params", (
        "from dataclasses import dataclass\n\nfrom ripple.decoders.confidence import Confidence\n"
        "from ripple.decoders.params import HyperParams\n\n\n@dataclass(frozen=True)\nclass P(HyperParams):\n"
        "    tau: float = 0.9\n\n\nclass BadParams(Confidence):\n    name = 'bad_params'\n    Params = P\n"),
        "not declared with hp()"),
}


def _distribution(folder: Path, kind: str, entry: str, source: str) -> Path:
    dist = folder / f"ripple-broken-{kind}"
    dist.mkdir(parents=True)
    module = f"broken_{kind.replace('-', '_')}"
    (dist / f"{module}.py").write_text(source)
    classes = re.findall(r"^class (\w+)", source, re.M)
    target = f"{module}:{classes[-1] if classes else 'Anything'}"  # the decoder is the module's last class
    (dist / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "ripple-broken-{kind}"\nversion = "1.0"\n\n[tool.setuptools]\npy-modules = ["{module}"]\n\n'
        f'[project.entry-points."ripple.decoders"]\n{entry} = "{target}"\n')
    return dist


def test_broken_plugins_are_refused_in_one_line_and_break_nothing_else(env):
    folder = env.root / "broken"
    folder.mkdir()
    dists = [_distribution(folder, kind, entry, source) for kind, (entry, source, _) in BROKEN.items()]
    env.run("pip install --no-deps --no-build-isolation " + " ".join(map(str, dists)), folder)
    generate = "ripple generate --model ripple-tiny --prompt 1+1= --gen-length 16 --block-length 8 --decoder "
    refused_kinds = [kind for kind in BROKEN if kind != "collision"]
    try:
        *procs, rps, listed = env.run_ripple([*(generate + BROKEN[kind][0] for kind in refused_kinds), generate + "rps",
                                              "ripple decoders --json"], folder, ok=False)
        for kind, proc in zip(refused_kinds, procs):
            reason = BROKEN[kind][2]
            assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
            assert f"ripple-broken-{kind} 1.0" in proc.stderr and reason in proc.stderr, proc.stderr
        # the built-in wins the collision and everything else works
        assert rps.returncode == 0 and listed.returncode == 0, (rps.stderr[-3000:], listed.stderr[-3000:])
        assert rps.stderr.count("warning") <= 1 and "-- nfe" in rps.stderr, rps.stderr
        listed = json.loads(listed.stdout)
        assert next(r for r in listed if r["decoder"] == "rps" and "refused" not in r)["provider"] == "built-in"
        refused = {r["decoder"]: r for r in listed if "refused" in r}
        assert set(refused) == {"bad_import", "not_a_decoder", "bad_params", "rps"}
        assert "built-in decoder" in refused["rps"]["refused"] and refused["rps"]["provider"] == "ripple-broken-collision==1.0"
    finally:
        env.run("pip uninstall -y " + " ".join(f"ripple-broken-{k}" for k in BROKEN), folder)
