"""Per-position features of one block for learned filters: the one place that computes them, for
`ripple learn label` (which stores the raw columns) and for the `learn2pd` decoder (which feeds a
filter), so that a filter reads at decoding time exactly what it was trained on.

Two stages, both shared:
- `raw_columns(logits, masked)`: what one forward says per block position, the columns the labelling
  file holds: `confidence` (the argmax token's probability, float32, computed as Learn2PD's filter
  input is), `margin` (top-1 minus top-2 probability), `entropy` (of the full distribution, nats) and
  `is_committed` (the position already holds a token);
- `assemble(names, columns, step)`: the filter's input [N, B, F] from those columns and the forward's
  index within its block, in the order `names` gives. Derived features: `masks_left` (the block's
  fraction still masked), `step` (the forward's index within its block), `position` (j / B),
`left_masked` (masked positions before j, over B) and `left_min_confidence` (the lowest confidence
among them, 1 where none): a token late in the block often depends on the ones before it.

Neighbours are not features here: a width-free filter reads them itself (a convolution over the
block, zero-padded at its edges), so one filter serves any block length.
"""
from __future__ import annotations

from typing import Any

from ..errors import RippleError
from ..lazy import torch

RAW = ("confidence", "margin", "entropy", "is_committed")  # stored per position by `ripple learn label`
# computed from the raw columns and the record's step
DERIVED = ("masks_left", "step", "position", "left_masked", "left_min_confidence")
KNOWN = RAW + DERIVED
# the columns beside Learn2PD's five (not `committed`: the engine's trace events use that key for commits)
LABEL_COLUMNS = ("margin", "entropy", "is_committed")


LANES = 16  # float32 lanes of the reduction in the softmax that made the golden files (an AVX-512 CPU)


def softmax_like_reference(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim in the logits' dtype, as the reference's F.softmax computes it; for
    float32 in a fixed order, so that its last bit (which decides Learn2PD's many ties at 1.0) is the
    same on every machine: exp(x - max), summed in 16 float32 lanes chunk by chunk and the lanes then
    halved pairwise, times 1 / sum, as torch's CPU kernel does with AVX-512 vectors (the golden files'
    machine; an AVX2 CPU sums in 8 lanes and ties positions the reference ranked apart).
    [..., V] -> [..., V]."""
    if logits.dtype != torch.float32:
        return torch.softmax(logits, dim=-1)
    import numpy as np

    shape = logits.shape
    rows = logits.detach().reshape(-1, shape[-1]).cpu()  # [R, V]
    e = torch.exp(rows - rows.max(dim=-1, keepdim=True).values)  # [R, V]
    pad = (-shape[-1]) % LANES  # zeros leave a lane's sum unchanged
    chunks = torch.nn.functional.pad(e, (0, pad)).numpy().reshape(rows.shape[0], -1, LANES)  # [R, C, 16]
    acc = torch.from_numpy(np.add.reduce(chunks, axis=1))  # [R, 16]: lane sums, chunk after chunk
    while acc.shape[1] > 1:
        half = acc.shape[1] // 2
        acc = acc[:, :half] + acc[:, half:]
    return (e * (1 / acc)).reshape(shape).to(logits.device)


def raw_columns(logits: torch.Tensor, masked: torch.Tensor) -> dict[str, torch.Tensor]:
    """One forward's raw per-position columns of a block: logits [L, V], masked [L] bool ->
    {name: [L]} (confidence, margin, entropy float32; is_committed bool), on the CPU."""
    x0 = logits.argmax(dim=-1)  # [L]
    # Learn2PD's filter input: the softmax in the logits' dtype (float32 in its fixed lane order)
    conf = softmax_like_reference(logits).gather(-1, x0[:, None]).squeeze(-1).to(torch.float32)  # [L]
    probs = torch.softmax(logits.to(torch.float64), dim=-1)  # [L, V]
    top2 = probs.topk(min(2, probs.shape[-1]), dim=-1).values  # [L, 2]
    margin = top2[:, 0] - (top2[:, 1] if top2.shape[-1] > 1 else 0.0)  # [L]
    entropy = -torch.special.xlogy(probs, probs).sum(dim=-1)  # [L] nats
    return {"confidence": conf.cpu(), "margin": margin.to(torch.float32).cpu(),
            "entropy": entropy.to(torch.float32).cpu(), "is_committed": (~masked.bool()).cpu()}


def check_names(names: tuple[str, ...] | list[str], where: str) -> None:
    """Refuse, in one line, feature names this Ripple does not compute."""
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise RippleError(f"{where} reads feature{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}, which this "
                          f"Ripple does not compute; known: {', '.join(KNOWN)}")


def assemble(names: tuple[str, ...], columns: dict[str, Any], step: Any) -> torch.Tensor:
    """The filter's input [N, B, F] float32 from raw columns {name: [N, B]} (tensors or arrays) and the
    records' forward index within their block, step [N]."""
    cols = {k: torch.as_tensor(v) for k, v in columns.items()}
    committed = cols["is_committed"].to(torch.float32)  # [N, B]
    n, width = committed.shape
    steps = torch.as_tensor(step, dtype=torch.float32).reshape(n, 1).expand(n, width)  # [N, B]
    masked = 1.0 - committed  # [N, B]
    derived = {
        "masks_left": masked.mean(dim=1, keepdim=True).expand(n, width),  # [N, B]
        "step": steps,
        "position": (torch.arange(width, dtype=torch.float32) / width).expand(n, width),  # [N, B]
    }
    if "left_masked" in names or "left_min_confidence" in names:
        # what is still open before each position: masked positions to its left (a share of the block), and
        # the lowest confidence among them (1 where none): a later token depends on the earlier ones
        derived["left_masked"] = (torch.cumsum(masked, dim=1) - masked) / width  # [N, B]
        conf = torch.where(masked > 0, cols["confidence"].to(torch.float32), torch.ones_like(masked))  # [N, B]
        shifted = torch.cat((torch.ones(n, 1), conf[:, :-1]), dim=1)  # [N, B]: position j sees j - 1
        derived["left_min_confidence"] = torch.cummin(shifted, dim=1).values  # [N, B]
    out = []
    for name in names:
        if name in derived:
            out.append(derived[name])
        elif name in cols:
            out.append(cols[name].to(torch.float32))
        else:
            check_names((name,), "the filter")
            raise RippleError(f"the records hold no {name!r} column; relabel with `ripple learn label`")
    return torch.stack(out, dim=-1).contiguous()  # [N, B, F]
