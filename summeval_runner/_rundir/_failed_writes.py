"""A write that fails in a run directory stops the run that writes it (issue 30).

A run being recorded watches its directory (``watch``) for as long as it writes there. Every
writer that does not belong to the journal but may sit in the directory reports a write it
could not make with ``failed_write``: the response cache when its file is inside the run
directory (``runner.cache_path``), and the run's log file (``RunLogHandler``, the handler
``summeval-run`` writes ``summeval-run.log`` with). The run whose directory holds the path then
stops its judge and agent calls at once, as it does when its journal cannot be written: a run
whose disk is full pays for nothing it could not keep.

``RunLogHandler`` fails quietly: its first failed write is said once on stderr, in one line,
and nothing more is written to the file (a later line could land after a hole). Python's
logging would print a traceback (``--- Logging error ---``) for every record instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from summeval_runner._secrets import scrub

# Each watched run directory (resolved), and what its run does when a write in it fails.
_watched: dict[Path, Callable[[str, BaseException], None]] = {}
_lock = threading.Lock()


def watch(run_dir: Path, on_failure: Callable[[str, BaseException], None]) -> Callable[[], None]:
    """Have ``on_failure(what, error)`` hear of each write reported failed in ``run_dir`` (or
    below it); the function that ends the watch."""
    key = _resolved(run_dir)
    with _lock:
        _watched[key] = on_failure

    def unwatch() -> None:
        with _lock:
            if _watched.get(key) is on_failure:
                del _watched[key]

    return unwatch


def failed_write(path: Path, what: str, error: BaseException) -> bool:
    """Report that ``what`` (a sentence's subject: "the log file X") could not be written at
    ``path``; whether a watched run directory holds it (its run was told)."""
    resolved = _resolved(path)
    with _lock:
        found = [
            on_failure
            for run_dir, on_failure in _watched.items()
            if resolved == run_dir or run_dir in resolved.parents
        ]
    for on_failure in found:
        on_failure(what, error)
    return bool(found)


def _resolved(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except OSError:
        return Path(os.path.abspath(path))


class RunLogHandler(logging.FileHandler):
    """A run's log file that fails quietly: the first record it cannot write is said once on
    stderr (one line, no traceback), the run whose directory holds the file is stopped
    (``failed_write``), and nothing more is written to the file."""

    def __init__(self, filename: str, *args: Any, **kwargs: Any) -> None:
        self.failed = False
        super().__init__(filename, *args, **kwargs)

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def flush(self) -> None:
        if self.failed:
            return
        try:
            super().flush()
        except OSError as error:
            self._fail(error)

    def close(self) -> None:
        # The file's last buffered bytes cannot be written either once a write failed.
        with contextlib.suppress(OSError):
            super().close()

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError | ValueError):
            self._fail(error)
        else:
            super().handleError(record)  # a record that cannot be formatted: a bug, shown

    def _fail(self, error: BaseException) -> None:
        if self.failed:
            return
        self.failed = True
        what = f"the log file {self.baseFilename}"
        with contextlib.suppress(Exception):
            print(
                scrub(
                    f"{what} could not be written ({type(error).__name__}: {error}); nothing "
                    "more is logged to it"
                ),
                file=sys.stderr,
            )
        failed_write(Path(self.baseFilename), what, error)
