"""`ripple analyze`: the RPS paper's Figure 1 (right), the "ripple effect".

Definitions (as in the paper's Figure 1 and Algorithm 1):
  oracle     the default decoder's final output for the prompt (greedy, cache none), or with
             `oracle="reference"` the task's reference completion tokenised onto the canvas
             (followed by end-of-sequence ids), for examples whose reference fits gen_length.
  states     partially decoded blocks: we replay the default decoder's order inside each
             block (commit the most confident masked position, mask id excluded) writing the
             oracle token there. With the default oracle this is exactly the default
             decoder's own trajectory. A state is analysed when at least one block position
             is decoded and at least two are masked. Blocks after the oracle's first
             end-of-sequence block are skipped (nothing but EOS left to predict).
  point      for each masked position i of a state: H_before = entropy of p_i (nats, full
             vocabulary, float64 softmax); commit i to its oracle token; reduction =
             mean over the OTHER masked positions j of the block of H(p_j) - H(p_j | i
             committed); rank = the oracle token's rank in p_i (1 = top-1, mask id
             excluded, ties counted in the token's favour).
  terciles   the points sorted by H_before, split into three equal-count groups; "mid
             entropy" is the middle group (the paper's shaded band).
  nontrivial_terciles  the same over the points with H_before above NONTRIVIAL_NATS only: a
             small model is near-certain at most positions, which otherwise fill both the low
             and the mid tercile and hide where uncertain positions ripple.
One state costs one batched forward: the state itself plus one row per masked position
with that position committed (the same canvas otherwise), so --limit 20 on ripple-tiny
takes a couple of minutes on CPU.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..decoders.base import entropy, top_prob
from ..errors import RippleError

RANK_BUCKETS = ("1", "2", "3-5", ">5")
NONTRIVIAL_NATS = 0.05  # H_before above this counts for `nontrivial_terciles`
BlockForward = Callable[[torch.Tensor], torch.Tensor]  # block contents [B, L] -> block logits [B, L, V]


@dataclass(frozen=True)
class RipplePoint:
    """One masked position committed to its oracle token in one partially decoded block."""

    example_id: str
    block: int
    decoded: int  # block positions already decoded in this state
    position: int  # block-relative position i
    entropy_before: float  # H(p_i) in nats before the commit
    reduction: float  # mean over the other masked positions j of H_j before - H_j after
    others: int  # how many other masked positions were averaged
    rank: int  # oracle token's rank in p_i, 1 = top-1
    oracle_prob: float  # p_i(oracle token)

    @property
    def bucket(self) -> str:
        return rank_bucket(self.rank)


def rank_bucket(rank: int) -> str:
    return "1" if rank == 1 else "2" if rank == 2 else "3-5" if rank <= 5 else ">5"


# ---------------------------------------------------------------------------- core
def block_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary entropy (nats) of float64 softmax: [..., V] -> [...]."""
    return entropy(torch.softmax(logits.to(torch.float64), dim=-1))


def measure_state(anchor: torch.Tensor, hv: torch.Tensor, masked: torch.Tensor, positions: torch.Tensor,
                  oracle: torch.Tensor, mask_id: int) -> list[dict]:
    """The ripple measurements of one state.

    anchor: [L, V] block logits of the state; hv: [m, L] block entropies with positions[k]
    committed to oracle[positions[k]] (`block_entropy` of those variants' logits);
    masked: [L] bool (the state's masks); positions: [m] block-relative; oracle: [L] ids.
    Returns one dict per position with entropy_before, reduction, others, rank, oracle_prob.
    """
    L = masked.shape[0]
    p0 = torch.softmax(anchor.to(torch.float64), dim=-1)  # [L, V]
    h0 = entropy(p0)  # [L]
    others = masked[None, :] & (torch.arange(L)[None, :] != positions[:, None])  # [m, L]
    count = others.sum(-1)  # [m]
    reduction = ((h0[None, :] - hv) * others).sum(-1) / count.clamp(min=1)  # [m]
    pi = p0[positions]  # [m, V]
    p_or = pi.gather(-1, oracle[positions][:, None]).squeeze(-1)  # [m]
    above = pi > p_or[:, None]  # [m, V]
    above[:, mask_id] = False
    rank = 1 + above.sum(-1)  # [m]
    return [{"position": int(i), "entropy_before": float(h0[i]), "reduction": float(r), "others": int(c),
             "rank": int(k), "oracle_prob": float(p)}
            for i, r, c, k, p in zip(positions.tolist(), reduction, count, rank, p_or)]


def walk_block(forward: BlockForward, oracle: torch.Tensor, mask_id: int,
               batch_size: int = 32) -> tuple[list[dict], int, int]:
    """Replay the default decoder's order through one block with oracle tokens; measure every
    partially decoded state. oracle: [L]. Returns the measure_state dicts (plus `decoded`),
    and how many of the chosen commits wrote the state's top-1 token, out of how many."""
    L = oracle.shape[0]
    tokens = torch.full((L,), mask_id, dtype=torch.long)
    out: list[dict] = []
    agree = chosen = 0
    for step in range(L):
        masked = tokens == mask_id  # [L]
        idx = masked.nonzero().squeeze(-1)  # [k]
        if idx.numel() == 1:  # the last position: nothing to measure or choose
            tokens[idx] = oracle[idx]
            break
        measure = step >= 1 and idx.numel() >= 2
        rows = [tokens.clone()]
        if measure:
            var = tokens[None].repeat(idx.numel(), 1)  # [m, L]
            var[torch.arange(idx.numel()), idx] = oracle[idx]
            rows += list(var)
        batch = torch.stack(rows)  # [1 + m, L]
        anchor, ents = None, []
        for s in range(0, batch.shape[0], batch_size):  # entropies per chunk: a chunk's logits at a time
            logits = forward(batch[s:s + batch_size])  # [b, L, V]
            if anchor is None:
                anchor = logits[0].cpu()
            ents.append(block_entropy(logits).cpu())  # [b, L]
        if measure:
            hv = torch.cat(ents)[1:]  # [m, L]
            for d in measure_state(anchor, hv, masked, idx, oracle, mask_id):
                out.append({**d, "decoded": step})
        probs = torch.softmax(anchor.to(torch.float64), dim=-1)  # [L, V]
        conf = torch.where(masked, top_prob(probs, mask_id), torch.full((L,), -math.inf, dtype=torch.float64))
        i = int(torch.argmax(conf))  # ties to the lower index, as the default decoder
        top = probs[i].clone()
        top[mask_id] = -1.0
        agree += int(int(torch.argmax(top)) == int(oracle[i]))
        chosen += 1
        tokens[i] = oracle[i]
    return out, agree, chosen


class CanvasProbe:
    """Forwards of one block's variants on a fixed canvas: prompt, earlier blocks holding the
    oracle (the semi-autoregressive state when this block is decoded), later blocks masked."""

    def __init__(self, engine, prompt: Sequence[int], oracle: Sequence[int], block: int, block_length: int):
        self.engine = engine
        P, G = len(prompt), len(oracle)
        self.bs = P + block * block_length
        self.L = block_length
        canvas = torch.full((P + G,), engine.mask_id, dtype=torch.long)
        canvas[:P] = torch.as_tensor(list(prompt), dtype=torch.long)
        canvas[P:self.bs] = torch.as_tensor(list(oracle[: block * block_length]), dtype=torch.long)
        self.canvas = canvas  # [N]
        lo = self.bs - engine.shift  # shifted families read position i's prediction at row i - 1
        self.rows = torch.arange(lo, lo + block_length)  # the block's prediction rows

    @torch.inference_mode()
    def __call__(self, blocks: torch.Tensor) -> torch.Tensor:
        B, N = blocks.shape[0], self.canvas.shape[0]
        canvas = self.canvas[None].repeat(B, 1)  # [B, N]
        canvas[:, self.bs:self.bs + self.L] = blocks
        dev = self.engine.device
        positions = torch.arange(N, device=dev)[None].expand(B, N)
        pad = torch.zeros(B, N, dtype=torch.bool, device=dev)
        logits, _ = self.engine.forward_full(canvas.to(dev), positions, pad, self.rows.to(dev), False)
        return logits  # [B, L, V], on the model's device


# ---------------------------------------------------------------------------- one example
def reference_oracle(tokenizer, reference: str, gen_length: int, eos_id: int) -> list[int] | None:
    """The reference completion's ids followed by EOS up to gen_length, or None if it does not fit."""
    ids = list(tokenizer(reference, add_special_tokens=False)["input_ids"])
    if len(ids) > gen_length:
        return None
    return ids + [eos_id] * (gen_length - len(ids))


def analyze_example(engine, example_id: str, prompt: Sequence[int], oracle: Sequence[int], block_length: int,
                    batch_size: int = 32) -> tuple[list[RipplePoint], int, int, int]:
    """Points of every analysed block of one example, the states measured, and the default-order
    commits that wrote the state's top-1 token, out of how many."""
    eos = set(engine.eos_ids)
    first_eos = next((k for k, t in enumerate(oracle) if t in eos), len(oracle))
    n_blocks = len(oracle) // block_length
    points: list[RipplePoint] = []
    states = agree = chosen = 0
    for b in range(n_blocks):
        if b * block_length >= first_eos:  # this block and later ones hold only EOS
            break
        probe = CanvasProbe(engine, prompt, oracle, b, block_length)
        block_oracle = torch.as_tensor(list(oracle[b * block_length:(b + 1) * block_length]), dtype=torch.long)
        found, n_agree, n_chosen = walk_block(probe, block_oracle, engine.mask_id, batch_size)
        states += len({d["decoded"] for d in found})
        agree += n_agree
        chosen += n_chosen
        points += [RipplePoint(example_id, b, d["decoded"], d["position"], d["entropy_before"], d["reduction"],
                               d["others"], d["rank"], d["oracle_prob"]) for d in found]
    return points, states, agree, chosen


# ---------------------------------------------------------------------------- summary
def terciles(points: Sequence[RipplePoint]) -> list[list[RipplePoint]]:
    """Low / mid / high thirds by entropy before the commit (equal counts; ties by order)."""
    ranked = sorted(points, key=lambda p: p.entropy_before)
    n = len(ranked)
    cut1, cut2 = round(n / 3), round(2 * n / 3)
    return [ranked[:cut1], ranked[cut1:cut2], ranked[cut2:]]


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def tercile_table(points: Sequence[RipplePoint]) -> dict:
    """Per entropy tercile (low, mid, high): points, H_before range, mean reduction, non-top-1 share."""
    per = {}
    for name, group in zip(("low", "mid", "high"), terciles(points)):
        hs = [p.entropy_before for p in group]
        per[name] = {"points": len(group), "entropy_min": min(hs) if hs else None,
                     "entropy_max": max(hs) if hs else None,
                     "mean_reduction": _mean([p.reduction for p in group]),
                     "not_top1_fraction": _mean([float(p.rank > 1) for p in group])}
    return per


def summarize(points: Sequence[RipplePoint], bins: int = 10) -> dict:
    """Counts, per-tercile mean reduction (all points, and the non-trivial ones), the mid-tercile
    non-top-1 fraction, a binned curve."""
    thirds = terciles(points)
    ranked = sorted(points, key=lambda p: p.entropy_before)
    curve = []
    for k in range(bins):
        part = ranked[round(k * len(ranked) / bins):round((k + 1) * len(ranked) / bins)]
        if part:
            curve.append({"entropy": _mean([p.entropy_before for p in part]),
                          "mean_reduction": _mean([p.reduction for p in part]), "points": len(part)})
    mid = thirds[1]
    return {
        "points": len(points),
        "mean_reduction": _mean([p.reduction for p in points]),
        "terciles": tercile_table(points),
        "nontrivial_terciles": tercile_table([p for p in points if p.entropy_before > NONTRIVIAL_NATS]),
        "mid_entropy_not_top1_fraction": _mean([float(p.rank > 1) for p in mid]),
        "rank_counts": {b: sum(p.bucket == b for p in points) for b in RANK_BUCKETS},
        "mid_rank_counts": {b: sum(p.bucket == b for p in mid) for b in RANK_BUCKETS},
        "mean_reduction_by_rank": {b: _mean([p.reduction for p in points if p.bucket == b]) for b in RANK_BUCKETS},
        "curve": curve,
    }


# ---------------------------------------------------------------------------- outputs
_COLORS = {"1": "tab:blue", "2": "tab:orange", "3-5": "tab:green", ">5": "tab:red"}


def plot_ripple(points: Sequence[RipplePoint], summary: dict, title: str, path: Path) -> Path:
    """Reduction vs entropy before the commit, coloured by the oracle token's rank; mid band shaded."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.6), dpi=120, layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    mid = summary["terciles"]["mid"]
    if mid["entropy_min"] is not None:
        ax.axvspan(mid["entropy_min"], mid["entropy_max"], color="0.85", zorder=0, label="mid-entropy tercile")
    for b in RANK_BUCKETS:
        sel = [p for p in points if p.bucket == b]
        if sel:
            ax.scatter([p.entropy_before for p in sel], [p.reduction for p in sel], s=9, alpha=0.55,
                       c=_COLORS[b], label=f"oracle rank {b} ({len(sel)})", zorder=2)
    curve = summary["curve"]
    if curve:
        ax.plot([c["entropy"] for c in curve], [c["mean_reduction"] for c in curve], "-", c="k", lw=1.6,
                label="mean (equal-count bins)", zorder=3)
    ax.axhline(0.0, c="0.4", lw=0.7)
    ax.set_xlabel("entropy of the committed position before the commit, H_before (nats)")
    ax.set_ylabel("mean entropy reduction at other masked positions (nats)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def _num(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def summary_markdown(s: dict) -> str:
    t = s["terciles"]
    lines = [
        f"# Ripple effect: {s['model']} on {s['task']}",
        "",
        f"{s['examples']} examples (oracle: {s['oracle']}; {s['skipped_examples']} skipped), gen_length "
        f"{s['gen_length']}, block_length {s['block_length']}: {s['states']} partially decoded block states, "
        f"{s['points']} points. Default-order commits whose oracle token was the state's top-1: "
        f"{_num(s['commit_agreement'], 3)}.",
        "",
        "| entropy tercile | points | H_before range (nats) | mean reduction (nats) | oracle not top-1 |",
        "|---|---|---|---|---|",
    ]
    for label, table in (("", t), (f"non-trivial (H > {NONTRIVIAL_NATS}) ", s["nontrivial_terciles"])):
        for name in ("low", "mid", "high"):
            g = table[name]
            lines.append(f"| {label}{name} | {g['points']} | {_num(g['entropy_min'], 3)} to "
                         f"{_num(g['entropy_max'], 3)} | {_num(g['mean_reduction'])} | "
                         f"{_num(g['not_top1_fraction'], 3)} |")
    lines += [
        "",
        f"Fraction of mid-entropy positions whose oracle token is not the top-1: "
        f"**{_num(s['mid_entropy_not_top1_fraction'], 3)}** (the paper reports 0.85 on GSM8K with LLaDA).",
        "",
        "Oracle rank counts (all points): " + ", ".join(f"{b}: {n}" for b, n in s["rank_counts"].items()) + ".",
        "",
        "Definitions: " + s["definitions"],
        "",
        "![ripple effect](ripple-effect.png)",
        "",
    ]
    return "\n".join(lines)


DEFINITIONS = (
    "states are partially decoded blocks (>= 1 position decoded, >= 2 masked) along the default decoder's "
    "order with oracle tokens; for each masked position i, H_before is the full-vocabulary entropy of p_i "
    "(nats) and the reduction is the mean over the other masked positions j of the same block of "
    "H(p_j) - H(p_j | i set to its oracle token); rank is the oracle token's rank in p_i (mask id excluded); "
    "terciles split the points sorted by H_before into three equal-count groups, mid = the middle one; "
    f"non-trivial terciles do the same over the points with H_before > {NONTRIVIAL_NATS} nats."
)


@dataclass(frozen=True)
class Analysis:
    out_dir: Path
    figure: Path
    summary: dict
    points: tuple[RipplePoint, ...] = field(repr=False, default=())


def default_out(model: str, task: str) -> Path:
    return Path("runs") / "analyze" / f"{Path(model.rstrip('/')).name}-{task}"


def run_analysis(model: str, task_name: str, *, limit: int = 20, out_dir: str | Path | None = None,
                 gen_length: int = 48, block_length: int = 16, oracle: str = "default", chat: bool = False,
                 data_dir: str | None = None, dtype: str = "auto", device: str = "auto", batch_size: int = 32,
                 progress: bool = True) -> Analysis:
    """Figure 1 for `model` on the first `limit` test examples of `task_name`; writes out_dir."""
    import time

    from ..progress import progress as progress_bar

    from ..decoders import build
    from ..platform.runtime.engine import Engine, GenerationConfig
    from ..platform.runtime.loading import load_model, require_tokenizer
    from ..tasks import get_task
    from ..tasks.prompting import encode_example

    if limit < 1:
        raise RippleError(f"--limit must be a positive number of examples, got {limit}")
    if batch_size < 1:
        raise RippleError(f"--batch-size must be positive, got {batch_size}")
    if oracle not in ("default", "reference"):
        raise RippleError(f"unknown oracle {oracle!r}; accepted: default, reference")
    config = GenerationConfig(gen_length, block_length, "none", stop_at_eos=False)
    task = get_task(task_name, data_dir=data_dir)
    examples = task.examples("test", limit)
    require_tokenizer(model)  # before the weights load
    lm = load_model(model, dtype=dtype, device=device)
    engine = Engine.from_loaded(lm)
    decoder = build("default")
    started = time.perf_counter()
    points: list[RipplePoint] = []
    states = agree = commits = skipped = 0
    bar = progress_bar(examples, disable=not progress, desc=f"analyze {task.name}", unit="example")
    for ex in bar:
        ids = encode_example(lm.tokenizer, ex, chat=chat)
        if len(ids) + gen_length > lm.max_positions:
            raise RippleError(f"example {ex.id}: prompt ({len(ids)} tokens) plus gen_length ({gen_length}) exceeds "
                              f"the model's {lm.max_positions} positions")
        if oracle == "reference":
            target = reference_oracle(lm.tokenizer, ex.reference, gen_length, engine.eos_ids[0])
            if target is None:
                skipped += 1
                continue
        else:
            target = list(engine.generate([ids], decoder, config)[0].tokens)
        found, n_states, n_agree, n_chosen = analyze_example(engine, ex.id, ids, target, block_length, batch_size)
        commits += n_chosen
        points += found
        states += n_states
        agree += n_agree
        bar.set_postfix(points=len(points), refresh=False)
    bar.close()
    if not points:
        raise RippleError(f"no block state to analyse in {len(examples)} example(s) of {task.name!r}"
                          + (f" ({skipped} references longer than gen_length {gen_length})" if skipped else ""))
    summary = {"model": model, "task": task.name, "oracle": oracle, "examples": len(examples) - skipped,
               "skipped_examples": skipped, "gen_length": gen_length, "block_length": block_length, "chat": chat,
               "states": states, "commit_agreement": agree / commits if commits else None,
               **summarize(points), "definitions": DEFINITIONS,
               "seconds": round(time.perf_counter() - started, 2)}
    out = Path(out_dir) if out_dir else default_out(model, task.name)
    out.mkdir(parents=True, exist_ok=True)
    figure = plot_ripple(points, summary, f"Ripple effect: {Path(model.rstrip('/')).name} on {task.name} "
                                          f"({len(points)} points)", out / "ripple-effect.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(summary_markdown(summary))
    _write_points(points, out / "points.csv")
    return Analysis(out, figure, summary, tuple(points))


def _write_points(points: Sequence[RipplePoint], path: Path) -> None:
    import csv

    with path.open("w", newline="") as fh:
        names = [*asdict(points[0]).keys(), "bucket"]
        w = csv.DictWriter(fh, fieldnames=names)
        w.writeheader()
        for p in points:
            w.writerow({**asdict(p), "bucket": p.bucket})
