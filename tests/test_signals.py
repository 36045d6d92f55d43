"""SIGTERM becomes an exception that unwinds like Ctrl-C; inside `signals_deferred` a signal waits
until the block (storing returned records) is done."""
import os
import signal

import pytest

from ripple.errors import Terminated, signals_deferred, stop_on_sigterm


@pytest.fixture
def sigterm_raises():
    """The handlers `ripple` runs with (an in-process Ray Tune run earlier in the session replaces SIGINT's)."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stop_on_sigterm()
    yield
    for s, handler in previous.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("signum,raised", [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_inside_the_block_is_delivered_after_it(sigterm_raises, signum, raised):
    done = []
    with pytest.raises(raised) as exc:
        with signals_deferred():
            os.kill(os.getpid(), signum)
            for _ in range(1000):  # the handler would have run by now, were it not deferred
                done.append(1)
            done.append("end")
    assert type(exc.value) is raised and done[-1] == "end" and len(done) == 1001
    with pytest.raises(raised):  # outside the block the handler is back
        os.kill(os.getpid(), signum)
        for _ in range(1000):
            pass
