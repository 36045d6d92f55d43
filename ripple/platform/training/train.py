"""`ripple train-tiny`: train the embedded models on CPU.

`llada` family (ripple-tiny, LLaDA's SFT objective): the prompt stays visible and the
response, padded with EOS to a fixed length as LLaDA does, is masked at a per-sample ratio
t ~ U(eps, 1); the loss is the cross-entropy on masked positions weighted by 1/t, averaged
over response positions. `llada2_moe` family (ripple-tiny-bd): block diffusion with LLaDA2.1's
mask and edit objectives (training/block_diffusion.py). `qwen2` family (ripple-tiny-ar, a causal
LM that serves as an autoregressive verifier beside ripple-tiny): next-token cross-entropy on each
example's answer and its EOS after the prompt, on ripple-tiny's own tokenizer.
Data are streamed deterministically from the synthetic tasks' train splits by step, so a
resumed run sees exactly the batches an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ...errors import RippleError
from ..runtime.visibility import padding_mask
from ..runtime.models import DiffusionTransformer, TransformerConfig, get_family
from ..runtime.models import llada, llada2, qwen2
from ..runtime.models.moe import MoEConfig

EPS = 1e-3
FAMILIES = ("llada", "llada2_moe", "qwen2")  # what train-tiny can train: ripple-tiny's, ripple-tiny-bd's, ripple-tiny-ar's


@dataclass(frozen=True)
class TrainConfig:
    out: str
    steps: int = 2400
    batch_size: int = 32
    lr: float = 2e-3
    min_lr: float = 1e-4
    warmup: int = 100
    weight_decay: float = 0.01
    d_model: int = 256
    n_layers: int = 6
    n_heads: int = 4
    mlp_hidden: int = 688
    response_length: int = 48
    max_positions: int = 4096  # written to config.json (LLaDA's value); RoPE itself has no table to size
    vocab_size: int = 512  # tokenizer's BPE target size
    tasks: tuple[str, ...] = ("arith", "pyfunc", "freefunc")
    mix: tuple[int, ...] = (1, 1, 1)  # examples of each task per cycle of the stream
    seed: int = 0
    checkpoint_every: int = 200
    snapshot_every: int = 2000  # log these checkpoints' weight sha256 to training/snapshots.jsonl
    log_every: int = 10
    family: str = "llada"  # "llada2_moe": block diffusion with MoE (training/block_diffusion.py); "qwen2": causal LM
    # "": train a BPE tokenizer on the tasks; else an embedded model whose tokenizer (and its config.json's
    # token ids) the model shares, copied beside the checkpoint (qwen2: ripple-tiny's, as a verifier needs)
    tokenizer: str = ""
    # llada2_moe only:
    block_length: int = 16
    n_kv_heads: int = 0  # 0: as n_heads
    experts: int = 8
    experts_per_token: int = 2
    expert_groups: int = 4
    topk_groups: int = 2
    expert_hidden: int = 64
    shared_experts: int = 1
    dense_layers: int = 1
    routed_scaling: float = 2.5
    edit_share: float = 0.0  # T2T: up to this share of the current block's visible tokens selected
    edit_keep: float = 0.0  # T2T: share of the selected positions that keep their token (the rest: random)
    bias_rate: float = 1e-3  # expert-bias balancing step

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise RippleError(f"unknown family {self.family!r}; accepted: {', '.join(FAMILIES)}")
        for name in ("edit_share", "edit_keep"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise RippleError(f"{name} {getattr(self, name)} is not a share; accepted: 0 to 1")
        if len(self.mix) != len(self.tasks) or min(self.mix) < 1:
            raise RippleError(f"mix {','.join(map(str, self.mix))} needs one positive count for each of the tasks "
                              f"{', '.join(self.tasks)}")


def stream_source(mix: tuple[int, ...], k: int) -> tuple[int, int]:
    """(task number, index in that task's train split) of example k of the training stream."""
    cycle = [t for t, m in enumerate(mix) for _ in range(m)]  # task of each slot of one cycle
    slot = k % len(cycle)
    t = cycle[slot]
    return t, (k // len(cycle)) * mix[t] + cycle[:slot].count(t)


class Batcher:
    """Deterministic batches: the stream cycles through the tasks, `mix[i]` examples of task i
    per cycle, and each task reads its own train split in order, so example k is a pure
    function of k (what exact resume relies on)."""

    def __init__(self, cfg: TrainConfig, tokenizer, mask_id: int, eos_id: int, pad_id: int):
        from ...tasks import get_task

        self.cfg, self.tok = cfg, tokenizer
        self.tasks = [get_task(t) for t in cfg.tasks]
        self.mask_id, self.eos_id, self.pad_id = mask_id, eos_id, pad_id

    def texts(self, k: int) -> tuple[list[int], list[int]]:
        """Example k's prompt ids as the model sees it and its answer's ids (no special tokens)."""
        t, i = stream_source(self.cfg.mix, k)
        task = self.tasks[t]
        ex = task.example("train", i)
        prompt = self.tok(ex.prompt, add_special_tokens=False)["input_ids"]
        resp = self.tok(ex.reference, add_special_tokens=False)["input_ids"]
        R = self.cfg.response_length
        if len(resp) >= R:
            raise RippleError(f"{task.name} reference of {len(resp)} tokens does not fit response_length {R}")
        return prompt, resp

    def pair(self, k: int) -> tuple[list[int], list[int]]:
        """(prompt, answer padded with EOS to response_length), as LLaDA's SFT lays it out."""
        prompt, resp = self.texts(k)
        return prompt, resp + [self.eos_id] * (self.cfg.response_length - len(resp))

    def causal_batch(self, step: int):
        """A causal LM's batch: prompt, answer and one EOS, right-padded (pads come after every real
        token, so causal attention needs no padding mask); the loss counts the answer and its EOS."""
        B = self.cfg.batch_size
        rows = [self.texts(step * B + i) for i in range(B)]
        T = max(len(p) + len(r) + 1 for p, r in rows)
        tokens = torch.full((B, T), self.pad_id, dtype=torch.long)
        scored = torch.zeros(B, T, dtype=torch.bool)  # [B, T]: positions whose token the loss predicts
        for b, (p, r) in enumerate(rows):
            seq = p + r + [self.eos_id]
            tokens[b, :len(seq)] = torch.tensor(seq)
            scored[b, len(p):len(seq)] = True
        return tokens, scored

    def batch(self, step: int, gen: torch.Generator):
        B, R = self.cfg.batch_size, self.cfg.response_length
        pairs = [self.pair(step * B + i) for i in range(B)]
        P = max(len(p) for p, _ in pairs)
        tokens = torch.full((B, P + R), self.pad_id, dtype=torch.long)
        pad = torch.zeros(B, P + R, dtype=torch.bool)
        for b, (p, r) in enumerate(pairs):
            off = P - len(p)  # left padding, exactly as the engine lays out a batch
            pad[b, :off] = True
            tokens[b, off:P] = torch.tensor(p)
            tokens[b, P:] = torch.tensor(r)
        positions = (torch.arange(P + R)[None] - pad.sum(1, keepdim=True)).clamp(min=0)
        target = tokens[:, P:].clone()  # [B, R]
        t = torch.rand(B, 1, generator=gen)
        p_mask = (1 - EPS) * t + EPS  # [B, 1]
        masked = torch.rand(B, R, generator=gen) < p_mask  # [B, R]
        tokens[:, P:] = torch.where(masked, torch.full_like(target, self.mask_id), target)
        attn = padding_mask(pad) if pad.any() else None  # [B, 1, T, T], as the engine masks a batch
        return tokens, positions, attn, target, masked, p_mask.expand(B, R), P


def lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, frac)))


def model_config(cfg: TrainConfig, vocab: int) -> TransformerConfig:
    if cfg.family == "qwen2":  # Qwen2's layout: q/k/v biases, grouped KV heads, eps 1e-6
        return TransformerConfig(vocab_size=vocab, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                                 n_kv_heads=cfg.n_kv_heads or cfg.n_heads, mlp_hidden=cfg.mlp_hidden,
                                 rope_theta=10000.0, norm_eps=1e-6, qkv_bias=True, rope_full_precision=False)
    if cfg.family == "llada":
        return TransformerConfig(vocab_size=vocab, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                                 n_kv_heads=cfg.n_heads, mlp_hidden=cfg.mlp_hidden, rope_theta=10000.0, norm_eps=1e-5)
    # LLaDA2.0-mini's layout in miniature: fused q/k/v with grouped KV heads, qk-norm, RoPE on half
    # of each head, a dense first layer, group-limited sigmoid-routed experts plus a shared expert
    head = cfg.d_model // cfg.n_heads
    moe = MoEConfig(n_experts=cfg.experts, top_k=cfg.experts_per_token, n_group=cfg.expert_groups,
                    topk_group=cfg.topk_groups, hidden=cfg.expert_hidden, n_shared=cfg.shared_experts,
                    routed_scaling=cfg.routed_scaling)
    problems = moe.problems()
    if problems:
        raise RippleError(f"MoE settings cannot work: {'; '.join(problems)}")
    return TransformerConfig(vocab_size=vocab, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                             n_kv_heads=cfg.n_kv_heads or cfg.n_heads, mlp_hidden=cfg.mlp_hidden, rope_theta=10000.0,
                             norm_eps=1e-6, rope_full_precision=False, head_size=head, rotary_dims=head // 2,
                             fused_qkv=True, qk_norm=True, moe=moe, dense_layers=cfg.dense_layers)


def _family_module(model: DiffusionTransformer):
    if getattr(model, "causal", False):
        return qwen2
    return llada2 if model.cfg.moe is not None else llada


def checkpoint_bytes(model: torch.nn.Module) -> bytes:
    """The weights as `model.safetensors` holds them: the family's key names, float32."""
    from safetensors.torch import save

    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    if model.cfg.moe is not None:
        tensors = {k: v.contiguous() for k, v in llada2.checkpoint_tensors(state).items()}
    else:
        tensors = {_family_module(model).checkpoint_key(k): v for k, v in state.items()}
    return save(tensors, metadata={"format": "pt"})


def export(model: DiffusionTransformer, out: Path, tokenizer, ids: dict, max_positions: int,
           tokenizer_dir: Path | None = None) -> None:
    """Write a Hugging Face format directory in the family's own format; `tokenizer_dir`: a shared
    tokenizer's directory, whose files are copied as they are (the model's ids are that tokenizer's)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.safetensors").write_bytes(checkpoint_bytes(model))
    module = _family_module(model)
    if module is qwen2:
        ids = {"bos_id": tokenizer.bos_token_id, "eos_id": ids["eos_id"], "pad_id": ids["pad_id"]}
    cfg = module.checkpoint_config(model.cfg, max_positions=max_positions, **ids)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if module is qwen2:  # what transformers' save_pretrained would write beside a Qwen2ForCausalLM
        gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
               "pad_token_id": cfg["pad_token_id"]}
        (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    if tokenizer_dir is None:
        tokenizer.save_pretrained(str(out))
        return
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_dir / name).exists():
            shutil.copyfile(tokenizer_dir / name, out / name)


def build_model(cfg: TrainConfig, vocab: int) -> DiffusionTransformer:
    """The family's module (so a llada2_moe model carries block_causal, as the loader builds it)."""
    return get_family(cfg.family).build(model_config(cfg, vocab))


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 of `model.safetensors` as `export` would write it now, so two runs can be compared bit
    for bit without their optimiser state or timings."""
    return hashlib.sha256(checkpoint_bytes(model)).hexdigest()


def train(cfg: TrainConfig, resume: bool = True, progress: bool = True, log=print, stop_at: int | None = None) -> dict:
    """Train (or resume) into cfg.out; returns a summary with the final loss and time.

    `stop_at` ends the run after that step with its checkpoint written, as an interruption
    would (the schedule stays that of cfg.steps): the way to re-run a prefix of a long run
    and compare its snapshot with the long run's (training/snapshots.jsonl)."""
    from ...progress import progress as progress_bar

    from .tokenizer import build_tokenizer

    out = Path(cfg.out)
    work = out / "training"
    work.mkdir(parents=True, exist_ok=True)
    state_file = work / "state.pt"
    tok_dir = work / "tokenizer"
    shared = None
    if cfg.tokenizer:
        shared = _shared_tokenizer_dir(cfg.tokenizer)
        tok_dir = shared
    elif not (tok_dir / "tokenizer.json").exists():
        build_tokenizer(tok_dir, cfg.vocab_size, seed=cfg.seed, tasks=cfg.tasks)
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # a shared tokenizer's directory holds its model's config.json (llada)
    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    ids = {"mask_id": tokenizer.mask_token_id, "eos_id": tokenizer.eos_token_id, "pad_id": tokenizer.pad_token_id}
    vocab = len(tokenizer)
    if shared is not None:  # the ids and the vocabulary size of the model whose tokenizer this is
        owner = json.loads((shared / "config.json").read_text())
        ids = {"mask_id": owner.get("mask_token_id"), "eos_id": owner["eos_token_id"], "pad_id": owner["pad_token_id"]}
        vocab = int(owner.get("embedding_size") or owner["vocab_size"])
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg, vocab)
    _init(model, cfg.seed)
    # the expert bias is set by balancing, never by gradients (it only selects experts)
    trained = [p for n, p in model.named_parameters() if not n.endswith("expert_bias")]
    for n, p in model.named_parameters():
        p.requires_grad_(not n.endswith("expert_bias"))
    opt = torch.optim.AdamW(trained, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    start, elapsed, curve = 0, 0.0, []
    if resume and state_file.exists():
        state = torch.load(state_file, weights_only=False)
        if state["config"] != dataclasses.asdict(cfg):
            raise RippleError(f"{state_file} was written with other settings; pass a new --out or --no-resume")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start, elapsed, curve = state["step"], state["elapsed"], state["curve"]
        log(f"resuming at step {start} of {cfg.steps}")
    batcher = Batcher(cfg, tokenizer, **ids)
    step_loss = _llada_loss
    if cfg.family == "qwen2":
        step_loss = _causal_loss
    if cfg.family == "llada2_moe":
        from .block_diffusion import BlockBatcher

        batcher = BlockBatcher(batcher.pair, cfg, vocab=len(tokenizer), special_ids=tokenizer.all_special_ids, **ids)
        step_loss = _block_loss
    model.train()
    bar = progress_bar(total=cfg.steps, initial=start, disable=not progress, desc="train-tiny", unit="step")
    t0 = time.perf_counter() - elapsed
    window: list[float] = []

    def save(step: int) -> None:
        tmp = state_file.with_suffix(".tmp")
        torch.save({"config": dataclasses.asdict(cfg), "model": model.state_dict(), "optim": opt.state_dict(),
                    "step": step, "elapsed": time.perf_counter() - t0, "curve": curve}, tmp)
        tmp.replace(state_file)  # atomic: a kill never leaves a half-written checkpoint
        if step % cfg.snapshot_every == 0 or step == cfg.steps:
            record = {"step": step, "sha256": weights_sha256(model), "seconds": round(time.perf_counter() - t0, 1)}
            with open(work / "snapshots.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")

    end = cfg.steps if stop_at is None else min(cfg.steps, stop_at)
    for step in range(start, end):
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
        loss, valid = step_loss(model, batcher, step, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        if cfg.family == "llada2_moe":
            from .block_diffusion import balance_experts

            balance_experts(model, valid, cfg.bias_rate)
        window.append(loss.item())
        bar.update(1)
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            mean = sum(window) / len(window)
            curve.append({"step": step + 1, "loss": mean, "seconds": time.perf_counter() - t0})
            window.clear()
            bar.set_postfix(loss=f"{mean:.3f}", refresh=False)
        if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < end:
            save(step + 1)
    bar.close()
    save(end)
    if end < cfg.steps:
        log(f"stopped at step {end} of {cfg.steps}; the checkpoint is in {state_file}")
        return {"steps": end, "seconds": time.perf_counter() - t0, "stopped": True,
                "sha256": weights_sha256(model), "config": dataclasses.asdict(cfg)}
    model.eval()
    export(model, out, tokenizer, ids, cfg.max_positions, tokenizer_dir=shared)
    # the summary travels with the model (a shipped asset's card cites it): the output folder by its name,
    # not by where on the training machine it was
    config = {**dataclasses.asdict(cfg), "out": Path(cfg.out).name}
    summary = {"steps": cfg.steps, "seconds": time.perf_counter() - t0,
               "final_loss": curve[-1]["loss"] if curve else None, "config": config}
    (work / "curve.json").write_text(json.dumps(curve))
    (out / "training_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_learning_curve(curve, out, cfg.family)
    return summary


def _llada_loss(model, batcher: Batcher, step: int, gen: torch.Generator) -> tuple[torch.Tensor, None]:
    """(loss, None) of one LLaDA SFT step: a dense model has no routing to balance."""
    tokens, positions, attn, target, masked, p_mask, P = batcher.batch(step, gen)
    R = batcher.cfg.response_length
    logits = model(tokens, positions, attn_mask=attn, logits_rows=torch.arange(P, P + R)).logits  # [B, R, V]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1), reduction="none")
    return (ce.view_as(target) * masked / p_mask).sum() / (target.numel()), None


def _causal_loss(model, batcher: Batcher, step: int, gen: torch.Generator) -> tuple[torch.Tensor, None]:
    """(loss, None) of one causal LM step: mean next-token cross-entropy over the answers and their EOS
    (row i predicts token i + 1; the prompt is context only)."""
    tokens, scored = batcher.causal_batch(step)  # [B, T] each
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)  # [B, T]: right padding, no shift
    logits = model(tokens, positions).logits[:, :-1]  # [B, T-1, V]: the module is causal
    target, keep = tokens[:, 1:], scored[:, 1:]  # [B, T-1]
    return F.cross_entropy(logits[keep].float(), target[keep]), None


def _block_loss(model, batcher, step: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, the batch's non-pad tokens, whose routing the expert balancing counts) of one block step."""
    from .block_diffusion import block_loss

    tokens, positions, attn, pad, target, masked, perturbed, p_mask, resp = batcher.batch(step, gen)
    T, B = tokens.shape[1], batcher.cfg.block_length
    logits = model(tokens, positions, attn_mask=attn, logits_rows=torch.arange(T - B, T)).logits  # [Bsz, B, V]
    return block_loss(logits, target, masked, perturbed, p_mask, resp), ~pad


def write_learning_curve(curve: list[dict], out: Path, family: str = "llada") -> None:
    """learning_curve.json (step, loss, seconds) and learning_curve.png beside the checkpoint."""
    ylabel = {"llada": "training loss (1/t-weighted CE)", "llada2_moe": "training loss (M2T + T2T)",
              "qwen2": "training loss (next-token CE on answers)"}[family]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    (out / "learning_curve.json").write_text(json.dumps(curve) + "\n")
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    ax.plot([c["step"] for c in curve], [c["loss"] for c in curve], lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    if curve:
        ax.set_title(f"{out.name}: {curve[-1]['step']} steps, {curve[-1]['seconds'] / 60:.0f} min, "
                     f"final loss {curve[-1]['loss']:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "learning_curve.png")
    plt.close(fig)


def _init(model: DiffusionTransformer, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    std = 0.02
    for name, p in model.named_parameters():
        if p.dim() >= 2:  # matrices, and the MoE's stacked expert matrices
            p.data.normal_(0.0, std, generator=g)
            if name.endswith(("attn.o.weight", "down.weight", "moe.w_down")):  # residual projections scaled by depth
                p.data.mul_(1 / math.sqrt(2 * model.cfg.n_layers))
        elif name.endswith("bias"):
            p.data.zero_()


def _shared_tokenizer_dir(name: str) -> Path:
    """The directory of embedded model `name`, whose tokenizer and token ids a model shares."""
    from ..runtime.loading import EMBEDDED, resolve_model_dir

    if name not in EMBEDDED:
        raise RippleError(f"tokenizer {name!r} is not an embedded model; accepted: {', '.join(EMBEDDED)}")
    return resolve_model_dir(name)


def _tiny(out: str, **kw) -> TrainConfig:
    """The shipped model's recipe (model card): 0.94 M parameters, 4 heads; per 12 examples
    7 arith, 1 pyfunc, 4 freefunc."""
    base = dict(steps=21000, lr=3e-3, d_model=128, n_layers=4, n_heads=4, mlp_hidden=352, mix=(7, 1, 4))
    base.update(kw)
    return TrainConfig(out=out, **base)


LINES_TASKS = ("lines/copy", "lines/insert_index", "lines/insert_random", "lines/remove_index", "lines/remove_random",
               "lines/replace_index", "lines/replace_random", "lines/reverse", "lines/shuffle", "lines/sort")


def _tiny_lines(out: str, **kw) -> TrainConfig:
    """ripple-tiny-lines' recipe (its model card): ripple-tiny's shape on the ten waiting-line operations,
    response 32 as ParallelBench generates them, sort and shuffle (the hardest) twice per cycle, and a
    learning rate of 1e-3: at ripple-tiny's 3e-3 the model never learnt to fetch a person from the prompt
    (a first 12,000-step run wrote well-formed lines of the wrong people, 0 % on copy; at 1e-3 copy alone
    reaches zero loss within 700 steps)."""
    base = dict(steps=16000, lr=1e-3, d_model=128, n_layers=4, n_heads=4, mlp_hidden=352, response_length=32,
                tasks=LINES_TASKS, mix=(1, 1, 1, 1, 1, 1, 1, 1, 2, 2))
    base.update(kw)
    return TrainConfig(out=out, **base)


def _micro(out: str, **kw) -> TrainConfig:
    """A seconds-long config for tests: same code path, a toy model."""
    base = dict(steps=20, batch_size=8, lr=3e-3, warmup=2, d_model=64, n_layers=2, n_heads=2, mlp_hidden=128,
                checkpoint_every=10, snapshot_every=10, log_every=2)
    base.update(kw)
    return TrainConfig(out=out, **base)


def _tiny_bd(out: str, **kw) -> TrainConfig:
    """ripple-tiny-bd's recipe (its model card): LLaDA2's layout in miniature, block 16."""
    base = dict(family="llada2_moe", steps=15000, lr=3e-3, d_model=128, n_layers=4, n_heads=4, n_kv_heads=2,
                mlp_hidden=352, experts=8, experts_per_token=2, expert_groups=4, topk_groups=2, expert_hidden=64,
                shared_experts=1, dense_layers=1, block_length=16, edit_share=0.25, edit_keep=0.5, mix=(7, 1, 4))
    base.update(kw)
    return TrainConfig(out=out, **base)


def _micro_bd(out: str, **kw) -> TrainConfig:
    """`micro` for the llada2_moe family (tests)."""
    return _micro(out, **{**dict(family="llada2_moe", n_kv_heads=1, experts=4, experts_per_token=2, expert_groups=2,
                                 topk_groups=1, expert_hidden=32, block_length=16, edit_share=0.25, edit_keep=0.5), **kw})


def _tiny_ar(out: str, **kw) -> TrainConfig:
    """ripple-tiny-ar's recipe (its model card): a Qwen2-layout causal LM on ripple-tiny's tokenizer and
    ripple-tiny's data stream (mix 7,1,4), as APD's verifier beside it."""
    base = dict(family="qwen2", tokenizer="ripple-tiny", steps=9000, lr=2e-3, d_model=128, n_layers=4, n_heads=4,
                n_kv_heads=2, mlp_hidden=352, max_positions=4096, mix=(7, 1, 4))
    base.update(kw)
    return TrainConfig(out=out, **base)


def _micro_ar(out: str, **kw) -> TrainConfig:
    """`micro` for the qwen2 family (tests)."""
    return _micro(out, **{**dict(family="qwen2", tokenizer="ripple-tiny", n_kv_heads=1), **kw})


PRESETS = {"tiny": _tiny, "micro": _micro, "tiny-bd": _tiny_bd, "micro-bd": _micro_bd, "tiny-lines": _tiny_lines,
           "tiny-ar": _tiny_ar, "micro-ar": _micro_ar}
# `--family` alone picks the shipped recipe
FAMILY_PRESETS = {"llada": "tiny", "llada2_moe": "tiny-bd", "qwen2": "tiny-ar"}


def recipe(out: str, family: str | None = None, preset: str | None = None, **overrides) -> TrainConfig:
    """The training config of `ripple train-tiny`: a preset (default: the family's shipped recipe;
    family `llada2` means llada2_moe) with `overrides` (steps, batch_size, lr, seed, mix) that are
    given; every value is checked, one line per problem."""
    chosen = {"llada2": "llada2_moe"}.get(family, family)
    if chosen is not None and chosen not in FAMILY_PRESETS:
        raise RippleError(f"unknown family {family!r}; accepted: llada, llada2 (= llada2_moe), qwen2")
    preset = FAMILY_PRESETS[chosen or "llada"] if preset is None else preset
    if preset not in PRESETS:
        raise RippleError(f"unknown preset {preset!r}; accepted: {', '.join(PRESETS)}")
    if chosen is not None and PRESETS[preset]("-").family != chosen:
        accepted = [name for name in PRESETS if PRESETS[name]("-").family == chosen]
        raise RippleError(f"preset {preset!r} is not of family {family!r}; accepted: {', '.join(accepted)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    for key, value in given.items():
        if key in ("steps", "batch_size", "lr") and value <= 0:
            raise RippleError(f"--{key.replace('_', '-')} must be positive, got {value}")
    return PRESETS[preset](out, **given)


def train_tiny(out: str, *, family: str | None = None, preset: str | None = None, threads: int | None = None,
               resume: bool = True, stop_at: int | None = None, **overrides) -> dict:
    """Train an embedded model as `ripple train-tiny` does (resuming from `out` unless `resume` is
    False); returns the run's summary."""
    cfg = recipe(out, family, preset, **overrides)
    if threads is not None:
        if threads <= 0:
            raise RippleError(f"--threads must be positive, got {threads}")
        torch.set_num_threads(threads)
    if stop_at is not None and stop_at <= 0:
        raise RippleError(f"--stop-at must be positive, got {stop_at}")
    return train(cfg, resume=resume, stop_at=stop_at)
