"""A step's packed forward: the cache policy's window plus the segments its plans declared (packed
lookahead variants, the shadow, the next block's rows), and where each one's predictions sit in the
forward's logits. The visibility of the segments is visibility.py's; which rows a forward
recomputes is the cache policy's (caches/); this module only lays the rows out and reads them back.

The prediction for block position j (>= s, the positions the opening did not commit) sits at row
j - s of the block and of each copy of it; without an opening commit on a shifted family it sits at
the window row before it (`back`). The logits of one row of the batch are, in order:
  block rows [0, n_out), variant rows [n_out, v1) (m copies of n rows), shadow rows [v1, sh1),
  the next block's rows [sh1, sh1 + L).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...decoders.base import BlockState, Plan
from .caches import Window


@dataclass(frozen=True)
class Packing:
    """One step forward's layout for a group of rows (module docstring)."""

    L: int  # block length
    s: int  # block positions committed at the opening: their rows keep that forward's logits
    n: int  # block rows a copy predicts (L - s)
    n_out: int  # block rows computed (fewer than n on a shortened canvas)
    m: int  # variants per row (a row with fewer has copies of its block in the rest, never read)
    shadow: bool
    next: bool  # the next block's rows follow
    variants: torch.Tensor | None  # [G, m, L] the variants' tokens
    rows: torch.Tensor  # [R] the logits rows the forward returns
    beyond: tuple[int, int] | None  # canvas columns of the next block's copy (outside the window)

    def read(self, o: torch.Tensor, logits: torch.Tensor, m_r: int = 0):
        """One row's forward output o [R, V] against its block's current logits [L, V]: the anchor
        [L, V] (rows past a cut keep theirs), the logits of its m_r variants [m_r, L, V] (None without),
        the shadow [L, V] (None without) and the next block's rows [L, V] (None without)."""
        s, n, n_out, m = self.s, self.n, self.n_out, self.m
        head = logits[:s]  # [s, V] positions committed at the opening keep that forward's rows
        v1 = n_out + m * n
        sh1 = v1 + (n if self.shadow else 0)
        shadow = torch.cat((head, o[v1:sh1])) if self.shadow else None
        beyond = o[sh1:sh1 + self.L] if self.next else None
        anchor = torch.cat((head, o[:n_out], logits[s + n_out:]))  # [L, V]
        if not m_r:
            return anchor, None, shadow, beyond
        var = o[n_out:v1].reshape(m, n, -1)[:m_r]  # [m_r, n, V]
        return anchor, torch.cat((head[None].expand(m_r, s, -1), var), dim=1), shadow, beyond  # [m_r, L, V]


def pack(group: list[int], plans: dict[int, Plan], states: dict[int, BlockState], win: Window, s: int,
         back: int, shift: int, looks: bool, shadow: bool, dev: torch.device) -> Packing:
    """The layout of `group`'s forward over `win` (module docstring); `looks`: their plans carry
    variants; `shadow`: they asked for the shadow; `shift`: the family's logit shift."""
    L = win.hi - win.lo
    Tw, n = win.w1 - win.w0, L - s  # block positions s.. (the rest were committed at the opening)
    n_out = min(n, win.extent - win.lo + back)  # block rows computed
    variants, m = None, 0
    if looks:
        m = max(plans[r].variants.shape[0] for r in group)
        var = []
        for r in group:
            v = plans[r].variants.to(dev)  # [m_r, L]
            if v.shape[0] < m:  # pad with copies of the anchor block; their logits are ignored
                v = torch.cat((v, states[r].tokens[None].expand(m - v.shape[0], L)), dim=0)
            var.append(v)
        variants = torch.stack(var)  # [G, m, L]
    ar = lambda k: torch.arange(k, device=dev)  # noqa: E731
    out_rows = [ar(n_out) + win.lo - back - win.w0]
    if m:
        out_rows.append((Tw + ar(m)[:, None] * L + ar(n)[None]).reshape(-1))
    if shadow:
        out_rows.append(Tw + m * L + ar(n))
    beyond = None
    if win.next:  # the next block's predictions: window rows where the window covers them, else its copy
        c = ar(L) + win.hi - shift  # [L] canvas rows
        inside = c < win.w1
        out_rows.append(torch.where(inside, c - win.w0, Tw + (m + shadow) * L + c - win.hi))
        if not bool(inside.all()):
            beyond = (win.hi, win.hi + L)
    return Packing(L, s, n, n_out, m, shadow, win.next, variants, torch.cat(out_rows), beyond)
