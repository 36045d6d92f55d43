"""A decoder with a model of its own beside the dLLM (ripple/platform/runtime/auxiliary.py): the engine
refuses a run whose model it does not hold, hands the model back by role to `prepare` and to the steps,
and counts its calls per sample apart from NFE, without any change to the dLLM's decode."""
import pytest
import torch

from ripple.decoders import build
from ripple.decoders.base import Commit, Plan, Scheduler, greedy, top1_index
from ripple.errors import RippleError
from ripple.platform.runtime.engine import GenerationConfig
from ripple.testing import scripted_engine

PROMPTS = [[5, 6, 7], [10, 11, 12, 13]]  # odd and even prompt lengths: only the first asks its verifier


class Verifier:
    """A stand-in second model: counts its calls, has a vocabulary like a model."""

    vocab_size = 40

    def __init__(self):
        self.calls = 0

    def __call__(self, ids):
        self.calls += 1
        return torch.zeros(ids.shape[0], self.vocab_size)


class Verified(Scheduler):
    """`default`'s rule; a sample with an odd prompt length calls its verifier once per step."""

    def __init__(self, params=None):
        super().__init__(params)
        self.shapes = []

    def auxiliary_models(self):
        return {"verifier": "tiny-verifier"}

    def prepare(self, shape):
        self.shapes.append(shape)

    def step(self, state):
        if state.prompt_length % 2:
            assert state.models["verifier"].vocab_size == Verifier.vocab_size  # the model's own attributes
            state.models["verifier"](state.tokens[None])
        tokens, conf = greedy(state)
        i = top1_index(conf)
        return Plan(Commit(torch.tensor([i]), tokens[i:i + 1]))


def test_a_decoder_whose_model_is_not_loaded_is_refused_in_one_line_before_any_forward():
    engine, model = scripted_engine("full")
    with pytest.raises(RippleError) as err:
        engine.generate(PROMPTS, Verified(), GenerationConfig(8, 4))
    message = str(err.value)
    assert "\n" not in message
    assert "verifier model 'tiny-verifier'" in message and "loaded: none" in message
    assert model.calls == 0


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("family", ["full", "shifted"])
def test_the_model_reaches_prepare_and_steps_and_its_calls_count_per_sample_apart_from_nfe(family, cache):
    engine, _ = scripted_engine(family)
    verifier = Verifier()
    engine.auxiliary["tiny-verifier"] = verifier
    cfg = GenerationConfig(8, 4, cache)
    events = []
    dec = Verified()
    outs = engine.generate(PROMPTS, dec, cfg, trace=events.append)
    plain = engine.generate(PROMPTS, build("default"), cfg)
    assert [o.tokens for o in outs] == [p.tokens for p in plain]  # the dLLM's decode is default's
    assert [o.nfe for o in outs] == [p.nfe for p in plain]  # the verifier's calls are not dLLM forwards
    steps = [sum(1 for e in events if e["sample"] == r and e["phase"] == "step") for r in range(2)]
    assert steps[0] > 0
    assert [o.auxiliary_nfe for o in outs] == [(("verifier", steps[0]),), (("verifier", 0),)]
    assert verifier.calls == steps[0]
    assert [s.models for s in dec.shapes] == [{"verifier": verifier}]
    assert all(p.auxiliary_nfe == () for p in plain)  # a decoder that declares none reports none
