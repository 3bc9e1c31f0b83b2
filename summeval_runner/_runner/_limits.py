"""Limits on judge traffic: a bound on requests in flight and a smooth requests-per-minute pace."""

from __future__ import annotations

import asyncio
import time

from asyncio_throttle.throttler import Throttler

from summeval_runner._judges._protocol import Judge, JudgeReply, JudgeRequest, judge_name


def pacing(requests_per_minute: float) -> tuple[int, float]:
    """(requests, period in seconds) for a sliding window that paces requests evenly.

    A plain ``Throttler(rpm, 60)`` would let a minute's budget out in the first second and then
    stall. This lets out at most a tenth of a second's share at once (at least one request), so
    the pace is even at 100 ms granularity, and the sleep between polls stays long enough to be
    precise even at thousands of requests a minute.

    >>> pacing(600)
    (1, 0.1)
    >>> pacing(6000)
    (10, 0.1)
    >>> pacing(30)
    (1, 2.0)
    """
    if requests_per_minute <= 0:
        raise ValueError(f"requests_per_minute must be > 0, got {requests_per_minute}")
    burst = max(1, int(requests_per_minute // 600))
    return burst, burst * 60.0 / requests_per_minute


class LimitedJudge:
    """A judge wrapped with a bound on requests in flight and an optional request rate.

    Objects, not globals: each run builds its own, so parallel runs in one process (a Hydra
    launcher reusing workers) never share a limit by accident. ``requests_sent`` counts calls
    made to the wrapped judge, for progress and rate reporting.
    """

    def __init__(
        self, judge: Judge, *, max_in_flight: int, requests_per_minute: float | None = None
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.judge = judge
        self.name = judge_name(judge)
        self.requests_sent = 0
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._throttler: Throttler | None = None
        if requests_per_minute is not None:
            burst, period = pacing(requests_per_minute)
            # Poll often enough to keep the pace, rarely enough not to spin.
            interval = min(0.05, max(0.001, period / burst / 4))
            self._throttler = Throttler(rate_limit=burst, period=period, retry_interval=interval)
        self._started = time.monotonic()

    def requests_per_second(self) -> float:
        elapsed = time.monotonic() - self._started
        return self.requests_sent / elapsed if elapsed > 0 else 0.0

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        async with self._in_flight:
            if self._throttler is not None:
                await self._throttler.acquire()  # type: ignore[no-untyped-call]
            self.requests_sent += 1
            return await self.judge.complete(request)

    async def aclose(self) -> None:
        close = getattr(self.judge, "aclose", None)
        if close is not None:
            await close()
