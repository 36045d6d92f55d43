"""The one place where sample records become the numbers Ripple reports (DESIGN.md section 2).

Every surface (`ripple eval`, the grid table, MLflow, sweeps, `ripple report`) calls
`summarize_cells`, so a number means the same everywhere and is computed once:
  accuracy     percent correct over samples without error, with its 95 % Wilson interval;
  mean NFE     over samples without error;
  TPS          generated tokens / decode seconds, both summed over the cell (canvas TPS: gen_length);
  speedup      TPS / the baseline cell's TPS, and NFE speedup = baseline mean NFE / mean NFE, each
               with a 95 % paired-bootstrap interval over the samples both cells share (seeded);
  p_value      exact McNemar test of correctness against the baseline on the shared samples
               (a binomial test on the discordant pairs).
Statistics come from scipy.stats, not hand-written formulas.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable, Mapping

import numpy as np
import polars as pl

CONFIDENCE = 0.95
RESAMPLES = 2000  # paired-bootstrap resamples per interval
SEED = 0  # the bootstrap's seed: the same records always give the same intervals
BASELINE_DECODER = "default"  # speedups and paired tests compare against this decoder's cell


@dataclass(frozen=True)
class CellMetrics:
    """One cell's numbers; the comparison fields are None without a baseline cell."""

    n: int  # samples without error
    errors: int
    correct: int
    accuracy: float  # percent
    accuracy_lo: float
    accuracy_hi: float
    mean_nfe: float
    generated_tokens: int  # summed over the cell
    decode_seconds: float  # summed over the cell
    tps: float
    canvas_tps: float
    shared: int | None = None  # samples without error in both this cell and its baseline
    speedup: float | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    nfe_speedup: float | None = None
    nfe_speedup_lo: float | None = None
    nfe_speedup_hi: float | None = None
    p_value: float | None = None  # exact McNemar against the baseline

    def metrics(self) -> dict[str, float]:
        """The numeric fields that are set, for MLflow and JSON."""
        return {k: float(v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_metrics(cls, values: Mapping[str, float]) -> "CellMetrics":
        """Inverse of `metrics()` (e.g. for numbers that crossed a process boundary as a dict)."""
        names = {f.name: f.type for f in fields(cls)}
        return cls(**{k: (int(v) if names[k] in ("int", "int | None") else float(v))
                      for k, v in values.items() if k in names})

    @property
    def significant(self) -> bool:
        """Accuracy differs from the baseline's at the 5 % level (paired test)."""
        return self.p_value is not None and self.p_value < 1 - CONFIDENCE

    def accuracy_text(self) -> str:
        """`16.0 ±10.2`: the estimate and half the width of its 95 % interval."""
        return f"{self.accuracy:.1f} ±{(self.accuracy_hi - self.accuracy_lo) / 2:.1f}"

    def speedup_text(self) -> str:
        return _ratio_text(self.speedup, self.speedup_lo, self.speedup_hi)

    def nfe_speedup_text(self) -> str:
        return _ratio_text(self.nfe_speedup, self.nfe_speedup_lo, self.nfe_speedup_hi)


def _ratio_text(v: float | None, lo: float | None, hi: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}x" if lo is None else f"{v:.2f}x ±{(hi - lo) / 2:.2f}"


def wilson(correct: int, n: int) -> tuple[float, float]:
    """95 % Wilson interval of a proportion, in percent ((0, 100) when n is 0)."""
    if n == 0:
        return 0.0, 100.0
    from scipy.stats import binomtest

    ci = binomtest(correct, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return 100 * float(ci.low), 100 * float(ci.high)


def mcnemar_exact(cell_correct: Iterable[bool], base_correct: Iterable[bool]) -> float:
    """Two-sided exact McNemar p-value for paired correctness (1.0 with no discordant pair)."""
    from scipy.stats import binomtest

    pairs = list(zip(cell_correct, base_correct, strict=True))
    only_cell = sum(a and not b for a, b in pairs)
    only_base = sum(b and not a for a, b in pairs)
    if only_cell + only_base == 0:
        return 1.0
    return float(binomtest(only_cell, only_cell + only_base, 0.5).pvalue)


def _ratio_of_sums(num_a, den_a, num_b, den_b, axis=-1):
    """(sum num_a / sum den_a) / (sum num_b / sum den_b) along `axis` (vectorised for bootstrap)."""
    return (np.sum(num_a, axis) / np.sum(den_a, axis)) / (np.sum(num_b, axis) / np.sum(den_b, axis))


def paired_ratio_interval(num_a, den_a, num_b, den_b, seed: int = SEED) -> tuple[float, float] | None:
    """95 % percentile paired-bootstrap interval of `_ratio_of_sums` (None below 2 pairs or when
    a resample's denominator can vanish)."""
    from scipy.stats import bootstrap

    data = tuple(np.asarray(x, dtype=np.float64) for x in (num_a, den_a, num_b, den_b))
    if len(data[0]) < 2 or not all(np.all(d > 0) for d in (data[1], data[2])):
        return None
    res = bootstrap(data, _ratio_of_sums, paired=True, vectorized=True, n_resamples=RESAMPLES,
                    confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _ok(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.filter(pl.col("error").is_null())


def cell_metrics(rows: pl.DataFrame, base: pl.DataFrame | None = None, seed: int = SEED) -> CellMetrics:
    """The metrics of one cell's records (`rows`), compared with `base` (the baseline cell's) if given.

    Columns used: sample_id, correct, error, nfe, generated_tokens, decode_seconds, gen_length (and
    task, when present: the rows of several tasks' cells pool into one, as a sweep trial does)."""
    ok = _ok(rows)
    n = ok.height
    correct = int(ok["correct"].cast(pl.Int64).sum() or 0) if n else 0
    tokens = int(ok["generated_tokens"].sum() or 0) if n else 0
    seconds = float(ok["decode_seconds"].sum() or 0.0) if n else 0.0
    canvas = int(ok["gen_length"].sum() or 0) if n else 0
    lo, hi = wilson(correct, n)
    out = dict(n=n, errors=rows.height - n, correct=correct, accuracy=100 * correct / n if n else 0.0,
               accuracy_lo=lo, accuracy_hi=hi, mean_nfe=float(ok["nfe"].mean()) if n else 0.0,
               generated_tokens=tokens, decode_seconds=seconds, tps=tokens / seconds if seconds else 0.0, canvas_tps=canvas / seconds if seconds else 0.0)
    if base is not None:
        out.update(_compare(ok, _ok(base), out, seed))
    return CellMetrics(**out)


def _compare(ok: pl.DataFrame, base_ok: pl.DataFrame, mine: dict, seed: int) -> dict[str, Any]:
    b_tokens, b_seconds = base_ok["generated_tokens"].sum(), base_ok["decode_seconds"].sum()
    b_nfe = base_ok["nfe"].mean() if base_ok.height else None
    key = ["task", "sample_id"] if "task" in ok.columns else ["sample_id"]  # rows may span several tasks
    cols = [*key, "correct", "nfe", "generated_tokens", "decode_seconds"]
    pair = ok.select(cols).join(base_ok.select(cols), on=key, suffix="_base")
    out: dict[str, Any] = {"shared": pair.height}
    if b_seconds and b_tokens and mine["tps"]:
        out["speedup"] = mine["tps"] / (b_tokens / b_seconds)
    if b_nfe and mine["mean_nfe"]:
        out["nfe_speedup"] = float(b_nfe) / mine["mean_nfe"]
    if pair.height == 0:
        return out
    tps_ci = paired_ratio_interval(pair["generated_tokens"], pair["decode_seconds"], pair["generated_tokens_base"],
                                   pair["decode_seconds_base"], seed)
    if tps_ci is not None and "speedup" in out:
        out["speedup_lo"], out["speedup_hi"] = tps_ci
    ones = np.ones(pair.height)  # NFE speedup = (sum nfe_base / n) / (sum nfe / n)
    nfe_ci = paired_ratio_interval(pair["nfe_base"], ones, pair["nfe"], ones, seed)
    if nfe_ci is not None and "nfe_speedup" in out:
        out["nfe_speedup_lo"], out["nfe_speedup_hi"] = nfe_ci
    out["p_value"] = mcnemar_exact(pair["correct"].to_list(), pair["correct_base"].to_list())
    return out


def self_baseline(m: CellMetrics) -> CellMetrics:
    """The baseline compared with itself: speedups exactly 1, nothing to test."""
    return replace(m, shared=m.n, speedup=1.0 if m.tps else None, nfe_speedup=1.0 if m.mean_nfe else None)


def summarize_cells(frame: pl.DataFrame, baselines: Mapping[str, str | None], seed: int = SEED
                    ) -> dict[str, CellMetrics]:
    """Metrics of every cell id in `baselines` that has records in `frame`; `baselines` maps a cell
    id to its baseline cell's id (None: no comparison, e.g. the baseline itself)."""
    by_cell = {k[0]: g for k, g in frame.group_by("cell_id")} if frame.height else {}
    out = {}
    for cell_id, base_id in baselines.items():
        rows = by_cell.get(cell_id)
        if rows is None:
            continue
        if base_id == cell_id:  # the baseline against itself: exactly 1, nothing to test
            out[cell_id] = self_baseline(cell_metrics(rows, None, seed))
            continue
        base = by_cell.get(base_id) if base_id is not None else None
        out[cell_id] = cell_metrics(rows, base, seed)
    return out
