"""`ripple report EXPERIMENT`: the paper's tables and plots from the result store, as a folder.

Every number is recomputed from the stored sample records by the metrics module
(`ripple/platform/experiments/metrics.py`, the one every surface calls), never copied from MLflow, so
a report always agrees with the store it names (DESIGN.md 2): accuracy with its 95 %
Wilson interval, mean NFE, TPS, speedup and NFE speedup against the `default` cell with
the same model, task and decode settings (`Cell.baseline_key`) with paired-bootstrap
intervals, and an exact McNemar test of each decoder's correctness against it.
MLflow contributes each cell's run id to the cell index, and receives the folder: it is
logged as artifacts (under `report/`) of one run named "report" in the experiment,
tagged `ripple_report`; re-running the report updates that run instead of adding one.
A separate run keeps the per-cell runs (and a sweep's parent/child runs) untouched.

Folder: report.md (tables, links to the PNGs), report.html (self-contained: PNGs as
base64 data URIs, inline CSS), cells.csv (one row per cell, full precision), *.png.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import re
import shutil
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import polars as pl

from ..errors import RippleError
from ..platform.experiments.metrics import ORACLE_DECODER, VERIFIER_RULE, ratio_text as fmt_ratio  # noqa: F401 (leaderboard's too)
from ..platform.experiments.store import DecodeSettings, ResultStore, check_name
from .pareto import ACCURACY_NFE, ACCURACY_TPS, front_flags
from .plots import INTERVAL_CAPTION, interval_bars, new_figure, save_png
from .records import load_records, slug, stored_experiments  # noqa: F401  (their home; imported from here too)

BASELINE = ("model", "task", *(f.name for f in dataclasses.fields(DecodeSettings)))  # = Cell.baseline_key()
SETTING = (*BASELINE[:2], "decoder", "params", *BASELINE[2:])  # every setting of a cell, one column each
CONTEXT = tuple(k for k in BASELINE if k != "task")  # one main table (tasks side by side) per context
ALWAYS_SHOWN = ("model", "gen_length", "block_length", "cache")
REPORT_TAG = "ripple_report"


# ---------------------------------------------------------------------------- cells
def summarize_cells(records: pl.DataFrame) -> pl.DataFrame:
    """One row per cell: its settings, label and the metrics module's numbers (intervals and the
    paired comparison with its Default cell included), in table order."""
    from ..platform.experiments.metrics import CellMetrics, baseline_ids, oracle_ids
    from ..platform.experiments.metrics import summarize_cells as cell_stats
    from ..platform.experiments.spec import Cell

    firsts = records.sort("cell_id", "sample_id").unique(subset="cell_id", keep="first", maintain_order=True)
    cells = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    stats = cell_stats(records, baseline_ids(cells), oracles=oracle_ids(cells))
    rows = [{"cell_id": r["cell_id"], **{k: r[k] for k in SETTING}, "label": cells[r["cell_id"]].label(),
             **dataclasses.asdict(stats[r["cell_id"]])} for r in firsts.iter_rows(named=True)]
    schema = {"cell_id": pl.String, **{k: records.schema[k] for k in SETTING}, "label": pl.String,
              **{f.name: pl.Int64 if f.type.startswith("int") else pl.Float64 for f in dataclasses.fields(CellMetrics)}}
    frame = pl.DataFrame(rows, schema=schema)
    order = {name: i for i, name in enumerate(_decoder_order())}
    return (frame.with_columns(pl.col("decoder").replace_strict(order, default=len(order), return_dtype=pl.Int64)
                               .alias("_order"))
            .sort([*CONTEXT, "task", "_order", "label"]).drop("_order"))


def _decoder_order() -> list[str]:
    from ..decoders import names

    return names()  # registry order: default first, then the baselines, rps last


# ---------------------------------------------------------------------------- tables
@dataclass(frozen=True)
class Table:
    """A rendered table: formatted cells, so Markdown, HTML and tests read the same strings."""

    kind: str  # main | closest | length | sensitivity | cells
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    figures: tuple[str, ...] = ()  # PNG file names shown under the table
    note: str = ""


def fmt_acc(c: dict[str, Any]) -> str:
    """`16.0 ±10.2` (half the 95 % Wilson interval), with ` *` when the accuracy differs from the
    Default cell's at p < 0.05 (exact McNemar on the shared samples)."""
    v = c["accuracy"]
    if v is None or math.isnan(v):
        return "-"
    p = c.get("p_value")
    return f"{v:.1f} ±{(c['accuracy_hi'] - c['accuracy_lo']) / 2:.1f}" + (" *" if p is not None and p < 0.05 else "")


def fmt_nfe(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.2f}"


def fmt_tps(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.1f}"


def fmt_speedup(c: dict[str, Any]) -> str:
    """`3.50x ±0.21` (half the 95 % paired-bootstrap interval, when there is one)."""
    v, lo, hi = c["speedup"], c.get("speedup_lo"), c.get("speedup_hi")
    if v is None or math.isnan(v):
        return "-"
    return f"{v:.2f}x" if lo is None or hi is None else f"{v:.2f}x ±{(hi - lo) / 2:.2f}"


def _groups(frame: pl.DataFrame, keys: Sequence[str]) -> list[tuple[dict[str, Any], pl.DataFrame]]:
    """(key values, rows) per distinct key, in the frame's order of first appearance."""
    out = []
    for key_frame in frame.select(keys).unique(maintain_order=True).iter_rows(named=True):
        cond = pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in key_frame.items()])
        out.append((key_frame, frame.filter(cond)))
    return out


def _describe(key: dict[str, Any], varying: set[str]) -> str:
    """`model ripple-tiny, gen_length 48, ...`: the always-shown settings plus those that vary."""
    return ", ".join(f"{k} {key[k]}" for k in key if k in ALWAYS_SHOWN or k in varying)


def _varying(cells: pl.DataFrame, keys: Iterable[str]) -> set[str]:
    return {k for k in keys if cells[k].n_unique() > 1}


def _labels(rows: pl.DataFrame) -> list[str]:
    return rows["label"].unique(maintain_order=True).to_list()


def main_tables(cells: pl.DataFrame) -> list[tuple[dict[str, Any], str, Table]]:
    """Decoders x tasks: accuracy / mean NFE / TPS / speedup, one table per context:
    (context key, its description, table). A context holding an `oracle` cell, or a decoder compared with one
    at other blocks and caches (its own geometry: APD), also shows each decoder's NFE / oracle (its mean NFE
    over the oracle's on the same samples)."""
    vary = _varying(cells, CONTEXT)
    batched = cells.height > 0 and int(cells["batch_size"].max()) > 1  # throughput mode: its column too
    edited = cells.height > 0 and cells["mean_edits"].is_not_null().any()  # token editing: edits per sample
    # a decoder with a second model: its forwards beside NFE, never added (metrics.VERIFIER_RULE)
    verified = cells.height > 0 and cells["mean_verifier_nfe"].is_not_null().any()
    metrics = ("acc %", "NFE", *(("verifier NFE",) if verified else ()), "TPF", "TPS", "speedup",
               *(("throughput",) if batched else ()), *(("edits",) if edited else ()))
    out = []
    for key, rows in _groups(cells, CONTEXT):
        tasks = rows["task"].unique(maintain_order=True).to_list()
        oracle = bool(rows["decoder"].eq(ORACLE_DECODER).any() or rows["nfe_over_oracle"].is_not_nan().any())
        at = 3 if verified else 2
        shown = metrics[:at] + (("NFE / oracle",) if oracle else ()) + metrics[at:]
        header = ["decoder"] + [f"{t} {m}" for t in tasks for m in shown]
        body = []
        for label in _labels(rows):
            line = [label]
            for t in tasks:
                r = rows.filter((pl.col("label") == label) & (pl.col("task") == t))
                if r.height == 0:
                    line += ["-"] * len(shown)
                    continue
                c = r.row(0, named=True)
                line += [fmt_acc(c), fmt_nfe(c["mean_nfe"]), *((fmt_nfe(c["mean_verifier_nfe"]),) if verified else ()),
                         *((fmt_ratio(c["nfe_over_oracle"]),) if oracle else ()),
                         fmt_nfe(c["tpf"]), fmt_tps(c["tps"]), fmt_speedup(c),
                         *((fmt_tps(c["throughput"]),) if batched else ()),
                         *((fmt_nfe(c["mean_edits"] or 0.0),) if edited else ())]
            body.append(tuple(line))
        desc = _describe(key, vary)
        out.append((key, desc, Table("main", f"Decoders x tasks ({desc})", tuple(header), tuple(body),
                                     note=VERIFIER_RULE if verified else "")))
    return out


CLOSEST_POINTS = 1.0  # "within 1 point of default's accuracy": at least default's accuracy minus this
CLOSEST_RATIO = 1.5  # "near the oracle": at most this many times its forwards (issue 57's bar)


def closest_to_oracle(cells: pl.DataFrame) -> Table | None:
    """Per model, task and decode settings holding both a `default` and an `oracle` cell: default's
    accuracy, the oracle's mean NFE, and the decoder with the fewest forwards among those whose accuracy
    is at least default's minus one point (default and the oracle themselves left out), with its NFE /
    oracle and whether that is within 1.5x; "none" where no decoder keeps the accuracy. How much of the
    room the model leaves (the oracle's forwards) a deployable decoder takes today. A decoder with its own
    block and cache (APD) competes where its oracle cell is (`metrics.oracle_ids`: the same settings at any
    block and cache)."""
    from ..platform.experiments.metrics import BASELINE_DECODER, oracle_ids
    from ..platform.experiments.spec import Cell

    vary = _varying(cells, CONTEXT)
    oracle_of = oracle_ids({r["cell_id"]: Cell.from_record(r) for r in cells.iter_rows(named=True)})
    body = []
    for key, rows in _groups(cells, BASELINE):
        default, oracle = (rows.filter(pl.col("decoder") == d) for d in (BASELINE_DECODER, ORACLE_DECODER))
        if default.height == 0 or oracle.height == 0:
            continue
        base, ref = default.row(0, named=True), oracle.row(0, named=True)
        oracles = set(oracle["cell_id"])  # the candidates: every cell compared with this group's oracle
        rows = cells.filter(pl.col("cell_id").is_in([cid for cid, o in oracle_of.items() if o in oracles]))
        keep = rows.filter(~pl.col("decoder").is_in([BASELINE_DECODER, ORACLE_DECODER])
                           & (pl.col("accuracy") >= base["accuracy"] - CLOSEST_POINTS) & pl.col("mean_nfe").is_not_nan())
        best = keep.sort("mean_nfe", "label").row(0, named=True) if keep.height else None
        ratio = best["nfe_over_oracle"] if best else None
        near = "-" if ratio is None or math.isnan(ratio) else ("yes" if ratio <= CLOSEST_RATIO else "no")
        context = _describe({k: v for k, v in key.items() if k in CONTEXT}, vary)
        body.append((context, key["task"], fmt_acc({**base, "p_value": None}), fmt_nfe(ref["mean_nfe"]),
                     best["label"] if best else "none", fmt_acc(best) if best else "-",
                     fmt_nfe(best["mean_nfe"]) if best else "-", fmt_ratio(ratio) if best else "-", near))
    if not body:
        return None
    header = ("setting", "task", "default acc %", "oracle NFE", "fewest forwards within 1 point", "its acc %",
              "its NFE", "NFE / oracle", "within 1.5x")
    note = (f"Among the decoders whose accuracy is at least default's minus {CLOSEST_POINTS:g} point (default and the "
            "oracle left out), the one with the fewest mean forwards; none: no decoder keeps default's accuracy. "
            f"within 1.5x: its NFE / oracle is at most {CLOSEST_RATIO:g}.")
    return Table("closest", "Closest to the oracle", header, tuple(body), note=note)


def length_tables(cells: pl.DataFrame) -> list[Table]:
    """Generation-length robustness: per model/task/cache, accuracy, TPS and speedup at each length."""
    keys = [k for k in BASELINE if k not in ("gen_length", "block_length")]
    vary = _varying(cells, keys)
    out = []
    for key, rows in _groups(cells, keys):
        if rows["gen_length"].n_unique() < 2:
            continue
        lengths = rows.select("gen_length", "block_length").unique().sort(["gen_length", "block_length"]).rows()
        header = ["decoder"] + [f"g{g}/b{b} {m}" for g, b in lengths for m in ("acc %", "TPS", "speedup")]
        body = []
        for label in _labels(rows):
            line = [label]
            for g, b in lengths:
                r = rows.filter((pl.col("label") == label) & (pl.col("gen_length") == g)
                                & (pl.col("block_length") == b))
                c = r.row(0, named=True) if r.height else None
                line += ([fmt_acc(c), fmt_tps(c["tps"]), fmt_speedup(c)] if c else ["-"] * 3)
            body.append(tuple(line))
        desc = ", ".join(f"{k} {key[k]}" for k in key if k in ("model", "task", "cache") or k in vary)
        out.append(Table("length", f"Generation-length robustness ({desc})", tuple(header), tuple(body)))
    return out


def _params(rows: pl.DataFrame) -> list[dict[str, Any]]:
    return [json.loads(p) if p else {} for p in rows["params"].to_list()]


def _sort_value(v: Any) -> tuple:
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, str(v))


def sensitivity_groups(cells: pl.DataFrame) -> list[tuple[dict[str, Any], pl.DataFrame, list[str]]]:
    """Cells that differ only in one decoder's hyperparameters: (key, rows sorted by the varying
    hyperparameters, their names). These are what a sweep stores."""
    out = []
    for key, rows in _groups(cells, [*BASELINE, "decoder"]):
        if rows["params"].n_unique() < 2:
            continue
        ps = _params(rows)
        names = sorted({k for p in ps for k in p if len({json.dumps(q.get(k), sort_keys=True) for q in ps}) > 1})
        order = sorted(range(rows.height), key=lambda i: tuple(_sort_value(ps[i].get(n)) for n in names))
        out.append((key, rows[order], names))
    return out


def sensitivity_table(key: dict[str, Any], rows: pl.DataFrame, names: list[str], vary: set[str]) -> Table:
    ps = _params(rows)
    acc, tps, nfe = rows["accuracy"].to_list(), rows["tps"].to_list(), rows["mean_nfe"].to_list()
    on_tps = front_flags(list(zip(acc, tps)), ACCURACY_TPS)
    on_nfe = front_flags(list(zip(acc, nfe)), ACCURACY_NFE)
    header = (*names, "acc %", "mean NFE", "TPF", "TPS", "speedup", "n", "Pareto front")
    body = []
    for i, c in enumerate(rows.iter_rows(named=True)):
        front = " + ".join(n for n, f in (("acc-TPS", on_tps[i]), ("acc-NFE", on_nfe[i])) if f) or ""
        body.append((*(str(ps[i].get(n, "-")) for n in names), fmt_acc(c), fmt_nfe(c["mean_nfe"]), fmt_nfe(c["tpf"]),
                     fmt_tps(c["tps"]), fmt_speedup(c), str(c["n"]), front))
    shown = {"model", "task", "decoder", *ALWAYS_SHOWN, *vary}
    desc = ", ".join(f"{k} {key[k]}" for k in key if k in shown)
    return Table("sensitivity", f"Hyperparameter sensitivity ({desc})", header, tuple(body),
                 note="Pareto front within these settings: acc-TPS maximises accuracy and TPS; "
                      "acc-NFE maximises accuracy and minimises mean NFE.")


def cells_table(cells: pl.DataFrame, runs: dict[str, str]) -> Table:
    """Index of every cell with its MLflow run (when tracked)."""
    vary = sorted(_varying(cells, [k for k in SETTING if k not in ("decoder", "params")]) | {"task"},
                  key=SETTING.index)
    header = ("cell_id", "decoder", *vary, "n", "errors", "MLflow run")
    body = tuple((c["cell_id"], c["label"], *(str(c[k]) for k in vary), str(c["n"]), str(c["errors"]),
                  runs.get(c["cell_id"], "-")) for c in cells.iter_rows(named=True))
    return Table("cells", "Cells", header, body)


# ---------------------------------------------------------------------------- plots
def pareto_figure(rows: pl.DataFrame, title: str):
    """Accuracy vs TPS and accuracy vs mean NFE, each point with its Wilson interval as a bar; the front
    drawn as a line, dominated points grey."""
    fig = new_figure(11.0, 4.4)
    acc, labels = rows["accuracy"].to_list(), rows["label"].to_list()
    bounds = list(zip(rows["accuracy_lo"].to_list(), rows["accuracy_hi"].to_list()))
    for ax, col, senses, xlabel in ((fig.add_subplot(1, 2, 1), "tps", ACCURACY_TPS, "TPS (generated tokens / s)"),
                                    (fig.add_subplot(1, 2, 2), "mean_nfe", ACCURACY_NFE, "mean NFE (lower is better)")):
        xs = rows[col].to_list()
        # the oracle reads the answer: a star, never on the front (a sweep's trial rows name no decoder)
        decoders = rows["decoder"].to_list() if "decoder" in rows.columns else [None] * rows.height
        flags = front_flags([(a, x) if d != ORACLE_DECODER else (None, None) for a, x, d in zip(acc, xs, decoders)],
                            senses)
        pts = [(x, a, lab, f, b) for x, a, lab, f, b in zip(xs, acc, labels, flags, bounds)
               if x is not None and a is not None]
        for on_front, colour in ((False, "0.6"), (True, "tab:red")):
            sel = [p for p in pts if p[3] == on_front]
            interval_bars(ax, [p[0] for p in sel], [p[1] for p in sel], [p[4][0] for p in sel],
                          [p[4][1] for p in sel], colour)
        ax.scatter([p[0] for p in pts if not p[3]], [p[1] for p in pts if not p[3]], c="0.6", s=28,
                   label="dominated")
        front = sorted((p for p in pts if p[3]), key=lambda p: p[0])
        ax.plot([p[0] for p in front], [p[1] for p in front], "-o", c="tab:red", ms=7, lw=1.5, label="Pareto front")
        annotate = pts if len(pts) <= 16 else front
        for x, a, lab, _, _ in annotate:
            ax.annotate(lab, (x, a), textcoords="offset points", xytext=(4, 4), fontsize=7)
        mark_oracle(ax, [(x, a) for x, a, d in zip(xs, acc, decoders) if d == ORACLE_DECODER])
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy %")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    return fig


def mark_oracle(ax, points: list[tuple[float | None, float | None]]) -> None:
    """The oracle's points (x, accuracy) as a black star: how far the model itself allows (issue 51)."""
    pts = [(x, a) for x, a in points if x is not None and a is not None]
    if pts:
        ax.scatter([x for x, _ in pts], [a for _, a in pts], marker="*", s=220, c="k", zorder=5,
                   label="oracle (the model's fewest forwards for the reference)")


def plot_pareto(rows: pl.DataFrame, title: str, path: Path) -> Path:
    return save_png(pareto_figure(rows, title), path)


def plot_speedup(rows: pl.DataFrame, title: str, path: Path) -> Path | None:
    """Speedup vs default per task (grouped bars, one per decoder setting); None if nothing to show."""
    from ..platform.experiments.metrics import BASELINE_DECODER

    rows = rows.filter(pl.col("speedup").is_not_null() & (pl.col("decoder") != BASELINE_DECODER))
    if rows.height == 0:
        return None
    tasks = rows["task"].unique(maintain_order=True).to_list()
    labels = _labels(rows)
    fig = new_figure(min(16.0, max(6.4, 1.2 + 0.45 * len(tasks) * len(labels))), 4.0)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(labels)
    for j, label in enumerate(labels):
        vals = []
        for t in tasks:
            r = rows.filter((pl.col("label") == label) & (pl.col("task") == t))
            vals.append(r["speedup"][0] if r.height else 0.0)
        bars = ax.bar([i + (j - (len(labels) - 1) / 2) * width for i in range(len(tasks))], vals, width, label=label)
        ax.bar_label(bars, labels=[f"{v:.1f}x" if v else "" for v in vals], fontsize=6, padding=1)
    ax.axhline(1.0, c="k", lw=0.8, ls="--")
    ax.set_ylim(0, max(1.0, float(rows["speedup"].max())) * 1.3)  # headroom for the legend
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("speedup vs default (TPS ratio)")
    ax.legend(fontsize=7, ncols=min(4, len(labels)))
    ax.set_title(title, fontsize=10)
    return save_png(fig, path)


def sensitivity_figure(rows: pl.DataFrame, name: str, title: str):
    """Accuracy (with its Wilson interval as a bar) and TPS against one numeric hyperparameter; None when
    it is not numeric."""
    xs = [p.get(name) for p in _params(rows)]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
        return None
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    interval_bars(ax, xs, rows["accuracy"].to_list(), rows["accuracy_lo"].to_list(), rows["accuracy_hi"].to_list(),
                  "tab:blue")
    ax.plot(xs, rows["accuracy"].to_list(), "-o", c="tab:blue", label="accuracy %")
    ax.set_xlabel(name)
    ax.set_ylabel("accuracy %", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(xs, rows["tps"].to_list(), "-s", c="tab:orange", label="TPS")
    ax2.set_ylabel("TPS", color="tab:orange")
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    handles, labels = (a + b for a, b in zip(ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()))
    ax2.legend(handles, labels, fontsize=7, loc="best")
    return fig


def plot_sensitivity(rows: pl.DataFrame, name: str, title: str, path: Path) -> Path | None:
    fig = sensitivity_figure(rows, name, title)
    return None if fig is None else save_png(fig, path)


# ---------------------------------------------------------------------------- documents
Block = tuple  # ("h1"|"h2"|"p", text) | ("table", Table) | ("img", file name, alt text)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in t.header) + " |", "|" + "|".join("---" for _ in t.header) + "|"]
    return out + ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows] + [""]


def table_html(t: Table) -> str:
    """A table whose cells may hold Markdown links (shown as HTML links)."""
    e = html.escape
    return ("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in t.header) + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(f"<td>{_links(e(c))}</td>" for c in row) + "</tr>" for row in t.rows)
            + "</tbody></table>")


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if b[0] == "h1":
            out += [f"# {b[1]}", ""]
        elif b[0] == "h2":
            out += [f"## {b[1]}", ""]
        elif b[0] == "p":
            out += [b[1], ""]
        elif b[0] == "table":
            t: Table = b[1]
            out += table_markdown(t)
            if t.note:
                out += [t.note, ""]
        elif b[0] == "img":
            out += [f"![{b[2]}]({b[1]})", ""]
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}img{max-width:100%;margin:.5em 0}
h2{margin-top:1.6em;border-bottom:1px solid #ddd}p.note{color:#555;font-size:12px}"""


def to_html(blocks: list[Block], title: str, folder: Path) -> str:
    """One self-contained page: CSS inline, every image a base64 data URI (no external assets)."""
    e = html.escape
    out = [f"<!doctype html><html><head><meta charset=\"utf-8\"><title>{e(title)}</title>",
           f"<style>{_CSS}</style></head><body>"]
    for b in blocks:
        if b[0] in ("h1", "h2"):
            out.append(f"<{b[0]}>{e(b[1])}</{b[0]}>")
        elif b[0] == "p":
            out.append(f"<p>{_inline_code(e(b[1]))}</p>")
        elif b[0] == "table":
            t: Table = b[1]
            out.append(table_html(t))
            if t.note:
                out.append(f"<p class=\"note\">{e(t.note)}</p>")
        elif b[0] == "img":
            data = base64.b64encode((folder / b[1]).read_bytes()).decode("ascii")
            out.append(f"<img alt=\"{e(b[2])}\" src=\"data:image/png;base64,{data}\">")
    out.append("</body></html>")
    return "\n".join(out)


def _links(text: str) -> str:
    """Markdown links `[text](path)` in an (escaped) table cell as HTML links (the trace pages)."""
    return re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", r'<a href="\2">\1</a>', text)


def _inline_code(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


# ---------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class Report:
    experiment: str
    out_dir: Path
    cells: pl.DataFrame  # summarize_cells() of the store
    tables: tuple[Table, ...]
    figures: tuple[Path, ...]
    mlflow_run_id: str | None
    set_aside: tuple[int, int | None] = (0, 0)  # (files, records) in quarantine/: damaged, not counted here

    def set_aside_text(self) -> str:
        return set_aside_text(self.set_aside)


def set_aside_text(counts: tuple[int, int | None]) -> str:
    """'' when nothing was set aside, else e.g. '12 records in 1 damaged file set aside in quarantine/'."""
    files, rows = counts
    if not files:
        return ""
    held = f"{rows} records" if rows is not None else "records (how many is unknown)"
    return f"{held} in {files} damaged file{'s' if files > 1 else ''} set aside in quarantine/"


def default_out(store_dir: str | Path, experiment: str) -> Path:
    return Path(store_dir).expanduser() / experiment / "report"


@contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A fresh sibling of `out` to write into: it replaces `out` once the block finishes and is removed
    if the block fails, so a reader never sees a half-written folder nor loses the previous one."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def build_report(store_dir: str | Path, experiment: str, out_dir: str | Path | None = None, *,
                 tracking_uri: str | None = None, track: bool = True) -> Report:
    """Write the report folder for `experiment` (atomically: a failure leaves no half folder)
    and, unless `track` is False, log it to the experiment's MLflow "report" run."""
    records = load_records(store_dir, experiment)
    out = Path(out_dir).expanduser() if out_dir else default_out(store_dir, experiment)
    if out.exists() and not (out / "report.md").exists():
        raise RippleError(f"--out {out} exists and is not a report folder; give a new or report directory")
    tracker = _open_tracker(experiment, store_dir, tracking_uri) if track else None
    runs = tracker.runs_by_cell() if tracker else {}
    cells = summarize_cells(records)
    aside = ResultStore(store_dir, experiment).set_aside()  # damaged files, set aside while reading

    with staged_folder(out) as tmp:
        blocks, tables, figures = _compose(experiment, Path(store_dir), records, cells, runs, tmp, aside)
        (tmp / "report.md").write_text(to_markdown(blocks))
        (tmp / "report.html").write_text(to_html(blocks, f"Ripple report: {experiment}", tmp))
        cells.write_csv(tmp / "cells.csv")
    run_id = _log_report(tracker, out) if tracker else None
    return Report(experiment, out, cells, tuple(tables), tuple(out / f.name for f in figures), run_id, aside)


def _compose(experiment: str, store_dir: Path, records: pl.DataFrame, cells: pl.DataFrame, runs: dict[str, str],
             folder: Path, set_aside: tuple[int, int | None]) -> tuple[list[Block], list[Table], list[Path]]:
    """The document (blocks), its tables and the PNGs written into `folder`; `set_aside`: the
    store's quarantined (files, records)."""
    blocks: list[Block] = [("h1", f"Ripple report: {experiment}")]
    hardware = sorted(set(records["hardware"].drop_nulls().to_list()))
    errors = int(records["error"].is_not_null().sum())
    aside = set_aside_text(set_aside)
    aside = f" {aside[0].upper()}{aside[1:]}, not counted here." if aside else ""
    blocks.append(("p", f"Store `{store_dir.expanduser().resolve()}`: {records.height} samples in {cells.height} cells"
                        f" ({errors} with errors, excluded from the metrics).{aside} Hardware: "
                        f"{'; '.join(hardware) or 'unknown'}. Generated "
                        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}."))
    blocks.append(("p", "accuracy % = correct / samples without error; NFE = mean forward calls per sample; "
                        "TPF = generated tokens / forward calls, summed over the cell (tokens per forward); "
                        "throughput (throughput mode only) = generated tokens / wall seconds of the batches; "
                        "TPS = sum of generated tokens / sum of decode seconds; speedup = TPS / TPS of `default` "
                        "with the same model, task, gen_length, block_length and cache. How to read the intervals: "
                        "± is half the width of a 95 % interval (Wilson for accuracy, a paired bootstrap over the "
                        "samples both cells share for speedup), so two decoders whose intervals overlap widely "
                        "are not told apart by this many samples; * marks an accuracy that differs from "
                        "`default`'s at p < 0.05 (exact McNemar test on the shared samples). cells.csv has the "
                        "exact bounds and p-values."))
    tables: list[Table] = []
    figures: list[Path] = []

    mains = main_tables(cells)
    several = len(mains) > 1
    for i, (key, desc, table) in enumerate(mains, 1):
        suffix = f"-{i}" if several else ""
        rows = cells.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in key.items()]))
        paretos = [plot_pareto(rows.filter(pl.col("task") == t), f"Pareto fronts, task {t}: {desc}",
                               folder / f"pareto-{slug(t)}{suffix}.png")
                   for t in rows["task"].unique(maintain_order=True).to_list()]
        bar = plot_speedup(rows, f"Speedup vs default: {desc}", folder / f"speedup{suffix}.png")
        figs = paretos + ([bar] if bar else [])
        table = Table(table.kind, table.title, table.header, table.rows, tuple(f.name for f in figs), table.note)
        tables.append(table)
        figures += figs
        blocks += [("h2", table.title), ("table", table)] + [("img", f.name, f.stem) for f in paretos]
        blocks += [("p", f"Pareto plots: {INTERVAL_CAPTION}")] + ([("img", bar.name, bar.stem)] if bar else [])

    closest = closest_to_oracle(cells)
    if closest is not None:
        blocks += [("h2", closest.title), ("table", closest)]  # the note prints under it
        tables.append(closest)

    failures = failure_tables(records, cells, folder)
    if failures:
        blocks += [("h2", "Parallel failures"), ("p", FAILURES_TEXT)]
        for t in failures:
            blocks += [("p", t.title), ("table", t)]
        tables += failures

    lengths = length_tables(cells)
    if lengths:
        blocks.append(("h2", "Generation-length robustness"))
        for t in lengths:
            blocks += [("p", t.title), ("table", t)]
        tables += lengths

    groups = sensitivity_groups(cells)
    if groups:
        blocks.append(("h2", "Hyperparameter sensitivity"))
        vary = _varying(cells, CONTEXT)
        for j, (key, rows, names) in enumerate(groups, 1):
            table = sensitivity_table(key, rows, names, vary)
            fig = None
            if len(names) == 1:
                fig = plot_sensitivity(rows, names[0], table.title,
                                       folder / f"sensitivity-{slug(key['decoder'])}-{slug(key['task'])}-{j}.png")
            if fig:
                table = Table(table.kind, table.title, table.header, table.rows, (fig.name,), table.note)
                figures.append(fig)
            tables.append(table)
            blocks += [("p", table.title), ("table", table)]
            blocks += [("img", fig.name, fig.stem), ("p", INTERVAL_CAPTION)] if fig else []

    index = cells_table(cells, runs)
    tables.append(index)
    blocks += [("h2", "Cells"), ("table", index)]
    return blocks, tables, figures


FAILURES_TEXT = (
    "Samples `default` (the reference, same model, task and decode settings) gets right and the decoder gets wrong, "
    "from the decode traces (`traces: true`), classified by their first wrong commit: the first commit of a token "
    "differing from the reference's final token at that position. parallel % = that commit was decided from a "
    "forward whose outputs committed two or more tokens (a lookahead's resolve and the step using its carried "
    "distributions count as one forward); duplicate % = that forward committed the wrong token at two or more "
    "positions; twice % = the decode ended with that wrong token at two or more positions, "
    "more than the reference's answer has it at, whichever forwards wrote them. Trace pages: the sample under `default` and the decoder (`ripple trace`), "
    "parallel failures first.")


def failure_tables(records: pl.DataFrame, cells: pl.DataFrame, folder: Path, pages: int = 5,
                   prefix: str = "traces") -> list[Table]:
    """One table per model, task and decode settings with traced cells: per decoder, its parallel-failure
    counts (metrics.parallel_failures) and links to the trace pages of up to `pages` such samples,
    written into `folder`/`prefix`/."""
    from ..platform.experiments.metrics import baseline_ids, parallel_failures
    from ..platform.experiments.spec import Cell
    from .trace_page import store_page, write_page

    if "trace" not in records.columns or records["trace"].is_null().all():
        return []
    firsts = records.unique(subset="cell_id", keep="first")
    by_id = {r["cell_id"]: Cell.from_record(r) for r in firsts.iter_rows(named=True)}
    bases = baseline_ids(by_id)
    counts = parallel_failures(records, bases, keep=pages)
    if not counts:
        return []
    experiment = records["experiment"][0]
    tables = []
    for key, rows in _groups(cells, BASELINE):
        body = []
        for c in rows.iter_rows(named=True):
            n = counts.get(c["cell_id"])
            if n is None:
                continue
            links = []
            for i, sid in enumerate(n.examples, 1):
                name = f"{prefix}/{slug(c['cell_id'])}-{slug(sid)}.html"
                page = store_page(records, experiment, c["task"], sid, [bases[c["cell_id"]], c["cell_id"]])[1]
                write_page(page, folder / name)
                links.append(f"[{i}]({name})")
            pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
            body.append((c["label"], str(n.wrong), pct(n.parallel_share), pct(n.duplicate_share), pct(n.twice_share),
                         " ".join(links)))
        if body:
            vary = _varying(cells, BASELINE)
            title = f"Parallel failures, {key['task']}: {_describe(key, vary | {'model'})}"
            tables.append(Table("failures", title, ("decoder", "wrong where default is right", "parallel %",
                                                    "duplicate %", "twice %", "trace pages"), tuple(body)))
    return tables


def _open_tracker(experiment: str, store_dir: str | Path, uri: str | None):
    from ..platform.experiments.tracking import Tracker

    return Tracker.open(experiment, Path(store_dir).expanduser(), uri)


def _log_report(tracker, folder: Path) -> str:
    """Log `folder` under `report/` of the experiment's report run (created on first use)."""
    client = tracker.client
    found = client.search_runs([tracker.experiment_id], filter_string=f"tags.{REPORT_TAG} = 'true'", max_results=1)
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
    else:
        run_id = client.create_run(tracker.experiment_id, run_name="report", tags={REPORT_TAG: "true"}).info.run_id
    client.log_artifacts(run_id, str(folder), artifact_path="report")
    client.set_terminated(run_id, "FINISHED")
    return run_id
