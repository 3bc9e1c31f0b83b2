"""Judge traffic: a bound on requests in flight, a smooth request and token rate, retries, and
back-off.

``LimitedJudge`` wraps a judge for one run. It retries what the policy says is transient,
honours the server's ``Retry-After``, and adapts: each burst of 429s halves the requests in
flight (and the rates, when set) and holds every new request back for the time the server
asked. Each round of successes raises them again: doubling back up to half the level where the
429s began (as TCP's slow start does), then one step a round, up to the configured limits.

Tokens are paced like requests (``TokenPacer``): each request waits until the tokens it is
estimated to use have accrued at the configured rate, and its reply's own count corrects the
estimate. The server's ``x-ratelimit-remaining-*`` headers hold new requests back until its
reset when it says too little is left for the next one, before it answers 429.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from asyncio_throttle.throttler import Throttler

from summeval_runner._errors import (
    BudgetExhaustedError,
    JudgeAPIError,
    JudgeConnectionError,
    JudgeUnreachableError,
)
from summeval_runner._judges._protocol import (
    Judge,
    JudgeReply,
    JudgeRequest,
    RateLimits,
    TokenUsage,
    answers_locally,
    close_judge,
    judge_name,
    judge_price,
    request_body_of,
)
from summeval_runner._runner._estimate import expected_output_tokens, request_tokens
from summeval_runner._runner._item_time import item_call, item_held
from summeval_runner._runner._outage import OutageWatch
from summeval_runner._runner._retry import RetryPolicy
from summeval_runner._runner._spend import Spend, reply_counts

# The slowest the adaptive rate goes, as a share of the configured rate.
_MIN_RATE_SHARE = 0.1
# 429s that arrive within this many seconds of a cut are the same burst: one cut per burst.
_CUT_INTERVAL_S = 1.0
# A cut this long after the last one starts a new episode: its level sets the recovery target.
_EPISODE_S = 30.0
# The token pacer's step back on a burst of 429s is gentle (the limit is known: an estimate fell
# short), and its step forward a round of successes small.
_MIN_TOKEN_SHARE = 0.5
_TOKEN_SHARE_STEP = 0.01
# judge_tpm is the server's limit: the pacer keeps this share of it, so that the jitter between
# a request leaving and arriving (a delayed request reaching the server with the ones after it)
# does not tip a drained bucket into 429s.
_TOKEN_MARGIN = 0.98

logger = logging.getLogger("summeval_runner")


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


class AdaptiveSlots:
    """A semaphore whose size can shrink and grow while it is in use, served in arrival order."""

    def __init__(self, maximum: int) -> None:
        if maximum < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {maximum}")
        self.maximum = maximum
        self.limit = maximum
        self.in_use = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def acquire(self) -> None:
        if self.in_use < self.limit and not self._waiters:
            self.in_use += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over as the task was cancelled
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_use -= 1
        self._wake()

    def resize(self, limit: int) -> None:
        self.limit = max(1, min(self.maximum, limit))
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_use < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_use += 1
                waiter.set_result(None)


class TokenPacer:
    """At most ``tokens_per_minute`` tokens a minute, at most ``burst_s`` seconds' worth at once.

    ``acquire(n)`` waits, in arrival order, until ``n`` tokens have accrued (a request larger
    than the burst waits for a full one); ``correct(delta)`` charges or refunds the difference
    between a request's estimate and what it used. The burst is half a second's worth: a
    server's bucket holds at least a second's, so requests that a busy machine (or network)
    delays and delivers together still fit in it. ``clock`` and ``sleep`` are passed in so that
    tests can run it on a fake clock.
    """

    def __init__(
        self,
        tokens_per_minute: float,
        *,
        burst_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        if tokens_per_minute <= 0:
            raise ValueError(f"tokens_per_minute must be > 0, got {tokens_per_minute}")
        self.tokens_per_minute = tokens_per_minute
        self._burst_s = burst_s
        self._share = 1.0
        self._clock = clock
        self._sleep = sleep
        self._level = self.capacity
        self._at = clock()
        self._turn = asyncio.Lock()

    @property
    def rate(self) -> float:
        """Tokens a second, now (a share of the configured rate after 429s)."""
        return self.tokens_per_minute * self._share / 60.0

    @property
    def capacity(self) -> float:
        return self.tokens_per_minute / 60.0 * self._burst_s

    @property
    def share(self) -> float:
        """The share of the configured rate the pacer keeps now (1 but after 429s)."""
        return self._share

    def set_share(self, share: float) -> None:
        self._refill()
        self._share = share

    def lower_limit(self, tokens_per_minute: float) -> None:
        """The server's own limit is lower than the one configured: keep to the server's."""
        self._refill()
        self.tokens_per_minute = tokens_per_minute

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._at) * self.rate)
        self._at = now

    async def acquire(self, tokens: int) -> None:
        async with self._turn:
            while True:
                self._refill()
                # Worked out on every pass: the server's lower limit, learned while this
                # request waits, shrinks the bucket, and a need larger than it never accrues.
                need = min(float(tokens), self.capacity)
                if self._level >= need:
                    self._level -= tokens
                    return
                await self._sleep((need - self._level) / self.rate)

    def correct(self, delta: float) -> None:
        """Charge ``delta`` more tokens (a refund when negative): a reply's count against its
        request's estimate, or a request that was not answered."""
        self._refill()
        self._level = min(self.capacity, self._level - delta)


class _NotSent(Exception):
    """The judge became unreachable while a request waited for its slot: it was not sent, and
    goes back to wait for the judge."""


class LimitedJudge:
    """A judge wrapped with the run's limits, retry policy, adaptive pacing and outage watch.

    Objects, not globals: each run builds its own, so parallel runs in one process (a Hydra
    launcher reusing workers) never share a limit by accident. ``requests_sent`` counts
    requests sent to the wrapped judge (retries and probes included), ``retries`` the retries
    among them, ``probes`` the requests sent while the judge could not be reached, and
    ``throttled`` the 429s received. ``on_traffic``, when given, hears of each as it happens
    (``{"requests": 1}`` before a request goes out, ``{"retries": 1}``, ``{"throttled_429": 1}``,
    and a reply's ``input_tokens`` and ``output_tokens``): the run journals them, so a killed
    process has counted them.

    The outage watch: a request that cannot connect (``JudgeConnectionError``: refused, DNS,
    TLS) starts an outage, unless one has started already; any request that gets through to the
    judge (a reply, or an HTTP error such as a 429 or a 503) ends it. During an outage the other
    requests are held and one at a time probes; once a probe fails ``outage_timeout_s`` or more
    after the outage began, the judge is declared unreachable. ``clock`` is the clock of the
    watch and of the holds (seconds, monotonic); tests pass a fake one.

    What it does is logged to the ``summeval_runner`` logger (``summeval-run.log``): each retry
    with its cause and wait, each 429 and the hold it starts, and the outage's start and end.
    """

    def __init__(
        self,
        judge: Judge,
        *,
        max_in_flight: int,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        retry: RetryPolicy | None = None,
        request_timeout_s: float | None = None,
        outage_timeout_s: float = 60.0,
        seed: int | None = None,
        on_traffic: Callable[[Mapping[str, float]], None] | None = None,
        spend: Spend | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.judge = judge
        # The offline judge reads text on this machine: it sends no request, so the display
        # shows no request rate or retries for it.
        self._local = answers_locally(judge)
        self._on_traffic = on_traffic
        self._spend = spend
        self._price = judge_price(judge)
        # Its judge's, for those it serves to read (``judge_price``: None, not known).
        self.price = self._price
        self.name = judge_name(judge)
        self.retry = retry or RetryPolicy(max_attempts=1)
        self.request_timeout_s = request_timeout_s
        self.outage_timeout_s = outage_timeout_s
        self.requests_sent = 0
        self.retries = 0
        self.probes = 0
        self.throttled = 0
        # Requests sent and not yet answered.
        self.in_flight = 0
        self._clock = clock
        self._watch = OutageWatch(
            "judge",
            self.name,
            outage_timeout_s=outage_timeout_s,
            base_delay_s=self.retry.base_delay_s,
            max_delay_s=self.retry.max_delay_s,
            unreachable=JudgeUnreachableError,
            clock=clock,
        )
        self._slots = AdaptiveSlots(max_in_flight)
        self._successes = 0
        self._last_cut = -_EPISODE_S
        # Below these, recovery doubles; above, it adds one step a round.
        self._fast_limit = 0
        self._fast_share = 0.0
        self._hold_until = 0.0
        self._rng = random.Random(seed)
        self._rpm = requests_per_minute
        self._rate_share = 1.0
        self._throttler: Throttler | None = None
        self._throttle_turn = asyncio.Lock()
        self._pacer = (
            TokenPacer(tokens_per_minute * _TOKEN_MARGIN) if tokens_per_minute is not None else None
        )
        if requests_per_minute is not None:
            self._throttler = Throttler(rate_limit=1, period=1.0)
            self._set_rate(1.0)
        # The tokens paced out so far (estimates, corrected by the replies' counts).
        self.tokens_paced = 0
        self._started = time.monotonic()

    @property
    def max_in_flight(self) -> int:
        """The current bound on requests in flight (adaptive, at most the configured one)."""
        return self._slots.limit

    @property
    def requests_per_minute(self) -> float | None:
        """The current request rate (adaptive, at most the configured one), or None."""
        return None if self._rpm is None else self._rpm * self._rate_share

    def requests_per_second(self) -> float:
        elapsed = time.monotonic() - self._started
        return self.requests_sent / elapsed if elapsed > 0 else 0.0

    def describe(self) -> str:
        """Figures for the progress display: what the judge is waiting for, if anything (a
        server's ``Retry-After``, an outage), its request rate, retries and 429s, and its
        limits as they are now (requests in flight of the bound, and the rates).

        >>> from summeval_runner import OfflineJudge
        >>> LimitedJudge(OfflineJudge(), max_in_flight=8).describe()
        'in flight 0/8'
        """
        figures = []
        if self._watch.paused:
            figures.append("judge unreachable: probing")
        elif (held_s := self._hold_until - self._clock()) > 0:
            figures.append(f"rate-limited: resuming in {math.ceil(held_s)} s")
        if not self._local:
            figures += [f"{self.requests_per_second():.1f} req/s", f"retries {self.retries}"]
        if self.throttled:
            figures.append(f"429s {self.throttled}")
        limit = self._slots.limit
        cut = f" (max {self._slots.maximum})" if limit < self._slots.maximum else ""
        figures.append(f"in flight {self.in_flight}/{limit}{cut}")
        if self._rpm is not None:
            figures.append(f"{self.requests_per_minute:.0f} rpm")
        if self._pacer is not None:
            figures.append(f"{self._pacer.rate * 60:,.0f} tpm")
        return ", ".join(figures)

    def _set_rate(self, share: float) -> None:
        assert self._throttler is not None
        assert self._rpm is not None
        self._rate_share = max(_MIN_RATE_SHARE, min(1.0, share))
        burst, period = pacing(self._rpm * self._rate_share)
        self._throttler.rate_limit = burst
        self._throttler.period = period
        # Poll often enough to keep the pace, rarely enough not to spin.
        self._throttler.retry_interval = min(0.05, max(0.001, period / burst / 4))

    def _on_success(self) -> None:
        self._successes += 1
        # Additive increase: one step per round of successes at the current limit.
        if self._successes >= self._slots.limit:
            self._successes = 0
            limit = self._slots.limit
            if limit < self._slots.maximum:
                self._slots.resize(
                    min(2 * limit, self._fast_limit) if limit < self._fast_limit else limit + 1
                )
            if self._pacer is not None:
                self._pacer.set_share(min(1.0, self._pacer.share + _TOKEN_SHARE_STEP))
            share = self._rate_share
            if self._throttler is not None and share < 1.0:
                self._set_rate(
                    min(2 * share, self._fast_share) if share < self._fast_share else share + 0.05
                )

    def _count(self, **counts: float) -> None:
        if self._on_traffic is not None:
            self._on_traffic(counts)

    def _on_throttled(self, wait_s: float) -> None:
        self.throttled += 1
        self._count(throttled_429=1)
        now = self._clock()
        # Nothing new goes out before the server's wait is over.
        held = now + wait_s > self._hold_until
        self._hold_until = max(self._hold_until, now + wait_s)
        self._successes = 0
        cut = now - self._last_cut >= _CUT_INTERVAL_S
        if cut:
            # Multiplicative decrease, once per burst of 429s.
            if now - self._last_cut >= _EPISODE_S:
                self._fast_limit = self._slots.limit // 2
                self._fast_share = self._rate_share / 2
            self._last_cut = now
            self._slots.resize(self._slots.limit // 2)
            if self._throttler is not None:
                self._set_rate(self._rate_share / 2)
            if self._pacer is not None:
                # The token rate is known (judge_tpm): a 429 means an estimate fell short, not
                # that the limit is lower; a gentle step back, recovered a step a round.
                self._pacer.set_share(max(_MIN_TOKEN_SHARE, self._pacer.share * 0.9))
        if held or cut:
            limits = f"in flight {self._slots.limit}"
            if self._rpm is not None:
                limits += f", {self.requests_per_minute:.0f} rpm"
            logger.info(
                "judge %s: 429 (rate-limited): new requests held for %.1f s; limits now %s",
                self.name,
                self._hold_until - now,
                limits,
            )

    async def _send(self, request: JudgeRequest, *, retry: bool, probe: bool) -> JudgeReply:
        """One request within the limits. Every request to the judge goes out here, and every
        reply or error comes back here: the one place where traffic is counted and watched.

        Raises ``_NotSent`` when the judge became unreachable while the request waited for
        its turn (a probe goes regardless).
        """
        await self._slots.acquire()
        hold = None
        try:
            while (wait := self._hold_until - self._clock()) > 0:
                await asyncio.sleep(wait)
            if self._throttler is not None:
                # One task at a time polls the throttler (it sleeps and re-checks); the others
                # wait their turn on the lock without waking, instead of dozens polling at once.
                async with self._throttle_turn:
                    await self._throttler.acquire()  # type: ignore[no-untyped-call]
            paced = 0
            if self._pacer is not None:
                expected = self._expected(request)
                paced = expected.input_tokens + expected.output_tokens
                await self._pacer.acquire(paced)
                self.tokens_paced += paced
            if self._watch.declared is not None or (self._watch.paused and not probe):
                if self._pacer is not None:
                    self._pacer.correct(-paced)
                    self.tokens_paced -= paced
                raise _NotSent
            # Raises BudgetExhaustedError when the request would pass the run's budget; its
            # tokens go back to the pacer then, as for any request not sent.
            try:
                hold = self._spend.admit_judge(request, self._price) if self._spend else None
            except BudgetExhaustedError:
                self._unpaced(paced)
                raise
            self.requests_sent += 1
            self._count(requests=1)
            if retry:
                self.retries += 1
                self._count(retries=1)
            if probe:
                self.probes += 1
            self.in_flight += 1
            try:
                reply = await self._call(request)
            except JudgeConnectionError as error:
                self._unpaced(paced)
                self._watch.lost(error, probe=probe)
                if self._watch.declared is not None:
                    raise self._watch.error() from error
                raise
            except JudgeAPIError:
                # It got through (an HTTP error, a dropped or cut reply, a timeout): not an
                # outage, whatever the retry policy makes of it. An unanswered request used no
                # tokens: its estimate goes back to the pacer.
                self._unpaced(paced)
                self._watch.reached()
                raise
            finally:
                self.in_flight -= 1
            self._watch.reached()
            self._repace(paced, reply)
            # Counted only when there is something to count (the offline judge's free replies
            # add no journal line), in one line with the estimate that stands in for a cost
            # the server left unknown.
            spent = reply_counts(reply)
            if self._spend is not None:
                if request.attempt == 1:
                    # A re-ask's reply (after an unusable one) is no measure of its kind's.
                    self._spend.learn(request, reply.usage.output_tokens)
                if hold is not None:
                    spent |= self._spend.settle(hold, reply)
                    hold = None
            if spent:
                self._count(**spent)
            return reply
        finally:
            if self._spend is not None and hold is not None:
                self._spend.release(hold)
            self._slots.release()

    def _expected(self, request: JudgeRequest) -> TokenUsage:
        """A request's tokens before it is sent: the run's estimate (the replies of its kind so
        far), else its prompt and a careful model's reply."""
        if self._spend is not None:
            return self._spend.expected(request)
        return TokenUsage(request_tokens(request), expected_output_tokens(request))

    def _unpaced(self, paced: int) -> None:
        if self._pacer is not None:
            self._pacer.correct(-paced)
            self.tokens_paced -= paced

    def _repace(self, paced: int, reply: JudgeReply) -> None:
        """Correct the pacer by the tokens the reply reports, and hold new requests back when
        the server says too little of its limit is left for the next one."""
        usage = reply.usage
        used = usage.input_tokens + usage.output_tokens
        if self._pacer is not None and used:
            self._pacer.correct(used - paced)
            self.tokens_paced += used - paced
        limits = reply.rate_limits
        if limits is not None:
            self._heed(limits, paced or used)

    def _heed(self, limits: RateLimits, next_tokens: int) -> None:
        """The server's own count: when it has fewer tokens (or requests) left than the next
        request needs, nothing new goes out until it has refilled enough (its reset time at
        most), rather than be answered 429. Under ``judge_tpm`` the pacer keeps the token count
        itself (the server's remaining tokens leave out what is on its way, and holding on
        them would pace twice); a server limit below the configured one lowers the pacer's."""
        checks = [(limits.remaining_requests, limits.limit_requests, limits.reset_requests_s, 1)]
        pacer = self._pacer
        if pacer is None:
            checks.append(
                (limits.remaining_tokens, limits.limit_tokens, limits.reset_tokens_s, next_tokens)
            )
        elif limits.limit_tokens and limits.limit_tokens * _TOKEN_MARGIN < pacer.tokens_per_minute:
            logger.warning(
                "judge %s: the server's token limit is %d a minute, below the %g paced so far: "
                "paced at the server's",
                self.name,
                limits.limit_tokens,
                pacer.tokens_per_minute / _TOKEN_MARGIN,
            )
            # With the same margin under it as under judge_tpm.
            pacer.lower_limit(limits.limit_tokens * _TOKEN_MARGIN)
        waits = []
        for remaining, limit, reset, need in checks:
            if remaining is None or reset is None or remaining >= need:
                continue
            wait = reset
            if limit:
                # A bucket refilled at limit a minute has the shortfall back this soon.
                wait = min(reset, (need - remaining) * 60.0 / limit)
            waits.append(wait)
        if waits:
            self._hold_until = max(self._hold_until, self._clock() + max(waits))

    async def _call(self, request: JudgeRequest) -> JudgeReply:
        with item_call():
            return await self._timed_call(request)

    async def _timed_call(self, request: JudgeRequest) -> JudgeReply:
        if self.request_timeout_s is None:
            return await self.judge.complete(request)
        # asyncio.timeout, not wait_for: on Python 3.11, wait_for returns a reply that comes in
        # as its task is cancelled and drops the cancellation, and the item goes on calling.
        try:
            async with asyncio.timeout(self.request_timeout_s):
                return await self.judge.complete(request)
        except TimeoutError:
            raise JudgeAPIError(
                f"the judge gave no reply within request_timeout_s ({self.request_timeout_s:g} s)"
            ) from None

    def request_body(self, request: JudgeRequest) -> Mapping[str, Any] | None:
        """What the wrapped judge sends for ``request`` (a transcript shows it)."""
        return request_body_of(self.judge, request)

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        # Of the item's time (item_timeout_s), only the call in progress counts: not the waits
        # for a slot, the pacers, a server's hold, a retry's backoff or an outage's probe.
        with item_held():
            return await self._complete(request)

    async def _complete(self, request: JudgeRequest) -> JudgeReply:
        attempt = 1  # tries that reached the judge: what max_attempts bounds
        sent = 0
        while True:
            try:
                probe = await self._watch.turn()
            except JudgeUnreachableError as error:
                error.attempts = sent
                raise
            wait_s = 0.0
            try:
                if probe:
                    await self._watch.before_probe()
                reply = await self._send(request, retry=sent > 0, probe=probe)
            except _NotSent:
                continue
            except JudgeConnectionError:
                # Not an attempt: the request never reached the judge. It waits until the judge
                # answers again (outage_timeout_s bounds that), then goes again.
                sent += 1
                continue
            except JudgeAPIError as error:
                sent += 1
                retryable = self.retry.is_retryable(error)
                wait_s = self.retry.delay_s(attempt, error, self._rng) if retryable else 0.0
                if error.status_code == 429:
                    self._on_throttled(wait_s)
                if not retryable or attempt >= self.retry.max_attempts:
                    error.attempts = sent
                    logger.info(
                        "judge %s: %s request failed after %d attempt%s: %s",
                        self.name,
                        request.step,
                        sent,
                        "" if sent == 1 else "s",
                        error,
                    )
                    raise
                logger.info(
                    "judge %s: %s request failed (%s); retry %d of %d in %.1f s",
                    self.name,
                    request.step,
                    error,
                    attempt,
                    self.retry.max_attempts - 1,
                    wait_s,
                )
                attempt += 1
            else:
                self._on_success()
                # Its retries: every send of this request before the one that succeeded.
                return reply if sent == 0 else replace(reply, retries=sent)
            finally:
                if probe:
                    self._watch.probe_done()
            await asyncio.sleep(wait_s)

    async def aclose(self) -> None:
        await close_judge(self.judge)
