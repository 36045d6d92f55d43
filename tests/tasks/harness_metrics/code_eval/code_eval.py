"""A stand-in for Hugging Face evaluate's `code_eval` metric, which lm-evaluation-harness's
humaneval and mbpp tasks load with `evaluate.load("code_eval")`.

evaluate fetches that metric's script from the Hugging Face hub at run time (neither its wheel
nor its sdist ships it), and this machine reaches no hub. This script does what the metric's
documentation and lm-eval's update notes (../shared/data/EVAL_PROTOCOLS.md) say it does, written
here without Ripple's code: each candidate followed by a newline and the reference test is
executed with `exec` in fresh globals (so `__name__` is not "__main__") in its own process,
with a 3.0 s timeout; it passes when nothing raises. pass@k uses the unbiased estimator.
It does not reproduce the metric's `reliability_guard` (which disables os.getcwd, os.chdir,
shutil.rmtree and more): the tests' programs use none of those.
"""
import multiprocessing
import os

import datasets
import evaluate
import numpy as np


def _execute(program, timeout, queue):
    import contextlib
    import io
    import signal

    def alarm(signum, frame):
        raise TimeoutError("timed out")

    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(program, {})  # noqa: S102 - this is what the metric does
        queue.put("passed")
    except BaseException as exc:  # noqa: BLE001 - any failure of the program is a failed test
        queue.put(f"failed: {type(exc).__name__}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _passes(program, timeout):
    queue = multiprocessing.get_context("fork").Queue()
    proc = multiprocessing.get_context("fork").Process(target=_execute, args=(program, timeout, queue))
    proc.start()
    proc.join(timeout + 1)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return False
    return not queue.empty() and queue.get() == "passed"


def _pass_at_k(n, c, k):
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


class CodeEval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="stand-in for evaluate's code_eval (module docstring)", citation="", inputs_description="",
            features=datasets.Features({"predictions": datasets.Sequence(datasets.Value("string")),
                                        "references": datasets.Value("string")}))

    def _compute(self, predictions, references, k=(1, 10, 100), num_workers=4, timeout=3.0):
        if os.getenv("HF_ALLOW_CODE_EVAL", "0") != "1":
            raise ValueError("set HF_ALLOW_CODE_EVAL=1 to run model-written code")
        results = [[_passes(candidate + "\n" + test, timeout) for candidate in candidates]
                   for candidates, test in zip(predictions, references)]
        totals = np.array([len(r) for r in results])
        correct = np.array([sum(r) for r in results])
        scores = {f"pass@{kk}": float(np.mean([_pass_at_k(n, c, kk) for n, c in zip(totals, correct)]))
                  for kk in k if (totals >= kk).all()}
        return scores, results
