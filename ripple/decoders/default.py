"""`default`: LLaDA's low-confidence remasking, one token per step (steps = gen_length)."""
from __future__ import annotations

from dataclasses import dataclass

from ..lazy import torch
from .base import BlockState, Commit, Plan, Scheduler, greedy, top1_index
from .params import HyperParams
from .registry import register


@dataclass(frozen=True)
class DefaultParams(HyperParams):
    pass


@register
class Default(Scheduler):
    name = "default"
    display_order = 0
    Params = DefaultParams

    def step(self, state: BlockState) -> Plan:
        tokens, conf = greedy(state)
        i = top1_index(conf)
        return Plan(Commit(torch.tensor([i]), tokens[i : i + 1]))
