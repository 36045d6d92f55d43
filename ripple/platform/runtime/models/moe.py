"""The mixture-of-experts MLP of LLaDA2.x (inclusionAI's `LLaDA2MoeSparseMoeBlock`) and of
SDAR-30B-A3B (Qwen3-MoE's sparse block); only the routing differs.

LLaDA2 routing (`score_function` "sigmoid"), as the reference computes it: router logits in
float32, sigmoid scores; experts are *selected* on scores + expert_bias (a group's score is
the sum of its two best biased scores, the `topk_group` best groups are kept, then the top-k
experts among them) but *weighted* by the unbiased scores, normalised to sum 1 and times
`routed_scaling_factor`; the shared expert is added unweighted.
Qwen3-MoE routing ("softmax"): softmax of the router logits in float32, the top-k experts
by that probability, their weights renormalised to sum 1 when `norm_topk` (the config's
`norm_topk_prob`); no groups, bias, scaling or shared expert. DiffusionGemma (Gemma 4's MoE)
routes the same way on a scaled input with per-expert weight scales and GELU experts
(models/diffusion_gemma_model.py, through `MoE.mix`).

Why not the reference's expert loop: it copies the per-expert token counts to the host in
every layer (`.cpu().numpy()`, then `.item()` per expert) to slice the sorted tokens, so a
GPU waits for the host once per layer. Here the tokens are sorted by expert and all experts
run as one grouped GEMM (`torch.nn.functional.grouped_mm`) whose group ends are a device
tensor: nothing in the forward reads a device value on the host. Where the grouped GEMM is
not available (CUDA without bfloat16 support for it, or an old torch), every expert runs on
every token and the routing weights zero the unchosen ones: still sync-free, E / top_k times
the MLP work. `per_expert_loop` is the reference's strategy, kept as the benchmark baseline.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ACTIVATION_NAMES, SCORE_FUNCTIONS, MoEConfig, expert_slot  # noqa: F401 (re-exported)


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,  # SwiGLU experts (LLaDA2, Qwen3-MoE)
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GeGLU experts (Gemma's gelu_pytorch_tanh)
}
assert tuple(ACTIVATIONS) == ACTIVATION_NAMES  # config.py names them for validation without torch


class GatedMLP(nn.Module):
    """down(act(gate x) * up x): a shared expert (SwiGLU), or Gemma's dense MLP and self-conditioning block."""

    def __init__(self, d_model: int, hidden: int, activation: str = "silu"):
        super().__init__()
        self.act = ACTIVATIONS[activation]
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


@lru_cache(maxsize=None)  # asked once per device and dtype, not in every layer's forward
def _grouped_mm_works(device: torch.device, dtype: torch.dtype) -> bool:
    if not hasattr(F, "grouped_mm"):
        return False
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        return dtype == torch.bfloat16 and torch.cuda.get_device_capability(device) >= (8, 0)
    return False


class MoE(nn.Module):
    def __init__(self, d_model: int, cfg: MoEConfig):
        super().__init__()
        self.cfg = cfg
        self.act = ACTIVATIONS[cfg.activation]
        E, I = cfg.n_experts, cfg.hidden
        self.router = nn.Linear(d_model, E, bias=False)
        # LLaDA2's selection bias (aux-loss-free balancing); the checkpoint's buffer, stored in the model dtype
        self.expert_bias = nn.Parameter(torch.zeros(E)) if cfg.score_function == "sigmoid" else None
        # experts stacked for the grouped GEMM: [expert, gate | up, I, d], viewed as [E, 2I, d]
        self.w_gate_up = nn.Parameter(torch.empty(E, 2, I, d_model))
        self.w_down = nn.Parameter(torch.empty(E, d_model, I))  # [E, d, I]
        self.shared = GatedMLP(d_model, I * cfg.n_shared, cfg.activation) if cfg.n_shared else None

    @property
    def gate_up(self) -> torch.Tensor:
        """[E, 2I, d]: each expert's gate rows then its up rows (a family that stores the checkpoint's own
        [E, 2I, d] tensor in `w_gate_up` gets it as it is)."""
        return self.w_gate_up.flatten(1, -2)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[T, d] -> chosen experts [T, k] and their float32 weights [T, k]."""
        cfg = self.cfg
        T = x.shape[0]
        logits = F.linear(x.float(), self.router.weight.float())  # [T, E]
        if cfg.score_function == "softmax":  # Qwen3-MoE
            w, idx = torch.softmax(logits, dim=-1).topk(cfg.top_k, dim=-1)  # [T, k] each
            return idx, (w / w.sum(-1, keepdim=True) if cfg.norm_topk else w)
        scores = torch.sigmoid(logits)
        biased = scores + self.expert_bias  # selection only
        groups = biased.view(T, cfg.n_group, -1).topk(2, dim=-1).values.sum(-1)  # [T, G]
        keep = torch.zeros_like(groups, dtype=torch.bool)
        keep.scatter_(1, groups.topk(cfg.topk_group, dim=-1, sorted=False).indices, True)
        keep = keep[:, :, None].expand(T, cfg.n_group, cfg.n_experts // cfg.n_group).reshape(T, -1)  # [T, E]
        idx = biased.masked_fill(~keep, float("-inf")).topk(cfg.top_k, dim=-1).indices  # [T, k]
        w = scores.gather(1, idx)
        if cfg.top_k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w * cfg.routed_scaling

    def forward(self, h: torch.Tensor, experts: "ExpertFn | None" = None) -> torch.Tensor:
        """[..., d] -> [..., d]. `experts` computes each token's k expert outputs [T, k, d] from
        (x [T, d], idx [T, k]); by default the grouped GEMM (or the every-expert fallback)."""
        shape = h.shape
        x = h.reshape(-1, shape[-1])  # [T, d]
        idx, w = self.route(x)
        out = self.mix(x, idx, w, experts)  # [T, d]
        if self.shared is not None:
            out = out + self.shared(x)
        return out.view(shape)

    def mix(self, x: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, experts: "ExpertFn | None" = None) -> torch.Tensor:
        """The routed experts' weighted sum [T, d] for tokens x [T, d], chosen experts idx [T, k] and their
        float32 weights w [T, k], sync-free (module docstring)."""
        if self.training:  # the trainer's expert-bias balancing reads the routing (training/block_diffusion.py)
            self.last_idx = idx.detach()
        if experts is None and self.training and torch.is_grad_enabled():
            experts = _loop_experts  # training: grouped_mm has no CPU backward (torch 2.13)
        elif experts is None:
            experts = MoE._grouped if _grouped_mm_works(x.device, x.dtype) else MoE._every_expert
        y = experts(self, x, idx)  # [T, k, d]
        return (y.float() * w[..., None]).sum(1).to(x.dtype)  # [T, d]

    def _grouped(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Each token's k expert outputs [T, k, d], by one grouped GEMM per projection."""
        T, k = idx.shape
        E, I = self.cfg.n_experts, self.cfg.hidden
        flat = idx.reshape(-1)  # [T*k]
        order = flat.argsort(stable=True)  # slots sorted by expert
        counts = torch.zeros(E, dtype=torch.int64, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
        ends = counts.cumsum(0).to(torch.int32)  # group ends, on the device
        xs = x.index_select(0, order // k)  # [T*k, d]
        gu = F.grouped_mm(xs, self.gate_up.transpose(1, 2), offs=ends)  # [T*k, 2I]
        a = self.act(gu[:, :I]) * gu[:, I:]
        ys = F.grouped_mm(a, self.w_down.transpose(1, 2), offs=ends)  # [T*k, d]
        return torch.empty_like(ys).index_copy_(0, order, ys).view(T, k, -1)

    def _every_expert(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Fallback without a grouped GEMM: every expert on every token, then each token's k picked."""
        I = self.cfg.hidden
        gu = torch.einsum("td,efd->etf", x, self.gate_up)  # [E, T, 2I]
        ys = torch.einsum("eti,edi->etd", self.act(gu[..., :I]) * gu[..., I:], self.w_down)  # [E, T, d]
        t = torch.arange(x.shape[0], device=x.device)[:, None]
        return ys[idx, t]  # [T, k, d]


ExpertFn = Callable[[MoE, torch.Tensor, torch.Tensor], torch.Tensor]


def _loop_experts(moe: MoE, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Each token's k expert outputs [T, k, d] the reference's way: token counts read on the host,
    one matmul chain per expert that has tokens."""
    T, k = idx.shape
    I = moe.cfg.hidden
    order = idx.reshape(-1).argsort()
    xs = x[order // k]
    counts = torch.bincount(idx.reshape(-1), minlength=moe.cfg.n_experts).tolist()  # host read
    outs, start = [], 0
    for e, n in enumerate(counts):
        if n:
            gu = F.linear(xs[start:start + n], moe.gate_up[e])
            outs.append(F.linear(moe.act(gu[:, :I]) * gu[:, I:], moe.w_down[e]))
            start += n
    ys = torch.cat(outs)
    y = torch.empty_like(ys)
    y[order] = ys
    return y.view(T, k, -1)


def per_expert_loop(moe: MoE, h: torch.Tensor) -> torch.Tensor:
    """`moe`'s forward with the reference's per-expert loop (same routing and combination): the
    benchmark baseline; not used for decoding."""
    return moe(h, experts=_loop_experts)
