"""Headless Chromium for the tests that open a page: required, never silently skipped.

CI (``.ci/run``) installs Debian's ``chromium``; a test that needs it fails where it is missing,
saying how to install it, unless ``SUMMEVAL_SKIP_BROWSER_TESTS=1`` says to skip such tests on
purpose (a machine that cannot have a browser).

``Browser`` drives Chromium through its DevTools protocol over a pipe
(``--remote-debugging-pipe``: no port, no network): tests click, type and read the page as a
person would, with trusted input events (``Input.dispatchMouseEvent``, ``Input.insertText``),
and read what the browser logged. Waits are for a condition in the page, with a generous
ceiling that only turns a hang into a failure; nothing is timed.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SKIP_BROWSER_TESTS = "SUMMEVAL_SKIP_BROWSER_TESTS"
# Ceilings, not expectations: a condition that holds returns at once.
CEILING_S = 90.0


def chromium() -> str:
    """The Chromium executable; the calling test fails (or, when told to, skips) without one."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is not None:
        return found
    if os.environ.get(SKIP_BROWSER_TESTS) == "1":
        pytest.skip(f"no Chromium, and {SKIP_BROWSER_TESTS}=1 skips the browser tests")
    pytest.fail(
        "this test opens the HTML report in headless Chromium, and no chromium (or "
        "chromium-browser) is on PATH: install it (Debian, Ubuntu: apt-get install chromium), "
        f"or set {SKIP_BROWSER_TESTS}=1 to skip the browser tests on purpose",
        pytrace=False,
    )


# Chromium reads the protocol from fd 3 and writes to fd 4. subprocess cannot place a pipe at
# a given descriptor without preexec_fn (unsafe with threads), so a tiny launcher does it.
_LAUNCHER = """
import os, sys
reads, writes = int(sys.argv[1]), int(sys.argv[2])
copies = os.dup(reads), os.dup(writes)
os.dup2(copies[0], 3)
os.dup2(copies[1], 4)
for fd in {reads, writes, *copies} - {3, 4}:
    os.close(fd)
# A copy that os.dup placed at 3 or 4 already is close-on-exec, and dup2 onto itself keeps that.
os.set_inheritable(3, True)
os.set_inheritable(4, True)
os.execv(sys.argv[3], sys.argv[3:])
"""

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-quic",
    "--mute-audio",
    "--hide-scrollbars",
)


class BrowserError(AssertionError):
    """The browser did not do what the test needed (a failed command, a hang)."""


@dataclass
class Page:
    """One tab: what it logged, and the means to act on it and read it."""

    browser: Browser
    session: str
    target: str
    console: list[dict[str, Any]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        reply = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, condition: str, ceiling_s: float = CEILING_S) -> None:
        """Return once the JavaScript ``condition`` holds in the page; fail if it never does
        within ``ceiling_s`` (a hang, not a slow machine: the ceiling is far above need)."""
        held = self.evaluate(
            "new Promise((resolve) => { const start = performance.now(); const poll = () => {"
            f" let held = false; try {{ held = Boolean({condition}); }} catch (e) {{}}"
            f" if (held || performance.now() - start > {ceiling_s * 1000})"
            " { resolve(held); } else { setTimeout(poll, 25); } }; poll(); })"
        )
        if not held:
            raise BrowserError(f"the page never reached {condition!r} ({ceiling_s:.0f} s)")

    def centre(self, selector: str) -> tuple[float, float]:
        box = self.evaluate(
            f"(() => {{ const node = document.querySelector({json.dumps(selector)});"
            " if (!node) return null; node.scrollIntoView({block: 'center'});"
            " const r = node.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise BrowserError(f"no element matches {selector!r}")
        return float(box[0]), float(box[1])

    def click(self, selector: str) -> None:
        """A left click in the middle of the element, as a mouse makes it."""
        x, y = self.centre(selector)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, selector: str, text: str) -> None:
        """Click the field, select what it holds and type ``text`` over it."""
        self.click(selector)
        self.send(
            "Input.dispatchKeyEvent", type="rawKeyDown", key="a", code="KeyA",
            windowsVirtualKeyCode=65, modifiers=2, commands=["selectAll"],
        )  # fmt: skip
        self.send("Input.dispatchKeyEvent", type="keyUp", key="a", code="KeyA", modifiers=2)
        if text:
            self.send("Input.insertText", text=text)
        else:
            self.send(
                "Input.dispatchKeyEvent", type="rawKeyDown", key="Backspace", code="Backspace",
                windowsVirtualKeyCode=8,
            )  # fmt: skip
            self.send("Input.dispatchKeyEvent", type="keyUp", key="Backspace", code="Backspace")

    def press(self, key: str, code: str, key_code: int) -> None:
        self.send(
            "Input.dispatchKeyEvent", type="rawKeyDown", key=key, code=code,
            windowsVirtualKeyCode=key_code,
        )  # fmt: skip
        self.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=code)

    def resize(self, width: int, height: int) -> None:
        """Show the page in a window of this size (CSS pixels)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip

    def screenshot(self, path: Path) -> Path:
        shot = self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})

    def errors(self) -> list[dict[str, Any]]:
        """What the page logged as an error: console errors, uncaught exceptions, and the
        browser's own errors (a blocked resource, a Content-Security-Policy violation)."""
        self.evaluate("0")  # every event sent before this reply has been read
        return [entry for entry in self.console if entry["level"] == "error"]


class Browser:
    """A headless Chromium driven over the DevTools protocol; one per test module."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self.width, self.height = width, height
        executable = chromium()
        self._profile = tempfile.TemporaryDirectory(prefix="summeval-chromium-")
        chrome_reads, self._to_chrome = os.pipe()
        self._from_chrome, chrome_writes = os.pipe()
        # Chromium's own log, read back when it fails; closed in close().
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable, "-c", _LAUNCHER, str(chrome_reads), str(chrome_writes),
                executable, *_FLAGS, f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}", "about:blank",
            ],
            pass_fds=(chrome_reads, chrome_writes),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )  # fmt: skip
        os.close(chrome_reads)
        os.close(chrome_writes)
        self._buffer = b""
        self._next_id = 0
        self._pages: dict[str, Page] = {}

    def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\0"
        while data:
            try:
                written = os.write(self._to_chrome, data)
            except BrokenPipeError:
                exit_code = self.process.wait()
                raise BrowserError(f"Chromium is gone (exit {exit_code}){self._tail()}") from None
            data = data[written:]

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_chrome], [], [], max(left, 0))
            if not ready:
                raise BrowserError(f"Chromium sent nothing for {CEILING_S:.0f} s{self._tail()}")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed the protocol pipe{self._tail()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def _tail(self) -> str:
        self._log.seek(0)
        return ": " + self._log.read().decode(errors="replace")[-2000:]

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        """Send a command and return its result; events that arrive meanwhile are recorded."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self._write(message)
        deadline = time.monotonic() + CEILING_S
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method} failed: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._record(reply)

    def _record(self, event: dict[str, Any]) -> None:
        page = self._pages.get(event.get("sessionId", ""))
        if page is None:
            return
        params = event.get("params", {})
        method = event.get("method")
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            level = "error" if params["type"] in ("error", "assert") else params["type"]
            page.console.append({"level": level, "text": text, "source": "console"})
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "")
            page.console.append({"level": "error", "text": text, "source": "exception"})
        elif method == "Log.entryAdded":
            entry = params["entry"]
            page.console.append(
                {"level": entry["level"], "text": entry["text"], "source": entry["source"]}
            )
        elif method == "Network.requestWillBeSent":
            page.requests.append(params["request"]["url"])

    def open(self, url: str) -> Page:
        """A new tab showing ``url``, once its load event has fired."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session, target)
        self._pages[session] = page
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.send(f"{domain}.enable")
        page.resize(self.width, self.height)
        page.send("Page.navigate", url=url)
        page.wait_for("document.readyState === 'complete'")
        return page

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self._write({"id": 0, "method": "Browser.close", "params": {}})
                self.process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._to_chrome)
            os.close(self._from_chrome)
            self._log.close()
            self._profile.cleanup()


@contextmanager
def browser(width: int = 1280, height: int = 900) -> Iterator[Browser]:
    """A headless Chromium for the duration of the block."""
    started = Browser(width, height)
    try:
        yield started
    finally:
        started.close()
