"""The one exception type users see: the CLI prints its message on one line and exits 2."""
from contextlib import contextmanager
from typing import Iterator


class RippleError(Exception):
    """Bad input or an unusable resource, described in one line with the accepted values."""


class Terminated(KeyboardInterrupt):
    """SIGTERM as an exception: a driver stops as on Ctrl-C (records stored, MLflow runs closed, Ray
    shut down) and the command exits 143 instead of dying mid-write."""


_terminated: list[int] = []  # SIGTERMs seen: Ray turns an exception raised in its blocking calls into a
# plain KeyboardInterrupt, so the exit status cannot rely on the exception's type alone


def _raise_terminated(signum, frame) -> None:
    _terminated.append(signum)
    raise Terminated()


def was_terminated(exc: BaseException) -> bool:
    """Whether `exc` (a KeyboardInterrupt that reached the top) stands for a SIGTERM."""
    return isinstance(exc, Terminated) or bool(_terminated)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver them to the handlers in place before:
    the block (storing a batch of records that workers returned) completes. Outside the main thread
    it changes nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


def stop_on_sigterm(fresh: bool = False) -> None:
    """Raise `Terminated` in the main thread on SIGTERM. `ray.init` installs its own handler (a bare
    sys.exit that skips clean-up), so the grid driver calls this again once Ray is up."""
    import signal
    import threading

    if fresh:  # a new command: forget a SIGTERM an earlier one (in this process) received
        _terminated.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
