"""`pyfunc`: "write a function" problems with short Python answers, for the tiny model.

Each problem is one templated sentence and a one-line function body, sized for a
character-level model (prompt <= 110 characters, reference <= 56). Hidden asserts
come from a plain Python rendering of each template's meaning (never from running
generated text), and completions are judged only through the sandbox.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product

from ripple.tasks.base import Example, Score, register_task
from ripple.tasks.sandbox import check_function
from ripple.tasks.synthetic import SyntheticTask

FUNCTION_NAMES = ("f", "g", "h")
ARG_NAMES: dict[str, tuple[tuple[str, ...], ...]] = {
    "int": (("x",), ("n",), ("y",)),
    "int2": (("a", "b"), ("x", "y"), ("m", "n")),
    "str": (("s",), ("t",), ("w",)),
    "list": (("xs",), ("nums",), ("ys",)),
}
SMALL, OFFSET, CONST, DIGIT, CUT = range(2, 13), range(1, 100), range(0, 21), range(0, 10), range(1, 6)


@dataclass(frozen=True)
class Family:
    """One problem template. `{v}`/`{w}` are the arguments, `{p}`/`{q}`/`{r}` the parameters."""

    kind: str  # argument kind, a key of ARG_NAMES
    phrase: str  # what the function returns, in words
    body: str  # the returned expression
    value: Callable[..., object]  # the template's meaning: value(params, *args)
    params: tuple[tuple[str, Sequence[object]], ...] = ()
    valid: Callable[[dict[str, object]], bool] = lambda params: True

    def variants(self) -> int:
        """How many distinct problems this template makes."""
        names, values = zip(*self.params) if self.params else ((), ())
        combos = sum(self.valid(dict(zip(names, combo))) for combo in product(*values))
        return len(FUNCTION_NAMES) * len(ARG_NAMES[self.kind]) * combos


FAMILIES: tuple[Family, ...] = (
    Family("int", "{v} times {p} plus {q}", "{v}*{p}+{q}", lambda k, x: x * k["p"] + k["q"],
           (("p", SMALL), ("q", OFFSET))),
    Family("int", "{v} times {p} minus {q}", "{v}*{p}-{q}", lambda k, x: x * k["p"] - k["q"],
           (("p", SMALL), ("q", OFFSET))),
    Family("int", "({v} plus {p}) times {q}", "({v}+{p})*{q}", lambda k, x: (x + k["p"]) * k["q"],
           (("p", OFFSET), ("q", SMALL))),
    Family("int", "{v} squared plus {p}", "{v}*{v}+{p}", lambda k, x: x * x + k["p"], (("p", OFFSET),)),
    Family("int", "{v} modulo {p}", "{v}%{p}", lambda k, x: x % k["p"], (("p", SMALL),)),
    Family("int", "{v} divided by {p}, rounded down", "{v}//{p}", lambda k, x: x // k["p"], (("p", SMALL),)),
    Family("int", "the absolute value of {v} minus {p}", "abs({v}-{p})", lambda k, x: abs(x - k["p"]),
           (("p", OFFSET),)),
    Family("int", "{v} if {v} is even else {p}", "{v} if {v}%2==0 else {p}",
           lambda k, x: x if x % 2 == 0 else k["p"], (("p", OFFSET),)),
    Family("int", "{v} if {v} is odd else {p}", "{v} if {v}%2==1 else {p}",
           lambda k, x: x if x % 2 == 1 else k["p"], (("p", OFFSET),)),
    Family("int", "{p} if {v} is greater than {q} else {r}", "{p} if {v}>{q} else {r}",
           lambda k, x: k["p"] if x > k["q"] else k["r"], (("p", DIGIT), ("q", CONST), ("r", DIGIT)),
           valid=lambda k: k["p"] != k["r"]),
    Family("int", "1 if {v} is divisible by {p} else 0", "1 if {v}%{p}==0 else 0",
           lambda k, x: 1 if x % k["p"] == 0 else 0, (("p", SMALL),)),
    Family("int2", "the max of {v} and {w}", "max({v},{w})", lambda k, x, y: max(x, y)),
    Family("int2", "the min of {v} and {w}", "min({v},{w})", lambda k, x, y: min(x, y)),
    Family("int2", "the absolute difference of {v} and {w}", "abs({v}-{w})", lambda k, x, y: abs(x - y)),
    Family("int2", "{v} times {w} plus {p}", "{v}*{w}+{p}", lambda k, x, y: x * y + k["p"], (("p", OFFSET),)),
    Family("int2", "{p} times {v} plus {w}", "{p}*{v}+{w}", lambda k, x, y: k["p"] * x + y, (("p", SMALL),)),
    Family("str", "{v} reversed", "{v}[::-1]", lambda k, s: s[::-1]),
    Family("str", "{v} in upper case", "{v}.upper()", lambda k, s: s.upper()),
    Family("str", "the first character of {v}", "{v}[0]", lambda k, s: s[0]),
    Family("str", "the last character of {v}", "{v}[-1]", lambda k, s: s[-1]),
    Family("str", "the first {p} characters of {v}", "{v}[:{p}]", lambda k, s: s[: k["p"]], (("p", CUT),)),
    Family("str", "{v} without its first {p} characters", "{v}[{p}:]", lambda k, s: s[k["p"]:],
           (("p", CUT),)),
    Family("str", "{v} repeated {p} times", "{v}*{p}", lambda k, s: s * k["p"], (("p", range(2, 6)),)),
    Family("str", "the length of {v} plus {p}", "len({v})+{p}", lambda k, s: len(s) + k["p"],
           (("p", OFFSET),)),
    Family("str", "{v} with '{p}' appended", "{v}+'{p}'", lambda k, s: s + k["p"],
           (("p", string.ascii_lowercase + string.digits),)),
    Family("list", "the sum of {v}", "sum({v})", lambda k, xs: sum(xs)),
    Family("list", "the length of {v}", "len({v})", lambda k, xs: len(xs)),
    Family("list", "the largest item of {v}", "max({v})", lambda k, xs: max(xs)),
    Family("list", "the smallest item of {v}", "min({v})", lambda k, xs: min(xs)),
    Family("list", "the sum of {v} times {p}", "sum({v})*{p}", lambda k, xs: sum(xs) * k["p"], (("p", SMALL),)),
    Family("list", "the number of items in {v} above {p}", "len([e for e in {v} if e>{p}])",
           lambda k, xs: len([e for e in xs if e > k["p"]]), (("p", CONST),)),
    Family("list", "the first item of {v}", "{v}[0]", lambda k, xs: xs[0]),
    Family("list", "the last item of {v}", "{v}[-1]", lambda k, xs: xs[-1]),
    Family("list", "{v} sorted", "sorted({v})", lambda k, xs: sorted(xs)),
)
# Drawing families uniformly would exhaust the small ones in the deduplicated test
# split, and drawing problems uniformly would drown them; sqrt(variants) keeps the
# test split's mix of families close to train's while every family still shows up.
FAMILY_WEIGHTS = tuple(math.sqrt(family.variants()) for family in FAMILIES)


def _inputs(kind: str, rng: random.Random) -> list[tuple[object, ...]]:
    """3 to 5 argument tuples for the hidden asserts; never empty strings or lists."""
    n = rng.randint(3, 5)
    if kind == "int":
        return [(x,) for x in rng.sample(range(-9, 41), n)]
    if kind == "int2":
        return [(rng.randint(-9, 30), rng.randint(-9, 30)) for _ in range(n)]
    if kind == "str":
        return [("".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8))),) for _ in range(n)]
    return [(rng.choices(range(31), k=rng.randint(1, 5)),) for _ in range(n)]


def extract_function(completion: str, stops: Sequence[str] = ("\n\n",)) -> str:
    """The first top-level function of a completion: from its `def` up to the first stop
    sequence or the first later line that is not indented."""
    for stop in stops:
        completion = completion.split(stop, 1)[0]
    lines = completion.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("def ")), None)
    if start is None:
        return completion  # no function: the asserts will fail with a NameError, which says so
    kept = [lines[start]]
    for line in lines[start + 1:]:
        if line.strip() and not line[0].isspace():
            break
        kept.append(line)
    return "\n".join(kept).rstrip() + "\n"


@register_task
class PyFunc(SyntheticTask):
    """One-line Python functions from a one-sentence spec; pass@1 on hidden asserts."""

    name = "pyfunc"
    metric = "pass@1"
    stop_sequences = ("\n\n",)
    timeout_s = 5.0

    def make(self, rng: random.Random) -> Example:
        family = rng.choices(FAMILIES, FAMILY_WEIGHTS)[0]
        fn = rng.choice(FUNCTION_NAMES)
        args = rng.choice(ARG_NAMES[family.kind])
        while True:
            params = {name: rng.choice(values) for name, values in family.params}
            if family.valid(params):
                break
        names = dict(zip(("v", "w"), args))
        signature = f"{fn}({', '.join(args)})"
        prompt = f"Write a function {signature} that returns {family.phrase.format(**names, **params)}.\n"
        reference = f"def {signature}:\n    return {family.body.format(**names, **params)}\n"
        tests = tuple(
            f"assert {fn}({', '.join(map(repr, call))})=={family.value(params, *call)!r}"
            for call in _inputs(family.kind, rng)
        )
        return Example(id="", prompt=prompt, reference=reference, tests=tests, entry_point=fn)

    def score(self, example: Example, completion: str) -> Score:
        program = extract_function(completion, self.stop_sequences)
        result = check_function(program, example.tests, timeout_s=self.timeout_s)
        return Score(correct=result.passed, details={"passed": result.passed, "timed_out": result.timed_out,
                                                     "error": result.error, "program": program})
