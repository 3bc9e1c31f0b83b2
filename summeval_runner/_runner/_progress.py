"""Progress: a tqdm bar on a terminal, plain lines elsewhere (CI logs, files), or nothing."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm


class ProgressReporter:
    """Items done of total, running mean score, errors, and the judge's figures (``details``).

    On a terminal a tqdm bar redraws in place. Elsewhere a bar's carriage returns would pile up
    in a log, so a plain line is printed at most every ``interval_s`` seconds and at the end.
    """

    def __init__(
        self,
        total: int | None,
        *,
        stream: TextIO | None = None,
        details: Callable[[], str] | None = None,
        interval_s: float = 10.0,
    ) -> None:
        self._stream = stream or sys.stderr
        self._total = total
        self._details = details
        self._interval_s = interval_s
        self._done = 0
        self._errors = 0
        self._score_sum = 0.0
        self._scored = 0
        self._started = time.monotonic()
        self._last_line = self._started
        self._bar: tqdm[Any] | None = None
        if self._stream.isatty():
            self._bar = tqdm(total=total, unit="item", file=self._stream, dynamic_ncols=True)

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
        now = time.monotonic()
        if self._done == self._total or now - self._last_line >= self._interval_s:
            self._last_line = now
            done = f"{self._done}/{self._total}" if self._total is not None else str(self._done)
            self._stream.write(f"progress: {done} items, {self._figures()}\n")
            self._stream.flush()

    def _figures(self) -> str:
        mean = f"{self._score_sum / self._scored:.3f}" if self._scored else "n/a"
        figures = f"mean {mean}, errors {self._errors}"
        if self._details is not None:
            figures += f", {self._details()}"
        return figures

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
