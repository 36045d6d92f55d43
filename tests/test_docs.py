"""Documentation cannot drift: README.md is a front page (at most 300 lines), every `ripple ...`
command in README.md and docs/*.md is parsed by Ripple's own argument parser (a renamed flag fails
here), and every relative link resolves, anchors included. The guides' code blocks run in
tests/test_plugins.py."""
import argparse
import re
import shlex
from pathlib import Path

import pytest

from ripple.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[\[\]|()<>]|\.\.\.|\b[A-Z][A-Z_]{2,}\b")  # a usage synopsis, not a runnable line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def commands(text: str) -> list[tuple[str, bool]]:
    """(`ripple ...` command, whether it is a whole line of a code block: continuations joined, a `$ `
    prompt dropped) for code blocks and inline spans (often fragments: their flags are checked)."""
    found, fenced, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fenced, pending = not fenced, ""
            continue
        if fenced:
            line = pending + line.strip().removeprefix("$ ")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if line.startswith("ripple "):
                found.append((line.split(" #")[0].strip(), True))
    found += [(m, False) for m in re.findall(r"`(ripple [^`]+)`", text)]
    # printed output (`ripple lm-eval: error: ...`, `ripple | gsm8k | ...`) is no command
    return [(c, whole) for c, whole in found if re.fullmatch(r"[a-z][\w-]*", c.split()[1])]


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The (sub)parser the leading words select, and the words after them."""
    while words:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or words[0] not in subs[0].choices:
            break
        parser, words = subs[0].choices[words[0]], words[1:]
    return parser, words


DOCUMENTED = sorted({(page.name, c, whole) for page in PAGES for c, whole in commands(page.read_text())})


def test_readme_is_a_front_page_and_the_docs_are_found():
    assert len((REPO / "README.md").read_text().splitlines()) <= 300
    names = {p.name for p in PAGES}
    assert {"models.md", "decoders.md", "tasks.md", "grids.md", "sweeps.md", "reports.md", "embedded-models.md",
            "benchmark.md", "troubleshooting.md", "plugins.md", "adding-a-decoder.md", "adding-a-task.md"} <= names
    assert len(DOCUMENTED) > 40


@pytest.mark.parametrize("page,command,whole", DOCUMENTED)
def test_every_documented_ripple_command_parses(page, command, whole):
    words = shlex.split(command)[1:]
    if words[:1] == ["lm-eval"]:  # every later word is the harness's own
        return
    parser, rest = _subparser(build_parser(), words)
    assert parser.prog != "ripple", f"{page}: `{command}` names no ripple command"
    known = {s for a in parser._actions for s in a.option_strings}
    flags = [w.split("=")[0] for w in rest if w.startswith("--")]
    unknown = [f for f in flags if f not in known]
    assert not unknown, f"{page}: `{command}`: {parser.prog} has no {', '.join(unknown)}"
    if whole and not PLACEHOLDER.search(command):  # a runnable line parses as a whole
        try:
            build_parser().parse_args(words)
        except SystemExit as exc:
            raise AssertionError(f"{page}: `{command}` does not parse") from exc


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path) if path else page
            if not where.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
