"""A store's records as the dashboards read them: one experiment's (with one-line refusals naming what
the store holds), the experiments a store holds, and file-name slugs. Reports, the leaderboard and
trace pages share them, so none imports another for them."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from ..errors import RippleError
from ..platform.experiments.store import ResultStore, check_name


def load_records(store_dir: str | Path, experiment: str) -> pl.DataFrame:
    """One row per (cell_id, sample_id) of `experiment`, through the store's deduplicating reader."""
    check_name("experiment", experiment)
    root = Path(store_dir).expanduser()
    if not root.is_dir():
        raise RippleError(f"no result store at {root}; run `ripple grid` first or pass --store DIR")
    store = ResultStore(root, experiment)
    if not store.dir.is_dir():
        known = stored_experiments(root)
        raise RippleError(f"unknown experiment {experiment!r} in store {root}; "
                          f"stored experiments: {', '.join(known) if known else 'none'}")
    frame = store.read()
    if frame.height == 0:
        raise RippleError(f"experiment {experiment!r} in store {root} has no sample records")
    return frame


def stored_experiments(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/records") if p.is_dir())


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "x"
