"""The outage watch: what a run does when the judge, or the agent under test, cannot be
connected to (connection refused, a name that does not resolve, a failed TLS handshake).

One rule for both. A call that cannot connect starts an outage, unless one has started already;
any call that gets through (a reply, or an error from the other side such as an HTTP 503) ends
it. During an outage the other calls are held and one at a time probes, with a backoff; once a
probe fails ``outage_timeout_s`` or more after the outage began, the other side is declared
unreachable and the run stops, interrupted and resumable. No call that could not connect is
anybody's error: the items it belonged to are left unfinished, never errored, so a run against
a server that is down never "completes" with every item failed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from summeval_runner._errors import AgentUnreachableError
from summeval_runner._judges._http_errors import no_connection
from summeval_runner._runner._item_time import item_held

T = TypeVar("T")

logger = logging.getLogger("summeval_runner")

# The longest wait between two probes: a side that comes back is found within this, whatever
# the retry policy's max_delay_s.
PROBE_MAX_DELAY_S = 2.0


class OutageWatch:
    """The watch over one side of the run's calls: ``kind`` is ``"judge"`` or ``"agent"``,
    ``name`` names it in the log ("judge gpt-4o-mini"); ``unreachable`` builds the error that
    stops the run from its message. ``clock`` is in seconds, monotonic; tests pass a fake one."""

    def __init__(
        self,
        kind: str,
        name: str,
        *,
        outage_timeout_s: float,
        base_delay_s: float,
        max_delay_s: float,
        unreachable: Callable[[str], Exception],
        clock: Callable[[], float],
    ) -> None:
        self.kind = kind
        self.who = f"{kind} {name}"
        self.outage_timeout_s = outage_timeout_s
        self._base_delay_s = base_delay_s
        self._max_delay_s = min(PROBE_MAX_DELAY_S, max_delay_s)
        self._unreachable_error = unreachable
        self._clock = clock
        # When the first connection failed after the other side was last reached (None: no
        # outage). Time before that does not count: a run that spent its first minute on 429s
        # or slow replies has reached it all along.
        self._since: float | None = None
        # Calls are held while the other side cannot be reached; one of them probes.
        self.paused = False
        self._probing = False
        self._probes = 0
        # The message of the error that stops the run, once the other side is declared
        # unreachable.
        self.declared: str | None = None
        # Set, and replaced, whenever the watch changes: held calls wake and look again.
        self._changed = asyncio.Event()

    def error(self) -> Exception:
        """The error that stops the run (only once the other side is declared unreachable)."""
        assert self.declared is not None
        return self._unreachable_error(self.declared)

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def turn(self) -> bool:
        """Wait while the other side cannot be reached and another call probes it. True when
        this call is to go out as the probe; raises the stopping error once it is declared."""
        while True:
            if self.declared is not None:
                raise self.error()
            if not self.paused:
                return False
            if not self._probing:
                self._probing = True
                return True
            await self._changed.wait()

    async def before_probe(self) -> None:
        """The probe's backoff: exponential from the policy's base delay, capped at a few
        seconds, and never past the moment the outage would be declared."""
        assert self._since is not None
        delay = min(self._max_delay_s, self._base_delay_s * 2**self._probes)
        left = self._since + self.outage_timeout_s - self._clock()
        self._probes += 1
        await asyncio.sleep(max(0.0, min(delay, left)))

    def probe_done(self) -> None:
        """The probe is back, whatever it found: another held call probes if need be."""
        self._probing = False
        self._notify()

    def lost(self, error: object, *, probe: bool) -> None:
        """A call could not connect: hold the others, and give up once a probe fails
        ``outage_timeout_s`` after the outage began."""
        now = self._clock()
        if self._since is None:
            self._since = now
            self.paused = True
            self._probes = 0
            logger.warning(
                "%s: %s; calls are held while one probes it, for up to outage_timeout_s (%g s) "
                "without a connection to the %s",
                self.who,
                error,
                self.outage_timeout_s,
                self.kind,
            )
        elif probe:
            logger.debug("probe %d of %s failed: %s", self._probes, self.who, error)
        down_s = now - self._since
        # Only a probe's failure declares the outage: the calls that fail with it were sent
        # before it began, and say nothing of whether the other side is back.
        if probe and down_s >= self.outage_timeout_s and self.declared is None:
            self.declared = (
                f"{error} for {down_s:.1f} s (outage_timeout_s is {self.outage_timeout_s:g} s): "
                f"the {self.kind} is unreachable; the run stops, resumable once the {self.kind} "
                "answers again"
            )
            self._notify()

    def reached(self) -> None:
        """A call got through (a reply, or an error from the other side): any outage is over,
        and held calls may go again."""
        self._since = None
        if self.paused:
            self.paused = False
            logger.info("%s answers again; held calls resume", self.who)
            self._notify()


class AgentWatch:
    """The agent under test, called under the outage watch: a call that could not connect
    (``no_connection`` finds it among the causes of what the agent raised) is no item's error.
    It waits while the agent is down and goes again once a probe gets through; the run stops
    with ``AgentUnreachableError`` when none has for ``outage_timeout_s``. Any other exception
    is the agent's answer, raised as it came (the item's error)."""

    def __init__(
        self,
        name: str,
        *,
        outage_timeout_s: float,
        base_delay_s: float,
        max_delay_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.watch = OutageWatch(
            "agent",
            name,
            outage_timeout_s=outage_timeout_s,
            base_delay_s=base_delay_s,
            max_delay_s=max_delay_s,
            unreachable=AgentUnreachableError,
            clock=clock,
        )

    async def call(self, call: Callable[[], Awaitable[T]]) -> T:
        watch = self.watch
        while True:
            # Waiting for the agent to be back is no part of the item's own time.
            with item_held():
                probe = await watch.turn()
            try:
                if probe:
                    with item_held():
                        await watch.before_probe()
                try:
                    output = await call()
                except Exception as error:
                    why = no_connection(error)
                    if why is None:
                        watch.reached()
                        raise
                    watch.lost(_NoConnection(self.name, why, error), probe=probe)
                    if watch.declared is not None:
                        raise watch.error() from error
                    continue
                watch.reached()
                return output
            finally:
                if probe:
                    watch.probe_done()


class _NoConnection:
    """What the log and the stopping error say of an agent call that could not connect."""

    def __init__(self, name: str, why: str, error: BaseException) -> None:
        detail = str(error)
        if why in detail:
            # Its own words say it (the bundled summarizer's, with its model's URL).
            self.text = f"the agent {name}: {detail}"
        else:
            self.text = f"the agent {name} could not connect ({why})"
            if detail:
                self.text += f": {type(error).__name__}: {detail}"

    def __str__(self) -> str:
        return self.text
