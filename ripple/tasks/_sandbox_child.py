"""The sandboxed child, `python -I _sandbox_child.py`, started only by `sandbox.run_program`.

It reads its configuration and the program from stdin (so the sentinel is on no command line,
environment or file). Isolated, it enters fresh namespaces and becomes three processes: this one
waits outside and exits as the program did; pid 1 of the new pid namespace mounts the run's
private filesystems and reaps; the program runs below it, so when the program ends the kernel
kills whatever it left behind. The program's process then limits itself, drops privileges,
disarms destructive functions and runs the program. Standard library only, never imported by
ripple: it runs under whichever interpreter starts it.

`python -I _sandbox_child.py --serve` is the same child as a fork server (`serve`): started once per
host process, with the modules a run imports already imported, it forks one such child per program,
so a program does not pay for an interpreter's start (about two thirds of a short run's CPU).
"""
import builtins
import errno
import io
import json
import linecache
import os
import resource
import signal
import socket
import sys
import traceback

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
UNREADABLE = "sandbox: the program's user cannot read"  # sandbox.py recognises a refusal by this prefix
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1  # 442 on every arch but alpha
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, CAPABILITY_VERSION_3 = 4, 38, 0x20080522
O_PATH = getattr(os, "O_PATH", 0o10000000)
# errnos by which a kernel, container or seccomp policy refuses a namespace or a mount
REFUSED = {errno.EPERM, errno.EACCES, errno.ENOSYS, errno.ENODEV, errno.EINVAL, errno.ENOSPC, errno.EUSERS}
BUG = "sandbox: bug:"  # sandbox.py recognises the sandbox's own failure by this prefix
PRIVATE = ("/var/tmp", "/dev/shm", "/tmp")  # the directories the run's tmpfs replaces
DISARMED = ("posix", "shutil", "subprocess")  # modules whose functions the prelude replaces


def main():
    cfg = json.loads(sys.stdin.buffer.readline())
    source = sys.stdin.buffer.read().decode("utf-8", "replace")
    # What the prelude disarms, imported before the drop (and any module named in `preload`).
    for name in (*cfg["preload"], *DISARMED):
        try:
            __import__(name)
        except Exception:
            pass
    import_path = [p for p in sys.path if os.path.isdir(p)]
    libc = isolate(cfg, runtime_paths(import_path)) if cfg["isolate"] else None
    if libc is None:
        os.chdir(cfg["workdir"])
    limit(cfg)
    drop_privileges(cfg, libc)
    refuse_unreadable(import_path)
    disarm(cfg)
    run(source, cfg["sentinel"], cfg["module_name"])


# ---------------------------------------------------------------------------- kernel isolation
def isolate(cfg, runtime):
    """Enter fresh namespaces and return libc in the program's process (the other two never return)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    step("namespaces", enter_namespaces, libc)
    status_read, status_write = os.pipe()
    child = os.fork()
    if child:
        os.close(status_write)
        relay(child, status_read)
    os.close(status_read)
    step("private filesystems", mount_private, libc, cfg, runtime)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 then ignores it, like every signal it has no handler for
    child = os.fork()
    if child:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        init(child, status_write)
    os.close(status_write)
    return libc


def step(what, action, *args):
    """Run one isolation step; a failure ends the run with one line naming it. The kernel refusing
    (a permission, a missing feature) is a reason to fall back; anything else (a path that is not
    there, say) is the sandbox's own mistake, and says so (sandbox.py then refuses to run)."""
    try:
        action(*args)
    except OSError as exc:
        if exc.errno in REFUSED:
            raise SystemExit(f"sandbox: {what} failed: {exc}") from None
        raise SystemExit(f"{BUG} {what} failed: {exc}") from None


def call(function, *args):
    """A libc call that raises OSError instead of returning -1."""
    import ctypes

    if function(*args) == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def enter_namespaces(libc):
    """New pid, network, mount and IPC namespaces. An ordinary user needs a user namespace first;
    it maps only the user itself, so the program keeps its uid and gains nothing outside."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET | (CLONE_NEWUSER if uid else 0)
    call(libc.unshare, flags)
    if uid:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)


def mount(libc, source, target, fstype, flags, data=None):
    import ctypes

    def enc(text):
        return None if text is None else text.encode()

    call(libc.mount, enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def read_only(libc, path):
    """Every mount below `path` read-only, in this mount namespace only (mount_setattr, Linux 5.12)."""
    import ctypes

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    call(libc.syscall, ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_long(AT_FDCWD), path.encode(),
         ctypes.c_long(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_long(ctypes.sizeof(attr)))


def runtime_paths(import_path):
    """What the program needs of the host to run, as the interpreter names it: the import path (a
    virtual environment's site-packages, the base installation, folders added by .pth files), the
    source folders of editable installs (setuptools' finder keeps them in `MAPPING`, off
    sys.path), the interpreter and a virtual environment's pyvenv.cfg. Each also at its resolved
    path where that differs. Read before any mount, so nothing is resolved through a hidden place."""
    named = list(import_path)
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
        if isinstance(mapping, dict):
            named += [path for path in mapping.values() if isinstance(path, str)]
    named += [sys.executable, os.path.join(sys.prefix, "pyvenv.cfg")]
    paths = set()
    for path in named:
        if path and os.path.exists(path):
            paths.update({os.path.normpath(os.path.abspath(path)), os.path.realpath(path)})
    return sorted(paths)


def outermost(paths):
    """`paths` without those inside another one of them (a recursive bind of the outer covers them)."""
    kept = []
    for path in sorted(paths):
        if not any(path.startswith(outer + "/") for outer in kept):
            kept.append(path)
    return kept


def mount_private(libc, cfg, runtime):
    """The host's filesystems read-only, a /proc of this pid namespace, and one size-limited tmpfs
    behind the working directory, /tmp, /var/tmp and /dev/shm: it vanishes with the namespace.
    What the program needs to run (`runtime`) is bound back read-only at its own paths where it
    lived under those directories, or under a directory the run's uid cannot enter (`expose`)."""
    mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the host
    read_only(libc, "/")
    needed = outermost(runtime)
    # Held open before anything is hidden: each is bound back later from its descriptor.
    held = {path: os.open(path, O_PATH | os.O_CLOEXEC) for path in needed}
    private = [path for path in PRIVATE if os.path.isdir(path) and not os.path.islink(path)]
    mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
    mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
          f"size={cfg['scratch']},nr_inodes={cfg['inodes']},mode=1777")
    for name in ("tmp", "var-tmp", "shm"):
        os.mkdir(f"/tmp/{name}")
        os.chmod(f"/tmp/{name}", 0o1777)
    # Bind the parts over their places; the last bind hides the tmpfs's root and the other parts.
    for name, target in (("var-tmp", "/var/tmp"), ("shm", "/dev/shm"), ("tmp", "/tmp")):
        if target in private:
            mount(libc, f"/tmp/{name}", target, None, MS_BIND)
    under_private = [path for path in needed if any(path.startswith(root + "/") for root in private)]
    for path in under_private:
        restore(libc, path, held[path])
    if cfg["uid"] is not None:
        expose(libc, [path for path in needed if path not in under_private], held)
    for fd in held.values():
        os.close(fd)
    os.mkdir(cfg["workdir"], 0o700)
    if cfg["uid"] is not None:
        os.chown(cfg["workdir"], cfg["uid"], cfg["gid"])
    os.chdir(cfg["workdir"])


def restore(libc, path, fd):
    """Bind what `fd` holds back at `path`, read-only, making the way down to it (0755, whatever the
    umask) in the fresh tmpfs that now covers it."""
    way = ""
    for part in path.strip("/").split("/")[:-1]:
        way += "/" + part
        if not os.path.isdir(way):
            os.mkdir(way)
            os.chmod(way, 0o755)
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        if not os.path.isdir(path):
            os.mkdir(path)
    elif not os.path.exists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))  # a file is bound over a file
    mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    read_only(libc, path)


def blocking_ancestor(path):
    """The outermost proper ancestor of `path` that other users cannot enter (such as a root-only
    home holding pyenv or conda), or None."""
    parts = path.strip("/").split("/")
    for depth in range(len(parts) - 1):
        ancestor = "/" + "/".join(parts[:depth + 1])
        if not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def expose(libc, paths, held):
    """Make `paths` reachable for the run's uid: each directory that hides part of them (e.g. a 0700
    /root) is covered, in this mount namespace only, by a read-only tmpfs that holds nothing but the
    way down to them, bound back at their own paths (read-only). Everything else in the hidden
    directory stays out of sight."""
    hidden = {}
    for path in paths:
        ancestor = blocking_ancestor(path)
        if ancestor is not None:
            hidden.setdefault(ancestor, []).append(path)
    for ancestor, inside in hidden.items():
        mount(libc, "tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=0755")
        for path in inside:
            restore(libc, path, held[path])
        read_only(libc, ancestor)


def refuse_unreadable(import_path):
    """One line, before the program runs, when its uid cannot read a directory of the import path:
    otherwise modules the prelude did not import would fail as if the program were wrong."""
    for path in import_path:
        if not os.access(path, os.R_OK | os.X_OK):
            raise SystemExit(f"{UNREADABLE} {path}, a directory of the interpreter's import path "
                             f"(install Python where other users can read it, or run as an ordinary user)")


def relay(child, status_pipe):
    """The outer process: wait, then exit as the program did, by its exit code or its signal."""
    _, status = os.waitpid(child, 0)
    reported = os.read(status_pipe, 32)
    code = os.waitstatus_to_exitcode(int(reported) if reported else status)
    if code < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 1
    os._exit(code)


def init(child, status_pipe):
    """pid 1: reap orphans until the program ends, report its status and exit, on which the
    kernel kills every process left in the namespace."""
    while True:
        pid, status = os.wait()
        if pid == child:
            os.write(status_pipe, str(status).encode())
            os._exit(0)


# ---------------------------------------------------------------------------- limits and privileges
def limit(cfg):
    # In a user namespace the two waiting processes above the program count towards its process limit.
    nproc = cfg["nproc"] + (2 if cfg["isolate"] and cfg["uid"] is None else 0)
    # CPU: SIGXCPU at the soft limit names the cause; the hard limit one second later is SIGKILL.
    for res, soft, hard in ((resource.RLIMIT_AS, cfg["memory"], cfg["memory"]),
                            (resource.RLIMIT_CPU, cfg["cpu"], cfg["cpu"] + 1),
                            (resource.RLIMIT_NPROC, nproc, nproc),
                            (resource.RLIMIT_FSIZE, cfg["fsize"], cfg["fsize"]),
                            (resource.RLIMIT_CORE, 0, 0)):
        current = resource.getrlimit(res)[1]
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(res, (soft, hard))


def drop_privileges(cfg, libc):
    """Root drops to the run's own uid; in a user namespace the capabilities `unshare` gave go.
    Isolated, no later exec may gain privileges (setuid binaries, file capabilities)."""
    if cfg["uid"] is not None:
        try:
            os.setgroups([])
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        except OSError as exc:
            raise SystemExit(f"sandbox: could not drop privileges: {exc}")
        if 0 in os.getresuid():
            raise SystemExit("sandbox: could not drop privileges")
    if libc is None:
        return
    import ctypes

    if cfg["uid"] is None:
        header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
        step("capability drop", call, libc.capset, header, (ctypes.c_uint32 * 6)())
    step("no_new_privs", call, libc.prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


# ---------------------------------------------------------------------------- the prelude (a safety net)
def disabled(name):
    def refuse(*args, **kwargs):
        raise PermissionError(f"{name} is disabled in the sandbox")
    return refuse


def disarm(cfg):
    """Disable destructive functions and refuse writes outside the working directory."""
    import _io
    import posix
    import shutil
    import subprocess

    # `posix` is what `os` wraps. Below the prelude the kernel guards what the program may not touch,
    # so `posix` loses only what it may still do: create, move or link files, and signal.
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


def run(source, sentinel, module_name):
    """Run the program under `module_name` ("__main__", or a module's name so that an
    `if __name__ == "__main__":` block is skipped); the sentinel after its last statement is
    what `passed` means."""
    sentinel = sentinel.encode()
    write, exit_now, stdout, stderr = os.write, os._exit, sys.stdout, sys.stderr
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    program = {"__name__": module_name, "__builtins__": builtins}
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


# ---------------------------------------------------------------------------- the fork server
def serve():
    """Fork one run per request of the host, on fd 0 (a SOCK_SEQPACKET socket): a request is the run's
    environment (JSON) with four descriptors: the program's stdin, stdout and stderr, and a socket of
    the run's own, on which the server answers the run's pid, then its exit status (as a returncode)
    once it has exited. The server reaps the run only when the host says so on that socket (any
    message, or closing it; closing before the status kills the run first), so the run's pid and
    process group stay reserved while the host kills what is left of it. The host closing fd 0 ends
    the server and every run still going. Single-threaded: it only ever forks from this loop."""
    import selectors

    for name in (*DISARMED, "ctypes"):  # what every run imports anyway: each fork has them already
        __import__(name)
    host = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup descriptor is written
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(host, selectors.EVENT_READ)
    sel.register(wake_read, selectors.EVENT_READ)
    runs = {}  # pid -> [its socket, whether its status was sent]
    while True:
        for key, _ in sel.select():
            if key.fileobj is host:
                message, fds, _, _ = socket.recv_fds(host, 1 << 16, 4)
                refusal = b""
                if not message:
                    for pid in runs:
                        kill_group(pid)
                    os._exit(0)
                try:
                    pid = os.fork()
                except OSError as exc:  # the host's user is out of processes, say: the host names it
                    pid, refusal = 0, f"-could not fork the run: {exc}".encode()
                if pid == 0 and not refusal:
                    start_run(json.loads(message), fds)
                for fd in fds[:3]:
                    os.close(fd)
                reply = socket.socket(fileno=fds[3])
                send_quietly(reply, refusal or str(pid).encode())  # a host that gave up on it closed its end
                if refusal:
                    reply.close()
                    continue
                runs[pid] = [reply, False]
                sel.register(reply, selectors.EVENT_READ, pid)
            elif key.fileobj == wake_read:
                os.read(wake_read, 4096)
                for pid, run in runs.items():
                    if not run[1]:
                        status = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                        if status is not None:
                            code = status.si_status if status.si_code == os.CLD_EXITED else -status.si_status
                            send_quietly(run[0], str(code).encode())
                            run[1] = True
            else:  # the host is done with this run
                pid = key.data
                reply, reported = runs.pop(pid)
                sel.unregister(reply)
                reply.close()
                if not reported:
                    kill_group(pid)
                os.waitpid(pid, 0)


def send_quietly(sock, data):
    try:
        sock.send(data)
    except OSError:  # the host has gone; its closing the socket ends the run next
        pass


def kill_group(pid):
    """SIGKILL the run's process group, and the run itself should it have left the group (its pid is
    not reaped yet, so it is still this run's)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def start_run(env, fds):
    """In the forked run: become what `python -I _sandbox_child.py` started by the host would be (its own
    session, its stdio on the run's pipes, the host's minimal environment, signals as a fresh
    interpreter has them), then run `main`. Never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        most = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        os.closerange(3, most if most != resource.RLIM_INFINITY else 1 << 20)
        os.environ.clear()
        os.environ.update(env)
        os.chdir("/")
        del sys.argv[1:]
        main()
        code = 0
    except SystemExit as exc:  # as the interpreter ends on it: a message goes to stderr, status 1
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else main()
