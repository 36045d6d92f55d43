"""The sandbox isolates wherever Ripple and its Python live: a virtual environment under /tmp,
/var/tmp or /dev/shm (the directories each run replaces with a private tmpfs) still runs programs
with kernel isolation, and the run sees of those directories only the environment's own files."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

import ripple
from tests.tasks.test_sandbox import STDLIB

PROJECT = Path(ripple.__file__).resolve().parents[1]  # the folder that holds the `ripple` package
PRIVATE = ("/tmp", "/var/tmp", "/dev/shm")

# Run by the environment's own interpreter: three programs in the sandbox, their results as JSON.
DRIVER = """
import dataclasses, json, sys
from ripple.tasks import sandbox
programs = json.loads(sys.argv[1])
results = {name: dataclasses.asdict(sandbox.run_program(source, timeout_s=60.0, memory_mb=1024))
           for name, source in programs.items()}
print(json.dumps({"missing": sandbox.missing_isolation(), "results": results}))
"""

STDLIB_PROGRAM = ("import importlib, json, os, sys\n"
                  f"for name in {STDLIB!r}:\n"
                  "    importlib.import_module(name)\n"
                  "print(json.dumps([sys.prefix, os.getuid()]))\n")

# Through libc, below the prelude: only the kernel's mounts stand in the way.
PLANT = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
made = []
for path in {targets!r}:
    fd = libc.open(path.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    if fd >= 0:
        libc.write(fd, b"planted", 7)
        libc.close(fd)
        made.append(path)
print(json.dumps(made))
"""

# Everything the run sees of the private directories; the runtime's own folders are listed, not walked
# (a project cloned under /tmp holds thousands of files), and checked to be there.
WALK = """
import json, os
seen = []
for top in {tops!r}:
    for root, dirs, files in os.walk(top):
        seen += [os.path.join(root, name) for name in dirs + files]
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in {runtime!r}]
print(json.dumps([os.getcwd(), seen, os.path.isdir({venv!r} + "/lib")]))
"""


def _environment(base: str) -> tuple[str, str]:
    """A folder made by mkdtemp (0700) under `base` holding a venv with the project importable."""
    folder = tempfile.mkdtemp(prefix="ripple-env-", dir=base)
    venv = f"{folder}/venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True)
    site = next(Path(venv).glob("lib/python*/site-packages"))
    # The project and the packages of the environment running this suite, as .pth lines.
    paths = [str(PROJECT), *[p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]]
    (site / "ripple-project.pth").write_text("\n".join(paths) + "\n")
    return folder, venv


@pytest.fixture(params=PRIVATE)
def environment(request):
    base = request.param
    if not os.path.isdir(base) or os.path.islink(base):
        pytest.skip(f"this machine has no {base} directory")
    folder, venv = _environment(base)
    try:
        yield base, folder, venv
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _allowed(path: str, roots: list[str]) -> bool:
    """`path` lies on the way to, or inside, one of `roots`."""
    return any(path == root or path.startswith(root + "/") or root.startswith(path + "/") for root in roots)


def test_an_environment_under_a_private_directory_runs_isolated(environment):
    base, folder, venv = environment
    marker = uuid.uuid4().hex
    secrets_ = [f"{folder}/secret-{marker}", f"{base}/ripple-secret-{marker}", f"/tmp/ripple-secret-{marker}"]
    for path in secrets_:
        Path(path).write_text("host only")
    targets = [f"{venv}/planted-{marker}", f"{folder}/planted-{marker}", f"{base}/planted-{marker}",
               f"{PROJECT}/planted-{marker}"]
    programs = {"stdlib": STDLIB_PROGRAM, "plant": PLANT.format(targets=targets),
                "walk": WALK.format(tops=[p for p in PRIVATE if os.path.isdir(p)], runtime=[venv, str(PROJECT)],
                                    venv=venv)}
    try:
        run = subprocess.run([f"{venv}/bin/python", "-c", DRIVER, json.dumps(programs)], capture_output=True,
                             text=True, timeout=300, cwd="/", env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert run.returncode == 0, run.stderr[-2000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        # kernel isolation on: no fallback, no warning line
        assert report["missing"] is None and "no kernel isolation" not in run.stderr, run.stderr[-2000:]
        stdlib, plant, walk = (report["results"][name] for name in ("stdlib", "plant", "walk"))

        assert stdlib["passed"], stdlib["error"]
        prefix, uid = json.loads(stdlib["stdout_tail"])
        assert prefix == venv  # the environment's own interpreter ran the program
        if os.geteuid() == 0:
            assert uid != 0  # as the per-run uid, which cannot enter the 0700 mkdtemp folder on the host

        assert plant["passed"], plant["error"]
        # the private tmpfs takes a write to base itself; nothing of it reaches the host
        assert f"{base}/planted-{marker}" in json.loads(plant["stdout_tail"])
        assert not any(os.path.exists(path) for path in targets)

        assert walk["passed"], walk["error"]
        workdir, seen, has_lib = json.loads(walk["stdout_tail"])
        runtime = [venv, str(PROJECT), os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix),
                   os.path.realpath(sys.executable), workdir]
        assert not any(path in seen for path in secrets_)
        strays = [path for path in seen if not _allowed(path, runtime)]
        assert not strays, strays[:10]
        assert venv in seen and has_lib  # the environment's files are there
    finally:
        for path in secrets_:
            Path(path).unlink(missing_ok=True)


def test_a_failure_of_the_sandboxs_own_making_is_refused_not_a_fallback(tmp_path, monkeypatch):
    """A path the sandbox itself got wrong is a bug to report, not a kernel refusal to fall back from:
    one line, and no program runs with weaker isolation."""
    from ripple.errors import RippleError
    from ripple.tasks import sandbox

    broken = tmp_path / "_sandbox_child.py"
    text = Path(sandbox._CHILD).read_text()
    assert text.count("    needed = outermost(runtime)\n") == 1
    broken.write_text(text.replace("    needed = outermost(runtime)\n",
                                   "    needed = outermost(runtime) + ['/nonexistent/ripple-runtime']\n"))
    monkeypatch.setattr(sandbox, "_CHILD", str(broken))
    monkeypatch.setattr(sandbox, "_MISSING", None)
    monkeypatch.setattr(sandbox, "_REFUSALS", {})
    with pytest.raises(RippleError) as info:
        sandbox.run_program("print('hello')")
    message = str(info.value)
    assert "\n" not in message and message.startswith("sandbox: bug: private filesystems failed"), message
    assert "/nonexistent/ripple-runtime" in message
