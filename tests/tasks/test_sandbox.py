"""The sandbox contains what generated code may do and still reports honestly."""

import os
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ripple.tasks.sandbox import ExecutionResult, check_function, run_program

ADD = "def add(a, b):\n    return a + b\n"


def test_a_correct_program_passes():
    result = check_function(ADD, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    assert isinstance(result, ExecutionResult)
    assert result.passed and not result.timed_out and result.error is None and result.returncode == 0


def test_a_failing_assert_fails_and_is_named():
    result = check_function(ADD, ["assert add(1, 2) == 3", "assert add(2, 2) == 5"])
    assert not result.passed and not result.timed_out
    assert result.error is not None and "AssertionError" in result.error


def test_errors_are_reported_by_their_last_traceback_line():
    assert run_program("def f(:\n    pass").error.startswith("SyntaxError")
    assert run_program("undefined_name + 1").error == "NameError: name 'undefined_name' is not defined"


def test_stdout_is_returned_without_the_sentinel():
    result = run_program("print('hello')\nprint('no newline', end='')")
    assert result.passed and result.stdout_tail == "hello\nno newline"


def test_an_infinite_loop_times_out_quickly():
    start = time.monotonic()
    result = run_program("while True:\n    pass", timeout_s=1.0)
    assert time.monotonic() - start < 1.0 + 2.0
    assert result.timed_out and not result.passed and "timed out" in result.error


def test_the_cpu_limit_stops_a_busy_program_before_the_wall_clock():
    result = run_program("while True:\n    pass", timeout_s=10.0, cpu_s=1)
    assert not result.passed and not result.timed_out and result.seconds < 5
    assert result.error == "killed by SIGXCPU"


def test_memory_bombs_fail_without_hurting_the_host():
    for source in ("x = bytearray(10**10)", "x = []\nwhile True:\n    x.append(bytearray(10**6))"):
        result = run_program(source, memory_mb=256, timeout_s=10.0)
        assert not result.passed and not result.timed_out
        assert "MemoryError" in result.error
    assert check_function(ADD, ["assert add(2, 3) == 5"]).passed  # the host still works


def test_a_fork_bomb_is_contained():
    blocked = run_program("import os\nwhile True:\n    os.fork()")
    assert not blocked.passed and "os.fork is disabled" in blocked.error
    # Around the prelude: only the process limit and the group kill stand in the way.
    start = time.monotonic()
    bomb = run_program("import posix\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n        pass",
                       timeout_s=2.0, max_procs=16)
    assert time.monotonic() - start < 2.0 + 2.0
    assert not bomb.passed and bomb.timed_out
    assert check_function(ADD, ["assert add(2, 3) == 5"]).passed


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # a killed orphan stays a zombie until init reaps it


# Leaving the process group is only caught by the per-run uid, which needs a root host.
LEFTOVERS = ["stays in the group"] + (["leaves the group"] if os.geteuid() == 0 else [])


@pytest.mark.parametrize("leftover", LEFTOVERS)
def test_processes_left_behind_are_killed(leftover):
    escape = "    posix.setsid()\n" if leftover == "leaves the group" else ""
    source = ("import posix, time\npid = posix.fork()\nif pid == 0:\n" + escape
              + "    time.sleep(60)\n    posix._exit(0)\nprint(pid)")
    start = time.monotonic()
    result = run_program(source, timeout_s=10.0)
    assert result.passed and time.monotonic() - start < 5.0
    child = int(result.stdout_tail)
    deadline = time.monotonic() + 3.0
    while not _dead(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(child)


def test_privileges_are_dropped():
    # On a root host the program must not run as root; elsewhere it never could.
    assert run_program("import os\nassert 0 not in os.getresuid() and 0 not in os.getresgid()").passed


def _all_refused(sources):
    for source in sources:
        result = run_program(source)
        assert not result.passed, source
        assert "PermissionError" in result.error, (source, result.error)


def test_files_outside_the_working_directory_are_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    outside = Path("/tmp") / f"ripple-sandbox-probe-{uuid.uuid4().hex}"
    attempts = [
        f"import os\nos.remove({str(victim)!r})",
        f"import os\nos.unlink({str(victim)!r})",
        f"import os\nos.rename({str(victim)!r}, 'stolen')",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
        f"open({str(victim)!r}, 'w').write('gone')",
        f"import pathlib\npathlib.Path({str(victim)!r}).write_text('gone')",
        f"open({str(outside)!r}, 'w').write('x')",
        f"import os\nos.close(os.open({str(outside)!r}, os.O_CREAT | os.O_WRONLY))",
    ]
    _all_refused(attempts)
    assert victim.read_text() == "precious"
    assert not outside.exists()


def test_lower_level_routes_around_the_prelude_are_closed_too(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    probe = Path("/tmp") / f"ripple-sandbox-probe-{uuid.uuid4().hex}"  # /tmp is writable by every uid
    attempts = [
        f"import posix\nposix.unlink({str(victim)!r})",
        f"import posix\nposix.rename({str(victim)!r}, 'stolen')",
        f"import posix\nposix.close(posix.open({str(probe)!r}, posix.O_CREAT | posix.O_WRONLY))",
        f"import _io\n_io.open({str(probe)!r}, 'w').write('x')",
        f"import _io\n_io.FileIO({str(probe)!r}, 'w').write(b'x')",
        f"import io\nio.FileIO({str(probe)!r}, 'a').write(b'x')",
        f"import posix\nposix.mkdir({str(probe)!r})",
        f"import os\nos.makedirs({str(probe)!r} + '/a/b')",
        f"import os\nos.symlink('/etc/passwd', {str(probe)!r})",
    ]
    _all_refused(attempts)
    assert victim.read_text() == "precious"
    assert not probe.exists()
    inside = run_program("import os, _io\nos.makedirs('a/b')\n_io.FileIO('a/b/f', 'w').write(b'x')\n"
                         "print(open('a/b/f').read())")
    assert inside.passed and inside.stdout_tail == "x\n"


def test_the_parent_environment_cannot_be_read_through_proc(monkeypatch):
    monkeypatch.setenv("RIPPLE_SANDBOX_SECRET", "hunter2")
    result = run_program("import os\nprint(open(f'/proc/{os.getppid()}/environ', 'rb').read())")
    assert not result.passed and "hunter2" not in result.stdout_tail
    assert "PermissionError" in result.error or "Permission denied" in result.error


def test_the_working_directory_is_fresh_private_and_removed():
    source = "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen('scratch.txt', 'w').write('ok')"
    first, second = run_program(source), run_program(source)
    assert first.passed and second.passed
    cwd_first, listing = first.stdout_tail.splitlines()
    assert listing == "[]" and cwd_first != second.stdout_tail.splitlines()[0]
    assert not Path(cwd_first).exists()


def test_huge_output_is_capped_and_the_tail_kept():
    start = time.monotonic()
    result = run_program("for _ in range(10**4):\n    print('x' * 10**4)\nprint('the end')",
                         timeout_s=20.0, output_cap=1000)
    assert time.monotonic() - start < 20.0
    assert len(result.stdout_tail) <= 1000 and result.stdout_tail.endswith("x\nthe end\n")
    assert result.passed


def test_exiting_before_the_asserts_is_a_failure():
    for early_exit in ("exit(0)", "quit()", "import sys\nsys.exit(0)", "import os\nos._exit(0)"):
        result = check_function(ADD + early_exit, ["assert add(1, 1) == 3"])
        assert not result.passed, early_exit
    result = check_function(ADD + "import os\nos._exit(0)", ["assert add(1, 1) == 3"])
    assert result.returncode == 0 and result.error is not None


def test_the_parent_environment_does_not_leak(monkeypatch):
    monkeypatch.setenv("RIPPLE_SANDBOX_SECRET", "hunter2")
    result = run_program("import os\nprint(sorted(os.environ))\nassert 'RIPPLE_SANDBOX_SECRET' not in os.environ")
    assert result.passed and "hunter2" not in result.stdout_tail
    assert set(eval(result.stdout_tail)) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"}


def test_the_program_cannot_kill_its_parent():
    for source in ("import os\nos.kill(os.getppid(), 9)", "import posix\nposix.kill(posix.getppid(), 9)",
                   "import os\nos.killpg(os.getpgid(os.getppid()), 9)", "import signal, os\nos.kill(1, 9)"):
        result = run_program(source)
        assert not result.passed and "PermissionError" in result.error
    # Below the prelude, the per-run uid is what stops it: libc's kill() gets EPERM.
    result = run_program("import ctypes, os\nrc = ctypes.CDLL(None).kill(os.getppid(), 9)\n"
                         "assert rc == 0, 'kill failed'")
    assert not result.passed
    assert os.getpid() > 0  # still here


def test_shell_and_subprocesses_are_disabled():
    for source in ("import os\nos.system('true')", "import subprocess\nsubprocess.run(['true'])",
                   "import subprocess\nsubprocess.Popen(['true'])"):
        result = run_program(source)
        assert not result.passed and "disabled in the sandbox" in result.error


def test_sixteen_programs_in_parallel():
    def job(i: int) -> tuple[int, ExecutionResult]:
        program = f"def f(x):\n    print({i})\n    return x * {i}\n"
        return i, check_function(program, [f"assert f(2) == {2 * i}", f"assert {i} % 3 != 0"])

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(job, range(16)))
    for i, result in results:
        assert result.passed == (i % 3 != 0), (i, result)
        assert result.stdout_tail == f"{i}\n"


# --- Below the prelude: programs whose standard library (ctypes, socket) is importable after the
# privilege drop, as on a host with a system Python. Only kernel isolation contains them.

@pytest.fixture
def reachable_stdlib(monkeypatch):
    from ripple.tasks import sandbox

    monkeypatch.setattr(sandbox, "_PRELOAD", sandbox._PRELOAD + ("ctypes", "socket"))


def _received(server) -> bytes:
    """Whatever reached the listener: the bytes of a connection accepted within half a second."""
    server.settimeout(0.5)
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return b""
    with conn:
        conn.settimeout(0.5)
        try:
            return conn.recv(1024) or b"(connected)"
        except TimeoutError:
            return b"(connected)"


def test_no_tcp_connection_reaches_a_local_service(reachable_stdlib):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = run_program(f"import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('127.0.0.1', {port}))\n"
                             "s.sendall(b'run this')\ns.close()")
        assert _received(server) == b""
    assert not result.passed and "Network is unreachable" in result.error


def test_files_made_through_ctypes_stay_inside_the_run(reachable_stdlib):
    name = f"ripple-sandbox-probe-{uuid.uuid4().hex}"
    paths = [f"{where}/{name}" for where in ("/tmp", "/var/tmp", "/dev/shm")]
    source = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              f"for path in {paths!r}:\n"
              "    fd = libc.open(path.encode(), 0o101, 0o644)  # O_WRONLY | O_CREAT\n"
              "    assert fd >= 0, ctypes.get_errno()\n"
              "    assert libc.write(fd, b'x' * 1000, 1000) == 1000\n")
    try:
        result = run_program(source)
        assert result.passed, result.error  # it wrote them, below the prelude ...
        assert [p for p in paths if os.path.exists(p)] == []  # ... but not on the host
    finally:
        for path in paths:
            Path(path).unlink(missing_ok=True)


class _FreeDisk:
    """The least free space seen on a filesystem while the block runs, polled every 20 ms."""

    def __init__(self, path: str) -> None:
        self.path, self.stop = path, threading.Event()

    def free(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def poll(self) -> None:
        while not self.stop.wait(0.02):
            self.least = min(self.least, self.free())

    def __enter__(self):
        self.before = self.least = self.free()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.least = min(self.least, self.free())


def test_writing_is_bounded_in_total_not_only_per_file():
    source = "for i in range(200):\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * (15 * 2**20))\n"
    with _FreeDisk(tempfile.gettempdir()) as disk:
        result = run_program(source, timeout_s=60.0)
    assert not result.passed and not result.timed_out
    assert "No space left on device" in result.error
    assert disk.least >= 0.99 * disk.before, (disk.before, disk.least)
