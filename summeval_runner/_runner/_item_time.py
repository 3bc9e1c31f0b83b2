"""An item's own time: what ``item_timeout_s`` counts.

An item's clock runs while it works: while one of its agent or judge calls is in progress, or
one of its scorers runs outside a judge request (a user's scorer, the runner's own steps between
calls). It stands still while every branch of the item (its agent call, each scorer of each
trial) waits on the run rather than works: for a judge request slot, the request or token pacer,
a server's ``Retry-After`` hold, a retry's backoff, an outage's probe of an unreachable judge,
or another item's draw of a source's questions. A run whose pacer holds an item for minutes
spends none of that item's ``item_timeout_s``; a call that hangs spends it all.

The item's task carries its clock in a context variable (each of its child tasks shares it);
the judge and the run mark what they do with ``item_work``, ``item_held`` and ``item_call``,
which are no-ops outside an item with a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar


class ItemTime:
    """One item's clock against ``limit_s`` seconds of its own work; ``on_expired`` is called
    once when they are spent (the run cancels the item's work then)."""

    def __init__(self, limit_s: float, on_expired: Callable[[], object] | None = None) -> None:
        self.limit_s = limit_s
        self.on_expired = on_expired
        # Seconds of own work so far (up to the last stop of the clock).
        self.used_s = 0.0
        self.expired = False
        # Branches at work (the agent's call, each scorer's run); of them, those inside a judge
        # request or waiting for another item's draw (whose own time is accounted below); and
        # judge calls in progress (sent, not yet answered).
        self._work = 0
        self._held = 0
        self._calls = 0
        self._loop = asyncio.get_running_loop()
        self._since: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._calls > 0 or self._work > self._held

    def spent_s(self) -> float:
        """Seconds of own work so far, the current stretch included."""
        since = self._since
        return self.used_s + (self._loop.time() - since if since is not None else 0.0)

    def _change(self, *, work: int = 0, held: int = 0, calls: int = 0) -> None:
        self._work += work
        self._held += held
        self._calls += calls
        if self.expired:
            return
        if self.running and self._since is None:
            self._since = self._loop.time()
            self._timer = self._loop.call_at(
                self._since + max(0.0, self.limit_s - self.used_s), self._expire
            )
        elif not self.running and self._since is not None:
            self.used_s += self._loop.time() - self._since
            self._since = None
            self.close()

    def _expire(self) -> None:
        self._timer = None
        self.used_s = self.spent_s()
        self._since = None
        self.expired = True
        if self.on_expired is not None:
            self.on_expired()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


ITEM_TIME: ContextVar[ItemTime | None] = ContextVar("summeval_item_time", default=None)


@contextlib.contextmanager
def _marked(**change: int) -> Iterator[None]:
    clock = ITEM_TIME.get()
    if clock is None:
        yield
        return
    clock._change(**change)
    try:
        yield
    finally:
        clock._change(**{name: -delta for name, delta in change.items()})


def item_work() -> contextlib.AbstractContextManager[None]:
    """A branch of the item at work inside the block: an agent call, a scorer's run."""
    return _marked(work=1)


def item_held() -> contextlib.AbstractContextManager[None]:
    """The branch is inside a judge request (only its call in progress counts, ``item_call``),
    or waits for another item's draw of a source's questions."""
    return _marked(held=1)


def item_call() -> contextlib.AbstractContextManager[None]:
    """A judge call in progress: sent, and not yet answered."""
    return _marked(calls=1)
