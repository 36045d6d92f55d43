"""The floor report from records with known NFE, floors and scores: each operation's best setting at
>= 95 % and its NFE over the floor (or the most accurate where none reaches it), the floor's TPF from the
default cell's correct answers, and the plot."""
import json
import random

import pytest

from ripple.dashboards.floors import figure, floor_report, floors
from ripple.dashboards.leaderboard import load_cells
from ripple.dashboards.plots import INTERVAL_CAPTION
from ripple.errors import RippleError
from ripple.platform.experiments.store import ResultStore
from tests.dashboards import test_report as rep
from tests.dashboards.bars import bars, has_interval_legend, wilson_bars

COPY, SHUFFLE = "lines/copy", "lines/shuffle"


def _cell(store, decoder, params, task, nfe, corrects, floors, tokens=12):
    cid = f"{decoder}-{task}-{json.dumps(params, sort_keys=True)}"
    rng = random.Random(0)
    store.append([rep.record(cid, decoder, params, task, 32, f"{task}-{i}", rng, experiment=store.experiment,
                             nfe=nfe, correct=ok, floor_nfe=fl, generated_tokens=tokens, block_length=32)
                  for i, (ok, fl) in enumerate(zip(corrects, floors))])


def test_floor_report(tmp_path):
    st = ResultStore(tmp_path, "lines")
    t, f = True, False
    copy_floor, shuffle_floor = [1] * 20, [3, 4, 5, 6] * 5  # shuffle: n forwards for n people
    _cell(st, "default", {}, COPY, 32, [t] * 20, copy_floor)
    _cell(st, "default", {}, SHUFFLE, 32, [t] * 19 + [f], shuffle_floor)
    _cell(st, "confidence", {"tau": 0.9}, COPY, 2, [t] * 20, copy_floor)  # 100 % at 2 forwards
    _cell(st, "confidence", {"tau": 0.5}, COPY, 1, [t] * 18 + [f] * 2, copy_floor)  # 90 %: does not count
    _cell(st, "confidence", {"tau": 0.9}, SHUFFLE, 6, [t] * 10 + [f] * 10, shuffle_floor)
    _cell(st, "rps", {}, SHUFFLE, 9, [t] * 18 + [f] * 2, shuffle_floor)  # 90 %: the most accurate but default
    md = floor_report(tmp_path, "lines", tmp_path / "out")
    text = md.read_text().split("## RPS against Confidence")[0]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines() if line.startswith("| ")}
    assert rows["copy"][1].startswith("confidence") and rows["copy"][3:6] == ["2.00", "1.00", "2.00 |"]
    # shuffle: default's 95 % at 32 forwards is the only setting at >= 95 %; floor 4.5 on average
    assert rows["shuffle"][1] == "default" and rows["shuffle"][4] == "4.50" and rows["shuffle"][5] == "7.11 |"
    assert (tmp_path / "out" / "floors.png").stat().st_size > 10_000
    pb = {line.split(" | ")[0].strip("| "): line for line in text.split("| decoder |")[1].splitlines()[2:] if line}
    assert set(pb) == {"default", "confidence", "rps"}
    # floors.png: per operation, each point (TPF = 12 tokens / NFE) with its Wilson interval as a bar, captioned
    cells, _ = load_cells(tmp_path)
    fig = figure(cells, floors(st.read()))
    copy, shuffle = fig.axes  # operations in name order
    assert bars(copy) == wilson_bars([(12 / 32, 20, 20), (12 / 2, 20, 20), (12 / 1, 18, 20)])
    assert bars(shuffle) == wilson_bars([(12 / 32, 19, 20), (12 / 6, 10, 20), (12 / 9, 18, 20)])
    assert has_interval_legend(fig) and INTERVAL_CAPTION in md.read_text()


def test_only_default_missing_leaves_no_floor_mark_and_empty_store_is_one_line(tmp_path):
    with pytest.raises(RippleError, match="has no records"):
        floor_report(tmp_path, "lines", tmp_path / "out")
    st = ResultStore(tmp_path, "arith-only")
    st.append([rep.record("c", "default", {}, "arith", 32, "s0", random.Random(0), experiment="arith-only")])
    with pytest.raises(RippleError, match="no task with a floor"):
        floor_report(tmp_path, "arith-only", tmp_path / "out")


def test_rps_against_confidence(tmp_path):
    """For each operation with free choices: RPS's NFE over Confidence (tau 0.9)'s only where their
    accuracies are within a point, which RPS settings no Confidence threshold or topk setting dominates
    in accuracy and TPF, and the two decoders' PB90; copy (floor 1) is not listed."""
    st = ResultStore(tmp_path, "lines")
    t, f = True, False
    rnd, shuffle_floor = [2] * 20, [3, 4, 5, 6] * 5
    _cell(st, "default", {}, "lines/insert_random", 32, [t] * 20, rnd)
    _cell(st, "confidence", {"tau": 0.9}, "lines/insert_random", 4, [t] * 20, rnd)
    _cell(st, "rps", {}, "lines/insert_random", 3, [t] * 20, rnd)  # same accuracy, 3 / 4 of the forwards
    _cell(st, "default", {}, SHUFFLE, 32, [t] * 20, shuffle_floor)
    _cell(st, "confidence", {"tau": 0.9}, SHUFFLE, 6, [t] * 10 + [f] * 10, shuffle_floor)
    _cell(st, "confidence", {"factor": 1.9}, SHUFFLE, 2, [t] * 20, shuffle_floor)  # the factor rule is no rival
    _cell(st, "rps", {}, SHUFFLE, 9, [t] * 18 + [f] * 2, shuffle_floor)
    _cell(st, "topk", {"k": 4}, SHUFFLE, 8, [t] * 18 + [f] * 2, shuffle_floor)  # as accurate, fewer forwards
    _cell(st, "rps", {"tau": 0.7}, SHUFFLE, 3, [t] * 14 + [f] * 6, shuffle_floor)  # the most tokens per forward
    _cell(st, "default", {}, COPY, 32, [t] * 20, [1] * 20)
    _cell(st, "rps", {}, COPY, 2, [t] * 20, [1] * 20)
    _cell(st, "confidence", {"tau": 0.9}, COPY, 2, [t] * 20, [1] * 20)
    text = floor_report(tmp_path, "lines", tmp_path / "out").read_text().split("## RPS against Confidence")[1]
    rows = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ") for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| operation")}
    assert set(rows) == {"insert_random", "shuffle"}
    assert rows["insert_random"][1:] == ["2.00", "100.0 / 3.00", "100.0 / 4.00", "0.75", "1.50", "rps"]
    assert rows["shuffle"][1:] == ["4.50", "90.0 / 9.00", "50.0 / 6.00", "-", "2.00", "rps(tau=0.7)"]
    assert "PB90 over the operations: RPS" in text and "Confidence" in text


def test_the_oracles_nfe_stands_beside_each_floor_and_is_never_the_best_setting(tmp_path):
    st = ResultStore(tmp_path, "lines")
    t = True
    _cell(st, "default", {}, COPY, 32, [t] * 4, [1] * 4)
    _cell(st, "default", {}, SHUFFLE, 32, [t] * 4, [3, 4, 5, 6])
    _cell(st, "oracle", {"follow": "default"}, SHUFFLE, 3, [t] * 4, [3, 4, 5, 6])  # 100 % in 3: below the floor
    _cell(st, "oracle", {"follow": "confidence"}, SHUFFLE, 2, [t] * 4, [3, 4, 5, 6])  # not the one shown
    text = floor_report(tmp_path, "lines", tmp_path / "out").read_text().split("## RPS against Confidence")[0]
    lines = text.splitlines()
    assert "| floor | oracle NFE | NFE / floor |" in lines[4]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in lines if line.startswith("| ")}
    assert rows["shuffle"][1] == "default" and rows["shuffle"][4:7] == ["4.50", "3.00", "7.11 |"]
    assert rows["copy"][4:7] == ["1.00", "-", "32.00 |"]
