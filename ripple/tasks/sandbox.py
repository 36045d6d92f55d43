"""Run untrusted, model-generated Python. This is the only module that does.

Each program runs in its own child (`_sandbox_child.py`), in its own session, with a minimal
environment: a fork of a `python -I` fork server that this process starts once, with what every
run imports already imported (an interpreter's start was most of a short program's cost). The
security boundary is the kernel:

- namespaces: its own network namespace with no interface up (not even loopback), its own IPC
  and pid namespaces (when the program ends, every process it left behind dies with the
  namespace), and its own mount namespace in which the host's filesystems are read-only and the
  working directory, /tmp, /var/tmp and /dev/shm are one fresh tmpfs of `SCRATCH_LIMIT` bytes
  that vanishes with the run; what the program needs of the host (the interpreter and its import
  path) is bound back read-only at its own paths where it lived under those directories or under
  one the run's uid cannot enter. Root unshares them directly; an ordinary user first enters a user
  namespace mapping only itself. A kernel that refuses them leaves the limits below, and
  `missing_isolation` says why, logged once per process;
- rlimits: address space (memory), CPU seconds, process count, file size, no core dumps;
- when the host runs as root (which ignores RLIMIT_NPROC), a privilege drop to a uid/gid of its
  own per run, so the process limit counts only this run's processes and the program cannot read
  or touch files owned by others. An ordinary user needs no pool: the user namespace gives the
  process limit a count of its own, and the program drops the capabilities it got there;
- a prelude that disables destructive functions (kill, fork, system, remove, rename, Popen,
  rmtree, ...) and refuses writes outside the working directory through `open`, `io`, `_io`,
  `os` and `posix` alike: a safety net, not a boundary (`ctypes` walks around it).

Success is not the exit status: the harness prints a per-run random sentinel after the last
statement, so `exit(0)` or `os._exit(0)` before the asserts fails. Output is read incrementally
and only its tail is kept.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ripple.errors import RippleError

FILE_SIZE_LIMIT = 16 * 2**20  # bytes a program may write to one file
SCRATCH_LIMIT = 64 * 2**20  # bytes in its working directory, /tmp, /var/tmp and /dev/shm together (memory)
SCRATCH_INODES = 8192  # files and directories there
_CHILD = str(Path(__file__).with_name("_sandbox_child.py"))
_UNREADABLE = "sandbox: the program's user cannot read"  # the child's refusal, before the program runs
_BUG = "sandbox: bug:"  # the child's word for a failure of its own making (not the kernel's refusal)
_MODULE_NAME = "program"  # `__name__` of a program not run as __main__
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


# Imported before the privilege drop and the prelude. None: the child refuses to run any program whose
# user cannot read the interpreter's import path (`refuse_unreadable`), so a program imports what it uses
# itself, after the prelude has disarmed `os` and `open` (a module cannot capture the real functions first),
# and a run does not pay for some thirty modules it mostly never uses (about a third of a run's CPU).
_PRELOAD: tuple[str, ...] = ()
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


def _reset_in_child() -> None:
    global _POOL, _PROBE_LOCK, _SERVER, _SERVER_LOCK
    _POOL = _UidPool()  # a forked child has a new pid and must not inherit a held lock
    _PROBE_LOCK = threading.Lock()
    if _SERVER is not None:  # the parent's server: a forked child starts its own
        _SERVER.sock.close()
    _SERVER, _SERVER_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)


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


class _ServerGone(Exception):
    """The fork server did not answer a request (it died, or was killed)."""


class _Run:
    """One program's process, forked by the fork server: the host's ends of its pipes, its pid, and
    its exit status as the server reports it on the run's own socket."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int, control: socket.socket) -> None:
        self.pid, self.stdin, self.stdout, self.stderr, self.control = pid, stdin, stdout, stderr, control
        self.returncode: int | None = None

    def close_stdin(self) -> None:
        if self.stdin is not None:
            os.close(self.stdin)
            self.stdin = None

    def exited(self) -> bool:
        """Has it exited? The server reports without reaping, so its pid (and process group id) stay
        reserved until `wait`."""
        if self.returncode is None:
            try:
                self._status(self.control.recv(64))
            except BlockingIOError:
                pass
        return self.returncode is not None

    def wait(self, timeout: float = 30.0) -> int:
        """Its returncode (negative: killed by that signal); then the server reaps it."""
        try:
            if self.returncode is None:
                self.control.settimeout(timeout)
                try:
                    self._status(self.control.recv(64))
                except TimeoutError:
                    raise RippleError(f"sandbox: the fork server reported no exit of run {self.pid} "
                                      f"within {timeout:g}s of its kill") from None
        finally:
            self.control.close()  # the server reaps it now
            for fd in (self.stdout, self.stderr):
                os.close(fd)
            self.close_stdin()
        return self.returncode

    def _status(self, message: bytes) -> None:
        if not message:
            raise RippleError(f"sandbox: the fork server ({_CHILD} --serve) ended during a run")
        self.returncode = int(message)


class _ForkServer:
    """`python -I _sandbox_child.py --serve`: one per host process, started at its first program and
    ended by the host's exit (its socket closes). Runs are requested under a lock; each answers on a
    socket of its own, so threads do not wait for each other's runs."""

    def __init__(self) -> None:
        host, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.child = _CHILD  # the child's source it serves (a changed one gets a server of its own)
        with server:
            self.proc = subprocess.Popen([sys.executable, "-I", self.child, "--serve"], stdin=server,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                                         env=_BASE_ENV, start_new_session=True, close_fds=True)
        self.sock, self.lock = host, threading.Lock()

    def start(self, env: dict[str, str]) -> _Run:
        """Ask for a run with `env`; the host keeps one end of each of its pipes and its socket."""
        own, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        (in_read, in_write), (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe(), os.pipe()

        def abandon() -> None:
            for fd in (in_write, out_read, err_read):
                os.close(fd)
            own.close()

        try:
            with self.lock:
                socket.send_fds(self.sock, [json.dumps(env).encode()], [in_read, out_write, err_write, theirs.fileno()])
        except OSError as exc:
            abandon()
            raise _ServerGone(str(exc)) from None
        finally:
            for fd in (in_read, out_write, err_write):
                os.close(fd)
            theirs.close()
        own.settimeout(30.0)
        try:
            answer = own.recv(256)
        except OSError:
            answer = b""
        if not answer.isdigit():
            abandon()
            if answer.startswith(b"-"):  # the server could not fork: it is fine, the machine is not
                raise RippleError(f"sandbox: {answer[1:].decode(errors='replace')}")
            raise _ServerGone("no pid")
        own.setblocking(False)  # `exited` polls it; `wait` gives it a timeout
        return _Run(int(answer), in_write, out_read, err_read, own)

    def close(self) -> None:
        self.sock.close()


def _fork(env: dict[str, str]) -> _Run:
    """A run forked by this process's fork server, which is started (again, if it died) as needed."""
    global _SERVER
    for _ in range(2):
        with _SERVER_LOCK:
            if _SERVER is None or _SERVER.proc.poll() is not None or _SERVER.child != _CHILD:
                if _SERVER is not None:
                    _SERVER.close()
                _SERVER = _ForkServer()
            server = _SERVER
        try:
            return server.start(env)
        except _ServerGone:
            with _SERVER_LOCK:
                if _SERVER is server:
                    server.close()
                    _SERVER = None
    raise RippleError(f"sandbox: the fork server ({_CHILD} --serve) could not start a program twice in a row")


_SERVER: _ForkServer | None = None
_SERVER_LOCK = threading.Lock()
# the fork server's environment, and every run's with its own HOME and TMPDIR
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def _kill_all(pgid: int, ident: tuple[int, int] | None) -> None:
    """SIGKILL the run's process group, its leader should it have left the group (unreaped, its pid is
    still the run's) and, when it had its own uid, every process of that uid (isolated runs need no
    uid: the group holds pid 1 of their pid namespace)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if ident is not None:  # catches processes that left the group; kill(-1) spares the caller itself
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=ident[0], group=ident[1], extra_groups=[],
                       env={}, cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10, check=False)


def _pump(run: _Run, payload: bytes, out: _Tail, err: _Tail, deadline: float, until_exit: bool) -> bool:
    """Feed stdin and read stdout/stderr until both close, the deadline passes or (if
    `until_exit`) the main process exits. Returns True when the deadline stopped it."""
    with selectors.DefaultSelector() as sel:
        if payload and run.stdin is not None:
            os.set_blocking(run.stdin, False)
            sel.register(run.stdin, selectors.EVENT_WRITE)
        else:
            run.close_stdin()
        sinks = {run.stdout: out, run.stderr: err}
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
                    run.close_stdin()
            if until_exit and run.exited():
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
                max_procs: int = 32, output_cap: int = 64_000, as_main: bool = True) -> ExecutionResult:
    """Run `source` in the sandbox; it passes if every statement ran.

    `as_main` False runs it as an imported module would run (`__name__` is not "__main__", so an
    `if __name__ == "__main__":` block is skipped), as lm-evaluation-harness's `code_eval` does.
    `cpu_s` defaults to the wall-clock timeout plus one second. Safe to call from many threads
    and processes at once. Raises RippleError (one line) when the sandbox's user could not import
    the interpreter's standard library here, or the sandbox failed by a fault of its own, before
    any program runs.
    """
    isolate = missing_isolation() is None
    refusal = _refusal(isolate)
    if refusal:
        raise RippleError(refusal)
    return _execute(source, isolate, timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                    max_procs=max_procs, output_cap=output_cap, as_main=as_main)


def missing_isolation() -> str | None:
    """Why the kernel will not isolate sandboxed programs here (the failing step), or None when it does.

    Probed once per process by running an empty program isolated; a refusal is logged once, and
    programs then run with the rlimits (and, as root, the per-run uid) only."""
    global _MISSING
    with _PROBE_LOCK:
        if _MISSING is None:
            probe = _execute("pass", True, timeout_s=30.0, cpu_s=None, memory_mb=512, max_procs=32, output_cap=4096)
            error = probe.error or ""
            # Isolation worked but what the program's user can read did not, or the sandbox made a
            # mistake of its own: refuse (one line) rather than fall back to weaker isolation.
            refused = error.startswith((_UNREADABLE, _BUG))
            if refused:
                _REFUSALS[True] = error
            _MISSING = "" if probe.passed or refused else (
                error or "the isolated probe failed").removeprefix("sandbox: ")
            if _MISSING:
                limits = "rlimits and a per-run uid" if os.geteuid() == 0 else "rlimits"
                logging.getLogger(__name__).warning(
                    "sandbox: no kernel isolation (%s); programs run with %s only: no private network, "
                    "filesystem or pid namespace", _MISSING, limits)
    return _MISSING or None


def _refusal(isolate: bool) -> str:
    """The one-line reason programs cannot be scored fairly in this mode ("" when they can): the
    program's user cannot read part of the interpreter's import path. Probed once per mode."""
    with _PROBE_LOCK:
        if isolate not in _REFUSALS:
            probe = _execute("pass", isolate, timeout_s=30.0, cpu_s=None, memory_mb=512, max_procs=32,
                             output_cap=4096)
            error = probe.error or ""
            _REFUSALS[isolate] = error if error.startswith((_UNREADABLE, _BUG)) else ""
    return _REFUSALS[isolate]


_MISSING: str | None = None
_REFUSALS: dict[bool, str] = {}
_PROBE_LOCK = threading.Lock()


@contextmanager
def _workdir(isolate: bool, ident: tuple[int, int] | None) -> Iterator[str]:
    """The program's working directory: isolated, a path the child makes in the run's own tmpfs;
    otherwise a fresh host directory, removed afterwards."""
    if isolate:
        yield f"/tmp/ripple-sandbox-{secrets.token_hex(8)}"
        return
    with tempfile.TemporaryDirectory(prefix="ripple-sandbox-", ignore_cleanup_errors=True) as workdir:
        if ident is not None:
            os.chown(workdir, *ident)
        yield workdir


def _execute(source: str, isolate: bool, *, timeout_s: float, cpu_s: float | None, memory_mb: int,
             max_procs: int, output_cap: int, as_main: bool = True) -> ExecutionResult:
    start = time.monotonic()
    sentinel = secrets.token_hex(16)
    cpu = math.ceil(cpu_s if cpu_s is not None else timeout_s + 1)
    with _identity() as ident, _workdir(isolate, ident) as workdir:
        config = {
            "sentinel": sentinel, "isolate": isolate, "workdir": workdir, "scratch": SCRATCH_LIMIT,
            "inodes": SCRATCH_INODES, "uid": ident[0] if ident else None, "gid": ident[1] if ident else None,
            "memory": memory_mb * 2**20, "cpu": max(1, cpu), "nproc": max_procs, "fsize": FILE_SIZE_LIMIT,
            "preload": _PRELOAD, "os": _DISABLED_OS, "posix": _DISABLED_POSIX, "shutil": _DISABLED_SHUTIL,
            "subprocess": _DISABLED_SUBPROCESS, "module_name": "__main__" if as_main else _MODULE_NAME,
        }
        payload = json.dumps(config).encode() + b"\n" + source.encode("utf-8", "replace")
        env = {**_BASE_ENV, "HOME": workdir, "TMPDIR": workdir}
        out, err = _Tail(max(output_cap, 256)), _Tail(max(output_cap, 4096))
        run = _fork(env)
        try:
            timed_out = _pump(run, payload, out, err, start + timeout_s, until_exit=True)
        finally:
            # The main process is not reaped yet, so its pgid is still ours. Isolated, killing the
            # group kills pid 1 of the run's pid namespace, and with it every process left there.
            _kill_all(run.pid, None if isolate else ident)
            _pump(run, b"", out, err, time.monotonic() + _DRAIN_S, until_exit=False)
            returncode = run.wait()
    marker = b"\n" + sentinel.encode() + b"\n"
    passed = not timed_out and returncode == 0 and out.data.endswith(marker)
    stdout = bytes(out.data[: -len(marker)] if out.data.endswith(marker) else out.data)
    error = _error(returncode, timed_out, timeout_s, err.data.decode("utf-8", "replace"), passed)
    return ExecutionResult(passed=passed, timed_out=timed_out, error=error,
                           stdout_tail=stdout.decode("utf-8", "replace")[-output_cap:],
                           returncode=returncode, seconds=time.monotonic() - start)


def check_function(program: str, tests: Sequence[str], **limits: Any) -> ExecutionResult:
    """Run `program` followed by the assert lines in `tests`; passes only if every assert ran.

    `limits` are `run_program`'s keyword arguments (`as_main` included)."""
    source = program.rstrip() + "\n\n\n" + "\n".join(tests) + "\n"
    return run_program(source, **limits)
