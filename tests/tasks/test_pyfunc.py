"""The `pyfunc` synthetic task: determinism, disjoint splits, sizes, and sandboxed scoring."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from ripple.tasks import Example, get_task
from ripple.tasks.pyfunc import FAMILIES, PyFunc, extract_function
from ripple.tasks.sandbox import run_program


@pytest.fixture(scope="module")
def task() -> PyFunc:
    return get_task("pyfunc")


@pytest.fixture(scope="module")
def train(task):
    return task.examples("train", 5000)


@pytest.fixture(scope="module")
def test_split(task):
    return task.examples("test", 2000)


def test_same_seed_same_examples_other_seed_other_examples(task, test_split):
    assert PyFunc(seed=0).examples("test", 200) == test_split[:200]
    assert PyFunc(seed=0).examples("train", 200) == task.examples("train", 200)
    assert [e.prompt for e in PyFunc(seed=1).examples("test", 200)] != [e.prompt for e in test_split[:200]]


def test_splits_never_share_a_prompt(train, test_split):
    assert not {e.prompt for e in train} & {e.prompt for e in test_split[:500]}
    assert not {e.prompt for e in PyFunc(seed=5).examples("train", 5000)} & {e.prompt for e in test_split}


def test_the_test_split_is_distinct_and_covers_every_kind(test_split):
    assert len({e.prompt for e in test_split}) == len(test_split) == 2000
    signatures = {e.reference.split("\n")[0][5:] for e in test_split}  # e.g. "(xs):"
    assert {"(x):", "(a, b):", "(s):", "(xs):"} <= signatures


def test_streaming_and_random_access_agree(task, train):
    stream = task.iter_examples("train", start=42)
    assert [next(stream) for _ in range(3)] == train[42:45]
    assert task.example("train", 4999) == train[4999]


def test_sizes_and_hidden_tests(train, test_split):
    for ex in train[:2000] + test_split:
        assert len(ex.prompt) <= 110, ex.prompt
        assert len(ex.reference) <= 56 and ex.reference.endswith("\n"), ex.reference
        assert ex.prompt.startswith("Write a function ") and ex.reference.startswith(f"def {ex.entry_point}(")
        assert 3 <= len(ex.tests) <= 5
        assert all(t.startswith(f"assert {ex.entry_point}(") for t in ex.tests)


def test_there_are_thousands_of_distinct_problems():
    assert sum(family.variants() for family in FAMILIES) > 20_000
    assert min(family.variants() for family in FAMILIES) >= 9


def test_every_reference_passes_its_hidden_tests(train, test_split):
    # One sandbox run checks 3,000 references against the asserts derived from the templates' meaning.
    blocks = [ex.reference + "\n".join(ex.tests) for ex in train[:1000] + test_split]
    result = run_program("\n".join(blocks), timeout_s=30.0)
    assert result.passed, result.error


def test_references_score_correct_through_the_sandbox(task, test_split):
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda ex: task.score(ex, ex.reference), test_split[:50]))
    assert all(score.correct for score in scores), [s.details for s in scores if not s.correct]


def test_wrong_completions_score_incorrect(task, test_split):
    def wrong(ex: Example) -> str:
        return f"def {ex.entry_point}{ex.reference[5:].split(':', 1)[0]}:\n    return None\n"

    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda ex: task.score(ex, wrong(ex)), test_split[:16]))
    assert not any(score.correct for score in scores)


LINEAR = Example(id="t", prompt="Write a function f(x) that returns x times 3 plus 2.\n",
                 reference="def f(x):\n    return x*3+2\n", tests=("assert f(2)==8", "assert f(0)==2", "assert f(-1)==-1"),
                 entry_point="f")


@pytest.mark.parametrize("completion,correct", [
    ("def f(x):\n    return x*3+2\n", True),
    ("def f(x):\n    return x*3+2\n\nWrite a function g(x) that", True),  # cut at the stop sequence
    ("def f(x):\n    return x*3+2\nprint(undefined)\n", True),  # cut at the first non-indented line
    ("def f(x):\n    return x*3+3\n", False),
    ("def g(x):\n    return x*3+2\n", False),  # wrong name: the asserts call f
    ("return x*3+2", False),
    ("", False),
])
def test_scoring_a_hand_written_problem(task, completion, correct):
    assert task.score(LINEAR, completion).correct is correct


def test_a_looping_completion_times_out_as_incorrect():
    task = PyFunc()
    task.timeout_s = 1.0
    score = task.score(LINEAR, "def f(x):\n    while True:\n        pass\n")
    assert not score.correct and score.details["timed_out"]


def test_extract_function():
    assert extract_function("def f(x):\n    y = x\n\n    return y\n") == "def f(x):\n    y = x\n"
    assert extract_function("Here:\ndef f(x):\n    return x\nf(1)\n") == "def f(x):\n    return x\n"
    assert extract_function("no code") == "no code"
