"""The task registry and records."""

import dataclasses

import pytest

from ripple.errors import RippleError
from ripple.tasks import Example, Score, Task, base, get_task, register_task, task_names


def test_synthetic_tasks_are_registered():
    assert {"arith", "pyfunc"} <= set(task_names())
    assert task_names() == sorted(task_names())
    for name in ("arith", "pyfunc"):
        task = get_task(name)
        assert isinstance(task, Task) and task.name == name
        assert task.metric in {"exact_match", "pass@1"} and task.stop_sequences


def test_unknown_task_suggests_the_closest_name_on_one_line():
    with pytest.raises(RippleError) as info:
        get_task("arth")
    message = str(info.value)
    assert "\n" not in message
    assert message == f"unknown task 'arth' (did you mean 'arith'?); registered: {', '.join(task_names())}"


def test_unknown_task_without_a_close_name_lists_the_registered_ones():
    with pytest.raises(RippleError, match=r"^unknown task 'zzzzzz'; registered: .*arith.*pyfunc") as info:
        get_task("zzzzzz")
    assert "did you mean" not in str(info.value)


def test_options_reach_the_constructor():
    assert get_task("arith", seed=7).seed == 7


class _Echo(Task):
    name = "echo-test"
    metric = "exact_match"
    stop_sequences = ("\n",)

    def examples(self, split="test", limit=None):
        return [Example(id="e0", prompt="say hi\n", reference="hi")][:limit]

    def score(self, example, completion):
        return Score(correct=completion == example.reference)


def test_register_a_task_and_reject_a_second_class_with_the_same_name(monkeypatch):
    monkeypatch.setattr(base, "_TASKS", dict(base._TASKS))  # leave the real registry untouched
    register_task(_Echo)
    register_task(_Echo)  # the same class again (e.g. a reload) is fine
    task = get_task("echo-test")
    ex = task.examples()[0]
    assert task.score(ex, "hi").correct and not task.score(ex, "ho").correct

    class Other(_Echo):
        pass

    with pytest.raises(RippleError, match="already used"):
        register_task(Other)


def test_records_are_frozen():
    ex = Example(id="a", prompt="p", reference="r")
    assert ex.answer is None and ex.tests == () and ex.entry_point is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.prompt = "q"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Score(correct=True).correct = False  # type: ignore[misc]
