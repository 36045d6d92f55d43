"""Benchmarks and synthetic tasks. Importing this package registers every task."""

from ripple.tasks import arith, freefunc, gsm8k, humaneval, lines, math500, mbpp, parallelbench, pyfunc  # noqa: F401  (imported to register their tasks)
from ripple.tasks.base import Example, Score, Task, get_task, register_task, task_class, task_names

__all__ = ["Example", "Score", "Task", "get_task", "register_task", "task_class", "task_names"]
