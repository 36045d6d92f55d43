"""A decoder written in the caller's own code (a Scheduler subclass defined inside the test, never
registered or packaged, as in a notebook cell) runs through ripple.generate, ripple.evaluate,
ripple.testing's invariant checks and a two-cell grid on Ray workers, which receive the class
pickled by value. Its records call it `local:NAME`, and its cell ids never collide with a registered
decoder's, even under a registered decoder's name. docs/python.md, the notebook walkthrough, runs
here too: its Python blocks in order, in one namespace (one Ray connection serves both grids)."""
import json
import re
from pathlib import Path

import pytest

import ripple
from ripple.testing import check_decoder, check_decoder_on_model

pytestmark = pytest.mark.slow
WALKTHROUGH = Path(__file__).resolve().parents[3] / "docs" / "python.md"


def test_a_decoder_defined_here_runs_in_generate_evaluate_the_checks_and_a_grid(tmp_path, ray_joined):
    from ripple.decoders.base import greedy
    from ripple.decoders.registry import local_source

    def digest(cls):
        return local_source(cls).rpartition("sha256:")[2]

    class Leftmost(ripple.Scheduler):
        """Commit the leftmost masked position of the block, with its top-1 token (never the mask id)."""

        def step(self, state):
            tokens, _ = greedy(state)  # [L]
            at = state.masked.nonzero()[0]  # [1]
            return ripple.Plan(ripple.Commit(at, tokens[at]))

    lm = ripple.load("ripple-tiny")
    out = ripple.generate(lm, "12+7=", Leftmost, gen_length=32, block_length=16)
    assert out.decoder == "local:Leftmost" and out.params == {} and len(out.tokens) == 32
    assert out.nfe == 32  # one commit per step: the opening forward plus one per later step, per block
    assert ripple.generate(lm, "12+7=", Leftmost(), gen_length=32, block_length=16).tokens == out.tokens

    mine = ripple.evaluate(lm, "arith", Leftmost, limit=4, gen_length=32, block_length=16)
    theirs = ripple.evaluate(lm, "arith", "confidence", limit=4, gen_length=32, block_length=16)
    assert (mine.decoder, mine.n, theirs.decoder) == ("local:Leftmost", 4, "confidence")
    assert 0.0 <= mine.mcnemar(theirs) <= 1.0 and mine.mean_nfe == 32.0

    check_decoder(Leftmost)
    check_decoder_on_model(Leftmost, lm, caches=("none", "prefix"))

    spec = {"experiment": "local", "models": ["ripple-tiny"], "tasks": {"arith": {"limit": 3}},
            "decoders": ["confidence", Leftmost], "gen_lengths": [32], "block_lengths": [16], "dtype": "float32"}
    run = ripple.grid(spec, store=tmp_path / "store", track=False, workers=1)
    records = run.store.read()
    assert records.height == 6 and records["error"].null_count() == 6
    assert set(records["decoder"]) == {"confidence", "local:Leftmost"}
    local = records.filter(records["decoder"] == "local:Leftmost")
    assert local["nfe"].to_list() == [32] * 3 and local["completion"].to_list() == mine.samples["completion"][:3].to_list()
    assert json.loads(local["plugins"][0])["decoder"].endswith(f".<locals>.Leftmost sha256:{digest(Leftmost)}")
    assert records["cell_id"].n_unique() == 2
    assert run.table()["decoder"].to_list() == ["confidence", "local:Leftmost"]


def test_a_local_decoder_under_a_registered_name_gets_cells_of_its_own():
    from ripple.decoders.confidence import Confidence

    class Mine(Confidence):  # a registered decoder's name, subclassed in place
        name = "confidence"

    base = {"models": ["ripple-tiny"], "tasks": ["arith"], "gen_lengths": [32], "block_lengths": [16]}
    alone = ripple.grid_spec({**base, "decoders": ["confidence"]}).cells
    both = ripple.grid_spec({**base, "decoders": ["confidence", Mine, Mine(Mine.Params(tau=0.5))]}).cells
    assert [c.decoder for c in both] == ["confidence", "local:confidence", "local:confidence"]
    assert both[0].cell_id == alone[0].cell_id  # a registered decoder's cells keep their ids
    assert len({c.cell_id for c in both}) == 3 and dict(both[2].params)["tau"] == 0.5
    with pytest.raises(ripple.RippleError, match="two local decoder classes share a name"):
        class Other(ripple.Scheduler):
            name = "confidence"

            def step(self, state):
                raise AssertionError

        ripple.grid_spec({**base, "decoders": [Mine, Other]})


def test_the_python_walkthrough_runs(tmp_path, monkeypatch, ray_joined):
    """docs/python.md as a notebook runs it; the grid's cells hold what ripple.evaluate measured."""
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", WALKTHROUGH.read_text(), re.S)
    assert len(blocks) == 5
    notebook: dict = {"__name__": "walkthrough"}
    for block in blocks:
        exec(compile(block, str(WALKTHROUGH), "exec"), notebook)
    out, mine, base, run = (notebook[k] for k in ("out", "mine", "base", "run"))
    assert (tmp_path / "commits.png").stat().st_size > 0 and out.trace
    assert mine.decoder == "local:Margin" and mine.n == base.n == 12
    table = {r["decoder"]: r for r in run.table().to_dicts()}
    assert set(table) == {"confidence", "local:Margin"}
    for cell, result in ((table["local:Margin"], mine), (table["confidence"], base)):
        assert (cell["accuracy"], cell["mean_nfe"]) == (result.accuracy, result.mean_nfe)
