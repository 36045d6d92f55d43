"""`ripple ...` in the test process: the CLI is a thin shell over the API, so a test that is about a
command's output and exit status, not about a process, calls `ripple.cli.main` and pays no interpreter
start-up, imports or model load of a subprocess."""
from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class CliRun:
    """What a subprocess run would give: exit status, standard output and standard error."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str], env: Mapping[str, str] | None = None, unset: Sequence[str] = ()) -> CliRun:
    """`ripple ARGV` with `env` set and `unset` removed for the call only; argparse's own refusals
    (SystemExit) come back as their exit status, as from a process."""
    from ripple.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for key in unset:
            mp.delenv(key, raising=False)
        for key, value in (env or {}).items():
            mp.setenv(key, value)
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return CliRun(code, out.getvalue(), err.getvalue())
