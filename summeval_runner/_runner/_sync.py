"""The sync twins of the async API (``run_evals_sync``, ``estimate_evals_sync``,
``judge_agreement_sync``): one async implementation, and a thin wrapper that keeps its typed
signature and runs it to the end on a new event loop.

Ctrl-C cancels the running coroutine (``asyncio.run``'s runner cancels its main task on SIGINT),
so a run ends as a cancelled run does, its state written, the manifest ``interrupted`` and
resumable; then ``KeyboardInterrupt`` reaches the caller.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def sync_twin(function: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, R]:
    """``function``'s twin for callers without a running event loop: the same parameters,
    typed as its own, and the same result."""

    @functools.wraps(function)
    def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return asyncio.run(function(*args, **kwargs))

    twin.__name__ = twin.__qualname__ = f"{function.__name__}_sync"
    twin.__doc__ = f"``{function.__name__}`` for callers without a running event loop."
    return twin
