"""MATH answer equivalence with the `math-verify` library, as lm-eval's `minerva_math500` reports it.

`math_verify` times out through `signal.alarm`, which only works in a process's main
thread, while completions are scored on worker threads (evaluation, Ray actors). So
the comparison runs in one long-lived helper process, whose main thread keeps the
library's own timeouts, and the caller waits with a deadline of its own; a helper
that hangs anyway is killed and replaced, and that completion counts as wrong.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import threading

DEADLINE_S = 30.0  # per comparison, on top of math_verify's own 5 s parse and verify timeouts


def _verify(gold_solution: str, completion: str) -> tuple[bool, str, str]:
    from math_verify import parse, verify

    gold, target = parse(gold_solution), parse(completion)
    return bool(verify(gold=gold, target=target)), _show(gold), _show(target)


def _show(parsed) -> str:
    return str(parsed[-1]) if parsed else ""


class _Helper:
    """One spawned worker process, replaced after a comparison that overran the deadline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: multiprocessing.pool.Pool | None = None

    def pool(self) -> multiprocessing.pool.Pool:
        with self._lock:
            if self._pool is None:
                self._pool = multiprocessing.get_context("spawn").Pool(1)
            return self._pool

    def reset(self, pool: multiprocessing.pool.Pool) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.terminate()


_HELPER = _Helper()


def math_equal(gold_solution: str, completion: str) -> tuple[bool, dict]:
    """(equivalent?, details): lm-eval's `math_verify` metric, verify(parse(solution), parse(completion))."""
    pool = _HELPER.pool()
    try:
        ok, gold, got = pool.apply_async(_verify, (gold_solution, completion)).get(timeout=DEADLINE_S)
    except multiprocessing.TimeoutError:
        _HELPER.reset(pool)
        return False, {"math_verify": False, "error": f"comparison timed out after {DEADLINE_S:g}s"}
    return ok, {"math_verify": ok, "gold_parsed": gold, "parsed": got}
