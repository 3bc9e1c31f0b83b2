"""Waiting in a test for a state the test brings about (a count of requests held, a batch
journaled), never for time to pass: the wait ends when the state is reached, fails at once when
what should reach it has ended (the run's task, the app's process) and, as a last resort against
a hang, after a bound far beyond anything the suite needs (a failure, never a measurement)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from typing import Any

from tests.prestarted import PrestartedApp

# Only a hang reaches it: every state waited for comes in milliseconds to seconds.
HANG_S = 120.0


async def until(
    condition: Callable[[], bool], what: str, *, task: asyncio.Future[Any] | None = None
) -> None:
    """Wait, without blocking the event loop, until ``condition`` holds. ``task``: what should
    bring it about; if it ends first, the wait fails with what it returned or raised."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if task is not None and task.done():
            outcome = task.exception() if not task.cancelled() else "cancelled"
            raise AssertionError(f"ended before {what}: {outcome or task.result()!r}")
        assert time.monotonic() < deadline, f"never reached in {HANG_S:g} s: {what}"
        await asyncio.sleep(0.005)


def wait_until(
    condition: Callable[[], bool],
    what: str,
    *,
    process: subprocess.Popen[str] | PrestartedApp | None = None,
) -> None:
    """Block until ``condition`` holds. ``process``: what should bring it about; if it exits
    first, the wait fails with its output."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode} before {what}: "
                                 f"{process.communicate()}")  # fmt: skip
        assert time.monotonic() < deadline, f"never reached in {HANG_S:g} s: {what}"
        time.sleep(0.01)
