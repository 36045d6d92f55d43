"""The `freefunc` task: free choices vary uniformly in the references, scoring is by behaviour."""

import re
from collections import Counter

import pytest

from ripple.tasks import get_task
from ripple.tasks.freefunc import FAMILIES, MULT, NAMES, OFFSET, FreeFunc, render
from ripple.tasks.synthetic import split_of


@pytest.fixture(scope="module")
def task() -> FreeFunc:
    return get_task("freefunc")


@pytest.fixture(scope="module")
def train(task):
    return task.examples("train", 4000)


def _param(reference: str) -> str:
    return re.match(r"def \w\((\w+)\):", reference).group(1)


def test_the_prompt_leaves_the_choices_free_and_the_references_vary_uniformly(train):
    for ex in train[:500]:
        assert _param(ex.reference) not in re.findall(r"\b\w\b", ex.prompt.split("function ", 1)[1][2:])
    params = Counter(_param(ex.reference) for ex in train)
    assert set(params) == set(NAMES)
    assert max(params.values()) / min(params.values()) < 1.3  # uniform over the names
    with_local = sum(ex.reference.count("\n") == 3 for ex in train) / len(train)
    assert 0.45 < with_local < 0.55
    by_prompt: dict[str, set[str]] = {}
    for i in range(20000):
        ex = get_task("freefunc").example("train", i)
        by_prompt.setdefault(ex.prompt, set()).add(ex.reference)
    assert max(len(refs) for refs in by_prompt.values()) >= 4  # one problem, several valid answers


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.phrase)
def test_every_order_and_split_of_every_family_computes_the_same_function(family):
    bodies = [render(family, 7, 29, "n", None, i) for i in range(len(family.orders))]
    bodies += [render(family, 7, 29, "n", "k", i) for i in range(len(family.split))]
    assert len(set(bodies)) == len(bodies)
    for body in bodies:
        scope: dict = {}
        exec(f"def f(n):\n{body}", scope)
        assert [scope["f"](x) for x in (-3, 0, 5)] == [family.value(x, 7, 29) for x in (-3, 0, 5)], body


def test_held_out_splits_are_disjoint_from_train_and_from_each_other(task, train):
    test, dev = task.examples("test"), task.examples("dev", 200)
    assert len(test) == 200 == len({e.prompt for e in test})
    prompts = {e.prompt for e in train}
    assert not prompts & {e.prompt for e in test} and not prompts & {e.prompt for e in dev}
    assert not {e.prompt for e in test} & {e.prompt for e in dev}
    assert all(split_of("freefunc", e.prompt) == "test" for e in test)


@pytest.mark.slow
def test_scoring_accepts_any_coherent_choice_and_rejects_an_incoherent_one(task):
    ex = task.examples("test", 5)[0]
    fn = ex.entry_point
    family, p, q = next((f, p, q) for f in FAMILIES for p in MULT for q in OFFSET
                        if ex.prompt.endswith(f" returns {f.phrase.format(p=p, q=q)}.\n"))
    for param, local, order in (("a", None, 0), ("m", "v", len(family.split) - 1)):
        completion = f"def {fn}({param}):\n{render(family, p, q, param, local, order)}\n"
        assert task.score(ex, completion).correct, completion
    incoherent = f"def {fn}(n):\n{render(family, p, q, 'k', None, 0)}"  # parameter n, body uses k
    verdict = task.score(ex, incoherent)
    assert not verdict.correct and "NameError" in verdict.details["error"]
    assert not task.score(ex, f"def other(x):\n{render(family, p, q, 'x', None, 0)}").correct  # wrong name
