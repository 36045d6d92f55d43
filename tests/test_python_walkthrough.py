"""docs/python.md runs as a notebook would: its Python blocks in order, in one namespace, in a fresh
folder. The grid's cells then hold what `ripple.evaluate` measured on the same samples."""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parent.parent / "docs" / "python.md"


def test_the_python_walkthrough_runs(tmp_path, monkeypatch):
    from tests.platform.gridtools import RAY_ENV

    for key, value in RAY_ENV.items():
        if not key.startswith("RAY_AUTH"):  # the auth mode stays as this process first used it
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 5
    notebook: dict = {"__name__": "walkthrough"}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), notebook)
    out, mine, base, run = (notebook[k] for k in ("out", "mine", "base", "run"))
    assert (tmp_path / "commits.png").stat().st_size > 0 and out.trace
    assert mine.decoder == "local:Margin" and mine.n == base.n == 12
    table = {r["decoder"]: r for r in run.table().to_dicts()}
    assert set(table) == {"confidence", "local:Margin"}
    for cell, result in ((table["local:Margin"], mine), (table["confidence"], base)):
        assert (cell["accuracy"], cell["mean_nfe"]) == (result.accuracy, result.mean_nfe)
