"""The `arith` synthetic task: determinism, disjoint splits, sizes, and scoring."""

import re

import pytest

from ripple.errors import RippleError
from ripple.tasks import get_task
from ripple.tasks.arith import MAX_VALUE, Arith

LINE = re.compile(r"^([a-d]) (\d+)([+\-*])(\d+)=(\d+)$")


@pytest.fixture(scope="module")
def task() -> Arith:
    return get_task("arith")


@pytest.fixture(scope="module")
def train(task):
    return task.examples("train", 5000)


@pytest.fixture(scope="module")
def test_split(task):
    return task.examples("test", 2000)


def test_same_seed_same_examples_other_seed_other_examples(task, test_split):
    again = Arith(seed=0)
    assert again.examples("test", 200) == test_split[:200]
    assert again.examples("train", 200) == task.examples("train", 200)
    other = Arith(seed=1)
    assert [e.prompt for e in other.examples("test", 200)] != [e.prompt for e in test_split[:200]]


def test_splits_never_share_a_prompt(train, test_split):
    assert not {e.prompt for e in train} & {e.prompt for e in test_split[:500]}
    assert not {e.prompt for e in Arith(seed=3).examples("train", 5000)} & {e.prompt for e in test_split[:500]}


def test_the_test_split_is_distinct_and_large_enough(test_split):
    assert len({e.prompt for e in test_split}) == len(test_split) == 2000


def test_streaming_and_random_access_agree(task, train, test_split):
    stream = task.iter_examples("train", start=100)
    assert [next(stream) for _ in range(5)] == train[100:105]
    assert task.example("test", 7) == test_split[7]
    assert len({e.id for e in train}) == len(train)


def test_sizes_fit_the_tiny_model(train, test_split):
    for ex in train[:2000] + test_split:
        assert len(ex.prompt) <= 114, ex.prompt
        assert len(ex.reference) <= 48 and ex.reference.endswith("\n"), ex.reference
        assert ex.prompt.startswith("Q: ") and ex.prompt.endswith("\nA: ")


def test_references_are_valid_arithmetic_in_gsm8k_form(train, test_split):
    for ex in train[:2000] + test_split:
        *lines, final = ex.reference.rstrip("\n").split("\n")
        assert 2 <= len(lines) <= 4
        value = None
        for label, line in zip("abcd", lines):
            got_label, a, op, b, c = LINE.match(line).groups()
            assert got_label == label and f"({label}) " in ex.prompt
            a, b, c = int(a), int(b), int(c)
            assert value is None or a == value  # each step continues from the last result
            assert c == {"+": a + b, "-": a - b, "*": a * b}[op]
            assert 0 <= c <= MAX_VALUE
            value = c
        assert final == f"#### {value}" and ex.answer == str(value)


def test_references_score_correct_and_wrong_answers_do_not(task, test_split):
    for ex in test_split[:500]:
        assert task.score(ex, ex.reference).correct
        wrong = ex.reference.replace(f"#### {ex.answer}", f"#### {int(ex.answer) + 1}")
        score = task.score(ex, wrong)
        assert not score.correct and not score.details["strict_match"]


def test_a_completion_without_the_marker_is_only_a_flexible_match(task, test_split):
    ex = test_split[0]
    score = task.score(ex, f"The answer is {ex.answer}")
    assert not score.correct and score.details["flexible_match"]


def test_bad_splits_and_limits_are_one_line_errors(task):
    with pytest.raises(RippleError, match="unknown split 'validation'; expected one of: train, dev, test"):
        task.examples("validation", 3)
    with pytest.raises(RippleError, match="unbounded"):
        task.examples("train")
    assert len(task.examples("test")) == task.test_size >= 1000
