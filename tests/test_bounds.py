"""How the run's bounds relate: the judge's bound follows the items in flight, and an item's
timeout counts its own work, not the waits the run imposes on it.

The judge is the real ``openai`` SDK against the loopback server, which counts the requests it
is answering at once and can hold every reply until the test releases it. Nothing here waits on
the clock to pass: the most requests at once is the server's count, reached while it holds them;
a paced run is one whose pacer alone makes its items wait several times their timeout; a slow
call is one the server never answers before the timeout has fired.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from summeval_runner import ConfigError, FakeJudge, create_summarization_scorer, run_evals
from summeval_runner._runner._item_time import ItemTime, item_call, item_held, item_work
from summeval_runner._runner._judge_stack import JudgeStack
from summeval_runner._runner._limits import LimitedJudge
from summeval_runner._runner._options import RunOptions
from tests.chat_server import ChatServer, Fault
from tests.waiting import until

pytestmark = pytest.mark.usefixtures("no_openai_env")


def items(count: int) -> list[dict[str, str]]:
    """Items of distinct sources: each draws its own questions (none waits for another's)."""
    return [
        {
            "id": f"d{i}",
            "input": f"Document {i} says the harbour opened in spring. It cost {i} million.",
            "output": f"The harbour opened in spring ({i}).",
        }
        for i in range(count)
    ]


def openai_scorer(server: ChatServer, **options: Any) -> Any:
    model = {"provider": "openai", "name": "judge-model", "base_url": server.base_url}
    return create_summarization_scorer(model | {"api_key_env": None}, options or None)


def held_run(
    server: ChatServer, expected: int, scorer: Any = None, **options: Any
) -> tuple[Any, int]:
    """A run whose every reply the server holds until ``expected`` requests are held at once
    (or the deadline fails the test); then released. The run's result and the server's most
    requests at once."""
    server.hold_after(0)

    async def main() -> Any:
        run = asyncio.create_task(
            run_evals(
                scorers=[scorer or openai_scorer(server)], data=items(30), cache="off", **options
            )
        )
        try:
            await until(
                lambda: server.arrivals >= expected, f"{expected} requests at once", task=run
            )
        finally:
            server.release()
        return await run

    result = asyncio.run(main())
    return result, server.most_in_flight


def test_concurrency_alone_sets_the_judge_requests_in_flight(chat_server: ChatServer) -> None:
    # The seed's name for the items in flight, and nothing else set: each of the 12 items has
    # its request in flight at once (the judge's bound was 8 whatever the items').
    result, most = held_run(chat_server, 12, concurrency=12)

    assert most == 12
    assert result.counts.scored == 30
    assert chat_server.answered == 90


def test_trials_of_an_item_have_their_requests_in_flight_at_once(chat_server: ChatServer) -> None:
    # Trials run at once: 6 items of 2 trials each have 12 requests in flight (each trial draws
    # its own questions: with per_source ones, the second waits for the first's draw).
    scorer = openai_scorer(chat_server, questions="per_item")
    result, most = held_run(chat_server, 12, scorer, concurrency=6, trials=2)

    assert most == 12
    assert result.counts.scored == 30


def test_an_explicit_judge_bound_still_caps_the_requests(chat_server: ChatServer) -> None:
    result, most = held_run(chat_server, 5, concurrency=12, max_judge_requests_in_flight=5)

    assert most == 5
    assert result.counts.scored == 30


def test_the_bound_follows_items_trials_and_the_scorers_sharing_a_judge() -> None:
    judge = FakeJudge()
    scorers = [create_summarization_scorer(judge), create_summarization_scorer(judge)]
    stack = JudgeStack(RunOptions(max_items_in_flight=10, trials=3))
    stack.bind(scorers)

    (limited,) = stack._limited.values()
    assert isinstance(limited, LimitedJudge)
    assert limited.max_in_flight == 60
    assert RunOptions.of(None, {"concurrency": 50}).judge_requests_bound() == 50
    with pytest.raises(ConfigError, match=r"an integer >= 1, or None \(null\) to follow the items"):
        RunOptions(max_judge_requests_in_flight=0)


def test_429s_slow_down_from_the_bound_that_follows_the_items() -> None:
    stack = JudgeStack(RunOptions(max_items_in_flight=40))
    stack.bind([create_summarization_scorer(FakeJudge())])
    (limited,) = stack._limited.values()
    assert isinstance(limited, LimitedJudge)

    limited._on_throttled(0.0)  # a burst of 429s: the bound halves, from 40

    assert limited.max_in_flight == 20
    assert "in flight 0/20 (max 40)" in limited.describe()


def test_a_paced_run_whose_waits_exceed_the_item_timeout_scores_every_item(
    chat_server: ChatServer,
) -> None:
    # 10 items at once, three requests each, 600 requests a minute: the pacer lets one out every
    # 0.1 s, so the last of the 30 leaves 2.9 s or more after the first, and the items finishing
    # last have waited for the pacer alone nearly three times their 1 s timeout. Their own work
    # (three calls on loopback) is milliseconds.
    result = asyncio.run(
        run_evals(
            scorers=[openai_scorer(chat_server)],
            data=items(10),
            cache="off",
            concurrency=10,
            judge_rpm=600,
            item_timeout_s=1.0,
        )
    )

    assert [(item.item_id, item.error) for item in result.items if item.error] == []
    assert result.counts.scored == 10
    assert chat_server.answered == 30


def test_a_servers_hold_longer_than_the_item_timeout_costs_no_item(
    chat_server: ChatServer,
) -> None:
    # The first request is answered 429 with Retry-After: 2 s; the run holds every new request
    # and the throttled one's retry that long, twice the items' 1 s timeout.
    chat_server.script(Fault(429, "rate limited", headers={"Retry-After": "2"}))
    result = asyncio.run(
        run_evals(
            scorers=[openai_scorer(chat_server)],
            data=items(2),
            cache="off",
            concurrency=2,
            item_timeout_s=1.0,
        )
    )

    assert [(item.item_id, item.error) for item in result.items if item.error] == []
    assert result.counts.scored == 2
    assert result.judge_traffic.throttled_429 == 1
    assert chat_server.answered == 7


def test_an_outage_longer_than_the_item_timeout_costs_no_item(chat_server: ChatServer) -> None:
    # The fourth request and every later one wait in the server, which then goes off its port
    # for 2.5 s (two and a half times the items' timeout, and longer on a slower machine): the
    # items hold their requests while one probes, and all score once it is back. Their own work
    # (three calls on loopback, a few probes refused at once) is milliseconds.
    chat_server.hold_after(3)
    problems: list[BaseException] = []

    def outage() -> None:
        try:
            deadline = time.monotonic() + 30
            while chat_server.arrivals <= 3:
                assert time.monotonic() < deadline, "no request held after three answered"
                time.sleep(0.01)
            chat_server.go_down()
            chat_server.release()
            time.sleep(2.5)
        except BaseException as error:
            problems.append(error)
        finally:
            chat_server.come_back()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    result = asyncio.run(
        run_evals(
            scorers=[openai_scorer(chat_server)],
            data=items(6),
            cache="off",
            concurrency=3,
            item_timeout_s=1.0,
            outage_timeout_s=600,
            retry={"base_delay_s": 0.01, "max_delay_s": 0.05},
        )
    )
    thread.join()

    assert problems == []
    assert chat_server.downs == 1
    assert [(item.item_id, item.error) for item in result.items if item.error] == []
    assert result.counts.scored == 6
    assert result.judge_traffic.retries > 0


def test_a_judge_call_that_hangs_still_times_the_item_out(chat_server: ChatServer) -> None:
    # The server answers the first item's three requests, then holds every reply until the
    # end: the second item's first call is in progress for as long as the test lets it be.
    chat_server.hold_after(3)
    try:
        result = asyncio.run(
            run_evals(
                scorers=[openai_scorer(chat_server)],
                data=items(2),
                cache="off",
                concurrency=1,
                item_timeout_s=0.5,
                request_timeout_s=None,
            )
        )
    finally:
        chat_server.release()

    first, second = result.items
    assert first.status == "scored"
    assert second.status == "error"
    assert second.error is not None
    assert second.error.type == "ItemTimeoutError"
    assert "item_timeout_s (0.5 s)" in second.error.message
    assert second.error.step == "preprocess"


def test_a_scorer_that_hangs_outside_any_judge_request_times_the_item_out() -> None:
    class Stuck:
        id = "stuck"

        async def run(self, *, input: Any, output: Any) -> float:
            await asyncio.Event().wait()  # never set: only the timeout ends it
            return 1.0

    result = asyncio.run(run_evals(scorers=[Stuck()], data=items(1), item_timeout_s=0.2))

    (item,) = result.items
    assert item.error is not None
    assert item.error.type == "ItemTimeoutError"
    assert item.error.step == "scorer"


def test_an_items_clock_runs_only_while_it_works() -> None:
    async def main() -> list[bool]:
        clock = ItemTime(60.0)
        seen = [clock.running]
        from summeval_runner._runner import _item_time

        token = _item_time.ITEM_TIME.set(clock)
        try:
            with item_work():  # a scorer runs
                seen.append(clock.running)
                with item_held():  # its judge request waits for a slot or the pacer
                    seen.append(clock.running)
                    with item_call():  # the request is sent
                        seen.append(clock.running)
                    seen.append(clock.running)  # a retry's backoff
                seen.append(clock.running)
        finally:
            _item_time.ITEM_TIME.reset(token)
        clock.close()
        return [*seen, clock.running]

    assert asyncio.run(main()) == [False, True, False, True, False, True, False]
