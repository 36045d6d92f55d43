"""`arith`: short multi-step word problems in GSM8K's answer format, for the tiny model.

Problems are templated and terse so a tiny model with a 48-token response window
can learn them: every prompt fits in 114 characters, every reference in 48. Steps
are labelled (a)-(d) in the question and their reasoning lines (`b 9*2=18`) carry the
same label, so a small model finds step k's operand by content rather than by
counting commas (unlabelled, a 1.5M-parameter model never learned that: model card). Completions are
scored by the GSM8K extractor, so the synthetic task and the real benchmark
share one scoring path.
"""

from __future__ import annotations

import random

from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.gsm8k_scoring import score_gsm8k
from ripple.tasks.synthetic import SyntheticTask

MAX_VALUE = 30  # every intermediate value stays in 0..30
MAX_OPERAND = 5  # added or taken away: 1..5
MAX_START = 12
# Small on purpose: the embedded model must learn each sum, difference and product as a fact.
PEOPLE = (("Sam", "He"), ("Tom", "He"), ("Ben", "He"), ("Max", "He"), ("Leo", "He"), ("Dan", "He"),
          ("Ann", "She"), ("Mia", "She"), ("Zoe", "She"), ("Ava", "She"), ("Eve", "She"), ("Amy", "She"))
OBJECTS = ("pens", "cards", "coins", "books", "eggs", "toys", "cups", "hats", "keys", "rocks")
ADD = ("buys {n} more", "gets {n} more", "finds {n} more", "wins {n} more")
SUB = ("gives away {n}", "loses {n}", "sells {n}")
MUL = {2: "doubles them", 3: "triples them"}
LABELS = "abcd"  # each step and its reasoning line carry the same label: the model finds step k by content
# Longest prompt: a 3-letter name, a 2-digit count, a 5-letter object and four labelled steps
# such as "(a) gives away 5" make 114 characters. Longest reference: four lines such as
# "a 29+1=30\n" and "#### 30\n", 48 characters, 45 tokens of ripple-tiny's BPE (< 48 positions).


def _step(rng: random.Random, value: int) -> tuple[str, str, int]:
    """One operation on `value`: (phrase, reasoning line, new value), never leaving 0..MAX_VALUE."""
    allowed = {"+": value < MAX_VALUE, "-": value > 0, "*": 2 <= value <= MAX_VALUE // 2}
    kind = rng.choice([op for op, ok in allowed.items() if ok])
    if kind == "+":
        n = rng.randint(1, min(MAX_OPERAND, MAX_VALUE - value))
        return rng.choice(ADD).format(n=n), f"{value}+{n}={value + n}", value + n
    if kind == "-":
        n = rng.randint(1, min(MAX_OPERAND, value))
        return rng.choice(SUB).format(n=n), f"{value}-{n}={value - n}", value - n
    k = rng.choice([m for m in MUL if value * m <= MAX_VALUE])
    return MUL[k], f"{value}*{k}={value * k}", value * k


@register_task
class Arith(SyntheticTask):
    """Two to four +, -, * steps on a small count; answer in `#### N` form."""

    name = "arith"
    metric = "exact_match"
    stop_sequences = ("\n\n", "Q:")

    def make(self, rng: random.Random) -> Example:
        name, pronoun = rng.choice(PEOPLE)
        things = rng.choice(OBJECTS)
        start = value = rng.randint(2, MAX_START)
        phrases, lines = [], []
        for label in LABELS[: rng.randint(2, 4)]:
            phrase, line, value = _step(rng, value)
            phrases.append(f"({label}) {phrase}")
            lines.append(f"{label} {line}")
        prompt = f"Q: {name} has {start} {things}. {pronoun} {', '.join(phrases)}. How many now?\nA: "
        reference = "\n".join(lines) + f"\n#### {value}\n"
        return Example(id="", prompt=prompt, reference=reference, answer=str(value))

    def score(self, example: Example, completion: str) -> Score:
        return score_gsm8k(completion, example.answer if example.answer is not None else example.reference)
