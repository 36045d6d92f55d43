"""The one place where sample records become the numbers Ripple reports (DESIGN.md section 2).

Every surface (`ripple eval`, the grid table, MLflow, sweeps, `ripple report`) calls
`summarize_cells`, so a number means the same everywhere and is computed once:
  accuracy     percent correct over samples without error, with its 95 % Wilson interval;
  mean NFE     over samples without error;
  TPF          tokens per forward: generated tokens / NFE, both summed over the samples without error
               (total / total, so long samples weigh by their length, as the d3LLM leaderboard pools);
  TPS          generated tokens / decode seconds, both summed over the cell's samples decoded at
               batch 1 (canvas TPS: gen_length): a latency figure, None when no sample ran alone;
  throughput   generated tokens / wall seconds of the engine calls (batches) that decoded them,
               over the samples at the cell's largest batch size: at batch 1 it equals TPS;
  speedup      TPS / the baseline cell's TPS (so at batch 1 only), and NFE speedup = baseline mean
               NFE / mean NFE, each with a 95 % paired-bootstrap interval over the samples both
               cells share (seeded);
  p_value      exact McNemar test of correctness against the baseline on the shared samples
               (a binomial test on the discordant pairs);
  AUP          accuracy under parallelism of one decoder's curve of (TPF, accuracy) points (`aup`);
  strict       ParallelBench tasks: mean `score_strict` (percent) over samples without error, the
               same rule on strictly formatted answers; None for tasks without it;
  PBx          ParallelBench's summary over a set of tasks: the largest tokens per step among a
               decoder's configurations whose mean score over the tasks is at least x (`pb_scores`).
The three statistics are scipy.stats' own definitions (Wilson without continuity correction,
`binomtest`'s two-sided p-value at 1/2, `bootstrap`'s paired percentile interval with its draws),
written out here with numpy and the standard library: importing scipy.stats costs every driver,
report and trial process about a second of CPU. tests/platform/experiments/test_metrics.py checks
them against scipy itself.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from .spec import Cell

CONFIDENCE = 0.95
RESAMPLES = 2000  # paired-bootstrap resamples per interval
SEED = 0  # the bootstrap's seed: the same records always give the same intervals
Z = NormalDist().inv_cdf(0.5 + 0.5 * CONFIDENCE)  # the normal quantile of a two-sided interval (1.96 at 95 %)
BASELINE_DECODER = "default"  # speedups and paired tests compare against this decoder's cell
# how every surface compares a decoder that spends forwards of two sizes (issue 58)
VERIFIER_RULE = ("verifier NFE: forwards of a decoder's second model (a small autoregressive verifier beside the "
                 "dLLM) per sample, shown beside mean NFE and never added to it: NFE stays the dLLM's forwards, "
                 "since a verifier's forward (0.5B) is not a dLLM's (7B). TPS counts the whole wall time, both "
                 "models' forwards included: it is the comparison across decoders with and without a second model.")
ORACLE_DECODER = "oracle"  # NFE / oracle compares against this decoder's cell (ripple/decoders/oracle.py)


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
    tpf: float | None  # tokens per forward: generated tokens / NFE over the cell (None when no forward ran)
    generated_tokens: int  # summed over the cell
    decode_seconds: float  # summed over the cell's batch-1 samples (TPS's denominator)
    tps: float | None  # batch-1 TPS; None when every sample was decoded in a batch of several
    canvas_tps: float | None
    batch_size: int = 1  # the largest batch size among the cell's samples
    throughput: float | None = None  # generated tokens / wall seconds across the batches at `batch_size`
    batches: int = 0  # engine calls behind `throughput`
    shared: int | None = None  # samples without error in both this cell and its baseline
    speedup: float | None = None
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    nfe_speedup: float | None = None
    nfe_speedup_lo: float | None = None
    nfe_speedup_hi: float | None = None
    p_value: float | None = None  # exact McNemar against the baseline
    mean_edits: float | None = None  # token edits per sample (token editing); None where no sample edited
    strict: float | None = None  # percent: mean score_strict (ParallelBench tasks); None for other tasks
    # mean NFE over the oracle cell's on the samples both decoded (issue 51); None without an oracle cell
    nfe_over_oracle: float | None = None
    # forwards of the decoder's second model (a verifier) per sample, beside mean_nfe and never added to it;
    # None where no sample carries one (decoders without a second model, records stored before it)
    mean_verifier_nfe: float | None = None

    def metrics(self) -> dict[str, float]:
        """The numeric fields that are set, for MLflow and JSON."""
        return {k: float(v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_metrics(cls, values: Mapping[str, float]) -> "CellMetrics":
        """Inverse of `metrics()` (e.g. for numbers that crossed a process boundary as a dict)."""
        names = {f.name: f.type for f in fields(cls)}
        unset = {k: None for k, t in names.items() if t.endswith("| None")}  # metrics() drops None values
        return cls(**{**unset, **{k: (int(v) if names[k] in ("int", "int | None") else float(v))
                                  for k, v in values.items() if k in names}})

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


@dataclass(frozen=True)
class CellSummary:
    """A cell and its metrics (`metrics.py`: errors excluded and counted, intervals, the comparison
    with the Default cell of the same model, task, lengths and cache when the grid has one)."""

    cell: "Cell"
    stats: CellMetrics

    @property
    def cell_id(self) -> str:
        return self.cell.cell_id

    def __getattr__(self, name: str):  # n, accuracy, tps, speedup, ...: the metrics' fields
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.stats, name)

    def metrics(self) -> dict[str, float]:
        return self.stats.metrics()


def _ratio_text(v: float | None, lo: float | None, hi: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}x" if lo is None else f"{v:.2f}x ±{(hi - lo) / 2:.2f}"


def wilson(correct: int, n: int) -> tuple[float, float]:
    """95 % Wilson interval of a proportion, in percent ((0, 100) when n is 0): scipy's
    `binomtest(correct, n).proportion_ci(method="wilson")`, term for term."""
    if n == 0:
        return 0.0, 100.0
    z, p = Z, correct / n
    denom = 2 * (n + z ** 2)
    center = (2 * n * p + z ** 2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z ** 2)
    lo = 0.0 if correct == 0 else center - delta
    hi = 1.0 if correct == n else center + delta
    return 100 * float(lo), 100 * float(hi)


def mcnemar_exact(cell_correct: Iterable[bool], base_correct: Iterable[bool]) -> float:
    """Two-sided exact McNemar p-value for paired correctness (1.0 with no discordant pair): the
    binomial test of the discordant pairs at 1/2, whose two tails are mirror images, summed exactly."""
    pairs = list(zip(cell_correct, base_correct, strict=True))
    only_cell = sum(a and not b for a, b in pairs)
    only_base = sum(b and not a for a, b in pairs)
    n = only_cell + only_base
    if n == 0 or only_cell == only_base:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_cell, only_base) + 1))
    return min(1.0, 2 * tail / 2 ** n)  # int / int: correctly rounded, however large


def _ratio_of_sums(num_a, den_a, num_b, den_b, axis=-1):
    """(sum num_a / sum den_a) / (sum num_b / sum den_b) along `axis` (vectorised over resamples)."""
    return (np.sum(num_a, axis) / np.sum(den_a, axis)) / (np.sum(num_b, axis) / np.sum(den_b, axis))


def paired_ratio_interval(num_a, den_a, num_b, den_b, seed: int = SEED) -> tuple[float, float] | None:
    """95 % percentile paired-bootstrap interval of `_ratio_of_sums` (None below 2 pairs or when
    a resample's denominator can vanish): scipy's `bootstrap(paired=True, method="percentile")`
    with the same generator, so the same draws (`RESAMPLES` rows of n sample indices at once)."""
    data = tuple(np.asarray(x, dtype=np.float64) for x in (num_a, den_a, num_b, den_b))
    n = len(data[0])
    if n < 2 or not all(np.all(d > 0) for d in (data[1], data[2])):
        return None
    idx = np.random.default_rng(seed).integers(0, n, (RESAMPLES, n))  # [R, n]
    ratios = _ratio_of_sums(*(d[idx] for d in data))  # [R]
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return float(low), float(high)


def _ok(rows: pl.DataFrame) -> pl.DataFrame:
    """Samples without error, with the batch columns filled in where `rows` predate them (a record
    without them was decoded alone: its batch is itself, its wall time its decode time)."""
    ok = rows.filter(pl.col("error").is_null())
    if "batch_size" not in ok.columns:
        ok = ok.with_columns(pl.lit(1, dtype=pl.Int64).alias("batch_size"))
    if "batch_id" not in ok.columns:
        ok = ok.with_columns(pl.lit(None, dtype=pl.String).alias("batch_id"))
    if "batch_seconds" not in ok.columns:
        ok = ok.with_columns(pl.lit(None, dtype=pl.Float64).alias("batch_seconds"))
    own = pl.format("sample:{}", pl.col("sample_id"))
    if "task" in ok.columns:  # rows may span several tasks (a sweep trial): sample ids repeat across them
        own = pl.format("sample:{}:{}", pl.col("task"), pl.col("sample_id"))
    return ok.with_columns(pl.col("batch_size").fill_null(1), pl.col("batch_id").fill_null(own),
                           pl.col("batch_seconds").fill_null(pl.col("decode_seconds")))


def _alone(ok: pl.DataFrame) -> pl.DataFrame:
    """The samples decoded at batch 1: the only ones whose decode time is a latency (TPS, speedup)."""
    return ok.filter(pl.col("batch_size") == 1)


def throughput(ok: pl.DataFrame) -> tuple[int, float | None, int]:
    """(batch size, generated tokens / wall seconds of their batches, batches) over the samples at the
    largest batch size in `ok` (a grid resumed at another batch size holds several)."""
    if ok.height == 0:
        return 1, None, 0
    size = int(ok["batch_size"].max())
    rows = ok.filter(pl.col("batch_size") == size)
    batches = rows.group_by("batch_id").agg(pl.col("batch_seconds").max()).sort("batch_id")  # a fixed summing order
    wall = float(batches["batch_seconds"].sum() or 0.0)
    tokens = int(rows["generated_tokens"].sum() or 0)
    return size, tokens / wall if wall > 0 else None, batches.height


def cell_metrics(rows: pl.DataFrame, base: pl.DataFrame | None = None, seed: int = SEED) -> CellMetrics:
    """The metrics of one cell's records (`rows`), compared with `base` (the baseline cell's) if given.

    Columns used: sample_id, correct, error, nfe, generated_tokens, decode_seconds, gen_length, and
    when present batch_size, batch_id, batch_seconds (absent: batch 1) and task (the rows of several
    tasks' cells pool into one, as a sweep trial does)."""
    ok = _ok(rows)
    n = ok.height
    forwards = int(ok["nfe"].sum() or 0) if n else 0
    correct = int(ok["correct"].cast(pl.Int64).sum() or 0) if n else 0
    alone = _alone(ok)
    tokens = int(alone["generated_tokens"].sum() or 0)
    seconds = float(alone["decode_seconds"].sum() or 0.0)
    canvas = int(alone["gen_length"].sum() or 0)
    timed = alone.height > 0 and seconds > 0
    size, tput, batches = throughput(ok)
    lo, hi = wilson(correct, n)
    out = dict(n=n, errors=rows.height - n, correct=correct, accuracy=100 * correct / n if n else 0.0,
               accuracy_lo=lo, accuracy_hi=hi, mean_nfe=float(ok["nfe"].mean()) if n else 0.0,
               tpf=int(ok["generated_tokens"].sum() or 0) / forwards if forwards else None,
               generated_tokens=int(ok["generated_tokens"].sum() or 0) if n else 0, decode_seconds=seconds,
               tps=tokens / seconds if timed else None, canvas_tps=canvas / seconds if timed else None,
               batch_size=size, throughput=tput, batches=batches, mean_edits=mean_edits(ok), strict=strict_score(ok),
               mean_verifier_nfe=mean_verifier_nfe(ok))
    if base is not None:
        out.update(_compare(ok, _ok(base), out, seed))
    return CellMetrics(**out)


def strict_score(ok: pl.DataFrame) -> float | None:
    """Percent: mean `score_strict` over the samples without error (a sample without one counts 0), or
    None when no sample carries one (a task without a strict figure, or records that predate it)."""
    if "score_strict" not in ok.columns or ok.height == 0 or ok["score_strict"].null_count() == ok.height:
        return None
    return 100 * float(ok["score_strict"].fill_null(0.0).sum()) / ok.height


def strict_text(value: float | None) -> str:
    """The strict figure as every table prints it (`87.5`, percent; `-` for a cell without one)."""
    return "-" if value is None else f"{value:.1f}"


def mean_edits(ok: pl.DataFrame) -> float | None:
    """Mean token edits per sample, or None when no sample edited (or the records predate editing)."""
    if "edits" not in ok.columns or ok.height == 0:
        return None
    total = int(ok["edits"].fill_null(0).sum() or 0)
    return total / ok.height if total else None


def mean_verifier_nfe(ok: pl.DataFrame) -> float | None:
    """Mean forwards of the decoder's second model per sample (a verifier's: a different model from the one
    NFE counts, so never added to it), or None when no sample carries the count."""
    if "verifier_nfe" not in ok.columns or ok.height == 0 or ok["verifier_nfe"].null_count() == ok.height:
        return None
    return float(ok["verifier_nfe"].fill_null(0).sum()) / ok.height


def _compare(ok: pl.DataFrame, base_ok: pl.DataFrame, mine: dict, seed: int) -> dict[str, Any]:
    base_alone = _alone(base_ok)  # speedup compares batch-1 TPS with batch-1 TPS
    b_tokens, b_seconds = base_alone["generated_tokens"].sum(), base_alone["decode_seconds"].sum()
    b_nfe = base_ok["nfe"].mean() if base_ok.height else None
    key = ["task", "sample_id"] if "task" in ok.columns else ["sample_id"]  # rows may span several tasks
    cols = [*key, "correct", "nfe", "generated_tokens", "decode_seconds", "batch_size"]
    pair = ok.select(cols).join(base_ok.select(cols), on=key, suffix="_base")
    out: dict[str, Any] = {"shared": pair.height}
    if b_seconds and b_tokens and mine["tps"]:
        out["speedup"] = mine["tps"] / (b_tokens / b_seconds)
    if b_nfe and mine["mean_nfe"]:
        out["nfe_speedup"] = float(b_nfe) / mine["mean_nfe"]
    if pair.height == 0:
        return out
    timed = pair.filter((pl.col("batch_size") == 1) & (pl.col("batch_size_base") == 1))
    tps_ci = paired_ratio_interval(timed["generated_tokens"], timed["decode_seconds"], timed["generated_tokens_base"],
                                   timed["decode_seconds_base"], seed)
    if tps_ci is not None and "speedup" in out:
        out["speedup_lo"], out["speedup_hi"] = tps_ci
    ones = np.ones(pair.height)  # NFE speedup = (sum nfe_base / n) / (sum nfe / n)
    nfe_ci = paired_ratio_interval(pair["nfe_base"], ones, pair["nfe"], ones, seed)
    if nfe_ci is not None and "nfe_speedup" in out:
        out["nfe_speedup_lo"], out["nfe_speedup_hi"] = nfe_ci
    out["p_value"] = mcnemar_exact(pair["correct"].to_list(), pair["correct_base"].to_list())
    return out


def baseline_ids(cells: Mapping[str, "Cell"]) -> dict[str, str | None]:
    """Each cell id's baseline: the id of the `default` cell with the same `Cell.baseline_key()` (model,
    task and decode settings), or None when there is none (the lowest id if there are several)."""
    base: dict[tuple, str] = {}
    for cid, c in sorted(cells.items()):
        if c.decoder == BASELINE_DECODER:
            base.setdefault(c.baseline_key(), cid)
            base.setdefault(("loose", c.geometry_free_key()), cid)
    return {cid: _found(base, c) for cid, c in cells.items()}


def _found(by_key: Mapping[tuple, Any], c: "Cell") -> Any:
    """What `by_key` holds for cell c's `baseline_key`, else, for a decoder with its own block and cache
    (`Cell.loose_key`), for the same settings at any block and cache (the lowest such id); None otherwise."""
    if c.baseline_key() in by_key:
        return by_key[c.baseline_key()]
    loose = c.loose_key()
    return None if loose is None else by_key.get(("loose", loose))


def oracle_ids(cells: Mapping[str, "Cell"]) -> dict[str, str | None]:
    """Each cell id's oracle cell: the `oracle` cell with the same `Cell.baseline_key()` (model, task and
    decode settings), the one following `default` where there are several (else the lowest id); None
    when there is none."""
    best: dict[tuple, tuple[int, str]] = {}
    for cid, c in sorted(cells.items()):
        if c.decoder == ORACLE_DECODER:
            rank = 0 if dict(c.params).get("follow", "default") == BASELINE_DECODER else 1
            for key in (c.baseline_key(), ("loose", c.geometry_free_key())):
                if key not in best or rank < best[key][0]:
                    best[key] = (rank, cid)
    found = {cid: _found(best, c) for cid, c in cells.items()}  # (rank, oracle id) or None
    return {cid: hit[1] if hit else None for cid, hit in found.items()}


def nfe_over_oracle(rows: pl.DataFrame, oracle_rows: pl.DataFrame) -> float | None:
    """A cell's mean NFE over its oracle cell's, on the samples both decoded without error (None: none)."""
    key = ["task", "sample_id"] if "task" in rows.columns else ["sample_id"]
    pair = _ok(rows).select(*key, "nfe").join(_ok(oracle_rows).select(*key, "nfe"), on=key, suffix="_oracle")
    below = int(pair["nfe_oracle"].sum() or 0) if pair.height else 0
    return int(pair["nfe"].sum()) / below if below else None


def ratio_text(v: float | None) -> str:
    """NFE / oracle as every table prints it: `1.35x` (`-` without an oracle cell of the same samples)."""
    return "-" if v is None or math.isnan(v) else f"{v:.2f}x"


def self_baseline(m: CellMetrics) -> CellMetrics:
    """The baseline compared with itself: speedups exactly 1, nothing to test."""
    return replace(m, shared=m.n, speedup=1.0 if m.tps else None, nfe_speedup=1.0 if m.mean_nfe else None)


def summarize_cells(frame: pl.DataFrame, baselines: Mapping[str, str | None], seed: int = SEED,
                    oracles: Mapping[str, str | None] | None = None) -> dict[str, CellMetrics]:
    """Metrics of every cell id in `baselines` that has records in `frame`; `baselines` maps a cell
    id to its baseline cell's id (None: no comparison, e.g. the baseline itself), `oracles` to its
    oracle cell's (`oracle_ids`; NFE / oracle)."""
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
    for cell_id, oracle_id in (oracles or {}).items():
        if cell_id in out and oracle_id in by_cell:
            out[cell_id] = replace(out[cell_id], nfe_over_oracle=nfe_over_oracle(by_cell[cell_id], by_cell[oracle_id]))
    return out


# ---------------------------------------------------------------------------- parallel failures
def parallel_failures(frame: pl.DataFrame, baselines: Mapping[str, str | None], keep: int = 5) -> dict[str, Any]:
    """Each cell with traces whose baseline (`default`) cell has traces too: its `FailureCount`
    (ripple/platform/runtime/failures.py) over the samples both hold without error: those the baseline
    gets right and the cell wrong, by the forward of their first wrong commit. Cells without traces
    (traces off, a store written before them) are left out."""
    from ..runtime.failures import count_failures
    from ..runtime.tracing import Trace

    if not frame.height or "trace" not in frame.columns:
        return {}
    traced = frame.filter(pl.col("error").is_null() & pl.col("trace").is_not_null())
    by_cell = {k[0]: g for k, g in traced.group_by("cell_id")} if traced.height else {}
    out = {}
    for cell_id, base_id in baselines.items():
        if base_id is None or base_id == cell_id or cell_id not in by_cell or base_id not in by_cell:
            continue
        base = {r["sample_id"]: r for r in by_cell[base_id].iter_rows(named=True)}
        rows = [(r["sample_id"], bool(r["correct"]), Trace.loads(r["trace"]).decisions,
                 bool(base[r["sample_id"]]["correct"]), Trace.loads(base[r["sample_id"]]["trace"]).decisions)
                for r in by_cell[cell_id].sort("sample_id").iter_rows(named=True)
                if r["sample_id"] in base and not r["correct"] and base[r["sample_id"]]["correct"]]
        out[cell_id] = count_failures(rows, keep)
    return out


def failure_metrics(count) -> dict[str, float]:
    """A `FailureCount` as MLflow metrics (shares in percent, as accuracy is)."""
    out = {"parallel_failures_wrong": float(count.wrong)}
    if count.wrong:
        out.update(parallel_failure_share=100.0 * count.parallel_share, duplicate_share=100.0 * count.duplicate_share,
                   twice_share=100.0 * count.twice_share)
    return out


# ---------------------------------------------------------------------------- AUP
AUP_ALPHA = 3.0  # the weight's penalty rate for accuracy below the best
AUP_WINDOW = 5.0  # points more than this many accuracy points below y_1 leave the curve


@dataclass(frozen=True)
class Aup:
    """One decoder curve's AUP, with the points it used and those the y_1 - 5 filter dropped."""

    aup: float
    points: tuple[tuple[float, float], ...]  # (TPF, accuracy %) kept, sorted by TPF
    dropped: tuple[tuple[float, float], ...] = ()  # below y_1 - AUP_WINDOW: the reference would refuse the curve


def aup_weight(y: float, y_max: float) -> float:
    """W(y) = min(exp(-alpha (1 - y / y_max)), 1): full credit at the best accuracy, then decaying fast."""
    if y_max <= 0:  # every accuracy is 0: each weighted term is 0 whatever W is
        return 1.0
    return min(float(np.exp(-AUP_ALPHA * (1.0 - y / y_max))), 1.0)


def aup(points: Iterable[tuple[float, float]], y_max: float) -> Aup:
    """Accuracy under parallelism (AUP) of one decoder's curve of (TPF rho, accuracy y in percent) points.

    The d3LLM leaderboard's score, as its `get_aup` computes it (repository hao-ai-lab/d3LLM, file
    `AUP_leaderboard/aup_utils.py`, function `get_aup`, alpha 3 and y_min_offset 5; read in the fork
    duterscmy/d3LLM, whose `AUP_leaderboard/main.py` calls it per task with y_max over every method).
    Sorted by rho, the points with y >= y_1 - 5 stay (y_1: accuracy at the smallest rho) and
        AUP = rho_1 y_1 + sum_{i>=2} (rho_i - rho_{i-1}) (y_i W(y_i) + y_{i-1} W(y_{i-1})) / 2,
    W from `aup_weight` with `y_max` the best accuracy of any decoder on the model and task. Parallelism
    counts only while accuracy holds: a trapezoid of speed gained at a lower accuracy is discounted.
    Where the reference asserts (a point more than 5 below y_1), Ripple keeps the filtered points and
    returns the others in `dropped`, so a surface can say so. Ties in rho keep the given order."""
    pts = sorted(((float(r), float(y)) for r, y in points), key=lambda p: p[0])
    if not pts:
        raise ValueError("AUP needs at least one (TPF, accuracy) point")
    if any(not r > 0 for r, _ in pts):
        raise ValueError(f"AUP needs positive TPF values, got {[r for r, _ in pts]}")
    floor = pts[0][1] - AUP_WINDOW
    kept = tuple(p for p in pts if p[1] >= floor)
    dropped = tuple(p for p in pts if p[1] < floor)
    total = kept[0][0] * kept[0][1]
    for (r0, y0), (r1, y1) in zip(kept, kept[1:]):
        total += (r1 - r0) * (y1 * aup_weight(y1, y_max) + y0 * aup_weight(y0, y_max)) / 2
    return Aup(total, kept, dropped)


# ---------------------------------------------------------------------------- PBx
PB_THRESHOLDS = (90, 80, 70, 60)  # ParallelBench's x, in percent


def pb_scores(configs: Iterable[tuple[float, float]], thresholds: Iterable[int] = PB_THRESHOLDS
              ) -> dict[int, float | None]:
    """ParallelBench's PBx over a decoder's configurations, each (tokens per step, mean score in percent)
    averaged over the same set of tasks: for each x, the largest tokens per step among configurations
    whose mean score is at least x, or None when none reaches x (its `pb_score`). Ties in score or in
    tokens per step change nothing: only the largest qualifying tokens per step counts."""
    configs = [(float(t), float(s)) for t, s in configs]
    return {x: max((t for t, s in configs if s >= x), default=None) for x in thresholds}
