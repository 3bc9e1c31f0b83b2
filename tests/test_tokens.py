"""Token limits: runner.judge_tpm paces judge requests by their token estimate, corrected by
what each reply reports, and the server's x-ratelimit-remaining-tokens / -reset-tokens headers
hold requests back before a 429 would come. Timing is only ever bounded from below here: a
paced run can be slower than its pace on a busy machine, never faster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from summeval_runner._runner._limits import TokenPacer
from tests.app import ENV, openai_run, run_app
from tests.chat_server import ChatServer
from tests.documents import write_dataset


class FakeTime:
    """A clock that moves only when the pacer sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_pacer_lets_out_a_seconds_worth_then_waits_for_the_tokens_to_accrue() -> None:
    time = FakeTime()
    # 1,000 tokens a second, a second's worth at once.
    pacer = TokenPacer(60_000, burst_s=1.0, clock=time.clock, sleep=time.sleep)

    async def send(*sizes: int) -> None:
        for size in sizes:
            await pacer.acquire(size)

    asyncio.run(send(600, 400))  # a second's worth, at once
    assert time.slept == []
    asyncio.run(send(500))  # half a second's tokens must accrue first
    assert sum(time.slept) == pytest.approx(0.5)
    # A reply that used 300 fewer tokens than estimated gives them back: the next 300 go at once.
    pacer.correct(-300)
    asyncio.run(send(300))
    assert sum(time.slept) == pytest.approx(0.5)
    # A request larger than a second's worth waits for a full bucket, then goes.
    asyncio.run(send(2_500))
    assert time.now == pytest.approx(0.5 + 1.0)
    # It took 2,500: the next 1,000 wait for the 1,500 beyond a second's worth and their own.
    asyncio.run(send(1_000))
    assert time.now == pytest.approx(1.5 + 2.5)


def test_a_request_waiting_when_the_servers_lower_limit_is_learned_still_goes() -> None:
    # 1,000 tokens a second configured, a second's worth at once; a request of 900 waits.
    time = FakeTime()

    async def sleep(seconds: float) -> None:
        await time.sleep(seconds)
        await asyncio.sleep(0)  # as a real sleep does, let the others run meanwhile

    pacer = TokenPacer(60_000, burst_s=1.0, clock=time.clock, sleep=sleep)

    async def scenario() -> None:
        await pacer.acquire(1_000)
        waiting = asyncio.ensure_future(pacer.acquire(900))
        await asyncio.sleep(0)  # it sleeps, waiting for its 900 tokens to accrue
        # The server says its limit is 6,000 a minute: a full bucket is now 100 tokens, fewer
        # than the waiting request needs. It waits for a full bucket and goes, not for ever
        # (the fake clock runs as fast as the pacer sleeps: seconds of it would be years).
        pacer.lower_limit(6_000)
        await asyncio.wait_for(waiting, timeout=10)

    asyncio.run(scenario())
    assert time.now < 2


def test_a_paced_run_stays_under_a_servers_token_limit(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    limit = 90_000  # tokens a minute: 1,500 a second
    chat_server.limit_tokens(limit, burst_s=3.0)
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        f"runner.judge_tpm={limit}",
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    assert chat_server.counts["429 tokens"] == 0
    arrivals = sorted(chat_server.token_arrivals)
    total = sum(tokens for _, tokens in arrivals)
    assert total > 2 * limit / 60  # more than the client may send at once: pacing had to act
    # The client lets out half a second's worth at once; the rest no faster than the limit.
    span = arrivals[-1][0] - arrivals[0][0]
    assert span >= 0.5 * (total - limit / 120) / (limit / 60)


def test_the_servers_remaining_tokens_hold_the_next_request_until_its_reset(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.send_headers(
        {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "800ms"}
    )
    dataset = write_dataset(tmp_path / "docs.jsonl", 1)

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        "runner.max_judge_requests_in_flight=1",
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    first, second = (request.arrived for request in chat_server.requests[:2])
    assert second - first >= 0.8
    assert chat_server.counts["429"] == 0
