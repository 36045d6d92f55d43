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
accuracy-TPF front of the section. One plot per section: accuracy against TPF, each curve joined.

Folder: leaderboard.html (self-contained: inline CSS and a few lines of sorting JS, plots as data
URIs), leaderboard.md, leaderboard.csv (exactly COLUMNS), one PNG per section.
"""
from __future__ import annotations

import base64
import csv
import html
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import RippleError
from ..platform.experiments.metrics import aup
from ..platform.experiments.store import DecodeSettings, ResultStore
from .pareto import ACCURACY_TPF, front_flags
from .report import (fmt_acc, fmt_nfe, fmt_speedup, fmt_tps, new_figure, save_png, slug, staged_folder,
                     stored_experiments, summarize_cells)

COLUMNS = ("model", "weights", "task", "decoder", "params", "experiment", "n", "accuracy", "accuracy_lo",
           "accuracy_hi", "tpf", "mean_nfe", "tps", "speedup", "aup", "pareto", "mean_edits", "seed")
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

    @property
    def usable(self) -> bool:
        """Has a point to plot, rank and score: samples without error and a positive TPF (AUP needs one)."""
        return bool(self.n and self.tpf)


@dataclass(frozen=True)
class Section:
    """One model, weights digest and task: its rows, the plot and dropped AUP points."""

    key: dict[str, str]
    rows: tuple[Row, ...]
    figure: str  # PNG file name
    dropped: tuple[str, ...]  # "decoder setting (experiment): TPF x, accuracy y" per dropped point


@dataclass(frozen=True)
class Leaderboard:
    out_dir: Path
    sections: tuple[Section, ...]
    experiments: tuple[str, ...]

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
        part = cells.filter(pl.all_horizontal([pl.col(k) == v for k, v in key.items()]))
        decode_vary = [k for k in DECODE if part[k].n_unique() > 1]
        rows = []
        for c in part.iter_rows(named=True):
            params = _params_text(c["label"], c["decoder"])
            if decode_vary:  # the section mixes lengths or caches: say which row is which
                params = " ".join(filter(None, [params, "[" + " ".join(f"{k}={c[k]}" for k in decode_vary) + "]"]))
            rows.append(Row(c["model"], c["weights"], c["task"], c["decoder"], params, c["experiment"], c["n"],
                            c["accuracy"], c["accuracy_lo"], c["accuracy_hi"], _num(c["tpf"]), c["mean_nfe"],
                            _num(c["tps"]), _num(c["speedup"]), None, False, tuple(c[k] for k in CURVE),
                            c["p_value"], c["speedup_lo"], c["speedup_hi"], _num(c["mean_edits"]), c.get("seed")))
        aups, dropped = _score_curves(rows)
        flags = front_flags([(r.accuracy, r.tpf) if r.usable else (None, None) for r in rows], ACCURACY_TPF)
        rows = [replace(r, aup=a, pareto=f) for r, a, f in zip(rows, aups, flags)]
        rows.sort(key=lambda r: (order.get(r.decoder, len(order)), r.decoder, r.params, r.experiment))
        sections.append(Section(key, tuple(rows), f"leaderboard-{slug('-'.join(key.values()))}.png", dropped))
    return sections


def _score_curves(rows: list[Row]) -> tuple[list[float | None], tuple[str, ...]]:
    """Each row's AUP (its decoder curve's; None without a point) and the points the y_1 - 5 filter
    dropped, as text; y_max is the best accuracy among the rows."""
    usable = [r for r in rows if r.usable]
    if not usable:
        return [None] * len(rows), ()
    y_max = max(r.accuracy for r in usable)
    scores, dropped = {}, []
    for key, members in _curves(rows).items():
        score = aup([(r.tpf, r.accuracy) for r in members], y_max)
        scores[key] = score.aup
        for tpf, acc in score.dropped:
            r = next(m for m in members if (m.tpf, m.accuracy) == (tpf, acc))
            dropped.append(f"{_setting(r)} ({r.experiment}): TPF {tpf:.2f}, accuracy {acc:.1f}")
    return [scores[r.curve] if r.usable else None for r in rows], tuple(dropped)


def _curves(rows) -> dict[tuple, list[Row]]:
    """The usable rows by decoder curve (a curve's key is `Row.curve`), in row order."""
    curves: dict[tuple, list[Row]] = {}
    for r in rows:
        if r.usable:
            curves.setdefault(r.curve, []).append(r)
    return curves


def _setting(r: Row) -> str:
    return f"{r.decoder}({r.params})" if r.params else r.decoder


# ---------------------------------------------------------------------------- plot
def plot_section(section: Section, path: Path) -> Path:
    """Accuracy against TPF: each decoder curve of each experiment joined in TPF order, the Pareto
    front ringed."""
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
        ax.plot([r.tpf for r in members], [r.accuracy for r in members], marker="os^Dv<>"[e % 7],
                ls=("-", "--", ":", "-.")[e % 4], ms=5, lw=1.2, c=f"C{decoders.index(r0.decoder) % 10}", label=name)
    front = [r for r in section.rows if r.pareto]
    ax.scatter([r.tpf for r in front], [r.accuracy for r in front], s=140, facecolors="none",
               edgecolors="k", lw=1.2, label="Pareto front (accuracy, TPF)")
    k = section.key
    ax.set_title(f"{k['model']} ({k['weights'][:12]}), task {k['task']}", fontsize=10)
    ax.set_xlabel("TPF (generated tokens per forward)")
    ax.set_ylabel("accuracy %")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save_png(fig, path)


# ---------------------------------------------------------------------------- documents
HEADER = ("decoder", "params", "experiment", "n", "accuracy %", "TPF", "mean NFE", "TPS", "speedup", "AUP", "Pareto")


def _header(s: "Section") -> tuple[str, ...]:
    """HEADER, plus an edits column in a section where some cell edited (token editing)."""
    return HEADER + (("edits",) if _edited(s) else ())


def _edited(s: "Section") -> bool:
    return any(r.mean_edits is not None for r in s.rows)


def _shown(r: Row, edits: bool = False) -> list[tuple[str, Any]]:
    """(text, sort value) per `_header` column."""
    acc = fmt_acc(asdict(r)) if r.n else "-"
    return [(r.decoder, r.decoder), (r.params or "-", r.params), (r.experiment, r.experiment), (str(r.n), r.n),
            (acc, r.accuracy if r.n else None), (fmt_nfe(r.tpf), r.tpf), (fmt_nfe(r.mean_nfe), r.mean_nfe),
            (fmt_tps(r.tps), r.tps), (fmt_speedup(asdict(r)), r.speedup),
            ("-" if r.aup is None else f"{r.aup:.1f}", r.aup), ("*" if r.pareto else "", int(r.pareto))] + (
        [(fmt_nfe(r.mean_edits or 0.0), r.mean_edits or 0.0)] if edits else [])


def _title(s: Section) -> str:
    return f"{s.key['model']} · weights {s.key['weights'][:12]} · task {s.key['task']}"


EXPLAIN = ("accuracy % with half its 95 % Wilson interval (* vs default: p < 0.05, exact McNemar); TPF = generated "
           "tokens / forward passes over the cell; TPS and speedup (vs the same experiment's default) at batch 1; "
           "AUP = accuracy under parallelism of the decoder's curve (its settings in one experiment), as the d3LLM "
           "leaderboard computes it; Pareto = on the accuracy-TPF front of the section; edits (where a cell edited) = "
           "tokens rewritten by token editing per sample.")


def to_markdown(sections: list[Section], experiments: list[str]) -> str:
    out = ["# Ripple leaderboard", "", f"Experiments: {', '.join(experiments)}. {EXPLAIN}", ""]
    for s in sections:
        head = _header(s)
        out += [f"## {_title(s)}", "", "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        out += ["| " + " | ".join(t.replace("|", "\\|") for t, _ in _shown(r, _edited(s))) + " |" for r in s.rows]
        out += ["", f"![{_title(s)}]({s.figure})", ""]
        out += [f"AUP dropped (more than 5 points below the curve's first accuracy): {d}" for d in s.dropped]
        out += [""] if s.dropped else []
    return "\n".join(out)


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


def to_html(sections: list[Section], experiments: list[str], folder: Path) -> str:
    """One self-contained page: no external asset, plots as data URIs, sorting in inline JS."""
    e = html.escape
    out = ["<!doctype html><html><head><meta charset=\"utf-8\"><title>Ripple leaderboard</title>",
           "<link rel=\"icon\" href=\"data:,\">", f"<style>{_CSS}</style></head><body>", "<h1>Ripple leaderboard</h1>",
           f"<p>Experiments: {e(', '.join(experiments))}. {e(EXPLAIN)} Click a column header to sort.</p>"]
    for s in sections:
        out.append(f"<h2>{e(_title(s))}</h2><table class=\"sortable\"><thead><tr>"
                   + "".join(f"<th>{e(h)}</th>" for h in _header(s)) + "</tr></thead><tbody>")
        for r in s.rows:
            cells = "".join(f"<td data-v=\"{e('' if v is None else str(v))}\">{e(t)}</td>"
                            for t, v in _shown(r, _edited(s)))
            out.append(("<tr class=\"front\">" if r.pareto else "<tr>") + cells + "</tr>")
        out.append("</tbody></table>")
        out += [f"<p class=\"note\">AUP dropped (more than 5 points below the curve's first accuracy): {e(d)}</p>"
                for d in s.dropped]
        data = base64.b64encode((folder / s.figure).read_bytes()).decode("ascii")
        out.append(f"<img class=\"plot\" alt=\"{e(_title(s))}\" src=\"data:image/png;base64,{data}\">")
    out += [f"<script>{_JS}</script>", "</body></html>"]
    return "\n".join(out)


def write_csv(sections: list[Section], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for s in sections:
            for r in s.rows:
                w.writerow(["" if getattr(r, c) is None else getattr(r, c) for c in COLUMNS])


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
    with staged_folder(out) as tmp:
        for s in sections:
            plot_section(s, tmp / s.figure)
        (tmp / "leaderboard.md").write_text(to_markdown(sections, experiments))
        (tmp / "leaderboard.html").write_text(to_html(sections, experiments, tmp))
        write_csv(sections, tmp / "leaderboard.csv")
    return Leaderboard(out, tuple(sections), tuple(experiments))


def summary_line(board: Leaderboard) -> str:
    rows = sum(len(s.rows) for s in board.sections)
    dropped = sum(len(s.dropped) for s in board.sections)
    note = f"; {dropped} point(s) dropped from AUP curves (listed on the page)" if dropped else ""
    return (f"leaderboard: {board.html} ({rows} rows in {len(board.sections)} model/task sections from "
            f"{len(board.experiments)} experiment(s): {', '.join(board.experiments)}){note}")

