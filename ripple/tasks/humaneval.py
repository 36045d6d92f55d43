"""HumanEval as lm-evaluation-harness's `humaneval`: 0-shot, Codex stop sequences, pass@1.

The prompt is the dataset's signature and docstring, unwrapped. The program run in
the sandbox is prompt + completion, then the dataset's `check` function and
`check(<entry point>)`, as the harness's `code_eval` metric assembles it.
"""
from __future__ import annotations

from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.benchmark import BenchmarkTask
from ripple.tasks.data import Source, load_rows
from ripple.tasks.sandbox import check_function

TEST = Source("openai/openai_humaneval", None, "test", ("humaneval/HumanEval.jsonl", "humaneval/HumanEval.jsonl.gz"))
LIMITS = {"timeout_s": 10.0, "cpu_s": 6.0, "memory_mb": 1024}  # generous for a loaded 2-core host


def score_program(program: str, tests: tuple[str, ...], limits: dict | None = None) -> Score:
    """pass@1 of one program: every test statement ran in the sandbox."""
    result = check_function(program, tests, **(limits or LIMITS))
    return Score(correct=result.passed, details={"passed": result.passed, "timed_out": result.timed_out,
                                                 "error": result.error, "stdout_tail": result.stdout_tail[-500:]})


@register_task
class HumanEval(BenchmarkTask):
    name = "humaneval"
    metric = "pass@1"
    stop_sequences = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
    hub_ids = ("openai/openai_humaneval",)

    def build(self) -> list[Example]:
        return [Example(id=doc["task_id"], prompt=doc["prompt"], reference=doc["canonical_solution"],
                        tests=(doc["test"], f"check({doc['entry_point']})"), entry_point=doc["entry_point"])
                for doc in load_rows(self.name, TEST, self.data_dir)]

    def score(self, example: Example, completion: str) -> Score:
        return score_program(example.prompt + completion, example.tests)

    def wrong_completion(self, example: Example) -> str:
        return "    return None\n"
