"""The model configurations families build from config.json, without torch: a driver validating a spec
asks a checkpoint's family (ripple/platform/runtime/checkpoints.py) without importing the modules
(about 2 s of CPU per process); the modules (transformer.py, moe.py) take these at build time."""
from __future__ import annotations

import re
from dataclasses import dataclass

SCORE_FUNCTIONS = ("sigmoid", "softmax")
ACTIVATION_NAMES = ("silu", "gelu_tanh")  # moe.ACTIVATIONS' keys: the experts' gate activations


_EXPERT_KEY = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")


def expert_slot(key: str) -> tuple[str, tuple[int, ...]] | None:
    """One expert's checkpoint tensor (`model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight`, as
    LLaDA2 and Qwen3-MoE checkpoints store them) -> our stacked parameter and the index of its slice
    (`MoE.w_gate_up` [E, 2, I, d], `MoE.w_down` [E, d, I]); None for any other key."""
    m = _EXPERT_KEY.match(key)
    if m is None:
        return None
    layer, expert, proj = int(m.group(1)), int(m.group(2)), m.group(3)
    if proj == "down":
        return f"layers.{layer}.moe.w_down", (expert,)
    return f"layers.{layer}.moe.w_gate_up", (expert, 0 if proj == "gate" else 1)


@dataclass(frozen=True)
class MoEConfig:
    n_experts: int
    top_k: int
    n_group: int
    topk_group: int
    hidden: int  # one expert's intermediate size
    n_shared: int  # shared experts (one MLP of hidden * n_shared); 0 for none
    routed_scaling: float
    score_function: str = "sigmoid"  # one of SCORE_FUNCTIONS: LLaDA2's grouped sigmoid, Qwen3-MoE's softmax
    norm_topk: bool = True  # softmax routing: renormalise the chosen k weights to sum 1
    activation: str = "silu"  # one of ACTIVATION_NAMES: the experts' gate activation

    def problems(self) -> list[str]:
        """What makes this routing impossible (empty when it works), for a one-line config error."""
        out = []
        for name in ("n_experts", "top_k", "n_group", "topk_group", "hidden"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.score_function not in SCORE_FUNCTIONS:
            out.append(f"score_function {self.score_function!r} is unknown; accepted: {', '.join(SCORE_FUNCTIONS)}")
        if self.activation not in ACTIVATION_NAMES:
            out.append(f"activation {self.activation!r} is unknown; accepted: {', '.join(ACTIVATION_NAMES)}")
        if out:
            return out
        if self.score_function == "softmax":
            if self.top_k > self.n_experts:
                out.append(f"num_experts_per_tok {self.top_k} exceeds num_experts {self.n_experts}")
            return out
        if self.n_experts % self.n_group:
            out.append(f"num_experts {self.n_experts} is not divisible by n_group {self.n_group}")
        elif self.n_experts // self.n_group < 2:
            out.append(f"each of the n_group {self.n_group} groups needs at least 2 experts "
                       f"(a group scores by its two best), got {self.n_experts // self.n_group}")
        if self.topk_group > self.n_group:
            out.append(f"topk_group {self.topk_group} exceeds n_group {self.n_group}")
        elif not out and self.top_k > self.topk_group * (self.n_experts // self.n_group):
            out.append(f"num_experts_per_tok {self.top_k} exceeds the {self.topk_group * (self.n_experts // self.n_group)} "
                       f"experts of the topk_group {self.topk_group} kept groups")
        if self.n_shared < 0:
            out.append(f"num_shared_experts must be >= 0, got {self.n_shared}")
        return out


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int  # rows of the output head (LLaDA: embedding_size)
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    mlp_hidden: int
    rope_theta: float
    norm_eps: float
    qkv_bias: bool = False
    rope_full_precision: bool = True
    head_size: int | None = None  # None: d_model // n_heads
    rotary_dims: int | None = None  # RoPE on the first rotary_dims dims of a head; None: all
    fused_qkv: bool = False  # one [q; k; v] projection (LLaDA2's query_key_value)
    qk_norm: bool = False  # per-head RMSNorm on q and k before RoPE
    out_bias: bool = False  # bias on the attention output projection
    moe: MoEConfig | None = None  # MoE MLPs in layers >= dense_layers
    dense_layers: int = 0

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.n_heads

    @property
    def rotary_dim(self) -> int:
        return self.rotary_dims or self.head_dim
