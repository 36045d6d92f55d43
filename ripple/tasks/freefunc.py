"""`freefunc`: "write a function" problems whose answers have free choices that ripple.

The prompt names the function and says what it computes, but not what to call the
parameter, whether to use a local variable, or in which order to write the expression.
Reference solutions choose all three uniformly at random, so a model trained on them
must pick a name once and reuse it, and must place each constant where its chosen order
puts it: committing one such choice collapses the uncertainty of every position tied to
it (the ripple effect), and committing two tied positions independently in one step can
produce an incoherent function (`def f(n):` whose body uses `k`). Completions are
scored by behaviour only: the hidden asserts call the function by the prompt's name.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ripple.tasks.base import Example, register_task
from ripple.tasks.pyfunc import PyFunc

FUNCTION_NAMES = ("f", "g", "h")
NAMES = ("x", "n", "a", "k", "v", "m")  # parameter and local variable names, all single letters
LOCAL_SHARE = 0.5  # share of references that name an intermediate value
MULT, OFFSET = range(2, 10), range(1, 60)


@dataclass(frozen=True)
class Family:
    """One computation on the parameter `x` with constants p and q.

    `orders` are the equivalent ways to write it in one expression; `split` are the ways
    to write it with a local `t` holding a part: (assignment, return) pairs."""

    phrase: str
    orders: tuple[str, ...]
    split: tuple[tuple[str, str], ...]
    value: Callable[[int, int, int], int]


FAMILIES: tuple[Family, ...] = (
    Family("it times {p} plus {q}", ("{x}*{p}+{q}", "{p}*{x}+{q}", "{q}+{x}*{p}", "{q}+{p}*{x}"),
           (("{x}*{p}", "{t}+{q}"), ("{p}*{x}", "{t}+{q}"), ("{x}*{p}", "{q}+{t}"), ("{p}*{x}", "{q}+{t}")),
           lambda x, p, q: x * p + q),
    Family("it times {p} minus {q}", ("{x}*{p}-{q}", "{p}*{x}-{q}"),
           (("{x}*{p}", "{t}-{q}"), ("{p}*{x}", "{t}-{q}")),
           lambda x, p, q: x * p - q),
    Family("it plus {q}, times {p}", ("({x}+{q})*{p}", "({q}+{x})*{p}", "{p}*({x}+{q})", "{p}*({q}+{x})"),
           (("{x}+{q}", "{t}*{p}"), ("{q}+{x}", "{t}*{p}"), ("{x}+{q}", "{p}*{t}"), ("{q}+{x}", "{p}*{t}")),
           lambda x, p, q: (x + q) * p),
    Family("it squared plus {q}", ("{x}*{x}+{q}", "{q}+{x}*{x}"),
           (("{x}*{x}", "{t}+{q}"), ("{x}*{x}", "{q}+{t}")),
           lambda x, p, q: x * x + q),
)


def render(family: Family, p: int, q: int, param: str, local: str | None, order: int) -> str:
    """The function body for one set of free choices (`local` None: a single return)."""
    if local is None:
        return f"    return {family.orders[order].format(x=param, p=p, q=q)}\n"
    assign, ret = family.split[order]
    return f"    {local} = {assign.format(x=param, p=p, q=q)}\n    return {ret.format(t=local, p=p, q=q)}\n"


@register_task
class FreeFunc(PyFunc):
    """One-parameter arithmetic functions with free names and orders; pass@1 on hidden asserts
    (scored exactly as `pyfunc`: the first function of the completion, run in the sandbox)."""

    name = "freefunc"
    test_size = 200  # about 220 distinct prompts fall in each held-out split

    def make(self, rng: random.Random) -> Example:
        family = rng.choice(FAMILIES)
        fn = rng.choice(FUNCTION_NAMES)
        p, q = rng.choice(MULT), rng.choice(OFFSET)
        param, local = rng.sample(NAMES, 2)
        if rng.random() < LOCAL_SHARE:
            body = render(family, p, q, param, local, rng.randrange(len(family.split)))
        else:
            body = render(family, p, q, param, None, rng.randrange(len(family.orders)))
        prompt = f"Write a function {fn} of one number that returns {family.phrase.format(p=p, q=q)}.\n"
        tests = tuple(f"assert {fn}({x!r})=={family.value(x, p, q)!r}"
                      for x in rng.sample(range(-9, 41), rng.randint(3, 5)))
        return Example(id="", prompt=prompt, reference=f"def {fn}({param}):\n{body}", tests=tests, entry_point=fn)
