"""Run untrusted, model-generated Python. This is the only module that does.

Each program runs in a fresh `python -I` child, in its own session (so the whole
process group can be killed), in a fresh temporary directory, with a minimal
environment and these limits, applied by the child to itself before the
program starts:

- rlimits: address space (memory), CPU seconds, process count, file size, no core dumps;
- when the host runs as root (which ignores RLIMIT_NPROC), a privilege drop to
  a uid/gid of its own per run, so the process limit counts only this run's
  processes, the program cannot touch files owned by others, and every process
  it leaves behind can be killed with `kill(-1)` as that uid;
- a prelude that disables destructive functions (kill, fork, system, remove,
  rename, Popen, rmtree, ...) and refuses writes outside the working directory
  through `open`, `io`, `_io`, `os` and `posix` alike.

Success is not the exit status: the harness prints a per-run random sentinel
after the last statement, so `exit(0)` or `os._exit(0)` before the asserts fails.
Output is read incrementally and only its tail is kept. The prelude is a
safety net, not a security boundary; the rlimits, the uid and the wall clock are.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

FILE_SIZE_LIMIT = 16 * 2**20  # bytes a program may write to one file
_UID_BASE = 2_000_000_000  # per-run uids live far above any real account
_UID_SLOTS = 256  # concurrent runs per host process
_UID_BLOCKS = (2**32 - 2 - _UID_BASE) // _UID_SLOTS  # one block of slots per process; > pid_max (2**22)
_DRAIN_S = 1.0  # after the kill, how long to wait for the pipes to close


@dataclass(frozen=True)
class ExecutionResult:
    """What happened to one program."""

    passed: bool  # ran to its end: the harness sentinel came after the last statement
    timed_out: bool  # killed by the wall clock
    error: str | None  # last traceback line, a signal name, or why it did not finish
    stdout_tail: str  # the last `output_cap` characters the program printed
    returncode: int | None  # negative: killed by that signal
    seconds: float  # wall time of the whole run


# The child's first code. It runs as root when the host is root, reads its
# configuration and the program from stdin (so the sentinel is on no command
# line, environment or file), limits itself, drops privileges, then runs the program.
_CHILD = r'''
def _harness():
    import builtins, io, json, linecache, os, resource, sys, traceback
    cfg = json.loads(sys.stdin.buffer.readline())
    source = sys.stdin.buffer.read().decode("utf-8", "replace")
    for name in cfg["preload"]:  # the stdlib may be unreadable once privileges are dropped
        try:
            __import__(name)
        except Exception:
            pass
    import posix, shutil, subprocess
    # CPU: SIGXCPU at the soft limit names the cause; the hard limit one second later is SIGKILL.
    for res, soft, hard in ((resource.RLIMIT_AS, cfg["memory"], cfg["memory"]),
                            (resource.RLIMIT_CPU, cfg["cpu"], cfg["cpu"] + 1),
                            (resource.RLIMIT_NPROC, cfg["nproc"], cfg["nproc"]),
                            (resource.RLIMIT_FSIZE, cfg["fsize"], cfg["fsize"]),
                            (resource.RLIMIT_CORE, 0, 0)):
        current = resource.getrlimit(res)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(res, (soft, hard))
    if cfg["uid"] is not None:
        try:
            os.setgroups([])
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        except OSError as exc:
            raise SystemExit(f"sandbox: could not drop privileges: {exc}")
        if 0 in os.getresuid():
            raise SystemExit("sandbox: could not drop privileges")

    def disabled(name):
        def refuse(*args, **kwargs):
            raise PermissionError(f"{name} is disabled in the sandbox")
        return refuse

    import _io
    # `posix` is what `os` wraps. Below the prelude the kernel guards what the per-run uid may not
    # touch (others' files, processes), so `posix` loses only what the uid may still do outside:
    # create, move or link files in world-writable places such as /tmp, and signal.
    for module, names in ((os, cfg["os"]), (posix, cfg["posix"]), (shutil, cfg["shutil"]),
                          (subprocess, cfg["subprocess"])):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, disabled(f"{module.__name__}.{name}"))
    root = os.path.realpath(os.getcwd())
    real_open, real_os_open, real_mkdir = io.open, posix.open, posix.mkdir
    fsdecode, realpath, RealFileIO = os.fsdecode, os.path.realpath, _io.FileIO

    def inside(path):
        target = realpath(fsdecode(path))
        return target == root or target.startswith(root + os.sep)

    def refuse_outside(path):
        if not isinstance(path, int) and not inside(path):
            raise PermissionError(f"writing outside the sandbox directory is disabled: {path!r}")

    def guarded_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+"):
            refuse_outside(file)
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
            refuse_outside(path)
        return real_os_open(path, flags, *args, **kwargs)

    def guarded_mkdir(path, *args, **kwargs):
        refuse_outside(path)
        return real_mkdir(path, *args, **kwargs)

    class GuardedFileIO(RealFileIO):
        def __init__(self, file, mode="r", *args, **kwargs):
            if any(c in mode for c in "wax+"):
                refuse_outside(file)
            super().__init__(file, mode, *args, **kwargs)

    builtins.open = io.open = _io.open = guarded_open
    io.FileIO = _io.FileIO = GuardedFileIO
    os.open = posix.open = guarded_os_open
    os.mkdir = posix.mkdir = guarded_mkdir
    sentinel = cfg["sentinel"].encode()
    write, exit_now, stdout, stderr = os.write, os._exit, sys.stdout, sys.stderr
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    del cfg
    program = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(source, "<program>", "exec"), program)
    except BaseException:
        try:
            stdout.flush()
        finally:
            traceback.print_exc(file=stderr)
            stderr.flush()
            exit_now(1)
    try:
        stdout.flush()
    finally:
        write(1, b"\n" + sentinel + b"\n")
        exit_now(0)


_harness()
'''

# Imported before the privilege drop; what generated solutions commonly import.
_PRELOAD = (
    "abc", "array", "ast", "bisect", "cmath", "collections", "collections.abc", "contextlib", "copy",
    "dataclasses", "datetime", "decimal", "enum", "fractions", "functools", "hashlib", "heapq",
    "itertools", "math", "numbers", "operator", "queue", "random", "re", "statistics", "string",
    "struct", "textwrap", "time", "typing", "unicodedata", "pathlib", "tempfile", "threading",
)
_DISABLED_OS = (
    "kill", "killpg", "system", "popen", "fork", "forkpty", "remove", "removedirs", "rmdir", "unlink",
    "rename", "renames", "replace", "truncate", "putenv", "unsetenv", "setsid", "setpgid", "setpgrp",
    "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chroot", "execv", "execve", "execl",
    "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
    "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "symlink", "link", "mkfifo",
    "mknod", "utime",
)
_DISABLED_POSIX = ("kill", "killpg", "rename", "replace", "symlink", "link", "mkfifo", "mknod")
_DISABLED_SHUTIL = ("rmtree", "move", "chown")
_DISABLED_SUBPROCESS = ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput")


class _UidPool:
    """Hands out per-run uids: unique among this process's threads, and across processes by `_uid_block`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # FIFO, so a uid is reused as late as possible: zombies of a killed run still
        # count against its process limit until init reaps them.
        self._free = deque(range(_UID_SLOTS))

    @contextmanager
    def lease(self) -> Iterator[int]:
        with self._cond:
            while not self._free:
                self._cond.wait()
            slot = self._free.popleft()
        try:
            yield _UID_BASE + _uid_block() * _UID_SLOTS + slot
        finally:
            with self._cond:
                self._free.append(slot)
                self._cond.notify()


def _uid_block() -> int:
    """This process's block of uids: distinct for live processes of one pid namespace, and
    shifted per namespace, so containers sharing a kernel's uids rarely meet."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        namespace = 0
    return (os.getpid() + namespace * 2654435761) % _UID_BLOCKS


_POOL = _UidPool()


def _reset_pool_in_child() -> None:
    global _POOL
    _POOL = _UidPool()  # a forked child has a new pid and must not inherit a held lock


os.register_at_fork(after_in_child=_reset_pool_in_child)


@contextmanager
def _identity() -> Iterator[tuple[int, int] | None]:
    """The (uid, gid) to drop to, or None when we are not root and cannot drop."""
    if os.geteuid() != 0:
        yield None
        return
    with _POOL.lease() as uid:
        yield uid, uid


class _Tail:
    """The last `cap` bytes of a stream, without ever holding more."""

    def __init__(self, cap: int) -> None:
        self.cap, self.data = cap, bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk[-self.cap:]
        if len(self.data) > self.cap:
            del self.data[: len(self.data) - self.cap]


def _exited(pid: int) -> bool:
    """Has `pid` exited? Peeks without reaping, so its pid (and process group id) stay reserved."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_all(pgid: int, ident: tuple[int, int] | None) -> None:
    """SIGKILL the run's process group and, when it had its own uid, every process of that uid."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if ident is not None:  # catches processes that left the group; kill(-1) spares the caller itself
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=ident[0], group=ident[1], extra_groups=[],
                       env={}, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10, check=False)


def _pump(proc: subprocess.Popen[bytes], payload: bytes, out: _Tail, err: _Tail, deadline: float,
          until_exit: bool) -> bool:
    """Feed stdin and read stdout/stderr until both close, the deadline passes or (if
    `until_exit`) the main process exits. Returns True when the deadline stopped it."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        if payload and not proc.stdin.closed:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        elif not proc.stdin.closed:
            proc.stdin.close()
        sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        for fd in sinks:
            sel.register(fd, selectors.EVENT_READ)
        sent = 0
        while any(key.fd in sinks for key in sel.get_map().values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            for key, _ in sel.select(min(remaining, 0.25)):
                if key.fd in sinks:
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        sinks[key.fd].add(chunk)
                    else:
                        sel.unregister(key.fd)
                    continue
                try:
                    sent += os.write(key.fd, payload[sent: sent + 65536])
                except BlockingIOError:
                    continue
                except BrokenPipeError:  # the child stopped reading; its output says why
                    sent = len(payload)
                if sent >= len(payload):
                    sel.unregister(key.fd)
                    proc.stdin.close()
            if until_exit and _exited(proc.pid):
                return False  # leftover children may hold the pipes; they are killed next
    return False


def _error(returncode: int | None, timed_out: bool, timeout_s: float, stderr: str, passed: bool) -> str | None:
    if passed:
        return None
    if timed_out:
        return f"timed out after {timeout_s:g}s"
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if lines:
        return lines[-1].strip()
    return "the program exited before it finished"


def run_program(source: str, *, timeout_s: float = 5.0, cpu_s: float | None = None, memory_mb: int = 512,
                max_procs: int = 32, output_cap: int = 64_000) -> ExecutionResult:
    """Run `source` as `__main__` in the sandbox; it passes if every statement ran.

    `cpu_s` defaults to the wall-clock timeout plus one second. Safe to call from
    many threads and processes at once.
    """
    start = time.monotonic()
    sentinel = secrets.token_hex(16)
    cpu = math.ceil(cpu_s if cpu_s is not None else timeout_s + 1)
    with _identity() as ident, tempfile.TemporaryDirectory(
            prefix="ripple-sandbox-", ignore_cleanup_errors=True) as workdir:
        if ident is not None:
            os.chown(workdir, *ident)
        config = {
            "sentinel": sentinel, "uid": ident[0] if ident else None, "gid": ident[1] if ident else None,
            "memory": memory_mb * 2**20, "cpu": max(1, cpu), "nproc": max_procs, "fsize": FILE_SIZE_LIMIT,
            "preload": _PRELOAD, "os": _DISABLED_OS, "posix": _DISABLED_POSIX, "shutil": _DISABLED_SHUTIL,
            "subprocess": _DISABLED_SUBPROCESS,
        }
        payload = json.dumps(config).encode() + b"\n" + source.encode("utf-8", "replace")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        out, err = _Tail(max(output_cap, 256)), _Tail(max(output_cap, 4096))
        proc = subprocess.Popen([sys.executable, "-I", "-c", _CHILD], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workdir, env=env,
                                start_new_session=True, close_fds=True)
        try:
            timed_out = _pump(proc, payload, out, err, start + timeout_s, until_exit=True)
        finally:
            _kill_all(proc.pid, ident)  # the main process is not reaped yet, so its pgid is still ours
            _pump(proc, b"", out, err, time.monotonic() + _DRAIN_S, until_exit=False)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            returncode = proc.wait()
    marker = b"\n" + sentinel.encode() + b"\n"
    passed = not timed_out and returncode == 0 and out.data.endswith(marker)
    stdout = bytes(out.data[: -len(marker)] if out.data.endswith(marker) else out.data)
    error = _error(returncode, timed_out, timeout_s, err.data.decode("utf-8", "replace"), passed)
    return ExecutionResult(passed=passed, timed_out=timed_out, error=error,
                           stdout_tail=stdout.decode("utf-8", "replace")[-output_cap:],
                           returncode=returncode, seconds=time.monotonic() - start)


def check_function(program: str, tests: Sequence[str], **limits: Any) -> ExecutionResult:
    """Run `program` followed by the assert lines in `tests`; passes only if every assert ran.

    `limits` are `run_program`'s keyword arguments."""
    source = program.rstrip() + "\n\n\n" + "\n".join(tests) + "\n"
    return run_program(source, **limits)
