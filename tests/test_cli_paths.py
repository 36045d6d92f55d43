"""Every output path option of every command, found through the CLI's own parser (so an option added
later is covered), is refused before any work when its folder is missing, a file stands where a folder
is needed or the reverse, or the folder takes no files: one line naming option, path and problem, exit 2."""
import argparse
import subprocess
import sys
import time

import pytest

import ripple.cli as cli
from ripple.cli import DIR, FILE, build_parser, main, path_options

UNWRITABLE = "/proc/ripple-nowhere"  # procfs takes no new files, not even from root
# options named like paths that are read, never written (checked by the code that reads them)
INPUTS = {"--data-dir", "--file"}  # read, not written: `ripple trace --file` reads a generate --trace file


def _commands(parser: argparse.ArgumentParser, prefix: tuple = ()) -> list[tuple[tuple, argparse.ArgumentParser]]:
    out = [(prefix, parser)] if prefix else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, (*prefix, name))
    return out


def _minimal_argv(sub: argparse.ArgumentParser, skip: argparse.Action) -> list[str]:
    """Values argparse accepts for every required argument (they are never used: the path fails first)."""
    def value(a):
        return str(a.choices[0]) if a.choices else "1" if a.type in (int, float) else "x"

    argv = []
    chosen = [g._group_actions[0] for g in sub._mutually_exclusive_groups if g.required]
    for a in sub._actions:
        if a is skip or isinstance(a, argparse._SubParsersAction):
            continue
        if not a.option_strings:
            argv.append(value(a))
        elif a.required or a in chosen:
            argv += [a.option_strings[-1], value(a)]
    return argv


PARSER = build_parser()
OPTIONS = [(cmd, sub, a) for cmd, sub in _commands(PARSER) for a in path_options(sub)]


def test_the_parser_marks_every_output_path_option():
    found = {(" ".join(cmd), a.option_strings[-1]) for cmd, _, a in OPTIONS}
    assert found >= {("generate", "--trace"), ("eval", "--samples-out"), ("analyze", "--out"), ("train-tiny", "--out"),
                     ("grid", "--store"), ("sweep", "--store"), ("report", "--out")}
    # an option added later with a path-like name but no FILE/DIR metavar would escape the check
    for cmd, sub in _commands(PARSER):
        for a in sub._actions:
            flag = a.option_strings[-1] if a.option_strings else ""
            takes_value = a.nargs != 0  # a switch (`ripple eval --traces`) names no path
            if any(w in flag for w in ("out", "store", "trace", "file", "path", "dir")) and flag not in INPUTS \
                    and takes_value:
                assert a.metavar in (FILE, DIR), f"ripple {' '.join(cmd)} {flag} is not marked FILE or DIR"


@pytest.fixture
def no_work(monkeypatch):
    """Every command function fails the test if reached: the path must be refused before it runs."""
    def forbidden(args):
        raise AssertionError(f"command {args.command} ran despite a bad path")

    for name in dir(cli):
        if name.startswith("cmd_"):
            monkeypatch.setattr(cli, name, forbidden)


def _cases(tmp_path, kind):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "a-dir").mkdir()
    wrong = (str(tmp_path / "a-dir"), "is a directory, not a file") if kind == FILE else \
        (str(tmp_path / "a-file"), "is a file, not a directory")
    return [(str(tmp_path / "missing" / "out"), f"directory {tmp_path / 'missing'} does not exist"), wrong,
            (str(tmp_path / "a-file" / "out"), f"{tmp_path / 'a-file'} is not a directory"),
            (UNWRITABLE if kind == DIR else f"{UNWRITABLE}.jsonl", "cannot write in /proc")]


@pytest.mark.parametrize("cmd,sub,action", OPTIONS,
                         ids=[f"{' '.join(c)} {a.option_strings[-1]}" for c, _, a in OPTIONS])
def test_a_bad_output_path_is_one_line_and_exit_2_before_any_work(tmp_path, capsys, no_work, cmd, sub, action):
    flag = action.option_strings[-1]
    for path, problem in _cases(tmp_path, action.metavar):
        before = sorted(tmp_path.rglob("*"))
        assert main([*cmd, *_minimal_argv(sub, action), flag, path]) == 2
        cap = capsys.readouterr()
        assert cap.out == "" and cap.err.count("\n") == 1, cap.err
        assert cap.err.startswith(f"ripple {cmd[0]}: error: {flag} {path}") and problem in cap.err, cap.err
        assert sorted(tmp_path.rglob("*")) == before  # nothing written


def test_from_the_command_line_no_model_loads(tmp_path):
    """A real process: the refusal comes in about the time Python takes to start, with no traceback."""
    argv = ["generate", "--model", "ripple-tiny", "--prompt", "hi", "--decoder", "default", "--gen-length", "48",
            "--block-length", "16", "--trace", str(tmp_path / "no-such-folder" / "trace.jsonl")]
    code = ("import sys; from ripple.cli import main; rc = main(sys.argv[1:]); "
            "print(sorted(m for m in ('ray', 'ripple.platform.runtime.loading') if m in sys.modules)); sys.exit(rc)")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert time.perf_counter() - t0 < 10
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"ripple generate: error: --trace {argv[-1]}: directory ")
    assert "does not exist" in proc.stderr
    assert proc.stdout.strip() == "[]"  # neither the model loader nor Ray was imported
