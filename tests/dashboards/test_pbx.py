"""PBx (ParallelBench's summary) from records with known scores: the metrics module's `pb_scores` and
the leaderboard's configurations over the ParallelBench-scored tasks (page, JSON and pbx.csv)."""
import csv
import json
import random
from dataclasses import dataclass

import pytest

from ripple.dashboards.leaderboard import PBX_COLUMNS, build_leaderboard
from ripple.decoders import registry
from ripple.decoders.base import Scheduler
from ripple.decoders.params import HyperParams, hp
from ripple.platform.experiments.metrics import pb_scores
from ripple.platform.experiments.store import ResultStore
from tests.dashboards import test_report as rep  # its SampleRecord maker
from tests.dashboards.cdp import Browser

WAIT, SUDOKU = "parallelbench/waiting_line/copy", "parallelbench/puzzle/sudoku_n4_12"


def test_pb_scores_takes_the_largest_qualifying_tokens_per_step():
    configs = [(1.0, 95.0), (2.0, 85.0), (4.0, 85.0), (8.0, 62.0), (16.0, 10.0)]
    assert pb_scores(configs) == {90: 1.0, 80: 4.0, 70: 4.0, 60: 8.0}  # tied scores: the faster one
    never = [(1.0, 89.9), (2.0, 70.0), (4.0, 70.0)]
    assert pb_scores(never) == {90: None, 80: 1.0, 70: 4.0, 60: 4.0}  # never reaches 90: none
    assert pb_scores([(4.0, 80.0), (4.0, 60.0)]) == {90: None, 80: 4.0, 70: 4.0, 60: 4.0}  # a score of exactly x counts
    assert pb_scores([]) == {90: None, 80: None, 70: None, 60: None}


@dataclass(frozen=True)
class StepsParams(HyperParams):
    steps: int = hp(0, 0, None, doc="forwards over the response")
    rank: str = hp("confidence")


class StepsDecoder(Scheduler):
    """A decoder that only declares what PBx reads: `steps` counts forwards over the response."""

    name = "pbx_steps_test"
    Params = StepsParams
    response_steps_params = ("steps",)

    def step(self, state):  # never decodes here
        raise NotImplementedError


@pytest.fixture
def steps_decoder(monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, StepsDecoder.name, StepsDecoder)
    return StepsDecoder.name


def _cells(store, decoder, task, gen, settings, rng, weights="w1", block=None):
    """One cell per (params, correct of 4 samples, nfe): samples carry exactly that score and NFE."""
    recs = []
    for p, corrects, nfe in settings:
        cid = f"{decoder}-{task}-{json.dumps(p, sort_keys=True)}-{weights}-{block}"
        recs += [rep.record(cid, decoder, p, task, gen, f"s{i}", rng, experiment=store.experiment, weights=weights,
                            nfe=nfe, correct=ok, block_length=block or gen, score=json.dumps({"score": float(ok)}),
                            score_strict=0.0) for i, ok in enumerate(corrects)]
    store.append(recs)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """The leaderboard of a store with known scores: the steps decoder and confidence on two ParallelBench
    tasks (weights w1), confidence on arith (not ParallelBench-scored) and on one task with weights w2."""
    tmp_path = tmp_path_factory.mktemp("pbx")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry._REGISTRY, StepsDecoder.name, StepsDecoder)
        _pb_store(ResultStore(tmp_path, "pb"), StepsDecoder.name)
        return tmp_path, build_leaderboard(tmp_path, tmp_path / "lb")


def _pb_store(st, steps_decoder):
    rng = random.Random(3)
    t, f = True, False
    # steps at k = 1, 4, 8 tokens per step: 32/32, 32/8, 32/4 on the waiting line; 64/64, 64/16, 64/8 on sudoku
    k = lambda steps: {"steps": steps, "rank": "margin"}  # noqa: E731
    _cells(st, steps_decoder, WAIT, 32, [(k(32), [t, t, t, t], 32), (k(8), [t, t, t, f], 8), (k(4), [t, t, f, f], 4)], rng)
    _cells(st, steps_decoder, SUDOKU, 64, [(k(64), [t, t, t, f], 64), (k(16), [t, t, t, f], 16), (k(8), [t, f, f, f], 8)],
           rng)
    # confidence thresholds: tokens per step measured (gen_length / NFE); never reaches 90
    c = lambda tau: rep.params("confidence", tau=tau)  # noqa: E731
    _cells(st, "confidence", WAIT, 32, [(c(0.9), [t, t, t, f], 16), (c(0.5), [t, t, f, f], 4)], rng)
    _cells(st, "confidence", SUDOKU, 64, [(c(0.9), [t, t, t, f], 16), (c(0.5), [t, f, f, f], 8)], rng)
    # a task that is not ParallelBench-scored never counts, and other weights are their own row
    _cells(st, "confidence", "arith", 48, [(c(0.5), [t, t, t, t], 2)], rng)
    _cells(st, "confidence", WAIT, 32, [(c(0.5), [f, f, f, f], 1)], rng, weights="w2")


def test_leaderboard_pbx_over_the_parallelbench_tasks(board):
    tmp_path, board = board
    steps_decoder = StepsDecoder.name
    rows = {(r.weights, r.decoder): r for r in board.pbx if len(r.tasks) > 1 or r.weights == "w2"}
    assert set(rows) == {("w1", steps_decoder), ("w1", "confidence"), ("w2", "confidence")}
    # per task too (PBx per operation) where a decoder has several tasks, after its all-task row
    alone = {(r.decoder, r.tasks): r for r in board.pbx if r.weights == "w1" and len(r.tasks) == 1}
    assert set(alone) == {(d, (t,)) for d in (steps_decoder, "confidence") for t in (SUDOKU, WAIT)}
    assert alone[steps_decoder, (WAIT,)].pbx == {90: 1.0, 80: 1.0, 70: 4.0, 60: 4.0}  # 100 % at k 1, 75 % at 4
    assert alone["confidence", (SUDOKU,)].pbx == {90: None, 80: None, 70: 4.0, 60: 4.0}
    assert [r.tasks for r in board.pbx if r.decoder == "confidence" and r.weights == "w1"] == \
        [(SUDOKU, WAIT), (SUDOKU,), (WAIT,)]

    topk = rows[("w1", steps_decoder)]
    assert topk.tasks == (SUDOKU, WAIT)
    # one configuration per k across both lengths: mean score over the two tasks
    assert [(p.tokens_per_step, p.score, p.tasks) for p in topk.configs] == [(1.0, 87.5, 2), (4.0, 75.0, 2),
                                                                             (8.0, 37.5, 2)]
    assert [p.setting for p in topk.configs] == ["rank=margin, tokens/step=1", "rank=margin, tokens/step=4",
                                                 "rank=margin, tokens/step=8"]
    assert topk.pbx == {90: None, 80: 1.0, 70: 4.0, 60: 4.0}

    conf = rows[("w1", "confidence")]
    assert conf.tasks == (SUDOKU, WAIT)  # arith left out
    # tau 0.9 (the default): score (75 + 75) / 2 at (32/16 + 64/16) / 2 = 3 tokens per step; tau 0.5: 37.5 at (8 + 8) / 2 = 8
    assert [(p.setting, p.tokens_per_step, p.score) for p in conf.configs] == [("defaults", 3.0, 75.0),
                                                                               ("tau=0.5", 8.0, 37.5)]
    assert conf.pbx == {90: None, 80: None, 70: 3.0, 60: 3.0}
    assert rows[("w2", "confidence")].pbx == {90: None, 80: None, 70: None, 60: None}

    with (tmp_path / "lb" / "pbx.csv").open() as fh:
        table = list(csv.reader(fh))
    assert tuple(table[0]) == PBX_COLUMNS
    assert [steps_decoder, "all", "2", "3", "", "1.0", "4.0", "4.0"] in [r[2:] for r in table[1:]]
    assert [steps_decoder, WAIT, "1", "3", "1.0", "1.0", "4.0", "4.0"] in [r[2:] for r in table[1:]]
    data = json.loads((tmp_path / "lb" / "leaderboard.json").read_text())
    (entry,) = [e for e in data["pbx"] if e["decoder"] == "confidence" and e["weights"] == "w1" and len(e["tasks"]) > 1]
    assert (entry["pb70"], entry["pb80"], entry["tasks"], entry["task"]) == (3.0, None, [SUDOKU, WAIT], "all")
    assert entry["configurations"][0] == {"setting": "defaults", "tasks": 2, "score": 75.0, "tokens_per_step": 3.0}
    strict = {row["decoder"]: row["strict"] for s in data["sections"] if s["task"] == WAIT for row in s["rows"]}
    assert strict[steps_decoder] == 0.0  # the strict column: every sample's score_strict was 0
    page = (tmp_path / "lb" / "leaderboard.html").read_text()
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    for text in (page, md):
        assert "PBx · ripple-tiny · weights w1" in text and "PB80" in text and "strict %" in text
        assert "tau=0.5 -&gt; score 37.5 at 8.00 tokens/step" in text or "tau=0.5 -> score 37.5 at 8.00" in text
    # every PBx row and note names its task, or "all" for the decoder's row over its tasks
    w1 = md.split("## PBx · ripple-tiny · weights w1")[1].split("\n## ")[0].splitlines()
    assert [tuple(line.strip("| ").split(" | ")[:2]) for line in w1 if line.startswith("| ")][1:] == SCOPES["w1"]
    assert [line[2:].split(": ")[0] for line in w1 if line.startswith("- ")] == [_note_scope(*k) for k in SCOPES["w1"]]


SCOPES = {"w1": [("confidence", "all"), ("confidence", SUDOKU), ("confidence", WAIT),  # registry order, "all" first
                 (StepsDecoder.name, "all"), (StepsDecoder.name, SUDOKU), (StepsDecoder.name, WAIT)],
          "w2": [("confidence", WAIT)]}  # one task: its row is that task's


def _note_scope(decoder: str, task: str) -> str:
    return f"{decoder}, all 2 tasks" if task == "all" else f"{decoder}, task {task}"


@pytest.mark.slow
@pytest.mark.usefixtures("chromium")
def test_every_pbx_row_and_note_names_its_task_in_headless_chromium(board, tmp_path):
    root, _ = board
    browser = Browser(tmp_path / "chromium")
    try:
        browser.open((root / "lb" / "leaderboard.html").as_uri())
        seen = browser.js("""Array.from(document.querySelectorAll('h2')).filter(h => h.textContent.startsWith('PBx'))
          .map(h => { const out = {title: h.textContent, head: [], rows: [], notes: []};
            for (let e = h.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling) {
              if (e.tagName === 'TABLE') {
                out.head = Array.from(e.tHead.rows[0].cells).map(c => c.textContent);
                out.rows = Array.from(e.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent)); }
              else if (e.classList.contains('note')) out.notes.push(e.textContent); }
            return out; })""")
        assert browser.errors == []
    finally:
        browser.close()
    assert [p["title"] for p in seen] == ["PBx · ripple-tiny · weights w1", "PBx · ripple-tiny · weights w2"]
    for page, weights in zip(seen, ("w1", "w2")):
        assert page["head"][:3] == ["decoder", "task", "tasks"]
        assert [tuple(r[:2]) for r in page["rows"]] == SCOPES[weights]
        assert [n.split(": ")[0] for n in page["notes"]] == [_note_scope(*k) for k in SCOPES[weights]]


def test_a_block_shorter_than_the_response_is_another_configuration(tmp_path, steps_decoder):
    rng = random.Random(4)
    st = ResultStore(tmp_path, "pb")
    p = {"steps": 8, "rank": "confidence"}
    _cells(st, steps_decoder, WAIT, 32, [(p, [True] * 4, 8)], rng)
    _cells(st, steps_decoder, WAIT, 32, [(p, [False] * 4, 8)], rng, block=8)
    (row,) = build_leaderboard(tmp_path, tmp_path / "lb").pbx
    assert [(c.setting, c.score) for c in row.configs] == [("tokens/step=4", 100.0),
                                                           ("tokens/step=4 [block=8]", 0.0)]
    assert row.pbx[90] == 4.0
