"""MATH500 as lm-evaluation-harness's `minerva_math500` (version 3.1): 4-shot Minerva prompts, math-verify scoring.

The four exemplars are the harness's fixed Minerva shots (assets/minerva_math_fewshot.json,
from `lm_eval/tasks/minerva_math/utils.py`), each shown as "Problem:\\n<problem>\\n\\n
Solution: <solution>". A completion is correct when `math_verify` finds it equivalent
to the reference solution, the harness's `math_verify` metric.
"""
from __future__ import annotations

import json
from importlib import resources

from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.benchmark import BenchmarkTask
from ripple.tasks.data import Source, load_rows
from ripple.tasks.math_verify_scoring import math_equal

TEST = Source("HuggingFaceH4/MATH-500", None, "test", ("math500/test.jsonl",))
TARGET_DELIMITER, FEWSHOT_DELIMITER = " ", "\n\n"


def doc_to_text(doc: dict) -> str:
    return "Problem:" + "\n" + doc["problem"] + "\n\n" + "Solution:"


def fewshot_turns() -> tuple[tuple[str, str], ...]:
    shots = json.loads(resources.files("ripple.tasks").joinpath("assets/minerva_math_fewshot.json").read_text())
    return tuple((doc_to_text(s), s["solution"]) for s in shots)


def fewshot_context() -> str:
    return "".join(text + TARGET_DELIMITER + solution + FEWSHOT_DELIMITER for text, solution in fewshot_turns())


@register_task
class Math500(BenchmarkTask):
    name = "math500"
    metric = "math_verify"
    stop_sequences = ("Problem:",)
    hub_ids = ("HuggingFaceH4/MATH-500",)

    def build(self) -> list[Example]:
        context, shots = fewshot_context(), fewshot_turns()
        return [Example(id=doc["unique_id"], prompt=context + doc_to_text(doc), reference=doc["solution"],
                        answer=doc["answer"], shots=shots, question=doc_to_text(doc))
                for doc in load_rows(self.name, TEST, self.data_dir)]

    def score(self, example: Example, completion: str) -> Score:
        ok, details = math_equal(example.reference, completion)
        return Score(correct=ok, details=details)

    def gold_completion(self, example: Example) -> str:
        return " " + example.reference

    def wrong_completion(self, example: Example) -> str:
        return (" Working it through gives $\\boxed{10^{6}+7}$.\n"
                "Final Answer: The final answer is $10^{6}+7$. I hope it is correct.")
