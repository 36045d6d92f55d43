"""`arith`: short multi-step word problems in GSM8K's answer format, for the tiny model.

Problems are templated and terse so a tiny model with a 48-token response window
can learn them: every prompt fits in 110 characters, every reference (one `a+b=c`
line per operation, then `#### N`) in 44. Completions are
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
# The ranges are small on purpose: a 1.5M-parameter model trained for 45 CPU minutes learns
# a table of ~330 facts; with values up to 60 and operands up to 9 (~1,100 facts) it learned
# to chain values from line to line but not the sums themselves (model card).
PEOPLE = (("Sam", "He"), ("Tom", "He"), ("Ben", "He"), ("Max", "He"), ("Leo", "He"), ("Dan", "He"),
          ("Ann", "She"), ("Mia", "She"), ("Zoe", "She"), ("Ava", "She"), ("Eve", "She"), ("Amy", "She"))
OBJECTS = ("pens", "cards", "coins", "books", "eggs", "toys", "cups", "hats", "keys", "rocks")
ADD = ("buys {n} more", "gets {n} more", "finds {n} more", "wins {n} more")
SUB = ("gives away {n}", "loses {n}", "sells {n}")
MUL = {2: "doubles them", 3: "triples them"}
# Longest prompt: a 3-letter name, a 2-digit count, a 5-letter object and four 13-character
# steps make at most 107 characters; longest reference: four 8-character lines and "#### 30\n", 44.


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
        value = rng.randint(2, MAX_START)
        prompt_start = f"Q: {name} has {value} {things}. {pronoun} "
        phrases, lines = [], []
        for _ in range(rng.randint(2, 4)):
            phrase, line, value = _step(rng, value)
            phrases.append(phrase)
            lines.append(line)
        steps = ", ".join(phrases[:-1]) + ", then " + phrases[-1]
        prompt = f"{prompt_start}{steps}. How many now?\nA: "
        reference = "\n".join(lines) + f"\n#### {value}\n"
        return Example(id="", prompt=prompt, reference=reference, answer=str(value))

    def score(self, example: Example, completion: str) -> Score:
        return score_gsm8k(completion, example.answer if example.answer is not None else example.reference)
