"""`make bench`: one LLaDA2.0-mini MoE layer, Ripple's grouped forward against a plain per-expert loop.

The layer has LLaDA2.0-mini's shape (hidden 2048, 256 experts of 512, top-8 in 4 of 8 groups,
one shared expert) with random weights; both forwards run on the same weights and inputs and
their outputs are checked equal before timing. The per-expert loop is the reference's
strategy (token counts read on the host, one matmul chain per expert with tokens).
"""
from __future__ import annotations

import torch

from ..platform.runtime.loading import hollow
from ..platform.runtime.models.llada2 import LLADA2
from ..platform.runtime.models.moe import MoE, per_expert_loop
from .presets import LLADA2_MINI
from .timing import median_ms


def moe_layer(device: torch.device, dtype: torch.dtype = torch.bfloat16, tokens=(32, 256), reps: int = 5,
              seed: int = 0) -> dict:
    cfg = LLADA2.to_config(LLADA2_MINI)
    gen = torch.Generator(device=device).manual_seed(seed)
    with hollow():
        moe = MoE(cfg.d_model, cfg.moe)
    moe = moe.to(dtype).to_empty(device=device).eval().requires_grad_(False)
    with torch.no_grad():
        for p in moe.parameters():
            p.normal_(0.0, 0.02, generator=gen)
    rows = []
    with torch.inference_mode():
        for t in tokens:
            h = torch.randn(1, t, cfg.d_model, generator=gen, device=device).to(dtype)
            diff = (moe(h).float() - per_expert_loop(moe, h).float()).abs().max().item()
            ours = median_ms(lambda: moe(h), device, reps)
            loop = median_ms(lambda: per_expert_loop(moe, h), device, reps)
            rows.append({"tokens": t, "grouped_ms": ours, "loop_ms": loop, "speedup": loop / ours, "max_abs_diff": diff})
    return {"shape": f"hidden {cfg.d_model}, {cfg.moe.n_experts} experts x {cfg.moe.hidden}, top-{cfg.moe.top_k} "
                     f"in {cfg.moe.topk_group} of {cfg.moe.n_group} groups, {cfg.moe.n_shared} shared",
            "dtype": str(dtype).removeprefix("torch."), "reps": reps, "rows": rows}


def format_moe(r: dict) -> str:
    lines = [f"MoE layer (LLaDA2.0-mini: {r['shape']}; random weights, {r['dtype']}, median of {r['reps']})",
             f"{'tokens':>7}{'grouped ms':>12}{'per-expert loop ms':>20}{'loop/grouped':>14}{'max |diff|':>12}"]
    for x in r["rows"]:
        lines.append(f"{x['tokens']:>7}{x['grouped_ms']:>12.1f}{x['loop_ms']:>20.1f}{x['speedup']:>14.2f}"
                     f"{x['max_abs_diff']:>12.2g}")
    return "\n".join(lines)
