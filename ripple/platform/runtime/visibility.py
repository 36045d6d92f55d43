"""Who may attend to whom in a forward: the masks of `Engine.forward_window` (DESIGN.md section 3),
and the same masks for training, which must see a batch as the engine does.

A forward's queries are the recomputed window [w0, w1) of the canvas, then the segments a step's
plans declared, in this order (ripple/platform/runtime/engine.py's module docstring):
  variants  m packed lookahead copies of the block [lo, hi): a variant sees what a block query
            sees, with its own copy in place of the block;
  shadow    one all-mask copy of the block: row t, predicting block position lo + t + shift, sees
            what a block query sees except the canvas token there, plus the whole shadow;
  beyond    a copy of the next block [b0, b1): it sees what a block query sees, with its own copy
            in place of the canvas's next block.
Base queries never see a segment and segments never see each other. Keys are the canvas's columns
[0, N) (cached outside the window), then the segments' own.
"""
from __future__ import annotations

import torch


def padding_mask(pad: torch.Tensor) -> torch.Tensor:
    """[B, N] left-padding flags -> [B, 1, N, N] visibility: nobody sees pads, pads see all
    (so no pad row is all -inf, whose NaNs would reach real rows through the values)."""
    return (~pad)[:, None, None, :] | pad[:, None, :, None]


def block_causal_visibility(pad: torch.Tensor, positions: torch.Tensor, block: int, q0: int = 0,
                            q1: int | None = None) -> torch.Tensor:
    """[B, N] left-padding flags and position ids -> [B, 1, q1 - q0, N] visibility of queries
    [q0, q1): a query sees the keys of its own and earlier blocks by position id (j // block <=
    i // block), never a pad; pad rows see all (no all -inf row). Block-diffusion training uses the
    same mask (ripple/platform/training/block_diffusion.py)."""
    q1 = pad.shape[1] if q1 is None else q1
    kb = positions // block  # [B, N]
    vis = (~pad)[:, None, :] & (kb[:, None, :] <= kb[:, q0:q1, None])  # [B, Q, N]
    return (vis | pad[:, q0:q1, None])[:, None]


def forward_mask(pad, positions, w0, w1, lo, hi, m, shadow=False, beyond=None, block=None,
                 shift: int = 0) -> torch.Tensor:
    """Visibility [B, 1, Tw + E, N + E] (True = may attend) of window [w0, w1) and the segments
    (module docstring), E = (m + shadow) * Lw + Lb extra rows. `pad`, `positions`: [B, N] of the
    forward's canvas; `block`: a block-causal family's block length (None: bidirectional); `shift`:
    the family's logit shift (which canvas position a shadow row predicts)."""
    B, N = pad.shape
    Tw, Lw = w1 - w0, hi - lo
    S = Lw if shadow else 0
    b0, b1 = beyond if beyond is not None else (0, 0)
    Lb = b1 - b0
    E = m * Lw + S + Lb
    dev = pad.device
    key_ok = ~pad  # [B, N]
    if block is None:
        base = key_ok[:, None, :].expand(B, Tw, N) | pad[:, w0:w1, None]  # [B, Tw, N]; pad rows see all
        ctx_ok = key_ok  # keys a query of the block sees
    else:
        base = block_causal_visibility(pad, positions, block, w0, w1)[:, 0]  # [B, Tw, N]
        ctx_ok = key_ok & (positions // block <= positions[:, lo:lo + 1] // block) if E else key_ok
    if not E:
        return base[:, None]
    no = lambda rows, cols: torch.zeros(B, rows, cols, dtype=torch.bool, device=dev)  # noqa: E731
    every = lambda n: torch.ones(B, n, n, dtype=torch.bool, device=dev)  # noqa: E731
    parts = [torch.cat((base, no(Tw, E)), dim=2)]  # base queries never see extra segments
    if m:
        # a variant sees the context minus the anchor's block, plus its own copy
        ctx = ctx_ok.clone()
        ctx[:, lo:hi] = False
        own = torch.block_diag(*[torch.ones(Lw, Lw, dtype=torch.bool, device=dev)] * m)  # [m*Lw, m*Lw]
        parts.append(torch.cat((ctx[:, None, :].expand(B, m * Lw, N), own[None].expand(B, -1, -1),
                                no(m * Lw, S + Lb)), dim=2))
    if shadow:
        # shadow row t sees the context minus its twin, the block position lo + t + shift it
        # predicts (a shifted family's last row predicts past the block: no twin)
        twin = torch.zeros(Lw, N, dtype=torch.bool, device=dev)
        t = torch.arange(hi - lo - shift, device=dev)
        twin[t, lo + shift + t] = True
        sees = ctx_ok[:, None, :] & ~twin[None]  # [B, Lw, N]
        parts.append(torch.cat((sees, no(Lw, m * Lw), every(Lw), no(Lw, Lb)), dim=2))
    if Lb:
        # the next block's copy sees the context minus the canvas next block, plus itself
        ctx = ctx_ok.clone()
        ctx[:, b0:b1] = False
        parts.append(torch.cat((ctx[:, None, :].expand(B, Lb, N), no(Lb, m * Lw + S), every(Lb)), dim=2))
    return torch.cat(parts, dim=1)[:, None]
