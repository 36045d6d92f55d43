"""Block-diffusion training for the embedded `llada2_moe` model (ripple-tiny-bd).

The objective matches how a block-diffusion family is decoded (ripple/platform/runtime/engine.py):
blocks of `block_length` are aligned to absolute position 0, a forward sees the canvas only up to
the end of the block being decoded, under block-causal attention. So each training example picks
one *current* block among the blocks that hold its answer (from the one with the prompt's tail to
the one with the first end-of-sequence token: decoding stops after that block), keeps every
earlier block clean, and cuts the sequence at the current block's end. In the current block's
response positions:
- Mask-to-Token (M2T): a ratio t ~ U(eps, 1) of them is masked; cross-entropy on those, weighted
  by 1/t (the masked-diffusion bound, as LLaDA's SFT).
- Token-to-Token (T2T, LLaDA2.1): of the positions left visible, a share s ~ U(0, edit_share) is
  selected ("perturbed"); each selected position is replaced by a random ordinary token, except
  that a share `edit_keep` of them keeps its own token (BERT's unchanged share). Cross-entropy on
  the original token at every selected position: the model learns to spot and rewrite wrong
  tokens, which editing decoders act on, and, from the kept ones, to keep right ones. Without the
  kept share every visible token it is scored on is wrong, so it learns to distrust them all and
  an editing decoder rewrites correct tokens (ripple-tiny-bd's version 1, trained before the kept
  share existed).
Both losses are summed over the block and divided by its response positions.

Every row ends at a block boundary, so with left padding all current blocks are the batch's last
`block_length` columns; positions count from the first real token and the attention mask is the
engine's own block-causal mask for those positions (`block_causal_visibility`).

The MoE router is balanced without an auxiliary loss, as LLaDA2 does (the `expert_bias` of its
gate): after each step, every MoE layer's bias moves by `bias_rate` towards the experts that got
fewer than the mean number of (non-pad) tokens and away from the busier ones (sign update). The bias
only selects experts; it never weights them, so it shifts load without changing the loss.
"""
from __future__ import annotations

import torch

from ..runtime.visibility import block_causal_visibility

EPS = 1e-3


class BlockBatcher:
    """Deterministic block-diffusion batches: example k of the stream is `Batcher.pair(k)` (so the
    data order is the LLaDA trainer's), the noise comes from the step's generator."""

    def __init__(self, pairs, cfg, *, vocab: int, special_ids, mask_id: int, eos_id: int, pad_id: int):
        self.pairs, self.cfg = pairs, cfg  # pairs(k) -> (prompt ids, response ids padded with EOS)
        self.mask_id, self.eos_id, self.pad_id = mask_id, eos_id, pad_id
        special = set(special_ids)
        self.ordinary = torch.tensor([i for i in range(vocab) if i not in special])  # T2T's random tokens

    def example(self, k: int, gen: torch.Generator):
        """(clean ids cut at the current block's end, response start P, current block start)."""
        B = self.cfg.block_length
        prompt, resp = self.pairs(k)
        P = len(prompt)
        first_eos = resp.index(self.eos_id) if self.eos_id in resp else len(resp) - 1
        lo, hi = P // B, (P + first_eos) // B  # blocks that hold the answer (and its first EOS)
        c = lo + int(torch.randint(hi - lo + 1, (1,), generator=gen))
        end = (c + 1) * B
        ids = prompt + resp
        ids = ids + [self.eos_id] * max(0, end - len(ids))  # responses are EOS-padded, as decoded
        return ids[:end], P, c * B

    def batch(self, step: int, gen: torch.Generator):
        cfg = self.cfg
        Bsz, B = cfg.batch_size, cfg.block_length
        rows = [self.example(step * Bsz + i, gen) for i in range(Bsz)]
        T = max(len(ids) for ids, _, _ in rows)
        tokens = torch.full((Bsz, T), self.pad_id, dtype=torch.long)
        pad = torch.zeros(Bsz, T, dtype=torch.bool)
        for b, (ids, _, _) in enumerate(rows):
            off = T - len(ids)  # left padding: a whole number of blocks, every row ends at T
            pad[b, :off] = True
            tokens[b, off:] = torch.tensor(ids)
        positions = (torch.arange(T)[None] - pad.sum(1, keepdim=True)).clamp(min=0)  # [Bsz, T]
        target = tokens[:, T - B:].clone()  # [Bsz, B] the current block, clean
        # response positions of the current block (the first decoded block may hold the prompt's tail)
        resp = torch.stack([torch.arange(s, s + B) >= P for _, P, s in rows])  # [Bsz, B]
        t = torch.rand(Bsz, 1, generator=gen)
        p_mask = (1 - EPS) * t + EPS  # [Bsz, 1]
        masked = (torch.rand(Bsz, B, generator=gen) < p_mask) & resp  # [Bsz, B]
        share = torch.rand(Bsz, 1, generator=gen) * cfg.edit_share  # [Bsz, 1]
        perturbed = (torch.rand(Bsz, B, generator=gen) < share) & resp & ~masked  # [Bsz, B]
        noise = self.ordinary[torch.randint(len(self.ordinary), (Bsz, B), generator=gen)]  # [Bsz, B]
        keep = torch.rand(Bsz, B, generator=gen) < cfg.edit_keep  # [Bsz, B] selected, left unchanged
        noise = torch.where(keep, target, noise)
        block = torch.where(masked, torch.full_like(target, self.mask_id), target)
        tokens[:, T - B:] = torch.where(perturbed, noise, block)
        attn = block_causal_visibility(pad, positions, B)  # [Bsz, 1, T, T], the engine's mask
        return tokens, positions, attn, pad, target, masked, perturbed, p_mask, resp


def block_loss(logits: torch.Tensor, target, masked, perturbed, p_mask, resp) -> torch.Tensor:
    """M2T (1/t-weighted) + T2T cross-entropy over the current block, per response position.
    logits [Bsz, B, V]; the rest [Bsz, B] (p_mask [Bsz, 1])."""
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1),
                                           reduction="none").view_as(target)  # [Bsz, B]
    weight = masked / p_mask + perturbed.float()  # [Bsz, B]
    return (ce * weight).sum() / resp.sum().clamp(min=1)


def _routed_load(moe, keep: torch.Tensor) -> torch.Tensor:
    """[E] token slots each expert got in the MoE's last training-mode forward, over `keep` [Bsz*T]."""
    return torch.bincount(moe.last_idx[keep].reshape(-1), minlength=moe.cfg.n_experts).float()


def balance_experts(model, valid: torch.Tensor, rate: float) -> None:
    """Sign update of every MoE layer's expert bias from the last forward's routing (non-pad tokens)."""
    keep = valid.reshape(-1)  # [Bsz*T]
    for layer in model.layers:
        moe = layer.moe
        if moe is None or getattr(moe, "last_idx", None) is None:
            continue
        load = _routed_load(moe, keep)  # [E]
        with torch.no_grad():
            moe.expert_bias.add_(rate * torch.sign(load.mean() - load))
        moe.last_idx = None


@torch.no_grad()
def expert_shares(model, batcher: BlockBatcher, batches: int = 8, seed: int = 12345,
                  first_step: int = 100_000) -> dict[int, list[float]]:
    """Each MoE layer's share of the routed (non-pad) token slots per expert, over `batches` training
    batches from `first_step` on (1 / n_experts each if perfectly even): what the expert bias
    balances, read from the routing the MoE layers record in training mode (the model card's figure)."""
    gen = torch.Generator().manual_seed(seed)
    moes = {i: layer.moe for i, layer in enumerate(model.layers) if layer.moe is not None}
    loads = {i: torch.zeros(moe.cfg.n_experts) for i, moe in moes.items()}
    was = {i: moe.training for i, moe in moes.items()}
    for moe in moes.values():
        moe.train()  # records `last_idx`; without gradients it still runs the inference experts path
    try:
        for step in range(first_step, first_step + batches):
            tokens, positions, attn, pad, *_ = batcher.batch(step, gen)
            model(tokens, positions, attn_mask=attn)
            keep = (~pad).reshape(-1)  # [Bsz*T]
            for i, moe in moes.items():
                loads[i] += _routed_load(moe, keep)
    finally:
        for i, moe in moes.items():
            moe.train(was[i])
            moe.last_idx = None
    return {i: (load / load.sum()).tolist() for i, load in loads.items()}
