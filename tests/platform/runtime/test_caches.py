"""The KV cache policies' registry (ripple/platform/runtime/caches/): the names the decoders' protocol
accepts are exactly the registered policies, and a policy is an addition the engine runs without
knowing its name."""
import pytest

import ripple.platform.runtime.generation as generation_module  # GenerationConfig checks the cache name there
from ripple.decoders import CACHE_NAMES, CACHE_POLICIES
from ripple.decoders.default import Default
from ripple.errors import RippleError
from ripple.platform.runtime.caches import POLICIES, cache_policy
from ripple.platform.runtime.caches.prefix import PrefixCache
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import SCRIPTED_PROMPTS, scripted_engine


def test_the_registered_policies_are_the_protocols_cache_names():
    assert tuple(POLICIES) == CACHE_NAMES and CACHE_NAMES[:len(CACHE_POLICIES)] == CACHE_POLICIES
    assert all(cache_policy(name).name == name for name in CACHE_NAMES)
    # a block decoder supports the block caches, never `sliding` (APD's window, for the decoders listing it)
    assert Default.supported_caches == CACHE_POLICIES


def test_an_unknown_policy_is_refused_in_one_line_naming_the_accepted_ones():
    with pytest.raises(RippleError, match=r"^unknown cache policy 'paged'; accepted: none, prefix, dual, sliding$"):
        cache_policy("paged")


class WholeCanvas(PrefixCache):
    """Stores the opening's keys as `prefix` does, but every step recomputes the whole canvas."""

    name = "whole"

    def window(self, bs, be, ext):
        return 0, ext


class AnyCache(Default):
    supported_caches = CACHE_POLICIES + ("whole",)


class Widths:
    """The scripted model, recording how many tokens each forward recomputes."""

    def __init__(self, model):
        self.model, self.widths = model, []

    def __getattr__(self, name):  # the family's properties (shift, block_causal, ...) are the model's
        return getattr(self.model, name)

    def __call__(self, tokens, *args, **kwargs):
        self.widths.append(tokens.shape[1])
        return self.model(tokens, *args, **kwargs)


@pytest.mark.parametrize("family", ["full", "shifted"])
def test_a_new_policy_is_one_more_registry_entry(monkeypatch, family):
    monkeypatch.setitem(POLICIES, "whole", WholeCanvas)
    monkeypatch.setattr(generation_module, "CACHE_NAMES", CACHE_NAMES + ("whole",))
    scripted, model = scripted_engine(family)
    runs = {}
    for cache in ("whole", "none", "prefix"):
        recorder = Widths(model)
        engine = Engine(recorder, mask_id=scripted.mask_id, eos_ids=scripted.eos_ids, pad_id=scripted.pad_id)
        outs = engine.generate(SCRIPTED_PROMPTS, AnyCache(), GenerationConfig(8, 4, cache))
        runs[cache] = ([(o.tokens, o.nfe) for o in outs], recorder.widths)
    # every step recomputes the whole canvas, as `none` does: its tokens, forwards and their widths
    assert runs["whole"] == runs["none"]
    assert runs["prefix"][1] != runs["none"][1]  # (what `prefix`, whose opening `whole` shares, recomputes)
