"""Progress bars in logs: off a terminal a bar redraws at most every LOG_INTERVAL seconds, so a
grid's `ray job submit` log holds a few lines rather than one per finished batch."""
import io

from ripple.progress import LOG_INTERVAL, progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _draws(stream: io.StringIO) -> int:
    return stream.getvalue().count("\r")


def test_off_a_terminal_a_bar_draws_only_its_start_and_end():
    log = io.StringIO()
    bar = progress(total=500, file=log, desc="grid", mininterval=0, miniters=1)  # as the terminal test below
    for i in range(500):
        bar.set_description(f"grid: cells {i // 50}/10", refresh=False)
        bar.update(1)
    bar.close()
    assert bar.mininterval >= LOG_INTERVAL
    assert _draws(log) == 2  # the opening line and the final state, nothing between (this loop takes < 30 s)
    assert "500/500" in log.getvalue() and "cells 9/10" in log.getvalue()


def test_on_a_terminal_a_bar_redraws_as_tqdm_does():
    tty = Terminal()
    bar = progress(range(200), file=tty, mininterval=0, miniters=1)
    for _ in bar:
        pass
    assert bar.mininterval == 0 and _draws(tty) > 100


def test_disabled_bar_writes_nothing():
    log = io.StringIO()
    for _ in progress(range(10), file=log, disable=True):
        pass
    assert log.getvalue() == ""
