"""Judge traffic limits and the progress display."""

from __future__ import annotations

import asyncio
import email.utils
import io
import random
import time

import pytest

from summeval_runner import (
    FakeJudge,
    JudgeAPIError,
    JudgeAuthError,
    JudgeReply,
    JudgeRequest,
    create_summarization_scorer,
    run_evals,
)
from summeval_runner._errors import JudgeInputTooLargeError
from summeval_runner._judges._rate_headers import retry_after_s
from summeval_runner._runner._limits import LimitedJudge, pacing
from summeval_runner._runner._progress import ProgressReporter
from summeval_runner._runner._retry import RetryPolicy


class SlowJudge(FakeJudge):
    def __init__(self) -> None:
        super().__init__(
            preprocess={
                "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                "questions": ["q"],
            },
            analyze={"coverage": [{"question": "q", "answered": True, "reason": "r"}]},
        )
        self.now = 0
        self.most = 0

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.now += 1
        self.most = max(self.most, self.now)
        # In flight for some turns of the event loop, not some milliseconds: every request let
        # in meanwhile starts, however busy the machine is.
        for _ in range(5):
            await asyncio.sleep(0)
        self.now -= 1
        return await super().complete(request)


def test_judge_requests_in_flight_are_bounded() -> None:
    judge = SlowJudge()
    limited = LimitedJudge(judge, max_in_flight=3)
    data = [{"id": str(i), "input": f"Source {i}.", "output": f"Summary {i}."} for i in range(20)]

    asyncio.run(
        run_evals(scorers=[create_summarization_scorer(limited)], data=data, max_items_in_flight=10)
    )

    assert judge.most == 3
    assert limited.requests_sent == 60


def test_a_rate_limit_paces_requests_evenly() -> None:
    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze={"coverage": [{"answered": True, "reason": "r"}]},
    )
    limited = LimitedJudge(judge, max_in_flight=50, requests_per_minute=1200)  # two per 100 ms
    data = [{"id": str(i), "input": "Source.", "output": "Summary."} for i in range(4)]
    sent: list[float] = []
    loop_time: list[float] = []

    class Clock(FakeJudge):
        async def complete(self, request: JudgeRequest) -> JudgeReply:
            sent.append(asyncio.get_running_loop().time())
            return await judge.complete(request)

    limited.judge = Clock()

    async def run() -> None:
        loop_time.append(asyncio.get_running_loop().time())
        await run_evals(
            scorers=[create_summarization_scorer(limited)], data=data, max_items_in_flight=4
        )

    asyncio.run(run())

    assert len(sent) == 12
    # Never more than 2 in a 100 ms window, and 12 requests take at least 5 windows.
    assert all(later - earlier >= 0.095 for earlier, later in zip(sent, sent[2:], strict=False))
    assert sent[-1] - loop_time[0] >= 5 * 0.1 * 0.95


@pytest.mark.parametrize(("rpm", "expected"), [(600, (1, 0.1)), (60, (1, 1.0)), (12000, (20, 0.1))])
def test_pacing_never_lets_more_than_a_tenth_of_a_second_out_at_once(
    rpm: float, expected: tuple[int, float]
) -> None:
    burst, period = pacing(rpm)

    assert (burst, period) == pytest.approx(expected)
    assert burst / period == pytest.approx(rpm / 60)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_tqdm_bar_on_a_terminal() -> None:
    stream = Terminal()
    reporter = ProgressReporter(4, stream=stream, details=lambda: "2.5 req/s")
    for score, error in ((1.0, False), (0.5, False), (None, True), (0.0, False)):
        reporter.update(score=score, error=error)
    reporter.close()

    shown = stream.getvalue()
    assert "4/4" in shown
    assert "\r" in shown  # redrawn in place
    assert "mean 0.500, errors 1, 2.5 req/s" in shown


def test_progress_is_plain_lines_elsewhere() -> None:
    stream = io.StringIO()
    now = [0.0]
    reporter = ProgressReporter(3, stream=stream, interval_s=3600, clock=lambda: now[0])
    for _ in range(3):
        now[0] += 20
        reporter.update(score=1.0, error=False)

    assert stream.getvalue() == "progress: 3/3 items, 01:00 elapsed, mean 1.000, errors 0\n"


class Throttling(FakeJudge):
    """Answers 429 to the calls whose numbers are listed, then valid replies."""

    def __init__(self, throttled: set[int], retry_after_s: float | None = None) -> None:
        super().__init__(
            preprocess={
                "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                "questions": ["q"],
            },
            analyze={"coverage": [{"question": "q", "answered": True, "reason": "r"}]},
        )
        self.throttled = throttled
        self.retry_after_s = retry_after_s
        self.calls = 0
        self.times: list[float] = []

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.calls += 1
        self.times.append(time.monotonic())
        if self.calls in self.throttled:
            raise JudgeAPIError("slow down", status_code=429, retry_after_s=self.retry_after_s)
        return await super().complete(request)


def preprocess_request() -> JudgeRequest:
    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze={"coverage": [{"answered": True, "reason": "r"}]},
    )
    scorer = create_summarization_scorer(judge)
    scorer.run_sync(input="Source.", output="Summary.")
    return judge.requests[0]


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        *[(status, True) for status in (408, 409, 429, 500, 503, None)],
        *[(status, False) for status in (400, 401, 403, 404, 422)],
    ],
)
def test_the_policy_retries_only_what_may_succeed_unchanged(
    status: int | None, retryable: bool
) -> None:
    assert RetryPolicy().is_retryable(JudgeAPIError("x", status_code=status)) is retryable


def test_the_policy_never_retries_a_refused_key_or_an_exhausted_quota() -> None:
    policy = RetryPolicy()
    assert not policy.is_retryable(JudgeAuthError("quota", status_code=429))
    assert not policy.is_retryable(JudgeInputTooLargeError("too long"))


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, max_retry_after_s=5.0)
    rng = random.Random(0)
    error = JudgeAPIError("busy", status_code=503)

    waits = {retry: [policy.delay_s(retry, error, rng) for _ in range(200)] for retry in (1, 3, 6)}

    assert min(waits[1]) >= 0
    assert max(waits[1]) <= 1.0
    assert 3.0 < max(waits[3]) <= 4.0  # up to base * 2**2, jittered below
    assert max(waits[6]) <= 8.0  # capped
    assert len(set(waits[1])) > 100  # jitter: the waits of many clients spread out
    asked = JudgeAPIError("slow down", status_code=429, retry_after_s=30.0)
    assert policy.delay_s(1, asked) == 5.0  # the server's wait, up to the cap


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-tokens": "20ms"}, 0.02),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_the_servers_wait_is_read_from_its_headers(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after_s(headers) == (pytest.approx(seconds) if seconds is not None else None)


def test_an_http_date_retry_after_is_read_as_the_time_left() -> None:
    # An HTTP date has whole seconds: the wait is to that second, from the moment it is read.
    at = int(time.time()) + 10
    in_ten = email.utils.formatdate(at, usegmt=True)
    before = time.time()
    wait = retry_after_s({"Retry-After": in_ten})
    after = time.time()

    assert wait is not None
    assert at - after <= wait <= at - before


def test_a_429_holds_every_new_request_for_the_servers_wait() -> None:
    judge = Throttling({1}, retry_after_s=0.3)
    limited = LimitedJudge(judge, max_in_flight=4, retry=RetryPolicy(max_attempts=3))
    request = preprocess_request()

    async def burst() -> None:
        first = asyncio.create_task(limited.complete(request))
        # One turn of the loop, no clock: the first request's 429 has arrived (it is answered
        # at once); the others start after it.
        await asyncio.sleep(0)
        assert judge.calls == 1
        await asyncio.gather(first, *(limited.complete(request) for _ in range(3)))

    asyncio.run(burst())

    assert judge.calls == 5
    throttled_at = judge.times[0]
    assert all(later - throttled_at >= 0.29 for later in judge.times[1:])
    assert (limited.retries, limited.throttled) == (1, 1)


def test_429s_halve_the_requests_in_flight_and_successes_raise_them_again() -> None:
    judge = Throttling({1, 2, 3})
    limited = LimitedJudge(
        judge,
        max_in_flight=8,
        requests_per_minute=6000,
        retry=RetryPolicy(max_attempts=5, base_delay_s=0.0),
    )
    request = preprocess_request()

    async def one() -> None:
        await limited.complete(request)

    asyncio.run(one())
    # Three 429s in a row are one burst: one cut.
    assert (limited.max_in_flight, limited.requests_per_minute) == (4, 3000)
    assert "retries 3, 429s 3, in flight 0/4 (max 8), 3000 rpm" in limited.describe()

    async def many() -> None:
        for _ in range(4 + 5 + 6 + 7):
            await limited.complete(request)

    asyncio.run(many())
    assert limited.max_in_flight == 8
    # Four rounds of successes: one more request in flight and 5% of the full rate each.
    assert limited.requests_per_minute == pytest.approx(6000 * (0.5 + 4 * 0.05))


def test_a_request_that_hangs_times_out_and_is_retried() -> None:
    class Hangs(FakeJudge):
        def __init__(self) -> None:
            super().__init__(
                preprocess={
                    "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                    "questions": ["q"],
                },
                analyze={"coverage": []},
            )
            self.calls = 0

        async def complete(self, request: JudgeRequest) -> JudgeReply:
            self.calls += 1
            if self.calls == 1:
                await asyncio.sleep(60)
            return await super().complete(request)

    judge = Hangs()
    limited = LimitedJudge(
        judge,
        max_in_flight=1,
        retry=RetryPolicy(max_attempts=2, base_delay_s=0.0),
        request_timeout_s=0.05,
    )

    reply = asyncio.run(limited.complete(preprocess_request()))

    assert reply.content
    assert (judge.calls, limited.retries) == (2, 1)
