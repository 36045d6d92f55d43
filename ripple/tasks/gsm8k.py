"""GSM8K as lm-evaluation-harness's `gsm8k` task: 5-shot "Question: ... Answer:" prompts.

Shots are drawn from the train split by the harness's default sampler: one
`random.Random(1234)` whose `sample(train, 5)` is called once per test question, in
order, so question i's shots depend on the draws for questions 0..i-1 too.
Scoring (strict and flexible match) is `gsm8k_scoring`, shared with `arith`.
"""
from __future__ import annotations

import random

from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.benchmark import BenchmarkTask
from ripple.tasks.data import Source, load_rows
from ripple.tasks.gsm8k_scoring import gold_answer, score_gsm8k

TEST = Source("openai/gsm8k", "main", "test", ("gsm8k/test.jsonl",))
TRAIN = Source("openai/gsm8k", "main", "train", ("gsm8k/train.jsonl",))
NUM_FEWSHOT = 5
FEWSHOT_SEED = 1234  # lm-eval's default `fewshot_random_seed`
TARGET_DELIMITER, FEWSHOT_DELIMITER = " ", "\n\n"


def doc_to_text(doc: dict) -> str:
    return f"Question: {doc['question']}\nAnswer:"


@register_task
class GSM8K(BenchmarkTask):
    name = "gsm8k"
    metric = "exact_match"
    stop_sequences = ("Question:", "</s>", "<|im_end|>")
    hub_ids = ("openai/gsm8k",)

    def build(self) -> list[Example]:
        test, train = load_rows(self.name, TEST, self.data_dir), load_rows(self.name, TRAIN, self.data_dir)
        rnd = random.Random(FEWSHOT_SEED)
        examples = []
        for i, doc in enumerate(test):
            shots = rnd.sample(train, NUM_FEWSHOT)
            context = "".join(doc_to_text(s) + TARGET_DELIMITER + s["answer"] + FEWSHOT_DELIMITER for s in shots)
            examples.append(Example(id=f"gsm8k/{i}", prompt=context + doc_to_text(doc), reference=doc["answer"],
                                    answer=gold_answer(doc["answer"]),
                                    shots=tuple((doc_to_text(s), s["answer"]) for s in shots),
                                    question=doc_to_text(doc)))
        return examples

    def score(self, example: Example, completion: str) -> Score:
        return score_gsm8k(completion, example.reference)

    def gold_completion(self, example: Example) -> str:
        return " " + example.reference  # the harness's target delimiter, as in the shots

    def wrong_completion(self, example: Example) -> str:
        wrong = int(float(example.answer.replace(",", ""))) + 1 if example.answer else 1
        return f" The answer is easy.\n#### {wrong}"
