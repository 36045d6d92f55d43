"""The task protocol and the registry that maps task names to task classes.

A task turns its data into `Example`s and scores one completion per example;
decoders, grids and dashboards only ever see these records, never a dataset.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, TypeVar

from ripple.errors import RippleError
from ripple.plugins import TASK_GROUP, BrokenPlugin, PluginGroup, PluginSource


@dataclass(frozen=True)
class Example:
    """One evaluation item: what the model sees and what it is compared against."""

    id: str
    prompt: str
    reference: str  # the gold completion text, e.g. a worked solution ending in "#### 9"
    answer: str | None = None  # the gold final answer, when the task has one
    tests: tuple[str, ...] = ()  # hidden assert lines for code tasks
    entry_point: str | None = None  # the function the tests call
    # For chat templates: the few-shot examples as (user, assistant) turns and the question's own
    # user turn, as lm-eval's multi-turn form has them (no delimiters). Empty: `prompt` is one turn.
    shots: tuple[tuple[str, str], ...] = ()
    question: str | None = None


@dataclass(frozen=True)
class Score:
    """The verdict on one completion; `details` says how it was reached."""

    correct: bool
    details: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """A benchmark: examples per split and a scorer for one completion."""

    name: ClassVar[str]
    metric: ClassVar[str]  # what `Score.correct` averages to, e.g. "exact_match", "pass@1"
    stop_sequences: ClassVar[tuple[str, ...]]  # generation is cut at the first of these
    uses_data: ClassVar[bool] = False  # True: the constructor takes `data_dir` (a local copy of the dataset)
    # constructor options a grid or sweep spec may set per task (e.g. a code task's sandbox limits);
    # they can change a score, so they are part of a cell's identity
    options: ClassVar[tuple[str, ...]] = ()
    # the response length a run of this task uses when none is given (`ripple eval` without --gen-length);
    # None: the command's own default
    gen_length: ClassVar[int | None] = None
    # scored by ParallelBench's metrics (`parallelbench_scoring`): the leaderboard's PBx counts its cells
    parallelbench_scored: ClassVar[bool] = False

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """Raise a one-line RippleError for an option this task does not take or a bad value."""
        for key in options:
            if key not in cls.options:
                accepted = ", ".join(cls.options) if cls.options else "none"
                raise RippleError(f"task {cls.name} takes no option {key!r}; accepted: {accepted}")

    def data_found(self) -> bool:
        """Whether this task's data are where it reads them. Only a task whose files the user brings
        (ParallelBench's) can say no; a grid spec's `if_data` tasks are left out then."""
        return True

    @abstractmethod
    def examples(self, split: str = "test", limit: int | None = None) -> list[Example]:
        """The first `limit` examples of `split`, in a fixed order."""

    @abstractmethod
    def score(self, example: Example, completion: str) -> Score:
        """Judge `completion` (the model's text after the prompt) for `example`."""

    def floor_nfe(self, example: Example) -> int | None:
        """The fewest forwards a decoder can make on `example` and always be right, where the task's
        definition settles it (tasks with free choices, e.g. `lines/<op>`); None: not defined."""
        return None


def cut_at_stops(text: str, stop_sequences: tuple[str, ...]) -> str:
    """`text` up to the first occurrence of any stop sequence, as generation `until` lists work."""
    for stop in stop_sequences:
        cut = text.find(stop)
        if cut >= 0:
            text = text[:cut]
    return text


_TASKS: dict[str, type[Task]] = {}
T = TypeVar("T", bound=type[Task])


@dataclass(frozen=True)
class TaskFamily:
    """Task names made from data rather than code (ParallelBench's categories, found in the data
    directory): `resolve` gives the class of a name of the family (registering it) or None for a name
    that is not the family's, and may raise a one-line RippleError for a name it refuses; `found`
    lists the family's names present in the data directory in effect."""

    resolve: Callable[[str], "type[Task] | None"]
    found: Callable[[], list[str]]


_FAMILIES: list[TaskFamily] = []


def register_task_family(family: TaskFamily) -> TaskFamily:
    _FAMILIES.append(family)
    return family


def check_task_class(name: str, obj) -> None:
    """A usable task plugin: a concrete Task subclass named `name` with its metric and stop sequences."""
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise TypeError(f"{obj!r} is not a subclass of ripple.tasks.Task")
    if getattr(obj, "__abstractmethods__", None):
        raise TypeError(f"{obj.__qualname__} does not implement {', '.join(sorted(obj.__abstractmethods__))}")
    if getattr(obj, "name", None) != name:
        raise TypeError(f"{obj.__qualname__}.name is {getattr(obj, 'name', None)!r}, not the entry point's {name!r}")
    if not isinstance(getattr(obj, "metric", None), str) or not isinstance(getattr(obj, "stop_sequences", None), tuple):
        raise TypeError(f"{obj.__qualname__} needs a `metric` string and a `stop_sequences` tuple")


PLUGINS = PluginGroup(TASK_GROUP, "task", check_task_class, lambda: set(_TASKS),
                      lambda name, cls: _TASKS.__setitem__(name, cls))


def refused_tasks() -> list[BrokenPlugin]:
    """Plugin tasks that could not be registered, with why."""
    return PLUGINS.refused()


def task_source(name: str) -> PluginSource | None:
    """The distribution and version of a plugin task; None for Ripple's own."""
    return PLUGINS.source(name)


def register_task(cls: T) -> T:
    """Class decorator: make `cls` available to `get_task(cls.name)`."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise RippleError(f"task class {cls.__qualname__} needs a non-empty `name`")
    existing = _TASKS.get(name)
    # Re-registering the same class (e.g. a module reload) is harmless; two classes are not.
    if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
        raise RippleError(f"task name {name!r} is already used by {existing.__module__}.{existing.__qualname__}")
    _TASKS[name] = cls
    return cls


def registered_task(name: str) -> type[Task] | None:
    """The class registered as `name` now, or None (no plugin reading, no task family asked)."""
    return _TASKS.get(name)


def task_names() -> list[str]:
    """Registered task names (and those a task family finds in the data directory in effect), sorted."""
    PLUGINS.read()
    found = {name for family in _FAMILIES for name in family.found()}
    return sorted(set(_TASKS) | found)


def task_class(name: str) -> type[Task]:
    """The class registered as `name`, or a one-line error listing the registered names."""
    refusal = PLUGINS.refusal(name, _TASKS)  # a plugin that took a built-in's name loses to it
    if refusal is not None:
        raise refusal
    try:
        return _TASKS[name]
    except KeyError:
        for family in _FAMILIES:
            cls = family.resolve(name)
            if cls is not None:
                return cls
        close = difflib.get_close_matches(name, task_names(), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RippleError(f"unknown task {name!r}{hint}; registered: {', '.join(task_names())}") from None


def catalogue() -> list[dict]:
    """Every registered task (metric, provider: built-in or a plugin's distribution, where its data
    come from, options, first line of its doc), then every refused plugin with why: `ripple tasks --json`."""
    import sys

    rows = []
    for name in task_names():
        cls = _TASKS[name]
        data = getattr(cls, "data_source", None) or ", ".join(getattr(cls, "hub_ids", ())) or "generated (synthetic)"
        plugin = task_source(name)
        doc = ((cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines() or [""])[0]
        # `source` is where the data come from (as before plugins existed); `provider` where the task does
        rows.append({"task": name, "metric": cls.metric, "source": data,
                     "provider": "built-in" if plugin is None else str(plugin), "options": list(cls.options),
                     "doc": doc})
    return rows + [{"task": b.name, "provider": str(b.source), "refused": b.error} for b in refused_tasks()]


def get_task(name: str, **options: Any) -> Task:
    """A new instance of the task registered as `name`; `options` go to its constructor.

    Options that are None are dropped, and so is `data_dir` for tasks that read no
    dataset, so one set of options (e.g. a grid's) fits every task."""
    cls = task_class(name)
    options = {k: v for k, v in options.items() if v is not None and (k != "data_dir" or cls.uses_data)}
    return cls(**options)
