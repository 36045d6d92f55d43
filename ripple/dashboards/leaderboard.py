"""`ripple leaderboard`: every experiment of a result store on one static page, ranked the way the
dLLM community compares decoders (accuracy against tokens per forward, and AUP).

Why a separate surface from `ripple report`: a report covers one experiment; researchers compare
decoders across grids and sweeps (LLaDA and Dream, several limits and lengths). Every number comes
from the metrics module (`ripple/platform/experiments/metrics.py`) through the report's per-experiment
cell summary, so a leaderboard row equals the grid JSON, the report and MLflow for the same cell.

Rows: per (model, weights digest, task) one section, one row per decoder setting of each experiment.
Rows of different weights (the records' `weights` digest) never share a section, so a retrained
checkpoint never competes with its former self. A decoder's AUP curve is its cells in one experiment
that share model, weights, task and decode settings and differ only in the decoder's hyperparameters
(the same samples, so the points are comparable); y_max is the best accuracy of any row of the
section. Points the y_1 - 5 filter drops are listed under the table. The Pareto mark is the
accuracy-TPF front of the section. An `oracle` row (ripple/decoders/oracle.py) reads the answer: it is
the section's yardstick, never ranked (no AUP, off the front, no PBx, out of y_max); every row of a
section holding one shows its NFE / oracle (same lengths, cache and samples), the plot stars its point.
A decoder that runs a second model (APD's small autoregressive verifier) spends forwards of two sizes: mean
NFE and TPF stay the dLLM's forwards, its verifier NFE is shown beside them and never added (a 0.5B forward
is not a 7B forward), and TPS, over the whole wall time of both models, is the cost comparison. One plot per section: accuracy against TPF, each curve joined, each
point with its 95 % Wilson interval as a bar (`plots.interval_bars`).

PBx (ParallelBench's summary, the metrics module's `pb_scores`): per model, weights and decoder over the
tasks that count (a task class marked `parallelbench_scored`), each configuration (the decoder's settings,
with hyperparameters that count forwards over the response read as tokens per step, and the other decode
settings; the block as "response" when it equals the response) gets its mean score over the tasks and its
mean tokens per step (gen_length / mean NFE per cell); a cell's score is its accuracy, the percent of
samples whose ParallelBench score is 1. Cells of one configuration and task in several experiments are
averaged first, as ParallelBench averages its runs. A decoder with several such tasks gets a row over all of
them (its `task` is "all") and one per task; every row and its note name that scope. Strict: the mean
`score_strict` where a task has one.

Folder: leaderboard.html (self-contained: inline CSS and a few lines of sorting JS, plots as data
URIs), leaderboard.md, leaderboard.csv (exactly COLUMNS), pbx.csv (exactly PBX_COLUMNS),
leaderboard.json (sections, rows and PBx with its configurations), one PNG per section.
"""
from __future__ import annotations

import base64
import csv
import html
import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import RippleError
from ..platform.experiments.metrics import PB_THRESHOLDS, VERIFIER_RULE, aup, pb_scores, strict_text
from ..platform.experiments.store import DecodeSettings, ResultStore
from .pareto import ACCURACY_TPF, front_flags
from .plots import INTERVAL_CAPTION, interval_bars, new_figure, save_png
from .report import (FAILURES_TEXT, ORACLE_DECODER, Table, failure_tables, fmt_acc, fmt_nfe, fmt_ratio, fmt_speedup,
                     fmt_tps, mark_oracle, slug, staged_folder, stored_experiments, summarize_cells, table_html,
                     table_markdown)

COLUMNS = ("model", "weights", "task", "decoder", "params", "experiment", "n", "accuracy", "accuracy_lo",
           "accuracy_hi", "tpf", "mean_nfe", "tps", "speedup", "aup", "pareto", "mean_edits", "seed", "strict",
           "nfe_over_oracle", "mean_verifier_nfe")
PBX_COLUMNS = ("model", "weights", "decoder", "task", "tasks", "configurations", *(f"pb{x}" for x in PB_THRESHOLDS))
SECTION = ("model", "weights", "task")
DECODE = tuple(f.name for f in fields(DecodeSettings))
CURVE = ("experiment", *SECTION, "decoder", *DECODE)  # cells of one curve differ only in hyperparameters
NO_WEIGHTS = "unknown"  # records stored before they carried a weights digest


@dataclass(frozen=True)
class Row:
    """One decoder setting of one experiment on one model, weights and task: the CSV's COLUMNS, then
    what the page shows beside them (the accuracy test and the speedup interval) and its curve's key."""

    model: str
    weights: str
    task: str
    decoder: str
    params: str  # the hyperparameters that differ from the decoder's defaults, e.g. `tau=0.3`
    experiment: str
    n: int
    accuracy: float
    accuracy_lo: float
    accuracy_hi: float
    tpf: float | None
    mean_nfe: float
    tps: float | None
    speedup: float | None
    aup: float | None  # its decoder curve's
    pareto: bool  # on the section's accuracy-TPF front
    curve: tuple
    p_value: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    mean_edits: float | None = None  # token edits per sample, where the cell edited
    # the cell's seed (each sample's generator is seeded from it and the sample id: renoising decoders)
    seed: int | None = None
    strict: float | None = None  # ParallelBench's strict figure (percent), where the task has one
    # mean NFE over the oracle cell's of the same lengths and cache, on the same samples (issue 51)
    nfe_over_oracle: float | None = None
    # forwards of the decoder's second model per sample (a verifier), beside mean_nfe, never added to it
    mean_verifier_nfe: float | None = None

    @property
    def usable(self) -> bool:
        """Has a point to plot: samples without error and a positive TPF (AUP needs one)."""
        return bool(self.n and self.tpf)

    @property
    def ranked(self) -> bool:
        """Has a point to rank and score (AUP, the Pareto front): usable and no oracle, which reads the
        answer: it is the section's yardstick (NFE / oracle, a star on the plot), not a competitor."""
        return self.usable and self.decoder != ORACLE_DECODER


@dataclass(frozen=True)
class Section:
    """One model, weights digest and task: its rows, the plot and dropped AUP points."""

    key: dict[str, str]
    rows: tuple[Row, ...]
    figure: str  # PNG file name
    dropped: tuple[str, ...]  # "decoder setting (experiment): TPF x, accuracy y" per dropped point


@dataclass(frozen=True)
class PbConfig:
    """One configuration of a decoder over the tasks that count: its mean score and tokens per step."""

    setting: str  # e.g. `rank=margin, tokens/step=4` (block and other decode settings when not the usual)
    tasks: int  # tasks it ran on
    score: float  # percent, mean over those tasks
    tokens_per_step: float  # mean over those tasks of gen_length / mean NFE


@dataclass(frozen=True)
class PbRow:
    """PBx of one decoder on one model and weights over the ParallelBench-scored tasks of the store."""

    model: str
    weights: str
    decoder: str
    tasks: tuple[str, ...]
    configs: tuple[PbConfig, ...]
    pbx: dict[int, float | None]  # x -> PBx

    @property
    def task(self) -> str:
        """The row's scope: its one task, or "all" for the row over every task the decoder ran."""
        return self.tasks[0] if len(self.tasks) == 1 else "all"

    def csv_values(self) -> list[Any]:
        return [self.model, self.weights, self.decoder, self.task, len(self.tasks), len(self.configs),
                *("" if self.pbx[x] is None else self.pbx[x] for x in PB_THRESHOLDS)]


@dataclass(frozen=True)
class Leaderboard:
    out_dir: Path
    sections: tuple[Section, ...]
    experiments: tuple[str, ...]
    pbx: tuple[PbRow, ...] = ()

    @property
    def html(self) -> Path:
        return self.out_dir / "leaderboard.html"


# ---------------------------------------------------------------------------- rows
def load_cells(store_dir: str | Path) -> tuple[pl.DataFrame, list[str]]:
    """Every cell of every experiment in the store with its metrics, experiment and weights digest."""
    root = Path(store_dir).expanduser()
    if not root.is_dir():
        raise RippleError(f"no result store at {root}; run `ripple grid` first or pass --store DIR")
    frames, names = [], []
    for name in stored_experiments(root):
        records = ResultStore(root, name).read()
        if records.height == 0:
            continue
        weights = (records.group_by("cell_id").agg(pl.col("weights").drop_nulls().unique().sort().str.join(","))
                   .with_columns(pl.when(pl.col("weights") == "").then(pl.lit(NO_WEIGHTS))
                                 .otherwise(pl.col("weights")).alias("weights")))
        cells = summarize_cells(records).join(weights, on="cell_id", how="left")
        frames.append(cells.with_columns(pl.lit(name).alias("experiment")))
        names.append(name)
    if not frames:
        raise RippleError(f"result store {root} holds no experiment with sample records; run `ripple grid` first")
    return pl.concat(frames, how="vertical_relaxed"), names


def _params_text(label: str, decoder: str) -> str:
    """`tau=0.3` from the label `confidence(tau=0.3)`: the hyperparameters that differ from the defaults."""
    return label[len(decoder) + 1:-1] if label.startswith(decoder + "(") else ""


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def build_rows(cells: pl.DataFrame) -> list[Section]:
    """Sections with their rows: AUP per curve and the Pareto mark per section (the metrics module's
    `aup`, the pareto module's front), sorted by decoder registry order, then setting and experiment."""
    from ..decoders import names

    order = {n: i for i, n in enumerate(names())}
    sections = []
    for key in cells.select(SECTION).unique().sort(SECTION).iter_rows(named=True):
        part = cells.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in key.items()]))
        decode_vary = [k for k in DECODE if part[k].n_unique() > 1]
        rows = []
        for c in part.iter_rows(named=True):
            params = _params_text(c["label"], c["decoder"])
            if decode_vary:  # the section mixes lengths or caches: say which row is which
                params = " ".join(filter(None, [params, "[" + " ".join(f"{k}={c[k]}" for k in decode_vary) + "]"]))
            rows.append(Row(c["model"], c["weights"], c["task"], c["decoder"], params, c["experiment"], c["n"],
                            c["accuracy"], c["accuracy_lo"], c["accuracy_hi"], _num(c["tpf"]), c["mean_nfe"],
                            _num(c["tps"]), _num(c["speedup"]), None, False, tuple(c[k] for k in CURVE),
                            c["p_value"], c["speedup_lo"], c["speedup_hi"], _num(c["mean_edits"]), c.get("seed"),
                            _num(c.get("strict")), _num(c.get("nfe_over_oracle")),
                            _num(c.get("mean_verifier_nfe"))))
        aups, dropped = _score_curves(rows)
        flags = front_flags([(r.accuracy, r.tpf) if r.ranked else (None, None) for r in rows], ACCURACY_TPF)
        rows = [replace(r, aup=a, pareto=f) for r, a, f in zip(rows, aups, flags)]
        rows.sort(key=lambda r: (order.get(r.decoder, len(order)), r.decoder, r.params, r.experiment))
        sections.append(Section(key, tuple(rows), f"leaderboard-{slug('-'.join(key.values()))}.png", dropped))
    return sections


def _score_curves(rows: list[Row]) -> tuple[list[float | None], tuple[str, ...]]:
    """Each row's AUP (its decoder curve's; None without a point) and the points the y_1 - 5 filter
    dropped, as text; y_max is the best accuracy among the ranked rows (an oracle row has no AUP)."""
    usable = [r for r in rows if r.ranked]
    if not usable:
        return [None] * len(rows), ()
    y_max = max(r.accuracy for r in usable)
    scores, dropped = {}, []
    for key, members in _curves(rows).items():
        if not members[0].ranked:
            continue
        score = aup([(r.tpf, r.accuracy) for r in members], y_max)
        scores[key] = score.aup
        for tpf, acc in score.dropped:
            r = next(m for m in members if (m.tpf, m.accuracy) == (tpf, acc))
            dropped.append(f"{_setting(r)} ({r.experiment}): TPF {tpf:.2f}, accuracy {acc:.1f}")
    return [scores[r.curve] if r.ranked else None for r in rows], tuple(dropped)


def _curves(rows) -> dict[tuple, list[Row]]:
    """The usable rows by decoder curve (a curve's key is `Row.curve`), in row order."""
    curves: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.usable:
            curves.setdefault(r.curve, []).append(r)
    return curves


def _setting(r: Row) -> str:
    return f"{r.decoder}({r.params})" if r.params else r.decoder


# ---------------------------------------------------------------------------- PBx
def _counts_for_pbx(task: str) -> bool:
    """Whether `task` is scored by ParallelBench's metrics (its class says so); unknown names do not count."""
    from ..tasks import task_class

    try:
        return bool(task_class(task).parallelbench_scored)
    except RippleError:
        return False


def _pb_setting(c: dict[str, Any]) -> tuple[tuple, str]:
    """A cell's configuration key and its text: the decoder's hyperparameters with those counting forwards
    over the response read as tokens per step, and every other decode setting (the block as "response"
    when it equals the response; the response length itself is the task's)."""
    from ..decoders import get, names

    cls = get(c["decoder"]) if c["decoder"] in names() else None
    per_response = cls.response_steps_params if cls is not None else ()
    defaults = cls.Params().to_dict() if cls is not None else {}
    params = json.loads(c["params"] or "{}")
    shown = []
    for k, v in sorted(params.items()):
        if k in per_response and v:
            shown.append(("tokens/step", c["gen_length"] / v))
        elif defaults.get(k, object()) != v:
            shown.append((k, v))
    block = "response" if c["block_length"] == c["gen_length"] else c["block_length"]
    decode = [(k, c[k]) for k in DECODE if k not in ("gen_length", "block_length", "task_options")]
    key = (tuple(shown), block, tuple(decode))
    text = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)
    return key, text + (f" [block={block}]" if block != "response" else "")


def build_pbx(cells: pl.DataFrame) -> list[PbRow]:
    """PBx per model, weights and decoder over the cells of ParallelBench-scored tasks (module docstring):
    over all of a model's such tasks, then, where there are several, over each task alone (PBx per
    operation), the all-task row first."""
    from ..decoders import names

    counted = cells.filter(pl.col("task").map_elements(_counts_for_pbx, return_dtype=pl.Boolean)
                           & (pl.col("n") > 0) & (pl.col("mean_nfe") > 0)
                           & (pl.col("decoder") != ORACLE_DECODER))  # it reads the answer: no trade-off to score
    order = {n: i for i, n in enumerate(names())}
    out = []
    for key in counted.select("model", "weights", "decoder").unique().iter_rows(named=True):
        part = counted.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in key.items()]))
        tasks = sorted(set(part["task"].to_list()))
        scopes = [part] + ([part.filter(pl.col("task") == t) for t in tasks] if len(tasks) > 1 else [])
        out.extend(_pb_row(key, scope) for scope in scopes)
    out.sort(key=lambda r: (r.model, r.weights, order.get(r.decoder, len(order)), r.decoder, len(r.tasks) == 1,
                            r.tasks))
    return out


def _pb_row(key: dict[str, Any], part: pl.DataFrame) -> PbRow:
    """One decoder's PBx over the tasks of `part` (its cells): each configuration's mean score and tokens
    per step over those tasks."""
    per: dict[tuple, tuple[str, dict[str, list[tuple[float, float]]]]] = {}
    for c in part.iter_rows(named=True):
        config, text = _pb_setting(c)
        tasks = per.setdefault(config, (text, {}))[1]
        tasks.setdefault(c["task"], []).append((c["accuracy"], c["gen_length"] / c["mean_nfe"]))
    configs = []
    for text, tasks in per.values():
        means = [(sum(a for a, _ in runs) / len(runs), sum(t for _, t in runs) / len(runs)) for runs in tasks.values()]
        configs.append(PbConfig(text or "defaults", len(means), sum(a for a, _ in means) / len(means),
                                sum(t for _, t in means) / len(means)))
    configs.sort(key=lambda p: (p.tokens_per_step, p.setting))
    return PbRow(key["model"], key["weights"], key["decoder"], tuple(sorted(set(part["task"].to_list()))),
                 tuple(configs), pb_scores((p.tokens_per_step, p.score) for p in configs))


# ---------------------------------------------------------------------------- plot
def section_figure(section: Section):
    """Accuracy against TPF: each decoder curve of each experiment joined in TPF order, each point with its
    Wilson interval as a bar, the Pareto front ringed."""
    fig = new_figure(7.2, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    curves = _curves(section.rows)
    decoders = list(dict.fromkeys(r.decoder for r in section.rows))  # a colour per decoder
    experiments = sorted({r.experiment for r in section.rows})  # a marker and line style per experiment
    for members in curves.values():
        members = sorted(members, key=lambda r: r.tpf)
        r0 = members[0]
        e = experiments.index(r0.experiment)
        name = r0.decoder + (f" ({r0.experiment})" if len(experiments) > 1 else "")
        colour = f"C{decoders.index(r0.decoder) % 10}"
        interval_bars(ax, [r.tpf for r in members], [r.accuracy for r in members],
                      [r.accuracy_lo for r in members], [r.accuracy_hi for r in members], colour)
        ax.plot([r.tpf for r in members], [r.accuracy for r in members], marker="os^Dv<>"[e % 7],
                ls=("-", "--", ":", "-.")[e % 4], ms=5, lw=1.2, c=colour, label=name)
    front = [r for r in section.rows if r.pareto]
    ax.scatter([r.tpf for r in front], [r.accuracy for r in front], s=140, facecolors="none",
               edgecolors="k", lw=1.2, label="Pareto front (accuracy, TPF)")
    mark_oracle(ax, [(r.tpf, r.accuracy) for r in section.rows if r.decoder == ORACLE_DECODER])
    k = section.key
    ax.set_title(f"{k['model']} ({k['weights'][:12]}), task {k['task']}", fontsize=10)
    ax.set_xlabel("TPF (generated tokens per forward)")
    ax.set_ylabel("accuracy %")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return fig


def plot_section(section: Section, path: Path) -> Path:
    return save_png(section_figure(section), path)


# ---------------------------------------------------------------------------- documents
HEADER = ("decoder", "params", "experiment", "n", "accuracy %", "TPF", "mean NFE", "TPS", "speedup", "AUP", "Pareto")


def _header(s: "Section") -> tuple[str, ...]:
    """HEADER, plus a strict column where a task has ParallelBench's strict figure, an edits column in a
    section where some cell edited (token editing), NFE / oracle in a section holding an oracle cell and
    verifier NFE where a decoder ran a second model (beside mean NFE, never added: `VERIFIER_RULE`)."""
    return (HEADER + (("strict %",) if _strict(s) else ()) + (("edits",) if _edited(s) else ())
            + (("NFE / oracle",) if _oracle(s) else ()) + (("verifier NFE",) if _verified(s) else ()))


def _verified(s: "Section") -> bool:
    return any(r.mean_verifier_nfe is not None for r in s.rows)


def _row_cells(r: Row, s: "Section") -> list[tuple[str, Any]]:
    """`_shown` with the columns `_header` gives section `s`."""
    return _shown(r, _edited(s), _strict(s), _oracle(s), _verified(s))


def _oracle(s: "Section") -> bool:
    return any(r.decoder == ORACLE_DECODER for r in s.rows)


def _edited(s: "Section") -> bool:
    return any(r.mean_edits is not None for r in s.rows)


def _strict(s: "Section") -> bool:
    return any(r.strict is not None for r in s.rows)


def _shown(r: Row, edits: bool = False, strict: bool = False, oracle: bool = False,
           verified: bool = False) -> list[tuple[str, Any]]:
    """(text, sort value) per `_header` column."""
    acc = fmt_acc(asdict(r)) if r.n else "-"
    return [(r.decoder, r.decoder), (r.params or "-", r.params), (r.experiment, r.experiment), (str(r.n), r.n),
            (acc, r.accuracy if r.n else None), (fmt_nfe(r.tpf), r.tpf), (fmt_nfe(r.mean_nfe), r.mean_nfe),
            (fmt_tps(r.tps), r.tps), (fmt_speedup(asdict(r)), r.speedup),
            ("-" if r.aup is None else f"{r.aup:.1f}", r.aup), ("*" if r.pareto else "", int(r.pareto))] + (
        [(strict_text(r.strict), r.strict)] if strict else []) + (
        [(fmt_nfe(r.mean_edits or 0.0), r.mean_edits or 0.0)] if edits else []) + (
        [(fmt_ratio(r.nfe_over_oracle), r.nfe_over_oracle)] if oracle else []) + (
        [(fmt_nfe(r.mean_verifier_nfe), r.mean_verifier_nfe)] if verified else [])


PBX_HEADER = ("decoder", "task", "tasks", "configurations", *(f"PB{x}" for x in PB_THRESHOLDS))
PBX_EXPLAIN = ("PBx (ParallelBench): over the ParallelBench-scored tasks, each configuration of a decoder gets its "
               "mean score over the tasks and its mean tokens per step (gen_length / NFE); PBx is the largest tokens "
               "per step among configurations with a mean score of at least x % (- when none reaches x). A decoder "
               "that ran several tasks has a row over all of them (task \"all\"), then one row per task.")


def _pbx_groups(pbx: list[PbRow]) -> dict[tuple[str, str], list[PbRow]]:
    groups: dict[tuple[str, str], list[PbRow]] = {}
    for r in pbx:
        groups.setdefault((r.model, r.weights), []).append(r)
    return groups


def _pbx_shown(r: PbRow) -> list[tuple[str, Any]]:
    return [(r.decoder, r.decoder), (r.task, r.task), (str(len(r.tasks)), len(r.tasks)),
            (str(len(r.configs)), len(r.configs))] + [
        ("-" if r.pbx[x] is None else f"{r.pbx[x]:.2f}", r.pbx[x]) for x in PB_THRESHOLDS]


def _pbx_configs(r: PbRow) -> str:
    """The configurations behind a row, named by decoder and scope: `rps, all 10 tasks: ...` or
    `rps, task lines/copy: ...`."""
    scope = f"task {r.task}" if r.task != "all" else f"all {len(r.tasks)} tasks"
    return f"{r.decoder}, {scope}: " + "; ".join(
        f"{p.setting} -> score {p.score:.1f} at {p.tokens_per_step:.2f} tokens/step"
        + (f" ({p.tasks} tasks)" if p.tasks != len(r.tasks) else "") for p in r.configs)


def _title(s: Section) -> str:
    return f"{s.key['model']} · weights {s.key['weights'][:12]} · task {s.key['task']}"


EXPLAIN = ("accuracy % with half its 95 % Wilson interval (* vs default: p < 0.05, exact McNemar); TPF = generated "
           "tokens / forward passes over the cell; TPS and speedup (vs the same experiment's default) at batch 1; "
           "AUP = accuracy under parallelism of the decoder's curve (its settings in one experiment), as the d3LLM "
           "leaderboard computes it; Pareto = on the accuracy-TPF front of the section; edits (where a cell edited) = "
           "tokens rewritten by token editing per sample.")


def explain(sections: list[Section]) -> str:
    """The page's reading guide: EXPLAIN, and how forwards of two sizes compare where a decoder ran a second
    model (NFE stays the dLLM's, the verifier's beside it, TPS over the whole wall time)."""
    return EXPLAIN + (" " + VERIFIER_RULE if any(_verified(s) for s in sections) else "")


def traced_failures(store_dir: str | Path, cells: pl.DataFrame, folder: Path) -> list[Table]:
    """The report's parallel-failure tables (`report.failure_tables`) of every experiment with decode traces,
    their trace pages under `folder`/traces/EXPERIMENT/."""
    root = Path(store_dir).expanduser()
    out = []
    for name in cells["experiment"].unique(maintain_order=True).to_list():
        records = ResultStore(root, name).read()
        if records["trace"].is_null().all():
            continue
        tables = failure_tables(records, cells.filter(pl.col("experiment") == name), folder,
                                prefix=f"traces/{slug(name)}")
        out += [replace(t, title=f"{name} · {t.title}") for t in tables]
    return out


def _failure_markdown(failures: list[Table]) -> list[str]:
    out = ["## Parallel failures", "", FAILURES_TEXT, ""] if failures else []
    for t in failures:
        out += [t.title, ""] + table_markdown(t)
    return out


def to_markdown(sections: list[Section], experiments: list[str], pbx: list[PbRow] = (),
                failures: list[Table] = ()) -> str:
    out = ["# Ripple leaderboard", "", f"Experiments: {', '.join(experiments)}. {explain(sections)}", ""]
    for (model, weights), rows in _pbx_groups(list(pbx)).items():
        out += [f"## PBx · {model} · weights {weights[:12]}", "", PBX_EXPLAIN, "",
                "| " + " | ".join(PBX_HEADER) + " |", "|" + "|".join("---" for _ in PBX_HEADER) + "|"]
        out += ["| " + " | ".join(t for t, _ in _pbx_shown(r)) + " |" for r in rows]
        out += [""] + [f"- {_pbx_configs(r)}" for r in rows] + [""]
    for s in sections:
        head = _header(s)
        out += [f"## {_title(s)}", "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        out += ["| " + " | ".join(t.replace("|", "\\|") for t, _ in _row_cells(r, s))
                + " |"
                for r in s.rows]
        out += ["", f"![{_title(s)}]({s.figure})", "", INTERVAL_CAPTION, ""]
        out += [f"AUP dropped (more than 5 points below the curve's first accuracy): {d}" for d in s.dropped]
        out += [""] if s.dropped else []
    return "\n".join(out + _failure_markdown(list(failures)))


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3;cursor:pointer;user-select:none}th[data-dir=asc]::after{content:" \\25B2"}
th[data-dir=desc]::after{content:" \\25BC"}td{text-align:right}td:nth-child(-n+3){text-align:left}
tr.front td{font-weight:600}img{max-width:100%}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
p.note{color:#555;font-size:12px}"""

# Click a header: sort that table's rows by the column's data-v (numbers; empty last) or text.
_JS = """document.querySelectorAll("table.sortable th").forEach(function(th, i) {
  th.addEventListener("click", function() {
    var body = th.closest("table").tBodies[0], asc = th.dataset.dir !== "asc";
    th.parentNode.querySelectorAll("th").forEach(function(h) { delete h.dataset.dir; });
    th.dataset.dir = asc ? "asc" : "desc";
    var key = function(row) { var v = row.cells[i].dataset.v; return v === "" ? null : isNaN(v) ? v : Number(v); };
    Array.from(body.rows).sort(function(a, b) {
      var x = key(a), y = key(b);
      if (x === null || y === null) return (x === null) - (y === null);
      var d = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return asc ? d : -d;
    }).forEach(function(row) { body.appendChild(row); });
  });
});"""


def _html_table(header, rows: list[list[tuple[str, Any]]], front: list[bool] | None = None) -> str:
    e = html.escape
    out = ["<table class=\"sortable\"><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in header)
           + "</tr></thead><tbody>"]
    for i, cells in enumerate(rows):
        tds = "".join(f"<td data-v=\"{e('' if v is None else str(v))}\">{e(t)}</td>" for t, v in cells)
        out.append(("<tr class=\"front\">" if front and front[i] else "<tr>") + tds + "</tr>")
    return "".join(out) + "</tbody></table>"


def to_html(sections: list[Section], experiments: list[str], folder: Path, pbx: list[PbRow] = (),
            failures: list[Table] = ()) -> str:
    """One self-contained page: no external asset, plots as data URIs, sorting in inline JS."""
    e = html.escape
    out = ["<!doctype html><html><head><meta charset=\"utf-8\"><title>Ripple leaderboard</title>",
           "<link rel=\"icon\" href=\"data:,\">", f"<style>{_CSS}</style></head><body>", "<h1>Ripple leaderboard</h1>",
           f"<p>Experiments: {e(', '.join(experiments))}. {e(explain(sections))} Click a column header to sort.</p>"]
    for (model, weights), rows in _pbx_groups(list(pbx)).items():
        out.append(f"<h2>{e(f'PBx · {model} · weights {weights[:12]}')}</h2><p>{e(PBX_EXPLAIN)}</p>")
        out.append(_html_table(PBX_HEADER, [_pbx_shown(r) for r in rows]))
        out += [f"<p class=\"note\">{e(_pbx_configs(r))}</p>" for r in rows]
    for s in sections:
        out.append(f"<h2>{e(_title(s))}</h2>" + _html_table(_header(s), [_row_cells(r, s) for r in s.rows],
                                                          [r.pareto for r in s.rows]))
        out += [f"<p class=\"note\">AUP dropped (more than 5 points below the curve's first accuracy): {e(d)}</p>"
                for d in s.dropped]
        data = base64.b64encode((folder / s.figure).read_bytes()).decode("ascii")
        out.append(f"<img class=\"plot\" alt=\"{e(_title(s))}\" src=\"data:image/png;base64,{data}\">"
                   f"<p class=\"note\">{e(INTERVAL_CAPTION)}</p>")
    if failures:
        out.append(f"<h2>Parallel failures</h2><p>{e(FAILURES_TEXT)}</p>")
        out += [f"<p>{e(t.title)}</p>{table_html(t)}" for t in failures]
    out += [f"<script>{_JS}</script>", "</body></html>"]
    return "\n".join(out)


def write_csv(sections: list[Section], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for s in sections:
            for r in s.rows:
                w.writerow(["" if getattr(r, c) is None else getattr(r, c) for c in COLUMNS])


def write_pbx_csv(pbx: list[PbRow], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(PBX_COLUMNS)
        for r in pbx:
            w.writerow(r.csv_values())


def to_json(sections: list[Section], experiments: list[str], pbx: list[PbRow]) -> str:
    """Everything the page shows, as data: each section's rows (COLUMNS) and each decoder's PBx with the
    configurations behind it."""
    return json.dumps({
        "experiments": experiments,
        "sections": [{**s.key, "rows": [{c: getattr(r, c) for c in COLUMNS} for r in s.rows], "dropped": list(s.dropped)}
                     for s in sections],
        "pbx": [{**dict(zip(PBX_COLUMNS[:4], r.csv_values()[:4])), "tasks": list(r.tasks),
                 **{f"pb{x}": r.pbx[x] for x in PB_THRESHOLDS}, "configurations": [asdict(p) for p in r.configs]}
                for r in pbx]}, indent=1)


# ---------------------------------------------------------------------------- the page
def default_out(store_dir: str | Path) -> Path:
    return Path(store_dir).expanduser() / "leaderboard"


def build_leaderboard(store_dir: str | Path, out_dir: str | Path | None = None) -> Leaderboard:
    """Write the leaderboard folder for every experiment in the store (atomically: a failure leaves
    no half folder, and an existing leaderboard is replaced only once the new one is complete)."""
    out = Path(out_dir).expanduser() if out_dir else default_out(store_dir)
    if out.exists() and not out.is_dir():
        raise RippleError(f"--out {out} is a file; give a directory for the leaderboard")
    if out.is_dir() and any(out.iterdir()) and not (out / "leaderboard.html").exists():
        raise RippleError(f"--out {out} exists and is not a leaderboard folder; give a new or leaderboard directory")
    cells, experiments = load_cells(store_dir)
    sections = build_rows(cells)
    pbx = build_pbx(cells)
    with staged_folder(out) as tmp:
        for s in sections:
            plot_section(s, tmp / s.figure)
        failures = traced_failures(store_dir, cells, tmp)
        (tmp / "leaderboard.md").write_text(to_markdown(sections, experiments, pbx, failures))
        (tmp / "leaderboard.html").write_text(to_html(sections, experiments, tmp, pbx, failures))
        (tmp / "leaderboard.json").write_text(to_json(sections, experiments, pbx))
        write_csv(sections, tmp / "leaderboard.csv")
        write_pbx_csv(pbx, tmp / "pbx.csv")
    return Leaderboard(out, tuple(sections), tuple(experiments), tuple(pbx))


def summary_line(board: Leaderboard) -> str:
    rows = sum(len(s.rows) for s in board.sections)
    dropped = sum(len(s.dropped) for s in board.sections)
    note = f"; {dropped} point(s) dropped from AUP curves (listed on the page)" if dropped else ""
    return (f"leaderboard: {board.html} ({rows} rows in {len(board.sections)} model/task sections from "
            f"{len(board.experiments)} experiment(s): {', '.join(board.experiments)}){note}")

