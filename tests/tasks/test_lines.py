"""`lines/<op>`: the generator's splits and seeds, ParallelBench's conventions, each operation's floor,
and the scorer shared with `parallelbench/waiting_line/<op>`."""
import json

import pytest

from ripple.cli import main
from ripple.tasks import Example, get_task
from ripple.tasks import lines, parallelbench_scoring
from ripple.tasks.lines import EMPTY, MAX_LENGTH, MIN_LENGTH, NAMES, OPS, list_text, places_text

OP_NAMES = [op.name for op in OPS]


def test_ten_operations_and_enough_names():
    assert OP_NAMES == ["copy", "insert_index", "insert_random", "remove_index", "remove_random", "replace_index",
                        "replace_random", "reverse", "shuffle", "sort"]
    assert len(set(NAMES)) == len(NAMES) >= 60 and EMPTY not in NAMES
    assert places_text(["Ann", "Bo", "Cy"]) == "Line of 3: 0Ann 1Bo 2Cy 3No 4No 5No"


@pytest.mark.parametrize("op", OP_NAMES)
def test_splits_are_disjoint_and_seeded(op):
    task = get_task(f"lines/{op}")
    test = {ex.prompt for ex in task.examples("test", 200)}
    dev = {ex.prompt for ex in task.examples("dev", 200)}
    train = {task.example("train", i).prompt for i in range(3000)}
    assert len(test) == 200 and not test & dev and not test & train and not dev & train
    again = get_task(f"lines/{op}").examples("test", 20)
    other = get_task(f"lines/{op}", seed=1).examples("test", 20)
    assert [e.prompt for e in again] == [e.prompt for e in task.examples("test", 20)]
    assert [e.prompt for e in other] != [e.prompt for e in again]


@pytest.mark.parametrize("op", OP_NAMES)
def test_examples_follow_parallelbench_conventions(op):
    """3 to 6 distinct names; the new person is not in the line; 0-based indices (insert at 0..n);
    the reference is written as ParallelBench's lists and scores 1 under both rules."""
    task = get_task(f"lines/{op}")
    lengths, indices = set(), set()
    for ex in task.examples("test", 300):
        line = _shown_line(ex.prompt.split("\n")[1])
        target = json.loads(ex.reference)
        assert MIN_LENGTH <= len(line) <= MAX_LENGTH and len(set(line)) == len(line) and set(line) <= set(NAMES)
        assert ex.reference == list_text(target)
        lengths.add(len(line))
        instruction = ex.prompt.split("\n")[0]
        if "index" in instruction:
            i = int(instruction.split("index ")[1].split()[0].rstrip("."))
            indices.add((i, len(line)))
            if op == "insert_index":
                word = instruction.split('"')[1]
                assert word not in line and target == line[:i] + [word] + line[i:]
            elif op == "remove_index":
                assert target == line[:i] + line[i + 1:]
            else:
                word = instruction.split('"')[1]
                assert word not in line and target == line[:i] + [word] + line[i + 1:]
        assert task.score(ex, ex.reference).details == {"score": 1.0, "score_strict": 1.0}
    assert lengths == set(range(MIN_LENGTH, MAX_LENGTH + 1))
    if op == "insert_index":
        assert any(i == n for i, n in indices) and any(i == 0 for i, _ in indices)  # append and front both drawn
    if op in ("remove_index", "replace_index"):
        assert all(i < n for i, n in indices)


def _shown_line(text: str) -> list[str]:
    """The people of a prompt's `Line of n: 0Ann 1Bo ...`, checked against its count and numbers."""
    head, places = text.split(": ")
    n = int(head.removeprefix("Line of "))
    shown = places.split(" ")
    assert len(shown) == MAX_LENGTH and [p[0] for p in shown] == [str(i) for i in range(MAX_LENGTH)]
    assert [p[1:] for p in shown[n:]] == [EMPTY] * (MAX_LENGTH - n)
    return [p[1:] for p in shown[:n]]


def _hand(op: str, line: list[str], target: list[str], word: str | None = None) -> Example:
    """An example built by hand in the generator's format."""
    spec = next(o for o in OPS if o.name == op)
    if op == "shuffle" or spec.random_place:
        label = {"input": line, "example": list_text(target)} | ({"word": word} if word else {})
    else:
        label = list_text(target)
    return Example(id="hand", prompt=f"{places_text(line)}\n", reference=list_text(target),
                   answer=json.dumps(label))


@pytest.mark.parametrize("op, line, target, word, floor", [
    ("copy", ["Ann", "Bo", "Cy"], ["Ann", "Bo", "Cy"], None, 1),
    ("reverse", ["Ann", "Bo", "Cy", "Dan"], ["Dan", "Cy", "Bo", "Ann"], None, 1),
    ("sort", ["Zoe", "Bo", "Cy"], ["Bo", "Cy", "Zoe"], None, 1),
    ("insert_index", ["Ann", "Bo", "Cy"], ["Ann", "Eli", "Bo", "Cy"], "Eli", 1),
    ("remove_index", ["Ann", "Bo", "Cy", "Dan", "Eli", "Fay"], ["Ann", "Cy", "Dan", "Eli", "Fay"], None, 1),
    ("replace_index", ["Ann", "Bo", "Cy"], ["Ann", "Bo", "Eli"], "Eli", 1),
    ("insert_random", ["Ann", "Bo", "Cy", "Dan", "Fay", "Gus"], ["Eli", "Ann", "Bo", "Cy", "Dan", "Fay", "Gus"], "Eli", 2),
    ("remove_random", ["Ann", "Bo", "Cy"], ["Ann", "Cy"], None, 2),
    ("replace_random", ["Ann", "Bo", "Cy", "Dan"], ["Ann", "Bo", "Eli", "Dan"], "Eli", 2),
    ("shuffle", ["Ann", "Bo", "Cy"], ["Cy", "Ann", "Bo"], None, 3),
    ("shuffle", ["Ann", "Bo", "Cy", "Dan", "Eli", "Fay"], ["Fay", "Eli", "Dan", "Cy", "Bo", "Ann"], None, 6),
])
def test_each_operations_floor(op, line, target, word, floor):
    task = get_task(f"lines/{op}")
    assert task.floor_nfe(_hand(op, line, target, word)) == floor


def test_the_scorer_is_parallelbenchs():
    """One code path: lines/<op> scores through parallelbench_scoring.score_completion with the metric
    parallelbench/waiting_line/<op> uses, so its rules hold here too."""
    assert lines.score_completion is parallelbench_scoring.score_completion
    metrics = {op.name: op.metric for op in OPS}
    assert metrics["shuffle"] == "list_shuffle_score" and metrics["insert_random"] == "list_random_insert_score"
    assert {metrics[o] for o in ("copy", "reverse", "sort", "insert_index", "remove_index", "replace_index")} == \
        {"list_match_score"}
    shuffle = get_task("lines/shuffle")
    ex = _hand("shuffle", ["Ann", "Bo", "Cy"], ["Cy", "Ann", "Bo"])
    assert shuffle.score(ex, '["Ann", "Bo", "Cy"]').details["score"] == 0  # the input's own order
    assert shuffle.score(ex, '["Bo", "Ann", "Cy"]').correct  # any other permutation
    assert not shuffle.score(ex, '["Bo", "Ann"]').correct  # one person lost
    insert = get_task("lines/insert_random")
    ex = _hand("insert_random", ["Ann", "Bo", "Cy"], ["Eli", "Ann", "Bo", "Cy"], "Eli")
    for at in range(4):
        line = ["Ann", "Bo", "Cy"]
        line.insert(at, "Eli")
        assert insert.score(ex, list_text(line)).correct  # every valid place
    lenient = insert.score(ex, "Answer: ['Ann', 'Eli', 'Bo', 'Cy']").details
    assert lenient == parallelbench_scoring.score_completion("list_random_insert_score",
                                                             "Answer: ['Ann', 'Eli', 'Bo', 'Cy']", json.loads(ex.answer))
    assert lenient["score_strict"] == 0


def test_records_carry_the_floor(tmp_path, capsys):
    """`ripple eval` writes each sample's floor_nfe (whatever the model answers)."""
    out = tmp_path / "samples.jsonl"
    argv = ["eval", "--model", "ripple-tiny", "--task", "lines/shuffle", "--limit", "3", "--decoder", "confidence",
            "--gen-length", "16", "--block-length", "16", "--samples-out", str(out), "--json"]
    assert main(argv) == 0
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    task = get_task("lines/shuffle")
    assert [s["floor_nfe"] for s in samples] == [task.floor_nfe(ex) for ex in task.examples("test", 3)]
    assert all(s["floor_nfe"] >= MIN_LENGTH for s in samples)
