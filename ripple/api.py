"""Ripple from Python (DESIGN.md section 8b): `ripple.load`, `ripple.generate`, `ripple.evaluate`,
`ripple.grid`, `ripple.sweep`, `ripple.leaderboard`, and learning a decoder's filter from the oracle
(`ripple.learn_label`, `ripple.learn_train`). The `ripple` command is a shell over these
functions (parse, call, print), so they check what it checks, and bad input raises RippleError with
the one line the command prints.

One model and one decoder (load, generate, evaluate) live in ripple/platform/experiments/calls.py,
where the lm-evaluation-harness model also reaches them; the functions here drive the grid, sweep
and leaderboard machinery and return what they built (the run with its store, or the table).
A spec is a YAML file, a shipped spec's name, or the same document as a dict, whose decoder entries
may then also be Scheduler classes or instances of the caller's own (pickled to the Ray workers).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RippleError
from .paths import DIR, FILE, writable_path
from .platform.experiments.calls import (  # noqa: F401  (the API's own names)
    DEFAULT_BLOCK_LENGTH, DEFAULT_GEN_LENGTH, Evaluation, Generation, evaluate, generate, load)

if TYPE_CHECKING:
    from .dashboards.leaderboard import Leaderboard
    from .platform.experiments.labels import Labelling
    from .platform.training.learn import Training
    from .platform.experiments.grid import GridRun
    from .platform.experiments.spec import GridSpec
    from .sweeps.run import SweepRun
    from .sweeps.spec import SweepSpec

__all__ = ["load", "generate", "evaluate", "grid", "sweep", "leaderboard", "grid_spec", "sweep_spec", "learn_label",
           "learn_train", "Generation", "Evaluation", "DEFAULT_GEN_LENGTH", "DEFAULT_BLOCK_LENGTH"]


def check_workers(workers: int | None) -> None:
    """A positive number of workers, or None (as many as the cluster holds)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise RippleError(f"--workers must be positive, got {workers}")


def _store(store: str | os.PathLike | None) -> Path:
    """The result store folder (default as `ripple grid` has it), checked to take files before any work."""
    from .platform.experiments.grid import default_store

    path = Path(store).expanduser() if store is not None else default_store()
    writable_path(path, "--store", DIR)
    return path


def _read_spec(spec: Any, kind: str, parsed: type, parse, load):
    """A validated spec of `kind` from a YAML path or shipped name (`load`), a dict (`parse`), or as it is."""
    if isinstance(spec, parsed):
        return spec
    if isinstance(spec, dict):
        return parse(spec, "(dict)")
    if isinstance(spec, (str, os.PathLike)):
        return load(str(spec))
    raise RippleError(f"a {kind} spec is a YAML file, a shipped spec's name or a dict, got {type(spec).__name__}")


def grid_spec(spec: Any, *, limit: int | None = None, data_dir: str | None = None,
              batch_size: int | None = None) -> GridSpec:
    """A validated grid spec from a YAML path, a shipped name, a dict (the YAML document) or a GridSpec,
    with `ripple grid`'s overrides."""
    from .platform.experiments.spec import GridSpec, load_spec, parse_spec

    parsed = _read_spec(spec, "grid", GridSpec, parse_spec, load_spec)
    return parsed.with_limit(limit).with_data_dir(data_dir).with_found_data().with_batch_size(batch_size)


def grid(spec: Any, *, store: str | os.PathLike | None = None, experiment: str | None = None, fresh: bool = False,
         limit: int | None = None, data_dir: str | None = None, batch_size: int | None = None,
         workers: int | None = None, track: bool = True, tracking_uri: str | None = None,
         progress: bool = False) -> GridRun:
    """Run (or resume) a grid on Ray workers into the result store, as `ripple grid` does. The run
    holds the store (`run.store.read()`: every sample record) and the cells' numbers (`run.table()`)."""
    from .platform.experiments.grid import run_grid

    parsed = grid_spec(spec, limit=limit, data_dir=data_dir, batch_size=batch_size)
    check_workers(workers)
    return run_grid(parsed, _store(store), experiment=experiment, tracking_uri=tracking_uri, track=track, fresh=fresh,
                    progress=progress, workers=workers)


def sweep_spec(spec: Any, *, experiment: str | None = None, limit: int | None = None, trials: int | None = None,
               data_dir: str | None = None, batch_size: int | None = None) -> SweepSpec:
    """A validated sweep spec from a YAML path, a shipped name or a dict, with `ripple sweep`'s overrides."""
    from .sweeps.spec import SweepSpec, load_sweep_spec, parse_sweep_spec

    parsed = _read_spec(spec, "sweep", SweepSpec, parse_sweep_spec, load_sweep_spec)
    return parsed.with_overrides(experiment=experiment, limit=limit, trials=trials, data_dir=data_dir,
                                 batch_size=batch_size)


def sweep(spec: Any, *, store: str | os.PathLike | None = None, experiment: str | None = None,
          limit: int | None = None, trials: int | None = None, data_dir: str | None = None,
          batch_size: int | None = None, workers: int | None = None, track: bool = True,
          tracking_uri: str | None = None, progress: bool = False) -> SweepRun:
    """Run a Ray Tune search over a decoder's hyperparameters, as `ripple sweep` does: the trials,
    the Pareto fronts and the best trial."""
    from .sweeps.run import run_sweep

    parsed = sweep_spec(spec, experiment=experiment, limit=limit, trials=trials, data_dir=data_dir,
                        batch_size=batch_size)
    check_workers(workers)
    return run_sweep(parsed, _store(store), tracking_uri=tracking_uri, track=track, progress=progress,
                     workers=workers)


def leaderboard(store: str | os.PathLike | None = None, out: str | os.PathLike | None = None) -> Leaderboard:
    """Every experiment of a store on one page (leaderboard.html, .md, .csv in `out`, default
    STORE/leaderboard), as `ripple leaderboard` writes it; returns its sections and rows."""
    from .dashboards.leaderboard import build_leaderboard
    from .platform.experiments.grid import default_store

    if out is not None:
        writable_path(out, "--out", DIR)
    return build_leaderboard(Path(store).expanduser() if store is not None else default_store(), out)


def learn_label(model: str, task: str | list[str], out: str | os.PathLike, *, split: str = "train", limit: int | None = None,
                gen_length: int = DEFAULT_GEN_LENGTH, block_length: int = DEFAULT_BLOCK_LENGTH,
                steps: int | None = None, dtype: str = "auto", data_dir: str | None = None,
                store: str | os.PathLike | None = None, experiment: str | None = None, workers: int | None = None,
                fresh: bool = False, progress: bool = False) -> Labelling:
    """Learn2PD's training records for the first `limit` examples of `task`'s `split`, as `ripple learn
    label` writes them: a plain run per prompt gives the answer, then the labelling run records each
    forward's confidences and which positions already hold the answer (Parquet `out`). It runs as a
    one-cell grid on Ray workers into the result store (`store`, `experiment`), so it resumes. Several
    tasks (a comma list or a list) are labelled together, `limit` each, and pooled into one file."""
    from .platform.experiments.labels import EXPERIMENT, label

    writable_path(out, "--out", FILE)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise RippleError(f"--limit must be a positive number of prompts, got {limit!r}")
    check_workers(workers)
    return label(model, task, out, split=split, limit=limit, gen_length=gen_length, block_length=block_length,
                 steps=steps, dtype=dtype, data_dir=data_dir, store=_store(store), experiment=experiment or EXPERIMENT,
                 workers=workers, progress=progress, fresh=fresh)


def learn_train(data: str | os.PathLike, out: str | os.PathLike, *, recipe: str = "learn2pd",
                epochs: int | None = None, seed: int = 0, threads: int | None = 1, progress: bool = False) -> Training:
    """Train a filter on `ripple learn label`'s records (Parquet `data`) with `recipe` (Learn2PD's
    notebook: `learn2pd`; Ripple's width-free filter chosen by held-out precision: `ripple`), as
    `ripple learn train` does; writes the filter (safetensors + card), the
    learning curve and the held-out metrics into `out`."""
    from .platform.training.learn import train_filter

    writable_path(out, "--out", DIR)
    return train_filter(data, out, recipe=recipe, epochs=epochs, seed=seed, threads=threads, progress=progress)
