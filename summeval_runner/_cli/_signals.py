"""Ctrl-C and SIGTERM during a run: stop gracefully, and at once on a second signal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Any


class Interrupts:
    """Ctrl-C and SIGTERM: the first stops the run gracefully, a second exits at once.

    A graceful stop starts no new item, lets those in flight finish (up to
    ``runner.shutdown_grace_s``) and writes everything. Exiting at once is safe too: finished
    items are already in the journal line by line, and tables only ever appear by an atomic
    rename, so nothing on disk is half-written; a resume picks up from the journal.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            # Outside the main thread (a launcher's worker) the launcher handles signals.
            with contextlib.suppress(ValueError):
                self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def attach(self, stop: asyncio.Event) -> None:
        """Route the next signal to ``stop``, from inside the event loop that watches it."""
        self._loop, self._stop = asyncio.get_running_loop(), stop
        if self.received is not None:
            stop.set()

    def detach(self) -> None:
        self._loop = self._stop = None

    @property
    def exit_code(self) -> int | None:
        return None if self.received is None else 128 + self.received

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            os._exit(128 + signum)
        self.received = signum
        print(
            f"\nsummeval-run: {signal.Signals(signum).name} received: finishing the items in "
            "flight and writing the results (again to exit at once)",
            file=sys.stderr,
            flush=True,
        )
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


class _ReaderMayLeave:
    """Standard output for a reader that may stop reading (``summeval-run | head``): once the
    pipe is closed, what is left to print goes nowhere, and the run ends as it would have (its
    tables, manifest and exit code), not as an internal error over a summary line."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._gone = False

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self._gone = True
        # The stream's own flush at exit would meet the closed pipe again: its descriptor now
        # points at /dev/null (Python's documented way for SIGPIPE).
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def tolerate_closed_stdout() -> None:
    """Let the program's reader leave early (``| head``) without making it fail."""
    if not isinstance(sys.stdout, _ReaderMayLeave):
        sys.stdout = _ReaderMayLeave(sys.stdout)
