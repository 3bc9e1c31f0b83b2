"""A judge that cannot be reached: a dead one stops the run, a short outage costs no item, and a
broken HTTP 200 is retried.

The judge is the real ``openai`` SDK against a real socket: a port bound but not listening
(every connection refused), or the loopback server taken down and brought back on its port.
Nothing waits on the clock: the server goes down while it holds requests past a count of
answers, and comes back once the client has logged a failed probe; the dead judge is bounded in
requests, not in seconds, and the outage watch's rules are checked against a fake clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from summeval_runner import (
    ConfigError,
    FakeJudge,
    JudgeUnreachableError,
    create_summarization_scorer,
    run_evals,
)
from summeval_runner._errors import JudgeAPIError, JudgeConnectionError
from summeval_runner._judges._protocol import JudgeReply, JudgeRequest, TokenUsage
from summeval_runner._rundir._manifest import read_manifest
from summeval_runner._runner._limits import LimitedJudge
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._retry import RetryPolicy
from tests.app import ENV, openai_run, run_app, table
from tests.chat_server import BrokenReply, ChatServer
from tests.documents import write_dataset
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("no_openai_env")

DATA = [
    {
        "id": f"d{i}",
        "input": f"Document {i} says the harbour opened in spring. It cost {i} million.",
        "output": f"The harbour opened in spring ({i}).",
    }
    for i in range(12)
]


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on which every connection is refused: bound (so no one else takes it for the
    length of the test), never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def openai_scorer(base_url: str) -> Any:
    # No key needed: the server is ours. SDK retries are turned off by the run itself.
    return create_summarization_scorer(
        {"provider": "openai", "name": "judge-model", "base_url": base_url, "api_key_env": None}
    )


# --- a dead judge ------------------------------------------------------------------------------


def test_a_dead_judge_stops_the_run_early_and_says_why(tmp_path: Path, refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}/v1"
    run_dir = tmp_path / "run"

    with pytest.raises(JudgeUnreachableError) as raised:
        asyncio.run(
            run_evals(
                scorers=[openai_scorer(url)],
                data=DATA,
                output_dir=run_dir,
                outage_timeout_s=0.5,
                max_items_in_flight=4,
                cache="off",
            )
        )

    cause = f"could not connect to {url} (connection refused)"
    assert cause in str(raised.value)
    assert "did not answer in time" not in str(raised.value)
    manifest = read_manifest(run_dir)
    assert manifest.status == "interrupted"  # resumable once the judge is back
    assert manifest.stopped_because is not None
    assert cause in manifest.stopped_because
    assert manifest.counts is not None
    assert (manifest.counts.total, manifest.counts.errors) == (0, 0)
    assert manifest.unfinished == len(DATA)  # unfinished, never errored
    assert manifest.judge is not None
    # The four items in flight asked once each, then a probe or two until outage_timeout_s;
    # retrying every item max_attempts (6) times would have sent 72 requests.
    assert manifest.judge.requests <= 4 + 2


def test_the_app_stops_on_a_dead_judge_and_says_why(tmp_path: Path, refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}/v1"
    dataset = write_dataset(tmp_path / "docs.jsonl", 12)
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        "model=openai",
        f"model.base_url={url}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        "runner.max_items_in_flight=4",
        "runner.outage_timeout_s=0.5",
        env=ENV,
    )

    assert completed.returncode == 1, completed.stderr
    cause = f"could not connect to {url} (connection refused)"
    assert cause in completed.stderr
    assert "12 of 12 items unfinished" in completed.stderr
    assert f"runner.resume={run_dir}" in completed.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "interrupted"
    assert cause in manifest["stopped_because"]
    assert manifest["unfinished"] == 12
    assert manifest["counts"]["errors"] == 0
    assert manifest["judge"]["requests"] <= 4 + 2


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://no-such-host.invalid/v1", "(name not resolved)"),
        ("https://{server}/v1", "(TLS handshake failed: wrong version number)"),
    ],
)
def test_a_connection_failure_names_its_cause(
    chat_server: ChatServer, url: str, reason: str
) -> None:
    # https:// to a plain HTTP server: the TLS handshake gets an HTTP answer.
    url = url.format(server=chat_server.base_url.removeprefix("http://").removesuffix("/v1"))

    result = openai_scorer(url).run_sync(input=DATA[0]["input"], output=DATA[0]["output"])

    assert result.status == "error"
    assert result.error.type == "JudgeConnectionError"
    assert result.error.message == f"could not connect to {url} {reason}"


def test_outage_timeout_s_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^outage_timeout_s must be > 0, got 0$"):
        RunOptions(outage_timeout_s=0)

    completed = run_app(tmp_path / "run", "runner.outage_timeout_s=-1")

    assert completed.returncode == 2
    assert "outage_timeout_s must be > 0, got -1" in completed.stderr


# --- a short outage ----------------------------------------------------------------------------


class _Probes(logging.Handler):
    """Sets ``failed`` once the runner logs a failed probe of an unreachable judge."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.failed = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("probe "):
            self.failed.set()


@pytest.fixture
def probes() -> Iterator[_Probes]:
    logger = logging.getLogger("summeval_runner")
    handler, level = _Probes(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_short_outage_mid_run_costs_retries_but_no_errored_item(
    chat_server: ChatServer, probes: _Probes
) -> None:
    problems: list[BaseException] = []
    # The tenth request and every later one wait in the server: the outage comes mid-run,
    # however fast the client is.
    chat_server.hold_after(9)

    def outage() -> None:
        try:
            wait_until(lambda: chat_server.arrivals > 9, "a request held after nine answered")
            # Going down cuts the held requests' connections (the client sees them dropped);
            # released, their handlers find the link closed. Any request that reached the
            # server too late to be cut is answered: either way no item is lost.
            chat_server.go_down()
            chat_server.release()
            # Back only once the client has shown it holds its requests and probes.
            wait_until(probes.failed.is_set, "a failed probe")
        except BaseException as error:
            problems.append(error)
        finally:
            chat_server.come_back()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    result = asyncio.run(
        run_evals(
            scorers=[openai_scorer(chat_server.base_url)],
            data=DATA,
            max_items_in_flight=4,
            # Never reached here: the outage lasts as long as the test makes it.
            outage_timeout_s=600,
            retry={"base_delay_s": 0.01, "max_delay_s": 0.05},
            cache="off",
        )
    )
    thread.join()

    assert problems == []
    assert chat_server.downs == 1
    assert (result.counts.scored, result.counts.errors, result.unfinished) == (len(DATA), 0, 0)
    assert result.passed
    assert result.judge_traffic.retries > 0
    assert result.judge_traffic.requests == len(DATA) * 3 + result.judge_traffic.retries


class Outage:
    """A judge that cannot be connected to for its first ``down_for`` calls, then answers."""

    def __init__(self, down_for: int) -> None:
        self.down_for = down_for
        self.calls = 0
        self.name = "outage"

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.calls += 1
        await asyncio.sleep(0)  # every request in flight goes out before the first fails
        if self.calls <= self.down_for:
            raise JudgeConnectionError("could not connect to http://judge/v1 (connection refused)")
        return JudgeReply(content="{}", usage=TokenUsage())


def request() -> JudgeRequest:
    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze={"coverage": []},
    )
    create_summarization_scorer(judge).run_sync(input="Source.", output="Summary.")
    return judge.requests[0]


def test_requests_held_in_an_outage_are_not_sent_and_spend_no_attempt() -> None:
    # Eight requests go out and fail; one probes three times more in vain; the fourth probe gets
    # through and the seven held requests follow. With one attempt each, none fails.
    judge = Outage(down_for=8 + 3)
    asked = request()
    limited = LimitedJudge(
        judge,
        max_in_flight=8,
        retry=RetryPolicy(max_attempts=1, base_delay_s=0.0, max_delay_s=0.0),
        outage_timeout_s=600,
    )

    async def main() -> list[JudgeReply]:
        return await asyncio.gather(*(limited.complete(asked) for _ in range(8)))

    replies = asyncio.run(main())

    assert len(replies) == 8
    assert judge.calls == 8 + 3 + 1 + 7
    assert limited.probes == 4
    assert limited.retries == sum(reply.retries for reply in replies) == 8 + 3
    assert limited.requests_sent == judge.calls


def test_a_judge_down_for_outage_timeout_s_is_declared_unreachable() -> None:
    judge = Outage(down_for=10**9)
    asked = request()
    # A probe waits base_delay_s, never past the timeout: one probe, two if the clock is coarse.
    limited = LimitedJudge(
        judge,
        max_in_flight=8,
        retry=RetryPolicy(max_attempts=6, base_delay_s=5.0, max_delay_s=5.0),
        outage_timeout_s=0.05,
    )

    async def main() -> list[JudgeReply | BaseException]:
        return await asyncio.gather(
            *(limited.complete(asked) for _ in range(8)), return_exceptions=True
        )

    outcomes = asyncio.run(main())

    assert all(isinstance(outcome, JudgeUnreachableError) for outcome in outcomes)
    message = str(outcomes[0])
    assert message.startswith("could not connect to http://judge/v1 (connection refused) for ")
    assert "(outage_timeout_s is 0.05 s): the judge is unreachable; the run stops" in message
    assert judge.calls <= 8 + 2
    # Once declared, no request goes out.
    with pytest.raises(JudgeUnreachableError):
        asyncio.run(limited.complete(asked))
    assert limited.requests_sent == judge.calls


class Clock:
    """A monotonic clock that moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


REFUSED = JudgeConnectionError("could not connect to http://judge/v1 (connection refused)")


class Scripted:
    """A judge whose calls each take ``seconds`` on the test's clock, then raise or answer."""

    def __init__(self, clock: Clock, *steps: tuple[float, Exception | None]) -> None:
        self.clock = clock
        self.steps = list(steps)
        self.calls = 0
        self.name = "scripted"

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        seconds, outcome = self.steps[self.calls]
        self.calls += 1
        self.clock.now += seconds
        if outcome is not None:
            raise outcome
        return JudgeReply(content="{}", usage=TokenUsage())


def scripted(*steps: tuple[float, Exception | None]) -> tuple[Scripted, LimitedJudge]:
    clock = Clock()
    judge = Scripted(clock, *steps)
    limited = LimitedJudge(
        judge,
        max_in_flight=1,
        retry=RetryPolicy(max_attempts=6, base_delay_s=0.0, max_delay_s=0.0),
        outage_timeout_s=1.0,
        clock=clock,
    )
    return judge, limited


@pytest.mark.parametrize("status", [429, 503])
def test_time_spent_on_http_errors_is_no_outage(status: int) -> None:
    # The judge answers an HTTP error after 1.2 s, longer than outage_timeout_s, then refuses one
    # connection: the outage begins there, so a probe goes and finds the judge back.
    busy = JudgeAPIError(f"HTTP {status}", status_code=status)
    judge, limited = scripted((1.2, busy), (0.0, REFUSED), (0.1, None))

    reply = asyncio.run(limited.complete(request()))

    assert reply.retries == 2
    assert judge.calls == 3
    assert limited.probes == 1


def test_an_http_error_from_a_probe_ends_the_outage() -> None:
    # Refused; 0.9 s later a probe gets a 503 (the judge was reached); 0.6 s later a refusal
    # starts a new outage, 1.5 s after the first refusal; its probe gets a reply.
    busy = JudgeAPIError("HTTP 503", status_code=503)
    judge, limited = scripted((0.0, REFUSED), (0.9, busy), (0.6, REFUSED), (0.2, None))

    reply = asyncio.run(limited.complete(request()))

    assert reply.retries == 3
    assert judge.calls == 4
    assert limited.probes == 2


def test_a_probe_refused_outage_timeout_s_after_the_first_refusal_stops_the_run() -> None:
    judge, limited = scripted((0.0, REFUSED), (0.6, REFUSED), (0.6, REFUSED))

    with pytest.raises(JudgeUnreachableError) as raised:
        asyncio.run(limited.complete(request()))

    assert str(raised.value) == (
        "could not connect to http://judge/v1 (connection refused) for 1.2 s "
        "(outage_timeout_s is 1 s): the judge is unreachable; the run stops, resumable once the "
        "judge answers again"
    )
    assert judge.calls == 3
    assert limited.probes == 2


# --- a broken HTTP 200 -------------------------------------------------------------------------

BROKEN = {"cut": "was cut off", "not_json": "was not JSON", "html": "was not JSON"}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_200_body_is_retried_and_the_item_scored(
    tmp_path: Path, chat_server: ChatServer, kind: Any
) -> None:
    chat_server.script(BrokenReply(kind))
    dataset = write_dataset(tmp_path / "docs.jsonl", 1)

    completed = run_app(
        tmp_path / "run", *openai_run(chat_server.base_url, dataset, "runner.cache=off"), env=ENV
    )

    assert completed.returncode == 0, completed.stderr
    items = table(tmp_path / "run", "items")
    assert items["status"].tolist() == ["scored"]
    assert items["judge_retries"].tolist() == [1]  # retried, not re-asked as a bad verdict
    assert chat_server.counts[kind] == 1
    assert len(chat_server.requests) == 4


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_200_broken_on_every_attempt_is_an_error_that_says_so(
    tmp_path: Path, chat_server: ChatServer, kind: Any
) -> None:
    chat_server.fail_every_request(BrokenReply(kind))
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    completed = run_app(
        tmp_path / "run",
        *openai_run(
            chat_server.base_url, dataset, "runner.retry.max_attempts=3", "runner.cache=off"
        ),
        env=ENV,
    )

    assert completed.returncode == 1, completed.stderr
    items = table(tmp_path / "run", "items")
    assert items["status"].tolist() == ["error", "error"]
    assert items["error_type"].tolist() == ["JudgeAPIError"] * 2
    assert items["error_step"].tolist() == ["preprocess"] * 2
    assert items["error_attempts"].tolist() == [3, 3]
    assert items["error_message"].str.contains(f"the judge's reply from .* {BROKEN[kind]}").all()
    assert len(chat_server.requests) == 6
