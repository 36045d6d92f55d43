"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands
on fd 3, replies on fd 4, NUL-separated JSON), so a test can click and read the console with the
standard library only (no websocket client, no Selenium)."""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# LIBRARY_NOTES.md: what runs headless here without network or a GPU
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


class Browser:
    """One Chromium process with one page attached; `errors` collects console errors and exceptions."""

    def __init__(self, profile: Path, timeout: float = 60.0):
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's fixed descriptors, inheritable across exec
            a, b = os.dup(cmd_r), os.dup(out_w)  # off 3 and 4 first, so neither dup2 clobbers the other
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}",
                                      "--window-size=1400,2000", "about:blank"], preexec_fn=fds, close_fds=False,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self.timeout = timeout
        self._id = 0
        self._buf = b""
        self.events: list[dict[str, Any]] = []
        page = next(t for t in self._wait_targets() if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _wait_targets(self) -> list[dict[str, Any]]:
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            targets = self.call("Target.getTargets")["targetInfos"]
            if any(t["type"] == "page" for t in targets):
                return targets
            time.sleep(0.2)
        raise AssertionError("chromium opened no page")

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.time()
            if left <= 0 or not select.select([self._out_r], [], [], left)[0]:
                raise AssertionError("no answer from chromium in time")
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                raise AssertionError(f"chromium closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                assert "error" not in reply, reply["error"]
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.time() + self.timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._read(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in out, out["exceptionDetails"]
        return out["result"].get("value")

    def click(self, x: float, y: float) -> None:
        """A real mouse click (press and release) at page coordinates."""
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, button="left", clickCount=1)

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors seen so far."""
        out = []
        for ev in self.events:
            m, p = ev.get("method"), ev.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._cmd_w)
        os.close(self._out_r)
