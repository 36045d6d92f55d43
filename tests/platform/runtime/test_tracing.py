"""Decode traces on scripted models: every forward's commits with the probabilities its outputs gave
them, edits and remasks, replaying to the output; and parallel failures classified by the forward of a
sample's first wrong commit (ripple/platform/runtime/tracing.py, failures.py)."""
import pytest
import torch

from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.failures import count_failures, first_divergence
from ripple.platform.runtime.reference import Reference, follow
from ripple.platform.runtime.tracing import Trace, TraceRecorder
from ripple.testing import ScriptedModel, hashed_script, peaked, scripted_engine, spread, view

V, MASK = 40, 39
PROMPT = [5, 6, 7, 8]  # canvas positions 0..3; the response is positions 4..7 (response positions 0..3)


def decode(script, decoder, settings=None, gen=4, block=4):
    """(output, trace) of PROMPT under `decoder` on a scripted model."""
    engine = Engine(ScriptedModel(V, script), mask_id=MASK, eos_ids=[1], pad_id=0)
    rec = TraceRecorder(1)
    out = engine.generate([PROMPT], build(decoder, settings or {}), GenerationConfig(gen, block), trace=rec)[0]
    return out, rec.traces()[0]


def fixed(pos, seen):
    """Each response position's own distribution, whatever it sees: 0 -> 10 at 0.95, 1 -> 11 at 0.6,
    2 -> 12 at 0.95, 3 -> 13 at 0.6 (a decoded position keeps its token)."""
    canvas, _ = view(seen, MASK)
    if canvas.get(pos, MASK) != MASK:
        return peaked(V, canvas[pos], 0.99)
    return peaked(V, {4: 10, 5: 11, 6: 12, 7: 13}[pos], {4: 0.95, 5: 0.6, 6: 0.95, 7: 0.6}[pos])


def test_a_trace_holds_each_forwards_commits_with_the_probability_its_outputs_gave_them():
    out, trace = decode(fixed, "confidence", {"tau": "0.9"})
    got = [(d.forward, [(p, t, round(q, 3)) for p, t, q in d.commits]) for d in trace.decisions]
    # forward 1 (the block opening) gives positions 0 and 2 over tau; then one token per forward
    assert got == [(1, [(0, 10, 0.95), (2, 12, 0.95)]), (2, [(1, 11, 0.6)]), (3, [(3, 13, 0.6)])]
    assert out.nfe == 3 and Reference.from_trace(trace.decisions).tokens == tuple(out.tokens)
    assert Trace.loads(trace.dumps()) == trace  # the stored form reads back


def editing(pos, seen):
    """As `fixed`, but once response position 1 holds 11, position 0 prefers 14 (p 0.9): an edit."""
    canvas, _ = view(seen, MASK)
    if pos == 4 and canvas.get(4, MASK) != MASK and canvas.get(5) == 11:
        return peaked(V, 14, 0.9)
    return fixed(pos, seen)


def test_edits_are_recorded_with_the_forward_and_probability_they_were_decided_from():
    out, trace = decode(editing, "confidence", {"tau": "0.9", "edit_tau": "0.5", "max_post_steps": "2"})
    edits = [(d.forward, d.edits) for d in trace.decisions if d.edits]
    assert len(edits) == 1
    forward, ((pos, old, new, q),) = edits[0]
    assert (pos, old, new) == (0, 10, 14) and q == pytest.approx(0.9, abs=1e-6)
    assert forward == 3  # the first forward that saw position 1 decoded
    assert out.tokens[0] == 14 and Reference.from_trace(trace.decisions).tokens == tuple(out.tokens)
    assert max(d.forward for d in trace.decisions) == out.nfe


@pytest.mark.parametrize("decoder,settings", [("wino", {"tau1": "0.3", "tau2": "0.95"}), ("rps", {"tau_pivot": "0.3"}),
                                              ("confidence", {"tau": "0.5", "edit_tau": "0.3", "max_post_steps": "3"})])
def test_every_decision_replays_to_the_output_remasks_included(decoder, settings):
    engine, _ = scripted_engine("full", hashed_script(V, 2.0))
    rec = TraceRecorder(3)
    prompts = ([5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19])
    outs = engine.generate(prompts, build(decoder, settings), GenerationConfig(16, 8), trace=rec)
    for out, trace in zip(outs, rec.traces()):
        assert Reference.from_trace(trace.decisions).tokens == tuple(out.tokens)
        assert [d.forward for d in trace.decisions] == sorted(d.forward for d in trace.decisions)
        assert max(d.forward for d in trace.decisions) <= out.nfe
        assert all(0.0 <= q <= 1.0 for d in trace.decisions for _, _, q in d.commits)
        if decoder == "wino":
            assert sum(len(d.remasks) for d in trace.decisions) > 0  # remasks happened and were recorded


@pytest.mark.parametrize("family,cache", [("full", "none"), ("full", "dual"), ("shifted", "prefix"),
                                          ("block_causal", "prefix")])
def test_a_trace_replays_to_the_reference_the_oracle_follows(family, cache):
    """The oracle's reference run (read off the engine's canvas) and a traced decode of the decoder it
    follows, replayed, are one `Reference`: the failure tables and the oracle measure against the same thing."""
    engine, _ = scripted_engine(family, hashed_script(V, 2.0))
    prompts = ([5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16, 17, 18, 19])
    config = GenerationConfig(16, 8, cache=cache)
    for followed in ("default", "confidence"):
        refs = follow(engine, prompts, build("oracle", {"follow": followed}), config, None)
        rec = TraceRecorder(len(prompts))
        outs = engine.generate(prompts, build(followed, {}), config, trace=rec)
        assert [Reference.from_trace(t.decisions) for t in rec.traces()] == refs
        assert [r.nfe for r in refs] == [o.nfe for o in outs]
        assert all(len(r.tokens) >= 16 for r in refs)  # block-aligned families decode their last block in full


# ---------------------------------------------------------------------------- parallel failures
X, Y, B, Z = 10, 12, 11, 13


def names(dup: bool):
    """Two names at response positions 1 and 2 that depend on each other: with both masked, position 1
    wants X (0.55) and position 2 wants Y (0.6, spread: a high entropy); once 2 holds Y, 1 wants B; once
    1 holds X, 2 wants Z. `default` commits 2 first (Y), then 1 (B). With `dup`, Y is X."""
    y = X if dup else Y

    def script(pos, seen):
        canvas, _ = view(seen, MASK)
        if canvas.get(pos, MASK) != MASK:
            return peaked(V, canvas[pos], 0.99)
        if pos == 4 or pos == 7:
            return peaked(V, 20 if pos == 4 else 21, 0.99)
        if pos == 5:
            return peaked(V, B, 0.99) if canvas.get(6) == y else peaked(V, X, 0.55, runner_up=30)
        return peaked(V, Z, 0.99) if canvas.get(5) == X else spread(V, y, 0.6)

    return script, [20, B, y, 21]  # the script and the answer it rewards: default's


def classify(dup, decoder, settings, target=None):
    script, answer = names(dup)
    target = target or answer
    ref_out, ref = decode(script, "default")
    out, trace = decode(script, decoder, settings)
    row = ("s", list(out.tokens) == target, trace.decisions, list(ref_out.tokens) == target, ref.decisions)
    return out, trace, ref, count_failures([row])


def test_a_first_wrong_commit_from_a_single_token_forward_is_not_parallel():
    out, trace, ref, n = classify(False, "topk", {"k": "1", "rank": "entropy"})  # position 1 before 2
    assert list(out.tokens) == [20, X, Z, 21]
    div = first_divergence(trace.decisions, Reference.from_trace(ref.decisions))
    assert (div.position, div.token, div.reference, div.forward_commits) == (1, X, B, ((1, X),))
    assert (n.wrong, n.parallel, n.duplicate, n.examples) == (1, 0, 0, ("s",))


def test_a_first_wrong_commit_from_a_forward_that_committed_several_is_parallel():
    out, trace, ref, n = classify(False, "topk", {"k": "2"})  # both names from one forward
    assert list(out.tokens) == [20, X, Y, 21]
    div = first_divergence(trace.decisions, Reference.from_trace(ref.decisions))
    assert div.parallel and not div.duplicate and sorted(div.forward_commits) == [(1, X), (2, Y)]
    assert (n.wrong, n.parallel, n.duplicate) == (1, 1, 0)


def test_the_same_wrong_token_at_two_positions_from_one_forward_is_a_duplicate():
    out, _, _, n = classify(True, "topk", {"k": "2"})
    assert list(out.tokens) == [20, X, X, 21]
    assert (n.wrong, n.parallel, n.duplicate) == (1, 1, 1)
    assert n.parallel_share == n.duplicate_share == 1.0


def test_a_sample_the_reference_gets_wrong_too_is_not_counted():
    _, _, _, n = classify(True, "topk", {"k": "2"}, target=[20, Z, Z, 21])  # neither decode writes this
    assert (n.wrong, n.parallel, n.duplicate, n.examples) == (0, 0, 0, ())
    assert n.parallel_share is None


def test_a_lookahead_resolve_and_the_step_reading_its_carried_rows_are_one_parallel_forward():
    """RPS on the names script: the pivot (position 1) is resolved from the packed forward, and the step
    after it commits position 2 from the distributions carried out of that same forward (its variant), with
    no forward between: one forward's outputs committed both, so the wrong X counts as a parallel failure."""
    script, answer = names(True)
    ref_out, ref = decode(script, "default")
    out, trace = decode(script, "rps", {"tau": "0.9", "tau_pivot": "0.5", "r": "0.01", "k_max": "3"})
    resolve = next(d for d in trace.decisions if d.phase == "resolve")
    after = trace.decisions[trace.decisions.index(resolve) + 1]
    assert resolve.info["chosen"] == X and [c[:2] for c in resolve.commits] == [(1, X)]
    assert resolve.variant == 0  # the first candidate's copy (X at the pivot) won
    assert (after.forward, after.variant, [c[:2] for c in after.commits]) == (resolve.forward, 0, [(2, Z)])
    assert after.commits[0][2] == pytest.approx(0.99, abs=1e-4)  # what the carried rows gave Z (the anchor: 0.6 on X)
    assert list(out.tokens) == [20, X, Z, 21] and out.nfe == resolve.forward
    n = count_failures([("s", list(out.tokens) == answer, trace.decisions, list(ref_out.tokens) == answer,
                         ref.decisions)])
    assert (n.wrong, n.parallel, n.duplicate) == (1, 1, 0)


def test_a_wrong_token_left_at_more_positions_than_the_reference_is_twice_whichever_forwards_wrote_it():
    """The new name written twice: once position 1 holds X, position 2 still wants X (0.99), as ripple-tiny-lines
    keeps the new name likely where it would otherwise go. `default` writes X at 2, then B at 1. RPS pivots on
    1 and writes X there; the step after writes X at 2 again. With `carry` on, that step reads the lookahead's
    carried rows, so one forward wrote X twice (duplicate); with it off, a fresh forward sees the first X and
    still writes the second: no duplicate, no parallel forward, but twice all the same."""

    def script(pos, seen):
        canvas, _ = view(seen, MASK)
        if canvas.get(pos, MASK) != MASK:
            return peaked(V, canvas[pos], 0.99)
        if pos == 4 or pos == 7:
            return peaked(V, 20 if pos == 4 else 21, 0.99)
        if pos == 5:
            return peaked(V, B, 0.99) if canvas.get(6) == X else peaked(V, X, 0.55, runner_up=30)
        return peaked(V, X, 0.99) if canvas.get(5) == X else spread(V, X, 0.6)

    answer = [20, B, X, 21]
    ref_out, ref = decode(script, "default")
    assert list(ref_out.tokens) == answer
    settings = {"tau": "0.9", "tau_pivot": "0.5", "r": "0.01", "k_max": "3"}
    for carry, parallel, duplicate in (("true", 1, 1), ("false", 0, 0)):
        out, trace = decode(script, "rps", {**settings, "carry": carry})
        assert list(out.tokens) == [20, X, X, 21], carry
        div = first_divergence(trace.decisions, Reference.from_trace(ref.decisions))
        assert (div.position, div.token, div.written, div.in_reference) == (1, X, 2, 1)
        n = count_failures([("s", False, trace.decisions, True, ref.decisions)])
        assert (n.wrong, n.parallel, n.duplicate, n.twice) == (1, parallel, duplicate, 1), carry
        assert n.twice_share == 1.0
    # a wrong token the decode leaves once is not twice, though the reference never has it
    out, trace = decode(names(False)[0], "topk", {"k": "2"})
    _, ref = decode(names(False)[0], "default")
    div = first_divergence(trace.decisions, Reference.from_trace(ref.decisions))
    assert (div.token, div.written, div.in_reference, div.twice) == (X, 1, 0, False)
