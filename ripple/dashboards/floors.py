"""How close each decoder gets to a task's floor: figures from a grid over tasks with floors (`lines/<op>`).

A task with free choices gives each record its `floor_nfe`, the fewest forwards a decoder can make and
always be right (ripple/tasks/lines.py). From one experiment's store this writes:
- floors.png: accuracy against tokens per forward (TPF) per task, one curve per decoder (its settings
  joined in TPF order, each point with its 95 % Wilson interval as a bar), and the floor marked: the TPF
  of a decoder that writes the right answer in the floor's forwards (the `default` cell's correct
  answers: generated tokens over floor_nfe, summed);
- floors.md: per task the best decoder setting at accuracy >= 95 % (fewest forwards) with its NFE over
  the floor, or the most accurate setting where none reaches 95 %, and beside the floor the oracle's mean
  NFE where the grid has an `oracle` cell (the forwards this model needs for Default's answers: the floor
  is a perfect model's, the oracle this one's); then PB90 / PB80 per decoder over the tasks (the
  leaderboard's PBx).
Run: python -m ripple.dashboards.floors [STORE] [EXPERIMENT] [OUT]   (defaults: results lines results/floors)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ..errors import RippleError
from ..platform.experiments.metrics import ORACLE_DECODER
from ..platform.experiments.store import ResultStore
from .leaderboard import build_pbx, load_cells
from .plots import INTERVAL_CAPTION, interval_bars, new_figure, save_png

TARGET = 95.0  # accuracy (percent) at which a setting counts as solving the task


@dataclass(frozen=True)
class Best:
    """A task's best setting: fewest forwards at >= TARGET accuracy, else the most accurate."""

    task: str
    label: str
    accuracy: float
    mean_nfe: float
    floor: float  # mean floor_nfe over the task's problems
    reached: bool
    oracle: float | None = None  # the oracle cell's mean NFE (following default where there are several)

    @property
    def ratio(self) -> float:
        return self.mean_nfe / self.floor


def floors(records: pl.DataFrame) -> dict[str, tuple[float, float | None]]:
    """Per task: (mean floor_nfe, the floor's TPF from the default cell's correct answers)."""
    out = {}
    for (task,), part in records.filter(pl.col("floor_nfe").is_not_null()).group_by("task"):
        ok = part.filter((pl.col("decoder") == "default") & pl.col("correct"))
        tpf = ok["generated_tokens"].sum() / ok["floor_nfe"].sum() if ok.height else None
        out[task] = (float(part.unique("sample_id")["floor_nfe"].mean()), tpf)
    return out


def best_settings(cells: pl.DataFrame, floor: dict[str, tuple[float, float | None]]) -> list[Best]:
    out = []
    for task in sorted(floor):
        part = cells.filter(pl.col("task") == task)
        oracle = oracle_nfe(part)
        part = part.filter(pl.col("decoder") != ORACLE_DECODER)  # it reads the answer: never the best setting
        if part.height == 0:
            continue
        solved = part.filter(pl.col("accuracy") >= TARGET).sort(["mean_nfe", "accuracy"], descending=[False, True])
        pick = solved if solved.height else part.sort(["accuracy", "mean_nfe"], descending=[True, False])
        row = pick.row(0, named=True)
        out.append(Best(task, row["label"], row["accuracy"], row["mean_nfe"], floor[task][0], solved.height > 0,
                        oracle))
    return out


def oracle_nfe(part: pl.DataFrame) -> float | None:
    """The mean NFE of a task's oracle cell (the one following default, labelled plain `oracle`, first), or None."""
    oracles = part.filter(pl.col("decoder") == ORACLE_DECODER).sort(pl.col("label") != ORACLE_DECODER, "label")
    return float(oracles["mean_nfe"][0]) if oracles.height else None


@dataclass(frozen=True)
class Versus:
    """A task's RPS (defaults) against Confidence at tau 0.9, and which RPS settings are on the
    accuracy-TPF front of RPS's, Confidence's threshold settings and `topk`'s."""

    task: str
    rps: tuple[float, float]  # (accuracy, mean NFE)
    confidence: tuple[float, float]
    floor: float
    on_front: tuple[str, ...]  # RPS settings no Confidence (tau) or topk setting dominates

    @property
    def nfe_ratio(self) -> float | None:
        """RPS's mean NFE over Confidence's, where their accuracies are within 1 point."""
        if abs(self.rps[0] - self.confidence[0]) > 1.0:
            return None
        return self.rps[1] / self.confidence[1]


def versus(cells: pl.DataFrame, floor: dict[str, tuple[float, float | None]]) -> list[Versus]:
    """`Versus` for each task with free choices (a floor above one forward) where both cells ran."""
    from .pareto import ACCURACY_TPF, front_flags

    out = []
    for task in sorted(t for t, (f, _) in floor.items() if f > 1):
        part = cells.filter(pl.col("task") == task)
        rps = part.filter(pl.col("label") == "rps")
        conf = part.filter(pl.col("label").is_in(["confidence", "confidence(tau=0.9)"]))
        if rps.height == 0 or conf.height == 0:
            continue
        # the rivals: Confidence's threshold settings (not its factor rule) and every topk setting
        rivals = part.filter(((pl.col("decoder") == "confidence") & ~pl.col("label").str.contains("factor"))
                             | (pl.col("decoder") == "topk"))
        mine = part.filter(pl.col("decoder") == "rps")
        pool = mine.select("label", "accuracy", "tpf").vstack(rivals.select("label", "accuracy", "tpf"))
        flags = front_flags([(r["accuracy"], r["tpf"]) for r in pool.iter_rows(named=True)], ACCURACY_TPF)
        front = tuple(label for label, flag in zip(pool["label"][:mine.height], flags) if flag)
        r, c = rps.row(0, named=True), conf.row(0, named=True)
        out.append(Versus(task, (r["accuracy"], r["mean_nfe"]), (c["accuracy"], c["mean_nfe"]), floor[task][0], front))
    return out


def figure(cells: pl.DataFrame, floor: dict[str, tuple[float, float | None]]):
    """Accuracy against TPF per task, one curve per decoder with each point's Wilson interval as a bar, and
    the floor's TPF marked."""
    tasks = sorted(floor)
    cols = 5
    rows = -(-len(tasks) // cols)
    fig = new_figure(3.1 * cols, 2.7 * rows + 0.8)
    decoders = sorted(set(cells["decoder"].to_list()))
    colours = {d: f"C{i % 10}" for i, d in enumerate(decoders)}
    markers = {d: "osD^v<>ph*"[i // 10 % 10] for i, d in enumerate(decoders)}
    for i, task in enumerate(tasks):
        ax = fig.add_subplot(rows, cols, i + 1)
        part = cells.filter((pl.col("task") == task) & pl.col("tpf").is_not_null())
        for d in decoders:
            pts = part.filter(pl.col("decoder") == d).sort("tpf", "accuracy")
            if pts.height:
                interval_bars(ax, pts["tpf"].to_list(), pts["accuracy"].to_list(), pts["accuracy_lo"].to_list(),
                              pts["accuracy_hi"].to_list(), colours[d])
                ax.plot(pts["tpf"].to_list(), pts["accuracy"].to_list(), marker=markers[d], ms=3, lw=1,
                        color=colours[d], label=d)
        mean_floor, tpf = floor[task]
        if tpf is not None:
            ax.axvline(tpf, color="k", ls="--", lw=0.8)
            ax.text(tpf, 2, f" floor\n {mean_floor:.1f} fwd", fontsize=6, va="bottom")
        ax.set_title(task.split("/")[-1], fontsize=9)
        ax.set_ylim(0, 102)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if i % cols == 0:
            ax.set_ylabel("accuracy %", fontsize=8)
        if i // cols == rows - 1:
            ax.set_xlabel("tokens per forward", fontsize=8)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(10, len(labels)), fontsize=7, frameon=False)
    return fig


def plot(cells: pl.DataFrame, floor: dict[str, tuple[float, float | None]], path: Path) -> Path:
    return save_png(figure(cells, floor), path)


def _widest(pbx) -> dict:
    """Per decoder, its PBx row over the most tasks (over all of them, where it has several rows)."""
    widest = {}
    for r in pbx:
        if r.decoder not in widest or len(r.tasks) > len(widest[r.decoder].tasks):
            widest[r.decoder] = r
    return widest


def to_markdown(best: list[Best], pbx) -> str:
    oracle = any(b.oracle is not None for b in best)  # the oracle's NFE beside the floor, where it ran
    out = [f"| operation | best setting (accuracy >= {TARGET:g} %, fewest forwards) | accuracy % | mean NFE | "
           "floor |" + (" oracle NFE |" if oracle else "") + " NFE / floor |",
           "|---|---|---|---|---|" + ("---|" if oracle else "") + "---|"]
    for b in best:
        label = b.label if b.reached else f"none reaches {TARGET:g} %; most accurate: {b.label}"
        beside = "" if not oracle else " - |" if b.oracle is None else f" {b.oracle:.2f} |"
        out.append(f"| {b.task.split('/')[-1]} | {label} | {b.accuracy:.1f} | {b.mean_nfe:.2f} | {b.floor:.2f} |"
                   f"{beside} {b.ratio:.2f} |")
    out += ["", "| decoder | configurations | PB90 | PB80 |", "|---|---|---|---|"]
    for r in _widest(pbx).values():
        shown = ["-" if r.pbx[x] is None else f"{r.pbx[x]:.2f}" for x in (90, 80)]
        out.append(f"| {r.decoder} | {len(r.configs)} | {shown[0]} | {shown[1]} |")
    return "\n".join(out) + "\n"


def versus_markdown(rows: list[Versus], pbx) -> str:
    """The RPS-against-Confidence table of floors.md, with the two decoders' PB90."""
    out = ["| operation | floor | RPS accuracy % / NFE | Confidence (tau 0.9) accuracy % / NFE | RPS NFE / "
           "Confidence NFE | RPS NFE / floor | RPS settings on the accuracy-TPF front |", "|---|---|---|---|---|---|---|"]
    for v in rows:
        ratio = "-" if v.nfe_ratio is None else f"{v.nfe_ratio:.2f}"
        front = ", ".join(v.on_front) or "none"
        out.append(f"| {v.task.split('/')[-1]} | {v.floor:.2f} | {v.rps[0]:.1f} / {v.rps[1]:.2f} | "
                   f"{v.confidence[0]:.1f} / {v.confidence[1]:.2f} | {ratio} | {v.rps[1] / v.floor:.2f} | {front} |")
    pb = {d: "-" if r.pbx[90] is None else f"{r.pbx[90]:.2f}" for d, r in _widest(pbx).items()
          if d in ("rps", "confidence")}
    out += ["", f"PB90 over the operations: RPS {pb.get('rps', '-')}, Confidence {pb.get('confidence', '-')}. "
                "(RPS NFE / Confidence NFE is shown where the two accuracies are within 1 point; the front is "
                "RPS's settings against Confidence's threshold settings and every `topk` setting.)"]
    return "\n".join(out) + "\n"


def floor_report(store: str | Path, experiment: str = "lines", out: str | Path = "results/floors") -> Path:
    """Write floors.png and floors.md for `experiment` of the store into `out`; returns the Markdown path."""
    records = ResultStore(store, experiment).read()
    if records.height == 0:
        raise RippleError(f"experiment {experiment!r} has no records in {store}; run `ripple grid {experiment}`")
    floor = floors(records)
    if not floor:
        raise RippleError(f"experiment {experiment!r} has no task with a floor (floor_nfe); e.g. the lines/<op> tasks")
    cells, _ = load_cells(store)
    cells = cells.filter(pl.col("experiment") == experiment)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plot(cells, floor, out / "floors.png")
    md = out / "floors.md"
    pbx = build_pbx(cells)
    md.write_text(f"![accuracy against tokens per forward per operation, with the floor](floors.png)\n\n"
                  f"{INTERVAL_CAPTION} The dashed line is the floor's TPF.\n\n"
                  + to_markdown(best_settings(cells, floor), pbx) + "\n## RPS against Confidence\n\n"
                  + versus_markdown(versus(cells, floor), pbx))
    return md


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ripple.dashboards.floors",
                                     description="floors.png and floors.md of a grid over tasks with floors "
                                                 "(lines/<op>): each decoder against each task's floor")
    parser.add_argument("store", nargs="?", default="results", help="the result store (default: results)")
    parser.add_argument("experiment", nargs="?", default="lines", help="the experiment (default: lines)")
    parser.add_argument("out", nargs="?", default="results/floors", help="output folder (default: results/floors)")
    args = parser.parse_args(argv)
    try:
        print(floor_report(args.store, args.experiment, args.out))
    except RippleError as exc:
        print(f"floors: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
