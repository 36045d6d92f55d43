"""Output paths checked before any work starts: a bad folder never costs a model load or a Ray start
(the command line checks every FILE and DIR option this way; the Python API the store and folders it
is given)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from .errors import RippleError

# Output path options carry one of these metavars (ripple/cli.py finds them in the parser)
FILE, DIR = "FILE", "DIR"


def _write_probe(directory: Path, flag: str, given: str) -> None:
    """Write a nameless file in `directory`: os.access would say yes to root on a read-only filesystem."""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        raise RippleError(f"{flag} {given}: cannot write in {directory} ({exc.strerror or exc})") from None


def writable_path(path: str | Path, flag: str, kind: str) -> None:
    """Refuse an output path before any work starts: its folder must exist and take new files; a FILE
    must not be a directory, a DIR must not be a file (a missing DIR is created by the command)."""
    given = Path(path).expanduser()
    parent = given.parent
    try:
        if kind == FILE and given.is_dir():
            raise RippleError(f"{flag} {path}: is a directory, not a file")
        if kind == DIR and given.exists() and not given.is_dir():
            raise RippleError(f"{flag} {path}: is a file, not a directory")
        if not parent.exists():
            raise RippleError(f"{flag} {path}: directory {parent} does not exist")
        if not parent.is_dir():
            raise RippleError(f"{flag} {path}: {parent} is not a directory")
        if kind == FILE and given.exists():
            with open(given, "ab"):  # appends nothing: only asks whether the file takes writes
                pass
    except OSError as exc:
        raise RippleError(f"{flag} {path}: cannot reach it ({exc.strerror or exc})") from None
    if kind == DIR and given.is_dir():
        _write_probe(given, flag, str(path))
    else:
        _write_probe(parent.absolute(), flag, str(path) if kind == FILE else f"{path} (to be created)")
