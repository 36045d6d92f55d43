"""One driver per experiment: a lock file in the store, held while `ripple grid` or `ripple sweep` runs.

Why a file created with O_CREAT|O_EXCL rather than flock/fcntl: exclusive creation is atomic on
local disks and on NFS v3 and later, whereas advisory locks over NFS depend on a lock daemon that
shared clusters often lack. The file holds the holder's host, process id, start time and a
heartbeat that a background thread rewrites in place (no new blocks: it works on a full disk).
A lock is stale, and is taken over, when its heartbeat is older than STALE_SECONDS (a driver on
another machine that died or lost power) or when its holder ran on this host and that process no
longer exists (SIGKILL): a re-run then resumes without manual clean-up. Hosts sharing a store
should keep their clocks in sync (NTP) to well within STALE_SECONDS.

Layout: <store>/<experiment>/driver.lock
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...errors import RippleError

HEARTBEAT_SECONDS = 5.0
STALE_SECONDS = 60.0
LOCK_NAME = "driver.lock"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as written in the lock file."""

    host: str
    pid: int
    started: float  # unix seconds
    token: str  # tells this holder's file from a later one at the same path
    heartbeat: float  # unix seconds of the last refresh

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.started, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"host {self.host}, pid {self.pid}, started {when}"

    def stale(self, now: float) -> bool:
        if now - self.heartbeat > STALE_SECONDS:
            return True
        if self.host == socket.gethostname():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:  # alive, owned by another user
                return False
        return False


def _encode(host: str, pid: int, started: float, token: str, heartbeat: float) -> bytes:
    # the heartbeat is the last field and always 17 characters wide, so a refresh rewrites it in place
    head = json.dumps({"host": host, "pid": pid, "started": started, "token": token})[:-1]
    return f'{head}, "heartbeat": {heartbeat:17.6f}}}\n'.encode()


def _read(path: Path) -> Holder | None:
    """The holder in `path`; None when the file is gone or not (yet) a whole lock record."""
    try:
        data = json.loads(path.read_bytes())
        return Holder(str(data["host"]), int(data["pid"]), float(data["started"]), str(data["token"]),
                      float(data["heartbeat"]))
    except (OSError, ValueError, KeyError, TypeError):  # gone, or not (yet) a whole record
        return None


class DriverLock:
    """The lock of one experiment's store folder; use as a context manager around a driver's work."""

    def __init__(self, folder: str | os.PathLike, what: str):
        self.path = Path(folder) / LOCK_NAME
        self.what = what  # for messages: "experiment 'x' in store /s"
        self.host, self.pid, self.started = socket.gethostname(), os.getpid(), time.time()
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offset = 0

    def acquire(self) -> "DriverLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(5):  # a takeover can race with another driver's; a few rounds settle it
            record = _encode(self.host, self.pid, self.started, self.token, time.time())
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            try:
                os.write(fd, record)
            except OSError as exc:
                os.close(fd)
                self.path.unlink(missing_ok=True)
                raise RippleError(f"{self.what}: cannot write the driver lock {self.path} "
                                  f"({exc.strerror or exc})") from None
            os.close(fd)
            self._offset = len(record) - 19  # where the 17-character heartbeat starts
            self._thread = threading.Thread(target=self._beat, name="ripple-lock-heartbeat", daemon=True)
            self._thread.start()
            return self
        raise RippleError(f"{self.what}: could not take the driver lock {self.path} (other drivers keep taking it)")

    def _take_over_if_stale(self) -> None:
        """Remove the lock at `path` if its holder is gone; otherwise refuse, naming the holder."""
        holder = _read(self.path)
        if holder is None:  # just created and not yet written, or damaged: judge it by its age
            try:
                age = time.time() - self.path.stat().st_mtime
            except FileNotFoundError:
                return
            if age <= STALE_SECONDS:
                time.sleep(0.2)
                holder = _read(self.path)
                if holder is None and self.path.exists():
                    raise RippleError(f"{self.what} is locked by another driver ({self.path} is being written); "
                                      f"try again in a moment")
                if holder is None:
                    return
        if holder is not None and not holder.stale(time.time()):
            raise RippleError(f"{self.what} is already being run by another driver ({holder.describe()}); wait "
                              f"for it to finish or stop it (lock {self.path})")
        # rename is atomic: of several drivers taking over the same stale lock, one moves it
        aside = self.path.with_name(f"{LOCK_NAME}.stale-{self.token}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return
        moved = _read(aside)
        if holder is not None and moved is not None and moved.token != holder.token:
            # another driver took it over between our read and our rename: give its fresh lock back
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
        aside.unlink(missing_ok=True)

    def _beat(self) -> None:
        """Rewrite the heartbeat in place until released; stop if the lock is no longer ours."""
        while not self._stop.wait(HEARTBEAT_SECONDS):
            holder = _read(self.path)
            if holder is None or holder.token != self.token:
                return
            try:
                fd = os.open(self.path, os.O_WRONLY)
                try:
                    os.pwrite(fd, f"{time.time():17.6f}".encode(), self._offset)
                finally:
                    os.close(fd)
            except OSError:  # e.g. a network store briefly away: the next beat tries again
                continue

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        holder = _read(self.path)
        if holder is not None and holder.token == self.token:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "DriverLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
