"""`oracle` (issue 51): per forward it commits every masked position whose top-1 is the reference token,
else the reference token where it is most probable; the engine runs the followed decoder first and
counts its forwards apart (`reference_nfe`)."""
import pytest

from ripple.cli import main
from ripple.decoders import build
from ripple.decoders.oracle import OracleParams
from ripple.errors import RippleError
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.platform.runtime.reference import Reference
from ripple.testing import (SCRIPTED_EOS, SCRIPTED_MASK, SCRIPTED_PROMPTS, SCRIPTED_VOCAB, ScriptedModel,
                            hashed_script, peaked, scripted_engine)

V, MASK = SCRIPTED_VOCAB, SCRIPTED_MASK
TOP = {0: 0.9, 1: 0.6, 2: 0.8, 3: 0.6}  # top-1 probability at response position j (prompt of 4: canvas 4 + j)


def _script(pos, seen):
    """Position 4 + j: top-1 token 10 + j with probability TOP[j], runner-up 30 + j with the rest; what the
    query sees changes nothing, so every decoder writes 10, 11, 12, 13."""
    j = (pos - 4) % 4
    return peaked(V, 10 + j, TOP[j], runner_up=30 + j)


def _engine():
    model = ScriptedModel(V, _script)
    return Engine(model, mask_id=MASK, eos_ids=[SCRIPTED_EOS], pad_id=0), model


def test_positions_whose_top1_is_the_reference_commit_together_and_the_reference_run_counts_apart():
    engine, model = _engine()
    events = []
    out = engine.generate([[5, 6, 7, 8]], build("oracle"), GenerationConfig(4, 4), trace=events.append)[0]
    # default wrote 10..13 in 4 forwards; every top-1 of the oracle's first forward is its token there
    assert out.tokens == (10, 11, 12, 13)
    assert [sorted(p for p, _ in e["committed"]) for e in events] == [[0, 1, 2, 3]]
    assert (out.nfe, out.reference_nfe, model.calls) == (1, 4, 5)


def test_where_no_top1_is_the_reference_the_reference_token_goes_where_it_is_most_probable():
    engine, model = _engine()
    events = []
    # a reference of the runner-ups, probabilities 1 - TOP: 0.1, 0.4, 0.2, 0.4; no forward changes them
    run = engine.start([[5, 6, 7, 8]], build("oracle"), GenerationConfig(4, 4), events.append, None, None,
                       [Reference((30, 31, 32, 33), nfe=0)])
    out = run.execute()[0]
    assert out.tokens == (30, 31, 32, 33)
    # one a forward: 1 (0.4, the leftmost of the tie with 3), 3, 2 (0.2), 0 (0.1)
    assert [[p for p, _ in e["committed"]] for e in events] == [[1], [3], [2], [0]]
    assert out.nfe == model.calls == 4


@pytest.mark.parametrize("family", ["full", "block_causal"])
def test_a_batch_of_prompts_of_different_lengths_gives_each_sample_its_own_reference(family):
    cfg = GenerationConfig(8, 4, "prefix")
    prompts = [list(p) for p in SCRIPTED_PROMPTS]  # 5, 3 and 7 tokens; hashed logits depend on what a query sees
    batch = scripted_engine(family, hashed_script(V))[0].generate(prompts, build("oracle"), cfg)
    alone = [scripted_engine(family, hashed_script(V))[0].generate([p], build("default"), cfg)[0] for p in prompts]
    assert len({a.tokens for a in alone}) == 3  # three different references
    assert [(b.tokens, b.reference_nfe) for b in batch] == [(a.tokens, a.nfe) for a in alone]
    assert all(b.nfe <= a.nfe for a, b in zip(alone, batch))


def test_the_record_carries_nfe_and_reference_nfe_apart(golden):
    import ripple

    out = ripple.generate(str(golden / "llada-tiny"), [5, 9, 33], "oracle", gen_length=8, block_length=4)
    ref = ripple.generate(str(golden / "llada-tiny"), [5, 9, 33], "default", gen_length=8, block_length=4)
    record = out.to_dict()
    assert record["tokens"] == list(ref.tokens) and record["reference_nfe"] == ref.nfe == 8
    assert 1 <= record["nfe"] <= 8 and ref.to_dict()["reference_nfe"] is None


def test_ripple_generate_prints_the_followed_decoders_forwards_apart(golden, capsys):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", "5,9,33", "--decoder", "oracle",
            "--gen-length", "8", "--block-length", "4"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "(the followed decoder's: 8, not counted)" in err


@pytest.mark.parametrize("follow,why", [
    ("nope", "is not a registered decoder"),
    ("oracle", "cannot be followed: it follows a reference itself"),
    ("renoise", "cannot be followed: it decodes uniform-noise families")])
def test_a_follow_that_cannot_be_followed_is_one_line_and_exit_2(golden, capsys, follow, why):
    argv = ["generate", "--model", str(golden / "llada-tiny"), "--input-ids", "5,6,7", "--decoder", "oracle",
            "--set", f"follow={follow}", "--gen-length", "8", "--block-length", "4"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"oracle hyperparameter follow={follow!r} {why}" in err and "accepted: default, confidence," in err
    assert err.count("\n") == 1 and "oracle" not in err.split("accepted:")[1].split(", ")


def test_an_editing_decoder_is_not_followed(monkeypatch):
    from ripple.decoders import registry
    from ripple.decoders.confidence import Confidence

    class Editor(Confidence):  # LLaDA2.1's token editing, on at its defaults
        name = "editor"

        @property
        def may_edit(self):
            return True

    monkeypatch.setitem(registry._REGISTRY, "editor", Editor)
    with pytest.raises(RippleError, match=r"^oracle hyperparameter follow='editor' cannot be followed: it rewrites "
                                          r"tokens it committed \(token editing\), so its commits are no reference; "
                                          r"accepted: default, confidence, "):
        OracleParams(follow="editor")


def test_grid_dry_run_lists_the_oracle(capsys):
    assert main(["grid", "lines", "--dry-run"]) == 0
    decoders = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("decoders:"))
    assert "oracle" in decoders.split(": ", 1)[1].split(", ")


def test_the_oracle_on_a_uniform_noise_family_is_one_line_and_exit_2(golden, capsys):
    argv = ["generate", "--model", str(golden / "diffusion-gemma-tiny"), "--input-ids", "5,6,7", "--decoder",
            "oracle", "--gen-length", "8", "--block-length", "8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "decoder 'oracle' decodes mask-noise families" in err and "(renoise)" in err and err.count("\n") == 1


@pytest.mark.parametrize("family", ["full", "shifted", "block_causal"])
def test_following_sequential_writes_sequentials_tokens_in_at_most_its_forwards(family):
    """`follow=sequential` (the issue names it beside default and confidence): the oracle writes what
    sequential writes, which is not default's here, and needs no more forwards than its one per forward."""
    engine, _ = scripted_engine(family, hashed_script(V, 2.0))
    prompts, cfg = [list(p) for p in SCRIPTED_PROMPTS], GenerationConfig(16, 8, cache="prefix")
    seq = engine.generate(prompts, build("sequential"), cfg)
    outs = engine.generate(prompts, build("oracle", {"follow": "sequential"}), cfg)
    assert [o.tokens for o in outs] == [s.tokens for s in seq]
    assert [o.tokens for o in seq] != [d.tokens for d in engine.generate(prompts, build("default"), cfg)]
    assert [o.reference_nfe for o in outs] == [s.nfe for s in seq]
    assert all(o.nfe <= s.nfe for o, s in zip(outs, seq)) and sum(o.nfe for o in outs) < sum(s.nfe for s in seq)
