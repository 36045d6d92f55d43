"""HumanEval as lm-evaluation-harness's `humaneval`: 0-shot, Codex stop sequences, pass@1.

The prompt is the dataset's signature and docstring, unwrapped. The program run in
the sandbox is prompt + completion, then the dataset's `check` function and
`check(<entry point>)`, as the harness's `code_eval` metric assembles it, and it runs as
`code_eval` runs it: 3 s of wall clock, as a module (an `if __name__ == "__main__":` block
does not run). Each code task takes its own `timeout_s`, `cpu_s` and `memory_mb`.
"""
from __future__ import annotations

from typing import Any, ClassVar

from ripple.errors import RippleError
from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.benchmark import BenchmarkTask
from ripple.tasks.data import Source, load_rows
from ripple.tasks.sandbox import check_function

TEST = Source("openai/openai_humaneval", None, "test", ("humaneval/HumanEval.jsonl", "humaneval/HumanEval.jsonl.gz"))
# lm-eval's `code_eval`: 3.0 s per program (HF evaluate's default), no memory limit; the CPU
# limit is the sandbox's default (wall clock + 1 s) and memory is capped at 1 GiB here.
LIMITS = {"timeout_s": 3.0, "cpu_s": None, "memory_mb": 1024}


def score_program(program: str, tests: tuple[str, ...], limits: dict | None = None) -> Score:
    """pass@1 of one program, run as a module like `code_eval` does: every test statement ran."""
    result = check_function(program, tests, **(limits or LIMITS), as_main=False)
    return Score(correct=result.passed, details={"passed": result.passed, "timed_out": result.timed_out,
                                                 "error": result.error, "stdout_tail": result.stdout_tail[-500:]})


class CodeTask(BenchmarkTask):
    """A benchmark scored by running programs: sandbox limits per task (`LIMITS` by default), settable
    from a grid or sweep spec (`tasks: {humaneval: {timeout_s: 10}}`)."""

    limits: ClassVar[dict[str, Any]] = LIMITS
    options: ClassVar[tuple[str, ...]] = ("timeout_s", "cpu_s", "memory_mb")

    def __init__(self, data_dir: str | None = None, timeout_s: float | None = None, cpu_s: float | None = None,
                 memory_mb: int | None = None) -> None:
        super().__init__(data_dir)
        given = {k: v for k, v in {"timeout_s": timeout_s, "cpu_s": cpu_s, "memory_mb": memory_mb}.items()
                 if v is not None}
        self.check_options(given)
        self.limits = {**self.limits, **given}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        super().check_options(options)
        for key, value in options.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise RippleError(f"task {cls.name}: {key} must be a positive number, got {value!r}")
            if key == "memory_mb" and not isinstance(value, int):
                raise RippleError(f"task {cls.name}: memory_mb must be a whole number of MiB, got {value!r}")


@register_task
class HumanEval(CodeTask):
    name = "humaneval"
    metric = "pass@1"
    stop_sequences = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
    hub_ids = ("openai/openai_humaneval",)

    def build(self) -> list[Example]:
        return [Example(id=doc["task_id"], prompt=doc["prompt"], reference=doc["canonical_solution"],
                        tests=(doc["test"], f"check({doc['entry_point']})"), entry_point=doc["entry_point"])
                for doc in load_rows(self.name, TEST, self.data_dir)]

    def score(self, example: Example, completion: str) -> Score:
        return score_program(example.prompt + completion, example.tests, self.limits)

    def wrong_completion(self, example: Example) -> str:
        return "    return None\n"
