"""MBPP as lm-evaluation-harness's `mbpp`: 3-shot (task ids 2, 3, 4), test ids 11-510, pass@1.

Prompts use the original paper's wording with [BEGIN]/[DONE]; the shots show their
code then "[DONE]". The program run is the completion (cut at "[DONE]") followed by
the three asserts. Like the harness, `test_setup_code` is not run, so the few items
that need it fail even with their reference code (`ripple tasks verify mbpp` names them).
"""
from __future__ import annotations

import ast
import warnings

from ripple.errors import RippleError
from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.data import Source, load_rows
from ripple.tasks.humaneval import CodeTask, score_program

# Locally the full file holds every task id; on the hub, config `full` splits them.
TEST = Source("google-research-datasets/mbpp", "full", "test", ("mbpp/mbpp.jsonl",))
PROMPT_SPLIT = Source("google-research-datasets/mbpp", "full", "prompt", ("mbpp/mbpp.jsonl",))
SHOT_IDS = (2, 3, 4)
TEST_IDS = range(11, 511)
FEWSHOT_DELIMITER = "\n\n"  # target_delimiter is ""


def doc_to_text(doc: dict) -> str:
    tests = "\n".join(doc["test_list"][:3])
    return (f"You are an expert Python programmer, and here is your task: {doc['text']} "
            f"Your code should pass these tests:\n\n{tests}\n[BEGIN]\n")


def shot_target(doc: dict) -> str:
    return doc["code"] + "\n[DONE]"


@register_task
class MBPP(CodeTask):
    name = "mbpp"
    metric = "pass@1"
    stop_sequences = ("[DONE]",)
    hub_ids = ("google-research-datasets/mbpp",)

    def build(self) -> list[Example]:
        by_id = {row["task_id"]: row for row in load_rows(self.name, TEST, self.data_dir)}
        shots = by_id  # a local file holds every split; the hub's test split lacks the prompt split's shots
        if any(i not in by_id for i in SHOT_IDS):
            shots = {row["task_id"]: row for row in load_rows(self.name, PROMPT_SPLIT, self.data_dir)}
        missing = [i for i in SHOT_IDS if i not in shots]
        if missing:
            raise RippleError(f"task mbpp: shot task ids {missing} are missing from the data")
        turns = tuple((doc_to_text(shots[i]), shot_target(shots[i])) for i in SHOT_IDS)
        context = "".join(text + code + FEWSHOT_DELIMITER for text, code in turns)
        return [Example(id=str(i), prompt=context + doc_to_text(by_id[i]), reference=by_id[i]["code"],
                        tests=tuple(by_id[i]["test_list"]), shots=turns, question=doc_to_text(by_id[i]))
                for i in TEST_IDS if i in by_id]

    def score(self, example: Example, completion: str) -> Score:
        return score_program(completion, example.tests, self.limits)

    def wrong_completion(self, example: Example) -> str:
        """The reference code with every top-level function then redefined to return None."""
        try:
            with warnings.catch_warnings():  # some references have invalid escapes such as "\w" in plain strings
                warnings.simplefilter("ignore", SyntaxWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                tree = ast.parse(example.reference.replace("\r\n", "\n"))
            names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        except SyntaxError:
            names = []
        return example.reference + "\n" + "".join(f"\ndef {n}(*args, **kwargs):\n    return None\n" for n in names)


def harness_test_docs(dataset):
    """lm-eval `process_docs` for a local mbpp.jsonl, which holds every task id: the test split (11-510)."""
    return dataset.filter(lambda doc: doc["task_id"] in TEST_IDS)
