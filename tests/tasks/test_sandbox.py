"""The sandbox contains what generated code may do and still reports honestly."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ripple.errors import RippleError
from ripple.tasks import sandbox
from ripple.tasks.sandbox import ExecutionResult, check_function, run_program

ADD = "def add(a, b):\n    return a + b\n"
REACHABLE = ("ctypes", "socket")  # what a system Python offers any uid; the venv's here hides it under /root


@pytest.fixture
def stdlib_reachable(monkeypatch):
    """Programs import ctypes and socket after the privilege drop, as under a system Python."""
    monkeypatch.setattr(sandbox, "_PRELOAD", sandbox._PRELOAD + REACHABLE)


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


def _all_refused(sources):
    for source in sources:
        result = run_program(source)
        assert not result.passed, source
        # Refused by the prelude, by the kernel, or the target is not even visible in the run's /tmp.
        assert "PermissionError" in result.error or "FileNotFoundError" in result.error, (source, result.error)


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
    for parent in ("os.getppid()", str(os.getpid())):  # the process above it, and this one by its host pid
        result = run_program(f"import os\nprint(open(f'/proc/{{{parent}}}/environ', 'rb').read())")
        assert not result.passed and "hunter2" not in result.stdout_tail
        assert "PermissionError" in result.error or "FileNotFoundError" in result.error, result.error


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


def test_the_program_cannot_kill_its_parent(stdlib_reachable):
    for source in ("import os\nos.kill(os.getppid(), 9)", "import posix\nposix.kill(posix.getppid(), 9)",
                   "import os\nos.killpg(os.getpgid(os.getppid()), 9)", "import signal, os\nos.kill(1, 9)"):
        result = run_program(source)
        assert not result.passed and "PermissionError" in result.error
    # Below the prelude, the kernel is what stops it: libc's kill() finds no such process in the
    # run's pid namespace (or, without one, gets EPERM as the per-run uid). Signal 0 only asks.
    result = run_program(f"import ctypes\nrc = ctypes.CDLL(None).kill({os.getpid()}, 0)\nassert rc == 0, 'kill failed'")
    assert not result.passed and "kill failed" in result.error


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


def test_a_fork_the_server_cannot_make_is_one_line_and_the_server_lives_on(tmp_path, monkeypatch):
    failing = tmp_path / "_sandbox_child.py"  # fork(2) fails, as when the user is out of processes
    text = Path(sandbox._CHILD).read_text()
    assert text.count("pid = os.fork()\n") == 1
    failing.write_text(text.replace("pid = os.fork()\n", "raise OSError(11, 'Resource temporarily unavailable')\n"))
    monkeypatch.setattr(sandbox, "_CHILD", str(failing))
    monkeypatch.setattr(sandbox, "_REFUSALS", {True: "", False: ""})
    monkeypatch.setattr(sandbox, "_MISSING", "")
    servers = []
    for _ in range(2):
        with pytest.raises(RippleError) as refused:
            run_program("print(1)")
        assert str(refused.value) == "sandbox: could not fork the run: [Errno 11] Resource temporarily unavailable"
        servers.append(sandbox._SERVER)
    # the same server both times: it refused the run and went on
    assert servers[0] is servers[1] and servers[0].child == str(failing) and servers[0].proc.poll() is None


def test_the_fork_server_is_started_again_after_it_dies_and_a_forked_host_gets_its_own():
    draw = "import random\nprint(random.random())"
    first = run_program(draw)
    server = sandbox._SERVER
    assert first.passed and server is not None
    server.proc.kill()
    server.proc.wait(timeout=30)
    second = run_program(draw)
    assert second.passed and sandbox._SERVER is not server  # a new server
    assert first.stdout_tail != second.stdout_tail  # each run seeds `random` itself: no state shared
    parents = sandbox._SERVER
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked host: the parent's server is not its own
        try:
            ok = sandbox._SERVER is None and run_program("print(6 * 7)").stdout_tail == "42\n"
            os.write(write, b"1" if ok and sandbox._SERVER.proc.pid != parents.proc.pid else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
    assert run_program("print('parent')").stdout_tail == "parent\n" and sandbox._SERVER is parents  # still serving


# ---------------------------------------------------------------------------- below the prelude
# Hostile programs that reach the kernel directly (ctypes, socket), run as the suite's user and,
# when that is root, again as an ordinary user: only kernel isolation contains them.

THROWAWAY_UID = 1_900_000_000 + os.getpid() % 100_000  # no account; below the per-run uids (2e9 and up)
DRIVER = """
import dataclasses, json, subprocess, sys
sys.path.insert(0, sys.argv[1])
import sandbox
request = json.loads(sys.stdin.read())
others = [subprocess.Popen(["sleep", "60"]) for _ in range(request["others"])]
try:
    missing = sandbox.missing_isolation()
    result = sandbox.run_program(request["source"], **request["limits"]) if request["source"] else None
finally:
    for other in others:
        other.kill()
        other.wait()
print(json.dumps({"missing": missing, "result": result and dataclasses.asdict(result)}))
"""


class ThisUser:
    """Runs programs in this process, as the suite's user."""

    @property
    def missing(self) -> str | None:
        return sandbox.missing_isolation()

    def run(self, source: str, others: int = 0, **limits) -> ExecutionResult:
        """`others`: processes of the same user kept running meanwhile."""
        sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(others)]
        try:
            return run_program(source, **limits)
        finally:
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()


class OrdinaryUser:
    """Runs programs through a driver process under a throwaway uid, with a copy of the sandbox
    module and a Python that uid can run, so its standard library is importable to the program."""

    def __init__(self, python: str, folder: str) -> None:
        self.python, self.folder, self.warnings = python, folder, []

    def _call(self, source: str | None, others: int = 0, **limits) -> dict:
        request = {"source": source, "others": others, "limits": limits}
        proc = subprocess.run([self.python, "-I", "-c", DRIVER, self.folder], input=json.dumps(request),
                              capture_output=True, text=True, user=THROWAWAY_UID, group=THROWAWAY_UID,
                              extra_groups=[], cwd="/", timeout=180,
                              env={"PATH": "/usr/local/bin:/usr/bin:/bin", "RIPPLE_SANDBOX_SECRET": "hunter2"})
        assert proc.returncode == 0, proc.stderr
        self.warnings = [line for line in proc.stderr.splitlines() if line.startswith("sandbox:")]
        return json.loads(proc.stdout)

    @property
    def missing(self) -> str | None:
        missing = self._call(None)["missing"]
        assert len(self.warnings) == (1 if missing else 0), self.warnings  # one line says why, or none
        return missing

    def run(self, source: str, others: int = 0, **limits) -> ExecutionResult:
        return ExecutionResult(**self._call(source, others, **limits)["result"])


def _python_for(uid: int) -> str:
    """The first Python that `uid` can run with ctypes and socket: ours, else a system one."""
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")]
    for python in dict.fromkeys(c for c in candidates if c):
        try:
            probe = subprocess.run([python, "-I", "-c", "import ctypes, socket"], user=uid, group=uid,
                                   extra_groups=[], cwd="/", env={}, capture_output=True, check=False)
        except OSError:  # not even executable for that uid
            continue
        if probe.returncode == 0:
            return python
    pytest.fail(f"no Python runs as an ordinary user here (tried {', '.join(candidates)}); install python3")


@pytest.fixture(scope="session")
def ordinary_user():
    folder = tempfile.mkdtemp(prefix="ripple-sandbox-copy-")
    os.chmod(folder, 0o755)
    for name in ("sandbox.py", "_sandbox_child.py"):
        shutil.copy(Path(sandbox.__file__).with_name(name), folder)
    os.mkdir(f"{folder}/ripple", 0o755)  # what sandbox.py imports: ripple.errors alone
    Path(f"{folder}/ripple/__init__.py").touch()
    shutil.copy(Path(sandbox.__file__).parents[1] / "errors.py", f"{folder}/ripple")
    for path in Path(folder).rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    try:
        yield OrdinaryUser(_python_for(THROWAWAY_UID), folder)
    finally:
        subprocess.run(["kill", "-9", "-1"], user=THROWAWAY_UID, group=THROWAWAY_UID, extra_groups=[], env={},
                       cwd="/", check=False)
        shutil.rmtree(folder)


# as root the core cases run twice, as this user and as a throwaway ordinary user; a suite that already
# runs as an ordinary user is that second run
DRIVERS = ["this user", "an ordinary user"] if os.geteuid() == 0 else ["this user"]


@pytest.fixture(params=DRIVERS)
def hostile(request, stdlib_reachable):
    if request.param == "this user":
        return ThisUser()
    return request.getfixturevalue("ordinary_user")


def _needs_isolation(hostile) -> None:
    """Skip, naming why, where the kernel refuses the namespaces this case needs."""
    missing = hostile.missing
    if missing:
        pytest.skip(f"sandbox: no kernel isolation ({missing})")


def _needs_isolation_unless_root(hostile) -> None:
    """Without namespaces only root's per-run uid holds the case (it counts and kills by uid)."""
    if isinstance(hostile, OrdinaryUser) or os.geteuid() != 0:
        _needs_isolation(hostile)


def _received(server: socket.socket) -> bytes:
    """Whatever reached a TCP listener: the bytes of a connection accepted within half a second."""
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


def test_no_tcp_connection_reaches_a_local_service(hostile):
    _needs_isolation(hostile)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = hostile.run(f"import socket\ns = socket.socket()\ns.settimeout(3)\ns.connect(('127.0.0.1', {port}))\n"
                             "s.sendall(b'run this')\ns.close()")
        assert _received(server) == b""
    assert not result.passed and "Network is unreachable" in result.error


def test_no_udp_datagram_reaches_a_local_service(hostile):
    _needs_isolation(hostile)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        result = hostile.run(f"import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'run this', "
                             f"('127.0.0.1', {port}))")
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.recv(1024)
    assert not result.passed and "Network is unreachable" in result.error


def test_files_made_through_ctypes_stay_inside_the_run(hostile):
    _needs_isolation(hostile)
    name = f"ripple-sandbox-probe-{uuid.uuid4().hex}"
    paths = [f"{where}/{name}" for where in ("/tmp", "/var/tmp", "/dev/shm")]
    source = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              f"for path in {paths!r}:\n"
              "    fd = libc.open(path.encode(), 0o101, 0o644)  # O_WRONLY | O_CREAT\n"
              "    assert fd >= 0, ctypes.get_errno()\n"
              "    assert libc.write(fd, b'x' * 1000, 1000) == 1000\n")
    try:
        result = hostile.run(source)
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


def test_writing_is_bounded_in_total_not_only_per_file(hostile):
    _needs_isolation(hostile)
    source = "for i in range(200):\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * (15 * 2**20))\n"
    with _FreeDisk(tempfile.gettempdir()) as disk:
        result = hostile.run(source, timeout_s=60.0)
    assert not result.passed and not result.timed_out
    assert "No space left on device" in result.error
    assert disk.least >= 0.99 * disk.before, (disk.before, disk.least)


def _alive(comm: str) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, state = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        if name.split("(", 1)[1] == comm and state.split()[0] not in ("Z", "X"):
            return True  # a killed orphan stays a zombie until init reaps it: that counts as gone
    return False


ESCAPES = {"stays in the group": "", "double-forks into a new session": "    posix.setsid()\n"
           "    if posix.fork():\n        posix._exit(0)\n"}


@pytest.mark.parametrize("leftover", ESCAPES)
def test_processes_left_behind_are_gone_after_the_run(hostile, leftover):
    if leftover != "stays in the group":
        _needs_isolation_unless_root(hostile)
    marker = f"rpl-{uuid.uuid4().hex[:8]}"  # its process name, to find it on the host
    source = ("import ctypes, posix, time\nready, tell = posix.pipe()\nif posix.fork() == 0:\n" + ESCAPES[leftover]
              + f"    ctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)\n"
              "    posix.write(tell, b'x')\n    time.sleep(60)\n    posix._exit(0)\n"
              "assert posix.read(ready, 1) == b'x'")
    start = time.monotonic()
    result = hostile.run(source, timeout_s=10.0)
    assert result.passed, result.error
    assert time.monotonic() - start < 8.0  # the leftover held no pipe open long
    deadline = time.monotonic() + 3.0
    while _alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(marker)


def test_the_process_limit_counts_only_the_runs_processes(hostile):
    _needs_isolation_unless_root(hostile)
    source = ("import posix, time\nn = 0\nwhile True:\n    try:\n        pid = posix.fork()\n    except OSError:\n"
              "        break\n    if pid == 0:\n        time.sleep(30)\n        posix._exit(0)\n    n += 1\nprint(n)")
    result = hostile.run(source, others=40, max_procs=16, timeout_s=20.0)
    assert result.passed, result.error
    assert 12 <= int(result.stdout_tail) < 16  # bounded, and the 40 other processes of the user did not count


def test_privileges_are_dropped(hostile):
    # As root: the run's own uid; in a user namespace: the capabilities it gave are gone too.
    source = ("import os\nassert 0 not in os.getresuid() and 0 not in os.getresgid()\n"
              "status = dict(line.split(':', 1) for line in open('/proc/self/status'))\n"
              "assert int(status['CapEff'], 16) == 0 and int(status['CapPrm'], 16) == 0, status['CapEff']\n"
              "print(status['NoNewPrivs'].strip())")
    result = hostile.run(source)
    assert result.passed, result.error
    assert result.stdout_tail == ("0\n" if hostile.missing else "1\n")


def test_no_other_process_environment_is_readable(hostile, monkeypatch):
    monkeypatch.setenv("RIPPLE_SANDBOX_SECRET", "hunter2")  # the ordinary user's driver has it too
    source = ("import os\nfor pid in filter(str.isdigit, os.listdir('/proc')):\n    try:\n"
              "        print(pid, b'hunter2' in open(f'/proc/{pid}/environ', 'rb').read())\n"
              "    except OSError:\n        pass")
    result = hostile.run(source)
    assert result.passed, result.error
    assert "True" not in result.stdout_tail


def test_where_the_kernel_refuses_isolation_one_line_says_so_and_the_limits_hold(tmp_path, monkeypatch, caplog):
    refusing = tmp_path / "_sandbox_child.py"  # unshare(2) fails as under a kernel or seccomp that forbids it
    text = Path(sandbox._CHILD).read_text()
    assert text.count("call(libc.unshare, flags)") == 1
    assert text.count("    refuse_unreadable(import_path)\n") == 1
    # These programs need only preloaded modules: past the refusal that an unreadable import path
    # brings (its own test below), the limits must still hold.
    text = text.replace("    refuse_unreadable(import_path)\n", "")
    refusing.write_text(text.replace("call(libc.unshare, flags)", "raise PermissionError(1, 'Operation not permitted')"))
    monkeypatch.setattr(sandbox, "_CHILD", str(refusing))
    monkeypatch.setattr(sandbox, "_MISSING", None)
    monkeypatch.setattr(sandbox, "_REFUSALS", {False: ""})
    with caplog.at_level(logging.WARNING, logger=sandbox.__name__):
        hello = run_program("print('hello')")
        memory = run_program("x = bytearray(10**10)", memory_mb=256)
        cpu = run_program("while True:\n    pass", timeout_s=10.0, cpu_s=1)
        bomb = run_program("import posix\nwhile True:\n    try:\n        posix.fork()\n    except OSError:\n        pass",
                           timeout_s=2.0, max_procs=16)
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert warnings[0].startswith("sandbox: no kernel isolation (namespaces failed: [Errno 1] Operation not permitted)")
    assert hello.passed and hello.stdout_tail == "hello\n"
    assert "MemoryError" in memory.error and cpu.error == "killed by SIGXCPU" and bomb.timed_out


# ---------------------------------------------------------------------------- the standard library
STDLIB = ("calendar", "csv", "difflib", "base64", "binascii", "pprint", "textwrap", "fractions", "decimal",
          "statistics", "heapq", "bisect", "string", "re", "json", "itertools", "functools", "collections",
          "typing", "dataclasses", "datetime", "math", "random", "zlib", "hashlib", "html", "xml.etree.ElementTree",
          "unittest", "doctest", "email", "sqlite3", "array", "struct", "copy", "enum", "operator", "io", "abc",
          "numbers", "cmath", "uuid", "shlex", "fnmatch", "glob", "gzip", "zipfile", "tarfile", "locale",
          "gettext", "argparse", "logging", "inspect", "ast", "tokenize", "graphlib", "contextvars", "weakref",
          "queue", "sched", "secrets", "ipaddress", "urllib.parse", "http", "wave", "colorsys", "timeit", "trace")


def _hidden_ancestor(path: str) -> str | None:
    """The outermost ancestor of `path` other users cannot enter."""
    parts = Path(os.path.realpath(path)).parts
    for depth in range(2, len(parts)):
        if not os.stat(Path(*parts[:depth])).st_mode & 0o001:
            return str(Path(*parts[:depth]))
    return None


def test_every_module_a_program_may_import_imports_under_the_sandboxs_user():
    """None of these is preloaded; on this machine the interpreter lives under /root (0700) and,
    as root, the program runs as a per-run uid that cannot enter it on the host."""
    assert not {"calendar", "csv", "difflib", "base64", "binascii", "pprint"} & set(sandbox._PRELOAD)
    print(f"interpreter {sys.base_prefix}; hidden ancestor {_hidden_ancestor(sys.base_prefix)}; "
          f"uid {os.geteuid()}")
    source = ("import importlib, os\n"
              f"for name in {STDLIB!r}:\n"
              "    importlib.import_module(name)\n"
              "print(os.getuid())\n")
    result = run_program(source, timeout_s=60.0, memory_mb=1024)
    assert result.passed, result.error
    if os.geteuid() == 0:
        assert int(result.stdout_tail.split()[-1]) != 0  # really as the unprivileged per-run uid


def test_the_hidden_directory_shows_only_the_interpreter():
    """What covers a root-only home inside the run holds the way to the import path and no more."""
    hidden = _hidden_ancestor(sys.base_prefix)
    if hidden is None or os.geteuid() != 0 or sandbox.missing_isolation():
        assert run_program("import calendar").passed  # nothing is hidden here: plain access works
        return
    source = (f"import os\nprint(sorted(os.listdir({hidden!r})))\n"
              f"open({hidden!r} + '/ripple-probe', 'w')\n")
    result = run_program(source)
    assert not result.passed and ("PermissionError" in result.error or "Read-only" in result.error), result.error
    shown = eval(result.stdout_tail.strip().splitlines()[0])
    on_host = sorted(os.listdir(hidden))
    expected = Path(os.path.realpath(sys.base_prefix)).relative_to(hidden).parts[0]
    assert shown == [expected] and len(on_host) >= len(shown), (shown, on_host)


def test_without_namespaces_an_unreadable_standard_library_is_refused_in_one_line(monkeypatch):
    """Without a mount namespace nothing can expose the interpreter: as root with Python in a
    root-only directory the sandbox refuses before any program runs, instead of scoring wrong."""
    monkeypatch.setattr(sandbox, "_MISSING", "forced off by the test")
    monkeypatch.setattr(sandbox, "_REFUSALS", {})
    if os.geteuid() == 0 and _hidden_ancestor(sys.base_prefix):
        with pytest.raises(RippleError) as info:
            run_program("import calendar")
        message = str(info.value)
        assert "\n" not in message and "cannot read" in message and "import path" in message, message
    else:
        assert run_program("import calendar").passed


def test_a_program_run_as_a_module_skips_its_main_block():
    source = "x = 1\nif __name__ == '__main__':\n    raise SystemExit('ran main')\n"
    assert not run_program(source).passed
    assert run_program(source, as_main=False).passed
    assert not run_program("assert __name__ == '__main__'", as_main=False).passed
