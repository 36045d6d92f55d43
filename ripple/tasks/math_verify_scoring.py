"""MATH answer equivalence with the `math-verify` library, as lm-eval's `minerva_math500` reports it.

`math_verify` times out through `signal.alarm`, which only works in a process's main
thread, while completions are scored on worker threads (evaluation, Ray actors). So
the comparison runs in one long-lived helper process, whose main thread keeps the
library's own timeouts, and the caller waits with a deadline of its own; a helper
that hangs anyway is killed and replaced, and that completion counts as wrong.
"""
from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

DEADLINE_S = 30.0  # per comparison, on top of math_verify's own 5 s parse and verify timeouts


def _verify(gold_solution: str, completion: str) -> tuple[bool, str, str]:
    from math_verify import parse, verify

    gold, target = parse(gold_solution), parse(completion)
    return bool(verify(gold=gold, target=target)), _show(gold), _show(target)


def _show(parsed) -> str:
    return str(parsed[-1]) if parsed else ""


class _Helper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
            return self._pool

    def reset(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        for proc in list(getattr(pool, "_processes", {}).values()):
            proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)


_HELPER = _Helper()


def math_equal(gold_solution: str, completion: str) -> tuple[bool, dict]:
    """(equivalent?, details): lm-eval's `math_verify` metric, verify(parse(solution), parse(completion))."""
    pool = _HELPER.pool()
    try:
        ok, gold, got = pool.submit(_verify, gold_solution, completion).result(timeout=DEADLINE_S)
    except FutureTimeout:
        _HELPER.reset(pool)
        return False, {"math_verify": False, "error": f"comparison timed out after {DEADLINE_S:g}s"}
    except BrokenProcessPool:
        _HELPER.reset(pool)
        return False, {"math_verify": False, "error": "the math-verify helper process died"}
    return ok, {"math_verify": ok, "gold_parsed": gold, "parsed": got}
