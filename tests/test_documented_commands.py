"""Every `python -m ...` command that the README, the Makefile, CI and the package's docstrings name
runs from where it lives now: its `--help` exits 0 with a usage line. A module moved without its
documentation (or the reverse) fails here."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COMMAND = re.compile(r"(?:\bpython3?|\$\(PY\)) -m (ripple(?:\.\w+)*)")


def documented_modules() -> list[str]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "Makefile", REPO / ".ci" / "run",
             *sorted((REPO / "ripple").rglob("*.py"))]
    return sorted({m for f in files for m in COMMAND.findall(f.read_text())})


MODULES = documented_modules()


def test_the_documented_commands_are_found():
    assert {"ripple.bench", "ripple.cli"} <= set(MODULES)  # `make bench`, `make demo`


@pytest.mark.parametrize("module", MODULES)
def test_every_documented_python_m_command_has_help(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: "), proc.stderr
