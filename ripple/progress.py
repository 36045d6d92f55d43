"""Progress bars that suit both a terminal and a log.

On a terminal a bar redraws twice a second. Off one (`ray job submit` logs, CI, output
piped to a file) every redraw becomes bytes in the log, so there a bar redraws at most
every LOG_INTERVAL seconds; its final state is always written when it closes.
"""
from __future__ import annotations

import sys
from typing import Any, Iterable

LOG_INTERVAL = 30.0  # seconds between redraws when stderr is not a terminal


def progress(iterable: Iterable | None = None, **kwargs: Any):
    """A tqdm bar (on stderr unless `file=` says otherwise); `disable=True` silences it. Update the
    description with `set_description(text, refresh=False)` so the redraw interval holds."""
    from tqdm import tqdm

    kwargs.setdefault("mininterval", 0.5)
    if not _is_terminal(kwargs.get("file") or sys.stderr):
        kwargs["mininterval"] = max(kwargs["mininterval"], LOG_INTERVAL)
        kwargs["maxinterval"] = max(kwargs.get("maxinterval", 10.0), LOG_INTERVAL)
    return tqdm(iterable, **kwargs)


def _is_terminal(stream: Any) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False
