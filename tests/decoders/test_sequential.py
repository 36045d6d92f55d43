"""`sequential` commits the leftmost masked positions of the block, as many as its schedule gives,
whatever the confidences say; the mask id is never committed."""
import pytest

from ripple.cli import main
from ripple.decoders import build
from ripple.platform.runtime.engine import Engine, GenerationConfig
from ripple.testing import ScriptedModel, peaked

V, MASK = 40, 39


def _script(pos, seen):
    """Confidence rises to the right (the rightmost position is the surest); position 9 prefers the mask."""
    logits = peaked(V, 10 + pos % 20, 0.55 + 0.05 * (pos % 8))
    if pos == 9:
        logits[MASK] = 5.0
    return logits


def _steps(settings, shift=0, block_causal=False, prompt=(5, 6, 7, 8), gen=8, block=8, cache="none"):
    model = ScriptedModel(V, _script, shift=shift, block_causal=block_causal)
    engine = Engine(model, mask_id=MASK, eos_ids=[], pad_id=0)
    events = []
    out = engine.generate([list(prompt)], build("sequential", settings), GenerationConfig(gen, block, cache),
                          trace=events.append)[0]
    assert out.nfe == model.calls and MASK not in out.tokens
    return [[p for p, _ in e["committed"]] for e in events if e["phase"] == "step"], out, events


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_one_position_a_step_left_to_right_by_default(cache):
    steps, out, events = _steps({}, cache=cache)
    assert steps == [[i] for i in range(8)] and out.nfe == 8
    committed = {p: t for e in events for p, t in e["committed"]}
    assert committed[5] == 10 + 9 % 20  # position 9 (response 5): its top-1 other than the mask id


def test_the_schedule_gives_the_count_per_step():
    steps, out, _ = _steps({"steps": "3"})  # block 8 over 3 steps: 3, 3, 2
    assert steps == [[0, 1, 2], [3, 4, 5], [6, 7]] and out.nfe == 3
    steps, _, _ = _steps({"steps": "8"})
    assert steps == [[i] for i in range(8)]


def test_a_prompt_tail_in_the_block_is_skipped_and_the_quota_clipped():
    # block diffusion, prompt of 5 and block 4: the first block holds the prompt's last token and 3 masks
    steps, _, _ = _steps({"steps": "2"}, block_causal=True, prompt=(5, 6, 7, 8, 9), gen=4, block=4)
    assert steps[:2] == [[0, 1], [2]]  # quota 2, then 2 clipped to the 1 mask left


def test_a_shifted_family_continues_after_the_opening_commit():
    steps, _, events = _steps({"steps": "4"}, shift=1)
    assert [e["committed"][0][0] for e in events if e["phase"] == "open"] == [0]
    assert steps == [[1, 2], [3, 4], [5, 6], [7]]


def test_a_negative_steps_is_one_line_and_exit_2(golden, capsys):
    argv = ["generate", "--model", str(golden / "sdar-tiny"), "--input-ids", "5,6,7", "--decoder", "sequential",
            "--set", "steps=-1", "--gen-length", "8", "--block-length", "4"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sequential hyperparameter steps=-1 is invalid; accepted: int in [0, inf]" in err and err.count("\n") == 1
