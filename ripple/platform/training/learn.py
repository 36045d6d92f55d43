"""`ripple learn train`: a filter trained on `ripple learn label`'s records, as a recipe says.

Recipe `learn2pd` is Learn2PD's notebook (ims-kdks/Learning-to-Parallel-Decoding, train.ipynb; the
golden README's "Filter training"): the records in file order (prompt order, each prompt's forwards
in order), shuffled with Python's `random` under the seed; the first int(0.8 n) train, the next
int(0.1 n) validate, the rest are held out; `torch.manual_seed(seed)` before the filter is built;
BCE with logits over every position, AdamW at lr 0.003 (torch's other defaults), full batch, one
step per epoch followed by the notebook's validation pass (loss and false-positive rate at 0.9). The
held-out records are scored once at the end as the notebook's last cell does. Nothing here draws
from the caller's random state: the shuffle has its own generator and the seeding is forked.

Recipe `ripple` (Ripple's own) trains a width-free filter (decoders/filters.py, architecture `ripple`)
on the per-position features of decoders/features.py (the labelling file's extra columns margin,
entropy and is_committed beside Learn2PD's five), on masked positions only, for a few candidate settings
(hidden size, neighbour window), and keeps the one with the best validation precision at the acceptance
threshold among those that accept at least `MIN_RECALL` of the correct positions (recall breaks ties).

The artifact is `save_filter`'s (ripple/decoders/filters.py: model.safetensors + card.json), with the
per-epoch curve (curve.csv) and its plot (learning_curve.png) beside it.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...decoders.features import LABEL_COLUMNS, assemble
from ...decoders.filters import (RIPPLE_FEATURES, FilterCard, build_filter, enter, file_sha256, get_architecture,
                                 lookup, save_filter)
from ...errors import RippleError

# the labelling file's columns and metadata key as ripple/platform/experiments/labels.py writes them (named
# again here: experiments and training are peers, neither imports the other; the tests write with one, read
# with the other)
COLUMNS = ("sample_id", "block", "step", "confidence", "is_correct")
META_KEY = b"ripple.learn"
THRESHOLD = 0.9  # the notebook's threshold for its false-positive and test figures
CURVE_EVERY = 500  # the card's curve: every this many epochs, and the last (the notebook prints the same)


# ---------------------------------------------------------------------------- the records
@dataclass(frozen=True)
class Records:
    """Validated training records: X [n, B] float32 confidences, y [n, B] float32 labels, in file order."""

    confidence: Any  # numpy [n, B] float32
    labels: Any  # numpy [n, B] float32 (is_correct as 0/1)
    sample_ids: tuple[str, ...]
    steps: tuple[int, ...]
    meta: dict[str, Any]  # how they were labelled (the file's metadata; {} for a file without it)
    path: str
    sha256: str
    # the extra per-position columns (LABEL_COLUMNS: margin, entropy float32, is_committed bool), numpy [n, B]
    # each; empty for a file labelled without them
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.confidence.shape[0])

    @property
    def block_length(self) -> int:
        return int(self.confidence.shape[1])


def _bad(path: str, problem: str) -> RippleError:
    return RippleError(f"--data {path}: {problem}; expected the Parquet file `ripple learn label` writes "
                       f"(columns {', '.join(COLUMNS)})")


def read_records(path: str | os.PathLike) -> Records:
    """The records of a labelling Parquet file, refused in one line when missing, unreadable, empty or
    not of that form (columns, types, equal row widths, confidences in [0, 1])."""
    import numpy as np
    import polars as pl
    import pyarrow.parquet as pq

    given = str(path)
    where = Path(path).expanduser()
    if not where.exists():
        raise RippleError(f"--data {given}: no such file; write one with `ripple learn label ... --out FILE.parquet`")
    if not where.is_file():
        raise RippleError(f"--data {given}: is not a file")
    try:
        table = pq.read_table(where)
    except Exception as exc:  # noqa: BLE001 -- pyarrow's errors for a damaged or foreign file vary
        raise _bad(given, f"not a readable Parquet file ({' '.join(str(exc).split())[:200]})") from None
    frame = pl.from_arrow(table)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise _bad(given, f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    integers = ((pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64), "integers")
    want = {"sample_id": ((pl.String,), "strings"), "block": integers, "step": integers}
    for name, (kinds, text) in want.items():
        if frame.schema[name] not in kinds:
            raise _bad(given, f"column {name} is {table.schema.field(name).type}, expected {text}")
    lists = {"confidence": ((pl.Float32, pl.Float64), "floats"), "is_correct": ((pl.Boolean,), "booleans")}
    for name, (inner, text) in lists.items():
        dtype = frame.schema[name]
        if not isinstance(dtype, pl.List) or dtype.inner not in inner:
            raise _bad(given, f"column {name} is {table.schema.field(name).type}, expected a list of {text}")
    if frame.height == 0:
        raise _bad(given, "holds no records")
    nulls = [c for c in COLUMNS if frame[c].null_count()
             or (c in lists and frame[c].list.eval(pl.element().is_null().any()).explode().any())]
    if nulls:
        raise _bad(given, f"column {nulls[0]} holds a null")
    widths = frame["confidence"].list.len()
    if (widths != frame["is_correct"].list.len()).any():
        row = int((widths != frame["is_correct"].list.len()).arg_true()[0])
        raise _bad(given, f"row {row} has {widths[row]} confidences but {frame['is_correct'][row].len()} labels")
    if widths.n_unique() > 1 or widths[0] < 1:
        raise _bad(given, f"rows are of {', '.join(map(str, sorted(widths.unique().to_list())))} positions; every "
                          f"row holds one block's positions (one block length)")
    X = np.array(frame["confidence"].to_list(), dtype=np.float32)  # [n, B]
    if not np.isfinite(X).all() or (X < 0).any() or (X > 1).any():
        raise _bad(given, "a confidence outside [0, 1]")
    y = np.array(frame["is_correct"].to_list(), dtype=np.float32)  # [n, B]
    extra = _extra_columns(given, frame, table, X.shape)
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        meta = {}
    return Records(X, y, tuple(frame["sample_id"].to_list()), tuple(frame["step"].to_list()),
                   meta if isinstance(meta, dict) else {}, given, file_sha256(where), extra)


def _extra_columns(given: str, frame, table, shape) -> dict[str, Any]:
    """The extra columns as numpy [n, B] (all of them or none), checked as the five are."""
    import numpy as np
    import polars as pl

    present = [c for c in LABEL_COLUMNS if c in frame.columns]
    if not present:
        return {}
    if len(present) < len(LABEL_COLUMNS):
        missing = [c for c in LABEL_COLUMNS if c not in present]
        raise _bad(given, f"has {', '.join(present)} but not {', '.join(missing)}")
    out = {}
    for name in LABEL_COLUMNS:
        inner, text = ((pl.Boolean,), "booleans") if name == "is_committed" else ((pl.Float32, pl.Float64), "floats")
        dtype = frame.schema[name]
        if not isinstance(dtype, pl.List) or dtype.inner not in inner:
            raise _bad(given, f"column {name} is {table.schema.field(name).type}, expected a list of {text}")
        if frame[name].null_count() or frame[name].list.eval(pl.element().is_null().any()).explode().any():
            raise _bad(given, f"column {name} holds a null")
        if (frame[name].list.len() != shape[1]).any():
            raise _bad(given, f"column {name} has rows of another width than confidence's {shape[1]}")
        values = np.array(frame[name].to_list(), dtype=np.bool_ if name == "is_committed" else np.float32)  # [n, B]
        if values.dtype != np.bool_ and not np.isfinite(values).all():
            raise _bad(given, f"a {name} that is not finite")
        out[name] = values
    return out


# ---------------------------------------------------------------------------- the split
@dataclass(frozen=True)
class Split:
    """Record indices of the three parts, in the shuffled order."""

    train: tuple[int, ...]
    val: tuple[int, ...]
    test: tuple[int, ...]


def notebook_split(n: int, seed: int) -> Split:
    """Learn2PD's split: `random.seed(seed); random.shuffle(records)`, then the first int(0.8 n), the
    next int(0.1 n), the rest. A shuffle's permutation depends only on the list's length and the
    generator, so shuffling indices with a generator of our own seeded alike gives the same order."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    first = int(n * 0.8)
    second = first + int(n * 0.1)
    return Split(tuple(order[:first]), tuple(order[first:second]), tuple(order[second:]))


# ---------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class Recipe:
    """A way to train a filter: its architecture, defaults and the function that trains it."""

    name: str
    architecture: str
    epochs: int  # the default number of full-batch steps
    # (records, split, *, epochs, seed, progress) -> Fit: trains, and scores the held-out records
    train: Callable[..., "Fit"]
    doc: str = ""
    needs: tuple[str, ...] = ()  # the labelling file's extra columns it reads


@dataclass(frozen=True)
class Fit:
    """What a recipe's training gives: the module and its per-epoch curve."""

    module: Any
    curve: tuple[tuple[int, float, float, float], ...]  # (epoch, train loss, val loss, val false positives at 0.9)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # the recipe's held-out figures (card metrics)
    features: tuple[str, ...] = ()  # what the filter reads (empty: the architecture's)


_RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    return enter(_RECIPES, recipe.name, recipe, "recipe")


def recipes() -> list[str]:
    return sorted(_RECIPES)


def get_recipe(name: str) -> Recipe:
    return lookup(_RECIPES, name, "recipe")


def false_positive(preds, y) -> float:
    """The notebook's false-positive rate: predicted positives that are negatives, over predicted
    positives (NaN when nothing is predicted positive, as the notebook's division gives)."""
    return ((preds > y).sum() / preds.sum()).item()


def full_batch(module, X, Xv, *, lr: float, epochs: int, bar, loss, val_loss, val_false_positive,
               tag: str = "") -> list[tuple[int, float, float, float]]:
    """The notebook's loop, which both recipes train by: per epoch one full-batch AdamW step (torch's
    defaults but `lr`) on `loss(module(X))`, then the validation pass on `module(Xv)`; the curve's rows
    are (epoch, loss, validation loss, validation false-positive rate)."""
    import torch

    optimizer = torch.optim.AdamW(module.parameters(), lr=lr)
    curve = []
    for epoch in range(epochs):
        module.train()
        optimizer.zero_grad()
        value = loss(module(X))
        value.backward()
        optimizer.step()
        module.eval()
        with torch.no_grad():
            val_logits = module(Xv)
            curve.append((epoch, value.item(), val_loss(val_logits).item(), val_false_positive(val_logits)))
        bar.update(1)
        if epoch % 100 == 0 or epoch == epochs - 1:
            bar.set_postfix_str(f"{tag}loss {curve[-1][1]:.4f} val {curve[-1][2]:.4f}", refresh=False)
    return curve


def _train_learn2pd(X, y, Xv, yv, *, block_length: int, epochs: int, seed: int, progress: bool) -> Fit:
    """Learn2PD's notebook loop: full-batch AdamW steps, each followed by the validation pass."""
    import torch

    from ...progress import progress as progress_bar

    lr = 0.003
    with torch.random.fork_rng(devices=[]):  # the caller's torch random state is left as it was
        torch.manual_seed(seed)
        module = build_filter("learn2pd", block_length)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    bar = progress_bar(total=epochs, disable=not progress, unit="epoch", dynamic_ncols=True, desc="learn2pd")
    try:
        curve = full_batch(module, X, Xv, lr=lr, epochs=epochs, bar=bar, loss=lambda logits: loss_fn(logits, y),
                           val_loss=lambda logits: loss_fn(logits, yv),
                           val_false_positive=lambda v: false_positive((torch.sigmoid(v) > THRESHOLD).float(), yv))
    finally:
        bar.close()
    return Fit(module, tuple(curve), {"optimizer": "AdamW", "lr": lr, "weight_decay": 0.01, "batch": "full",
                                      "loss": "BCEWithLogitsLoss (mean)", "threshold": THRESHOLD})


def _recipe_learn2pd(records: "Records", split: "Split", *, epochs: int, seed: int, progress: bool) -> Fit:
    """The notebook on the confidences: trains, then its last cell on the held-out records."""
    import torch

    def part(idx):  # [k, B] each, in the shuffled order
        ix = list(idx)
        return torch.from_numpy(records.confidence[ix]), torch.from_numpy(records.labels[ix])

    (X, y), (Xv, yv), (Xt, yt) = part(split.train), part(split.val), part(split.test)
    fit = _train_learn2pd(X, y, Xv, yv, block_length=records.block_length, epochs=epochs, seed=seed, progress=progress)
    return dataclasses.replace(fit, metrics={"test_at_0.9": held_out_metrics(fit.module, Xt, yt)})


LEARN2PD = register_recipe(Recipe(
    "learn2pd", "learn2pd", 3000, _recipe_learn2pd,
    doc="Learn2PD's train.ipynb: shuffle under the seed, 80/10/10, torch.manual_seed, BCE with logits, AdamW "
        "lr 0.003, full batch (the notebook runs 40,000 epochs; 3,000 here by default)"))


# ---------------------------------------------------------------------------- Ripple's recipe
SELECT_THRESHOLD = 0.96  # learn2pd's default acceptance threshold: the precision there decides
MIN_RECALL = 0.1  # a candidate must accept at least this share of the correct masked positions
RIPPLE_EPOCHS = 1500
RIPPLE_LR = 0.01
# the candidate settings, in order (an exact tie goes to the earlier): hidden size, neighbour window
RIPPLE_CANDIDATES = ({"hidden": 16, "window": 1}, {"hidden": 32, "window": 1}, {"hidden": 32, "window": 2})


def ripple_inputs(records: "Records", idx, features: tuple[str, ...] = RIPPLE_FEATURES):
    """The ripple recipe's tensors for records `idx`: X [k, B, F] (decoders/features.py, as the decoder
    assembles them), y [k, B] labels, masked [k, B] bool (the candidates: not yet committed)."""
    import torch

    ix = list(idx)
    columns = {"confidence": records.confidence[ix], **{k: v[ix] for k, v in records.extra.items()}}
    X = assemble(features, columns, [records.steps[i] for i in ix])  # [k, B, F]
    return X, torch.from_numpy(records.labels[ix]), torch.from_numpy(~records.extra["is_committed"][ix])


def acceptance(module, X, y, masked, threshold: float) -> dict[str, Any]:
    """Precision and recall of what a filter accepts at `threshold` among masked positions: precision =
    correct accepted / accepted (None when it accepts nothing), recall = correct accepted / correct."""
    import torch

    with torch.no_grad():
        accepted = (torch.sigmoid(module(X)) > threshold) & masked  # [k, B]
    correct = (y > 0.5) & masked  # [k, B]
    hits, n_acc, n_pos = int((accepted & correct).sum()), int(accepted.sum()), int(correct.sum())
    return {"threshold": threshold, "precision": hits / n_acc if n_acc else None,
            "recall": hits / n_pos if n_pos else None, "accepted": n_acc, "correct": n_pos,
            "masked": int(masked.sum())}


def choose(scores: list[dict[str, Any]], min_recall: float = MIN_RECALL) -> int:
    """The candidate to keep: the highest precision (to 4 decimals) among those whose recall reaches
    `min_recall`, then the higher recall, then the earlier; if none reaches it, the highest recall (a
    filter that accepts nothing never wins on an undefined precision)."""
    def key(i):
        s = scores[i]
        recall = s["recall"] or 0.0
        if recall >= min_recall and s["precision"] is not None:
            return (1, round(s["precision"], 4), recall, -i)
        return (0, 0.0, recall, -i)

    return max(range(len(scores)), key=key)


def _fit_masked(X, y, m, Xv, yv, mv, *, hidden: int, window: int, epochs: int, seed: int, bar) -> tuple[Any, list]:
    """One candidate: full-batch AdamW on BCE with logits over masked positions only."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_filter("ripple", None, features=X.shape[-1], hidden=hidden, window=window)
    w, wv = m.float(), mv.float()  # [n, B], [m, B]: committed positions are no candidates

    def loss_of(logits, target, weight):  # mean BCE over the masked positions
        raw = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none")  # [k, B]
        return (raw * weight).sum() / weight.sum().clamp(min=1.0)

    curve = full_batch(module, X, Xv, lr=RIPPLE_LR, epochs=epochs, bar=bar, tag=f"h{hidden} w{window} ",
                       loss=lambda logits: loss_of(logits, y, w), val_loss=lambda logits: loss_of(logits, yv, wv),
                       val_false_positive=lambda v: false_positive(((torch.sigmoid(v) > THRESHOLD) & mv).float(), yv * wv))
    module.eval()
    module.requires_grad_(False)
    return module, curve


def _recipe_ripple(records: "Records", split: "Split", *, epochs: int, seed: int, progress: bool,
                   candidates: tuple[dict[str, int], ...] = RIPPLE_CANDIDATES,
                   threshold: float = SELECT_THRESHOLD) -> Fit:
    """Train every candidate on the training records, keep the one `choose` prefers on the validation
    records' precision at `threshold`, score it once on the held-out records."""
    from ...progress import progress as progress_bar

    if not records.extra:
        raise RippleError(f"--data {records.path}: has no {', '.join(LABEL_COLUMNS)} columns (labelled before the "
                          f"ripple recipe existed); relabel it with `ripple learn label` for --recipe ripple")
    (X, y, m), (Xv, yv, mv), (Xt, yt, mt) = (ripple_inputs(records, part)
                                             for part in (split.train, split.val, split.test))
    bar = progress_bar(total=epochs * len(candidates), disable=not progress, unit="epoch", dynamic_ncols=True,
                       desc="ripple")
    fits, scores = [], []
    try:
        for cand in candidates:
            module, curve = _fit_masked(X, y, m, Xv, yv, mv, hidden=cand["hidden"], window=cand["window"],
                                        epochs=epochs, seed=seed, bar=bar)
            fits.append((module, curve))
            scores.append(acceptance(module, Xv, yv, mv, threshold))
    finally:
        bar.close()
    pick = choose(scores)
    module, curve = fits[pick]
    test = acceptance(module, Xt, yt, mt, threshold)
    metrics = {
        "chosen": dict(candidates[pick]),
        "chosen_by": f"validation precision at {threshold} (masked positions), recall >= {MIN_RECALL}, "
                     f"then recall",
        "candidates": [{**dict(c), "val": s} for c, s in zip(candidates, scores)],
        "val_at_threshold": scores[pick],
        "test_at_threshold": test,
    }
    hyper = {"optimizer": "AdamW", "lr": RIPPLE_LR, "weight_decay": 0.01, "batch": "full",
             "loss": "BCEWithLogitsLoss (mean over masked positions)", "threshold": threshold,
             "min_recall": MIN_RECALL, **dict(candidates[pick])}
    return Fit(module, tuple(curve), hyper, metrics, RIPPLE_FEATURES)


RIPPLE = register_recipe(Recipe(
    "ripple", "ripple", RIPPLE_EPOCHS, _recipe_ripple, needs=LABEL_COLUMNS,
    doc="Ripple's: a width-free filter over confidence, margin, entropy, committed, masks left, step and position "
        "with its neighbours, trained on masked positions; the candidate with the best validation precision at "
        f"{SELECT_THRESHOLD} is kept"))


# ---------------------------------------------------------------------------- the workflow
@dataclass(frozen=True)
class Training:
    """What one `ripple learn train` wrote: the filter's directory, its card, the curve and plot."""

    out: Path
    card: FilterCard
    curve_file: Path
    plot: Path
    seconds: float

    def summary(self) -> str:
        c, m = self.card, self.card.metrics
        sizes = m["split"]
        width = "any block length" if c.block_length is None else f"block_length {c.block_length}"
        head = (f"{self.out}: {c.recipe} filter ({c.architecture}, {width}) from {c.records} "
                f"records of {c.prompts} prompts ({c.model or 'model unknown'}, {c.task or 'task unknown'} "
                f"{c.split}; train/val/test {sizes['train']}/{sizes['val']}/{sizes['test']}), {c.epochs} epochs at "
                f"seed {c.seeds[0]} in {self.seconds:.1f} s\n"
                f"final train loss {_fmt(m['final_train_loss'])}, val loss {_fmt(m['final_val_loss'])}; ")
        if "test_at_0.9" in m:
            test = m["test_at_0.9"]
            body = (f"held-out (test) at 0.9: accuracy {_fmt(test['accuracy'])}, false positive "
                    f"{_fmt(test['false_positive'])}, false negative {_fmt(test['false_negative'])}")
        else:
            test, chosen = m["test_at_threshold"], m["chosen"]
            body = (f"chose {', '.join(f'{k} {v}' for k, v in chosen.items())} of {len(m['candidates'])} candidates; "
                    f"held-out (test) at {test['threshold']} over masked positions: precision "
                    f"{_fmt(test['precision'])}, recall {_fmt(test['recall'])}")
        return head + body + f"\ncard {self.out / 'card.json'}; curve {self.curve_file}; plot {self.plot}"


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _finite(v: float) -> float | None:
    """A metric for JSON: None where the notebook's division gave NaN (nothing predicted positive)."""
    return None if v is None or not math.isfinite(v) else float(v)


def held_out_metrics(module, X, y) -> dict[str, Any]:
    """The notebook's last cell on the held-out records: accuracy, false negatives, false positives at 0.9."""
    import torch

    with torch.no_grad():
        preds = (torch.sigmoid(module(X)) > THRESHOLD).float()  # [k, B]
    return {"accuracy": _finite((preds == y).float().mean().item()),
            "false_negative": _finite(((preds < y).sum() / (preds.numel() - preds.sum())).item()),
            "false_positive": _finite(false_positive(preds, y)),
            "predicted_positive": int(preds.sum().item()), "positions": int(preds.numel())}


def train_filter(data: str | os.PathLike, out: str | os.PathLike, *, recipe: str = "learn2pd",
                 epochs: int | None = None, seed: int = 0, threads: int | None = 1,
                 progress: bool = False) -> Training:
    """Train `recipe`'s filter on the records in `data` and write it with its card, curve and plot to
    `out`. Everything is checked before anything is written."""
    import torch

    chosen = get_recipe(recipe)
    if epochs is None:
        epochs = chosen.epochs
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise RippleError(f"--epochs must be a positive number of epochs, got {epochs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise RippleError(f"--seed must be a non-negative integer, got {seed!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise RippleError(f"--threads must be a positive number of threads, got {threads!r}")
    records = read_records(data)
    if chosen.needs and not records.extra:
        raise RippleError(f"--data {records.path}: has no {', '.join(chosen.needs)} columns (labelled before the "
                          f"{chosen.name} recipe existed); relabel it with `ripple learn label` for --recipe "
                          f"{chosen.name}")
    arch = get_architecture(chosen.architecture)
    split = notebook_split(records.n, seed)
    if not split.val or not split.test:
        raise RippleError(f"--data {records.path}: {records.n} records leave the 80/10/10 split without validation "
                          f"or held-out records; label at least 10 records (more prompts: --limit)")
    started = time.perf_counter()
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        fit = chosen.train(records, split, epochs=epochs, seed=seed, progress=progress)
    finally:
        torch.set_num_threads(before)
    seconds = time.perf_counter() - started
    last = fit.curve[-1]
    meta = records.meta
    blocks = sum(1 for s in records.steps if s == 1)  # the notebook's "average steps" divides by these
    metrics = {
        "split": {"train": len(split.train), "val": len(split.val), "test": len(split.test)},
        "positive_fraction": float(records.labels.mean(dtype="float64")),
        "average_steps_as_printed_by_the_notebook": records.n / blocks if blocks else None,
        "final_train_loss": _finite(last[1]), "final_val_loss": _finite(last[2]),
        "final_val_false_positive_at_0.9": _finite(last[3]),
        **fit.metrics,
        "curve": {"columns": ["epoch", "train_loss", "val_loss", "val_false_positive_at_0.9"],
                  "rows": [[e, _finite(a), _finite(b), _finite(c)] for e, a, b, c in fit.curve
                           if e % CURVE_EVERY == 0 or e == len(fit.curve) - 1]},
        "hyperparameters": fit.hyperparameters,
        "seconds": round(seconds, 3),
        "threads": threads,
    }
    settings = {k: meta[k] for k in ("gen_length", "block_length", "steps", "dtype", "cell_id", "experiment",
                                     "weights", "tasks") if k in meta}  # tasks: each pooled task's prompts, records
    settings.update(data=records.path, data_sha256=records.sha256)
    card = FilterCard(
        chosen.architecture, records.block_length if arch.fixed_width else None, fit.features or arch.features,
        model=str(meta.get("model", "")), model_sha256=str(meta.get("weights_sha256") or ""),
        task=str(meta.get("task", "")), split=str(meta.get("split", "")),
        prompts=int(meta.get("prompts") or len(set(records.sample_ids))), records=records.n, recipe=chosen.name,
        seeds=(seed,), epochs=epochs, metrics=metrics, settings=settings)
    target = Path(out).expanduser()
    card = save_filter(target, fit.module, card)
    curve_file = write_curve(target / "curve.csv", fit.curve)
    plot = plot_curve(target / "learning_curve.png", fit.curve, card)
    return Training(target, card, curve_file, plot, seconds)


def write_curve(path: Path, curve) -> Path:
    """Every epoch's losses and validation false-positive rate (empty where the notebook's division is NaN)."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epoch", "train_loss", "val_loss", "val_false_positive_at_0.9"])
        for e, a, b, c in curve:
            w.writerow([e, repr(a), repr(b), "" if not math.isfinite(c) else repr(c)])
    return path


def plot_curve(path: Path, curve, card: FilterCard) -> Path:
    """The notebook's two figures on one page: the losses, and the validation false-positive rate at 0.9."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = [c[0] for c in curve]
    fig = Figure(figsize=(10, 4.2))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    left.plot(epochs, [c[1] for c in curve], label="training loss", color="#0066CC")
    left.plot(epochs, [c[2] for c in curve], label="validation loss", color="red")
    left.set_xlabel("epoch")
    left.set_ylabel("BCE with logits")
    left.legend()
    left.grid(True)
    right.plot(epochs, [c[3] for c in curve], label="validation false-positive rate at 0.9", color="green")
    right.set_xlabel("epoch")
    right.set_ylabel("false-positive rate")
    right.legend()
    right.grid(True)
    width = "any block length" if card.block_length is None else f"block length {card.block_length}"
    fig.suptitle(f"{card.recipe} filter, {width}: {card.model or '?'} {card.task} "
                 f"{card.split}, {card.records} records, seed {card.seeds[0]}", fontsize=10)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path
