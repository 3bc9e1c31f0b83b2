"""What a run tells the people watching it: the log file, the console's last lines, and the
progress display while the judge holds requests back.

Nothing here waits on the clock: the progress display and the judge's limits run on a fake
clock, and the app's retries are scripted answers of the loopback server.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from summeval_runner import (
    FakeJudge,
    JudgeAPIError,
    JudgeReply,
    JudgeRequest,
    create_summarization_scorer,
)
from summeval_runner._errors import JudgeConnectionError
from summeval_runner._runner._limits import LimitedJudge
from summeval_runner._runner._progress import ProgressReporter
from summeval_runner._runner._retry import RetryPolicy
from tests.app import ENV, SECRET, openai_run, run_app
from tests.chat_server import ChatServer, Fault
from tests.documents import write_dataset
from tests.waiting import until

# An agent that fails on one document and takes the first sentence of the others.
AGENT = """
class Flaky:
    def __init__(self, k: int = 1, max_words: int | None = None) -> None:
        self.k = k

    def __call__(self, text: str) -> str:
        if "copy 1 " in text:
            raise RuntimeError("the agent could not summarize copy 1")
        return text.split(". ")[0] + "."
"""


def test_the_log_holds_retries_429s_tracebacks_and_counts_and_the_console_the_errors(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "flaky_agent.py").write_text(AGENT, encoding="utf-8")
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    # The first request gets a 500 and the next a 429 asking for a wait of 20 ms; the rest pass.
    chat_server.script(Fault(500), Fault(429, headers={"retry-after-ms": "20"}))

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        "target._target_=flaky_agent.Flaky",
        "runner.max_error_rate=0.5",
        "runner.max_items_in_flight=1",
        env=ENV | {"PYTHONPATH": str(tmp_path / "agents")},
    )

    assert completed.returncode == 0, completed.stderr
    log = (tmp_path / "run" / "summeval-run.log").read_text(encoding="utf-8")
    judge = "judge openai/gpt-4o-mini"
    # Each retry, with its cause and wait; the 429's hold, and the limits it cut.
    assert f"{judge}: preprocess request failed (the judge at {chat_server.base_url}" in log
    assert "answered HTTP 500: Error code: 500 - injected fault); retry 1 of 5 in " in log
    assert f"{judge}: 429 (rate-limited): new requests held for 0.0 s; limits now in " in log
    assert "answered HTTP 429: Error code: 429 - injected fault); retry 2 of 5 in 0.0 s" in log
    # The agent's failure, with where it came from.
    assert "item doc-00001: the target raised RuntimeError; the item is an error" in log
    assert "Traceback (most recent call last):" in log
    assert 'in __call__\n    raise RuntimeError("the agent could not summarize copy 1")' in log
    assert (
        "run_evals: completed: 3 items: 2 scored, 0 blank summaries (scored 0), 0 unscorable, "
        "1 errors; 0 unfinished"
    ) in log
    assert SECRET not in log
    # The console: no retry, no traceback; it ends with the run's errors, counted.
    console = completed.stdout + completed.stderr
    assert "retry 1 of 5" not in console
    assert "Traceback" not in console
    assert completed.stdout.splitlines()[-2:] == [
        "errors (items; error_type in error_step: error_message, in items.parquet):",
        "  1  RuntimeError in target: the agent could not summarize copy 1",
    ]


def test_a_resumed_run_logs_what_it_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=2", "runner.progress=false").returncode == 0

    again = run_app(run_dir, "dataset.limit=2", "runner.progress=false", f"runner.resume={run_dir}")

    assert again.returncode == 0, again.stderr
    log = (run_dir / "summeval-run.log").read_text(encoding="utf-8")
    assert f"in {run_dir}: 2 finished items kept, 0 that ended in error tried again, 0 items" in log
    assert log.count("run_evals: completed: 2 items: 2 scored") == 2


class Clock:
    """A monotonic clock that moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Refusing(FakeJudge):
    """Answers each request with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(
            preprocess={
                "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                "questions": ["q"],
            },
            analyze={"coverage": []},
        )
        self.error = error

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        raise self.error


def a_request() -> JudgeRequest:
    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze={"coverage": []},
    )
    create_summarization_scorer(judge).run_sync(input="Source.", output="Summary.")
    return judge.requests[0]


def test_the_progress_display_counts_down_a_retry_after_while_no_item_finishes() -> None:
    clock = Clock()
    judge = Refusing(JudgeAPIError("HTTP 429", status_code=429, retry_after_s=45.0))
    limited = LimitedJudge(
        judge,
        max_in_flight=8,
        requests_per_minute=3000,
        retry=RetryPolicy(max_attempts=3),
        clock=clock,
    )
    stream = io.StringIO()
    reporter = ProgressReporter(
        2, stream=stream, details=limited.describe, interval_s=10, clock=clock
    )
    shown: list[str] = []
    request = a_request()

    async def main() -> None:
        asked = asyncio.create_task(limited.complete(request))
        await until(lambda: limited.throttled > 0, "a 429 received", task=asked)
        # Ten seconds on: the plain line is written, though no item has finished.
        clock.now += 10
        reporter.tick()
        clock.now += 30
        shown.append(reporter.line())
        clock.now += 5
        shown.append(reporter.line())
        asked.cancel()

    asyncio.run(main())

    (written,) = stream.getvalue().splitlines()
    assert written.startswith(
        "progress: 0/2 items, 00:10 elapsed, mean n/a, errors 0, rate-limited: resuming in 35 s, "
    )
    # The limits, labelled: the 429 halved the requests in flight and the rate.
    assert written.endswith(", retries 0, 429s 1, in flight 0/4 (max 8), 1500 rpm")
    assert "00:40 elapsed" in shown[0]
    assert "rate-limited: resuming in 5 s" in shown[0]
    assert "rate-limited" not in shown[1]


def test_the_progress_display_says_when_the_judge_cannot_be_reached() -> None:
    refused = JudgeConnectionError("could not connect to http://judge/v1 (connection refused)")
    limited = LimitedJudge(Refusing(refused), max_in_flight=8, outage_timeout_s=3600)
    request = a_request()

    async def main() -> str:
        asked = asyncio.create_task(limited.complete(request))
        await until(lambda: limited.requests_sent > 0, "a request sent", task=asked)
        await asyncio.sleep(0)
        shown = limited.describe()
        asked.cancel()
        return shown

    assert asyncio.run(main()).startswith("judge unreachable: probing, ")


def test_the_offline_judge_shows_no_request_rate(tmp_path: Path) -> None:
    completed = run_app(tmp_path / "run", "dataset.limit=2", "runner.progress=true")

    assert completed.returncode == 0, completed.stderr
    (last,) = [line for line in completed.stderr.splitlines() if line.startswith("progress:")]
    assert last.startswith("progress: 2/2 items, ")
    # The judge bound follows the 16 items in flight (one scorer, one trial).
    assert last.endswith(", errors 0, in flight 0/16")
    assert "req/s" not in last


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_is_redrawn_while_no_item_finishes() -> None:
    stream = Terminal()
    reporter = ProgressReporter(2, stream=stream, details=lambda: "rate-limited: resuming in 9 s")
    before = stream.getvalue()

    reporter.tick()

    assert "rate-limited: resuming in 9 s" not in before
    assert "0/2" in stream.getvalue()[len(before) :]
    assert "rate-limited: resuming in 9 s" in stream.getvalue()
    reporter.close()
