"""Progress: a tqdm bar on a terminal, plain lines elsewhere (CI logs, files), or nothing."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm

# How often the display is redrawn while nothing finishes: the elapsed time keeps moving, and a
# wait (a server's Retry-After, an outage) shows as it counts down.
_REFRESH_S = 1.0


class ProgressReporter:
    """Items done of total, elapsed time, running mean score, errors, and the judge's figures
    (``details``: what it waits for, its rate, retries, 429s and limits).

    On a terminal a tqdm bar redraws in place. Elsewhere a bar's carriage returns would pile up
    in a log, so a plain line is printed every ``interval_s`` seconds (whether or not an item
    finished: a run held by a long ``Retry-After`` says so) and at the end. ``start()`` begins
    the periodic redraw (``tick``), ``close()`` ends it; ``clock`` is passed in so that tests
    can run it on a fake clock.
    """

    def __init__(
        self,
        total: int | None,
        *,
        stream: TextIO | None = None,
        details: Callable[[], str] | None = None,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream or sys.stderr
        self._total = total
        self._details = details
        self._interval_s = interval_s
        self._clock = clock
        self._done = 0
        self._errors = 0
        self._score_sum = 0.0
        self._scored = 0
        self._started = clock()
        self._last_line = self._started
        self._ticker: asyncio.Task[None] | None = None
        self._bar: tqdm[Any] | None = None
        if self._stream.isatty():
            self._bar = tqdm(total=total, unit="item", file=self._stream, dynamic_ncols=True)

    def start(self) -> None:
        """Redraw the display every second from now until ``close()``, in the running loop."""
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(min(_REFRESH_S, self._interval_s))
            self.tick()

    def tick(self) -> None:
        """Redraw with nothing finished since the last time: the bar's elapsed time and figures,
        or a plain line once ``interval_s`` has passed since the last one."""
        if self._bar is not None:
            self._bar.set_postfix_str(self._figures(), refresh=False)
            self._bar.refresh()
        elif self._clock() - self._last_line >= self._interval_s:
            self._write_line()

    def update(self, *, score: float | None, error: bool) -> None:
        self._done += 1
        self._errors += error
        if score is not None:
            self._score_sum += score
            self._scored += 1
        if self._bar is not None:
            self._bar.set_postfix_str(self._figures(), refresh=False)
            self._bar.update(1)
            return
        if self._done == self._total or self._clock() - self._last_line >= self._interval_s:
            self._write_line()

    def line(self) -> str:
        """The plain line, as it would be printed now."""
        done = f"{self._done}/{self._total}" if self._total is not None else str(self._done)
        elapsed = tqdm.format_interval(self._clock() - self._started)
        return f"progress: {done} items, {elapsed} elapsed, {self._figures()}"

    def _write_line(self) -> None:
        self._last_line = self._clock()
        self._stream.write(self.line() + "\n")
        self._stream.flush()

    def _figures(self) -> str:
        mean = f"{self._score_sum / self._scored:.3f}" if self._scored else "n/a"
        figures = f"mean {mean}, errors {self._errors}"
        details = self._details() if self._details is not None else ""
        return f"{figures}, {details}" if details else figures

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._bar is not None:
            self._bar.close()
