"""Throughput mode's hardest batch: rows that plan a packed lookahead next to rows that do not.

The engine groups a step's rows by the kind of forward they need (one forward per kind), pads
the variants of rows that plan fewer of them, and counts NFE per row. A scripted model makes
the mix certain: rows whose prompt holds token 20 are sure of three block positions in four
(one masked position is left after the first commit: a plain forward), the others are torn
between two or three tokens everywhere (a pivot with candidates for RPS, branches for LoPA)."""
import math

import pytest
import torch

from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel

V, MASK, EOS, SURE = 40, 39, 1, 20
PROMPTS = [[SURE, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15], [16, 17, 18, 19], [SURE, 21, 22, 23, 24, 25, 26, 27],
           [28, 29, 30, 31]]  # lengths 4 and 8: block positions line up with pos % 4 in every row


def _dist(probs: dict[int, float]) -> torch.Tensor:
    logits = torch.full((V,), -30.0)
    for tok, p in probs.items():
        logits[tok] = math.log(p)
    return logits


def script(pos: int, seen) -> torch.Tensor:
    tok = (pos * 7) % 30 + 2  # never MASK or EOS
    if any(t == SURE for _, t in seen):
        return _dist({tok: 0.99, tok + 1: 0.01}) if pos % 4 != 3 else _dist({tok: 0.5, tok + 1: 0.3, tok + 2: 0.2})
    if pos % 2:  # two candidates
        return _dist({tok: 0.6, tok + 1: 0.4})
    return _dist({tok: 0.5, tok + 1: 0.3, tok + 2: 0.2})  # three candidates


def _engine() -> tuple[Engine, ScriptedModel]:
    model = ScriptedModel(V, script)
    return Engine(model, mask_id=MASK, eos_ids=[EOS], pad_id=0), model


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("decoder", ["rps", "lopa"])
def test_rows_with_and_without_a_lookahead_share_a_batch_with_their_batch1_nfe(decoder, cache):
    cfg = GenerationConfig(gen_length=8, block_length=4, cache=cache)
    singles = [_engine()[0].generate([p], build(decoder), cfg)[0] for p in PROMPTS]
    engine, model = _engine()
    events = []
    batch = engine.generate(PROMPTS, build(decoder), cfg, trace=events.append)

    assert [b.tokens for b in batch] == [s.tokens for s in singles]
    assert [b.nfe for b in batch] == [s.nfe for s in singles]  # per-row NFE, not the batch's forward count
    assert [b.lookahead_nfe for b in batch] == [s.lookahead_nfe for s in singles]
    sure = [i for i, p in enumerate(PROMPTS) if SURE in p]
    assert all(batch[i].lookahead_nfe == 0 for i in sure)
    assert all(batch[i].lookahead_nfe > 0 for i in range(len(PROMPTS)) if i not in sure)
    # the same step of the same block: some rows planned a lookahead forward, the others a plain one
    kinds: dict[tuple[int, int], dict[int, str]] = {}
    for e in events:
        if e["phase"] == "step" and e["forward"] is not None:
            kinds.setdefault((e["block"], e["step"]), {})[e["sample"]] = e["forward"]
    mixed = [k for k, rows in kinds.items() if {"lookahead", "normal"} <= set(rows.values())]
    assert mixed, kinds
    assert all(kinds[mixed[0]][i] == "normal" for i in sure)
    assert model.row_calls == sum(s.nfe for s in singles)  # each row is forwarded exactly its own NFE times
    assert model.calls < sum(s.nfe for s in singles)  # ... in fewer, batched forward calls
