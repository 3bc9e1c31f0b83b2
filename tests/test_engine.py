"""run_evals is the engine: Python callers get the limits, retries, cache, run directory and
resume that summeval-run has, from the same code; and nothing a run opens is left open."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from summeval_runner import (
    ConfigError,
    DatasetFile,
    EvalRunResult,
    FieldMap,
    InputError,
    ItemResult,
    JudgeBase,
    JudgeReply,
    JudgeRequest,
    OpenAIJudge,
    OpenAIJudgeConfig,
    RetryPolicy,
    RunOptions,
    SummarizationScorer,
    create_summarization_scorer,
    run_evals,
)
from tests.app import ENV, run_app, table
from tests.chat_server import ChatServer, FaultMix
from tests.documents import write_dataset
from tests.test_judge_base import REPLIES
from tests.waiting import until

SOURCE = "The dam opened in May. It cost 9 million. Traffic fell by half."
FAST_RETRIES = {"max_attempts": 10, "base_delay_s": 0.01, "max_delay_s": 0.05}


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])


def openai_scorer(server: ChatServer) -> SummarizationScorer:
    return create_summarization_scorer(
        {"provider": "openai", "name": "gpt-4o-mini", "base_url": server.base_url}
    )


def lead_2(text: str) -> str:
    return ". ".join(text.split(". ")[:2])


@contextlib.contextmanager
def nothing_left_open() -> Iterator[list[str]]:
    """Every warning and every error raised in a finaliser (an unclosed client session, socket
    or transport reports itself so when collected), gathered; the caller asserts on the list."""
    found: list[str] = []
    previous = sys.unraisablehook

    def collect(unraisable: Any) -> None:
        found.append(f"{unraisable.exc_type.__name__}: {unraisable.exc_value}")

    sys.unraisablehook = collect
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
            gc.collect()
        found.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        sys.unraisablehook = previous


def alive_event_loops() -> int:
    gc.collect()
    # type(), not isinstance(): isinstance asks an object its __class__, and the SDKs' lazy
    # proxies answer by loading what they stand for (3 s of this test's 4 went there).
    return sum(issubclass(type(o), asyncio.AbstractEventLoop) for o in gc.get_objects())


def test_run_evals_rides_out_faults_under_a_rate_limit_and_the_app_gives_the_same_rows(
    tmp_path: Path, chat_server: ChatServer, openai_key: None
) -> None:
    # The provider fails 10% of requests with a 500, sends 10% malformed replies, and answers
    # everything 429 for 0.2 s of every second, as a rate limit does; the client paces itself
    # at 6,000 requests a minute, below what 16 items in flight would send.
    chat_server.mix = FaultMix(
        seed=11, server_errors=0.1, malformed=0.1, storm_every_s=1.0, storm_s=0.2
    )
    dataset = write_dataset(tmp_path / "docs.jsonl", 30)

    result = asyncio.run(
        run_evals(
            target=lead_2,
            scorers=[openai_scorer(chat_server)],
            data=DatasetFile(dataset, FieldMap()),
            judge_rpm=6000,
            retry=FAST_RETRIES,
            cache="off",
            output_dir=tmp_path / "python",
        )
    )

    assert (result.counts.total, result.counts.scored, result.status) == (30, 30, "completed")
    assert result.passed
    assert chat_server.counts["500"] >= 5
    assert chat_server.counts["malformed"] >= 2
    assert chat_server.counts["429"] >= 1
    traffic = result.judge_traffic
    assert traffic.retries == chat_server.counts["500"] + chat_server.counts["429"]
    assert traffic.throttled_429 == chat_server.counts["429"]
    # The run's own retries, not the SDK's: every request the server saw was counted.
    assert traffic.requests == len(chat_server.requests)

    agent = tmp_path / "agents"
    agent.mkdir()
    (agent / "lead_two.py").write_text(
        "def lead_2(text):\n    return '. '.join(text.split('. ')[:2])\n", encoding="utf-8"
    )
    (tmp_path / "conf" / "target").mkdir(parents=True)
    (tmp_path / "conf" / "target" / "lead_two.yaml").write_text(
        "_target_: hydra.utils.get_method\npath: lead_two.lead_2\n", encoding="utf-8"
    )
    completed = run_app(
        tmp_path / "cli",
        f"--config-dir={tmp_path / 'conf'}",
        "target=lead_two",
        "model=openai",
        f"model.base_url={chat_server.base_url}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.judge_rpm=6000",
        "runner.retry.max_attempts=10",
        "runner.retry.base_delay_s=0.01",
        "runner.retry.max_delay_s=0.05",
        "runner.cache=off",
        "runner.progress=false",
        "runner.variant=default",
        env=ENV | {"PYTHONPATH": str(agent)},
    )

    assert completed.returncode == 0, completed.stderr
    # The same rows, but for what differs between any two runs: the run id, the clock, and
    # how many retries the 429 storms (which depend on the clock) cost.
    volatile = ["run_id", "judge_latency_s", "target_latency_s", "judge_retries"]
    for name in ("items", "alignment", "coverage"):
        python_rows = table(tmp_path / "python", name).drop(columns=volatile, errors="ignore")
        cli_rows = table(tmp_path / "cli", name).drop(columns=volatile, errors="ignore")
        pd.testing.assert_frame_equal(python_rows, cli_rows)


def test_a_scorer_used_alone_across_event_loops_leaves_nothing_open(
    chat_server: ChatServer, openai_key: None
) -> None:
    scorer = openai_scorer(chat_server)
    loops_before = alive_event_loops()

    with nothing_left_open() as left_open:
        for _ in range(3):
            result = asyncio.run(scorer.run(input=SOURCE, output="The dam opened in May."))
            assert result.status == "scored"
        scorer.run_sync(input=SOURCE, output="The dam opened.")

    assert left_open == []
    assert len(chat_server.requests) == 4 * 3
    # Nothing holds on to the loops that ended (a client kept per loop would).
    assert alive_event_loops() == loops_before


def test_run_evals_and_the_context_managers_close_their_connections_at_once(
    chat_server: ChatServer, openai_key: None
) -> None:
    """Closed when the block or the run ends, not later when the event loop does."""

    async def all_closed() -> bool:
        # The server sees a closed connection a moment after the client closes it.
        for _ in range(1000):
            if chat_server.open_connections == 0:
                return True
            await asyncio.sleep(0.01)
        return False

    async def main() -> None:
        result = await run_evals(
            scorers=[openai_scorer(chat_server)],
            data=[{"input": SOURCE, "output": "It cost 9 million."}],
        )
        assert result.counts.scored == 1
        assert await all_closed(), "run_evals left its copy of the judge connected"

        async with openai_scorer(chat_server) as scorer:
            await scorer.run(input=SOURCE, output="The dam opened in May.")
            assert chat_server.open_connections >= 1  # kept alive for the next call
        assert await all_closed(), "the scorer's block left its judge connected"

        judge = OpenAIJudge(OpenAIJudgeConfig(name="gpt-4o-mini", base_url=chat_server.base_url))
        async with judge:
            await create_summarization_scorer(judge).run(input=SOURCE, output="Traffic fell.")
            assert chat_server.open_connections >= 1
        assert await all_closed(), "the judge's block left it connected"

    with nothing_left_open() as left_open:
        loop = asyncio.new_event_loop()
        # A judge dropped without being closed is closed when the collector finds it: only
        # explicit closes may count here.
        gc.disable()
        try:
            loop.run_until_complete(main())
        finally:
            gc.enable()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    assert left_open == []
    assert len(chat_server.requests) == 3 * 3


def test_options_come_as_an_object_a_mapping_or_keywords_and_concurrency_is_an_alias() -> None:
    built = RunOptions(max_items_in_flight=4, judge_rpm=600, retry=RetryPolicy(max_attempts=2))

    assert (
        RunOptions.of(None, {"concurrency": 4, "judge_rpm": 600, "retry": {"max_attempts": 2}})
        == built
    )
    assert (
        RunOptions.of(
            {"max_items_in_flight": 4, "judge_rpm": 600}, {"retry": RetryPolicy(max_attempts=2)}
        )
        == built
    )
    assert RunOptions.of(built, {"judge_rpm": 60}).judge_rpm == 60
    # Keywords win over a mapping too, whichever name they use.
    assert RunOptions.of({"max_items_in_flight": 2}, {"concurrency": 4}).max_items_in_flight == 4
    assert str(RunOptions.of(None, {"shard": "1/4"}).shard) == "1/4"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"concurrency": 0}, "max_items_in_flight must be an integer >= 1, got 0"),
        ({"concurrency": 2, "max_items_in_flight": 3}, "max_items_in_flight is given twice"),
        ({"max_items_in_flights": 3}, "max_items_in_flights is not a run option"),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts must be >= 1, got 0"),
        ({"retry": {"tries": 3}}, "retry: unknown setting 'tries'"),
        (
            {"cache": "sometimes"},
            "cache must be one of off, read, write, readwrite, got 'sometimes'",
        ),
        ({"shard": "4/4"}, "shard must be I/N with 0 <= I < N"),
        ({"max_error_rate": 1.5}, "max_error_rate must be between 0 and 1, got 1.5"),
    ],
)
def test_a_bad_option_is_named_with_its_rule_before_any_work(
    values: dict[str, Any], message: str
) -> None:
    calls: list[str] = []

    async def target(text: str) -> str:
        calls.append(text)
        return text

    with pytest.raises(ConfigError, match=message):
        asyncio.run(
            run_evals(
                target=target,
                scorers=[create_summarization_scorer("offline")],
                data=[{"input": SOURCE}],
                **values,
            )
        )
    assert calls == []


def first_sentence(text: str) -> str:
    return text.split(". ")[0]


def test_a_python_run_in_a_directory_resumes_where_it_stopped(tmp_path: Path) -> None:
    data = [{"id": f"d{i}", "input": f"Item {i} opened. It cost {i} million."} for i in range(8)]
    scorer = create_summarization_scorer("offline")

    async def stopped_after_three() -> EvalRunResult:
        stop = asyncio.Event()
        finished: list[str] = []

        def count(item: ItemResult) -> None:
            finished.append(item.item_id)
            if len(finished) == 3:
                stop.set()  # as Ctrl-C does in the app

        return await run_evals(
            target=first_sentence,
            scorers=[scorer],
            data=data,
            on_item_complete=count,
            output_dir=tmp_path / "run",
            stop=stop,
            max_items_in_flight=1,
        )

    interrupted = asyncio.run(stopped_after_three())
    resumed = asyncio.run(
        run_evals(
            target=first_sentence,
            scorers=[scorer],
            data=data,
            output_dir=tmp_path / "run",
            resume=True,
        )
    )

    assert (interrupted.status, interrupted.counts.total) == ("interrupted", 3)
    assert interrupted.unfinished == 5
    assert not interrupted.passed
    assert interrupted.manifest is not None
    assert interrupted.manifest.status == "interrupted"
    assert (resumed.status, resumed.counts.total, resumed.unfinished) == ("completed", 8, 0)
    assert resumed.passed
    assert [item.item_id for item in resumed.items] == [f"d{i}" for i in range(3, 8)]
    assert resumed.manifest is not None
    (resumption,) = resumed.manifest.resumptions
    assert (resumption.items_kept, resumption.items_to_score) == (3, 5)
    # The manifest counts both parts' judge requests: three an item, each item once.
    assert resumed.manifest.judge is not None
    assert resumed.manifest.judge.requests == 3 * 8
    assert table(tmp_path / "run", "items")["item_id"].tolist() == [f"d{i}" for i in range(8)]


def test_a_resume_over_other_data_or_another_scorer_is_refused(tmp_path: Path) -> None:
    data = [{"id": "a", "input": SOURCE, "output": "The dam opened in May."}]
    asyncio.run(
        run_evals(scorers=[create_summarization_scorer("offline")], data=data, output_dir=tmp_path)
    )

    with pytest.raises(ConfigError, match="resume: the data changed since the run began"):
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer("offline")],
                data=[{"id": "a", "input": SOURCE, "output": "Something else."}],
                output_dir=tmp_path,
                resume=True,
            )
        )
    changed = r"scorer\.summarization-scorer\.max_questions was 10, now 3"
    with pytest.raises(ConfigError, match=changed):
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer("offline", {"max_questions": 3})],
                data=data,
                output_dir=tmp_path,
                resume=True,
            )
        )
    with pytest.raises(ConfigError, match="already holds a run"):
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer("offline")], data=data, output_dir=tmp_path
            )
        )


def test_the_apps_runner_group_is_run_options_field_for_field() -> None:
    from dataclasses import asdict, fields

    from summeval_runner._cli._config import RunnerConfig

    names = {f.name for f in fields(RunOptions)}
    assert {f.name for f in fields(RunnerConfig)} == names | {"resume", "estimate"}
    app, library = asdict(RunnerConfig()), asdict(RunOptions())
    # The app shows progress where a Python caller gets none unless asked; all else is shared.
    assert {name: app[name] for name in names - {"progress"}} == {
        name: library[name] for name in names - {"progress"}
    }


def test_a_run_stopped_before_the_end_of_a_stream_is_interrupted_not_passed(
    tmp_path: Path,
) -> None:
    def stream() -> Iterator[dict[str, str]]:
        for i in range(100):
            yield {"id": f"d{i}", "input": f"Item {i} opened. It cost {i} million."}

    async def stopped(output_dir: Path | None) -> EvalRunResult:
        stop = asyncio.Event()

        def count(item: ItemResult) -> None:
            stop.set()

        return await run_evals(
            target=first_sentence,
            scorers=[create_summarization_scorer("offline")],
            data=stream(),
            total=100,
            on_item_complete=count,
            output_dir=output_dir,
            stop=stop,
            max_items_in_flight=1,
        )

    for output_dir in (None, tmp_path / "run"):
        result = asyncio.run(stopped(output_dir))

        assert result.status == "interrupted", output_dir
        assert not result.passed
        assert result.counts.total < 100
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "interrupted"
    # Nothing can show a list to hold what the stream held: the run is not resumed over it.
    with pytest.raises(ConfigError, match="read its items from a stream"):
        asyncio.run(
            run_evals(
                target=first_sentence,
                scorers=[create_summarization_scorer("offline")],
                data=list(stream()),
                output_dir=tmp_path / "run",
                resume=True,
            )
        )


def test_a_run_that_scores_nothing_or_reads_no_score_does_not_pass() -> None:
    class Unreadable:
        """A user's scorer that returns what the runner cannot count."""

        id = "mine"

        async def run(self, *, input: Any, output: Any) -> Any:
            return None if "0" in input else {"score": 0.9, "reason": "fine"}

    data = [{"id": f"d{i}", "input": f"Item {i} opened.", "output": "Opened."} for i in range(3)]
    no_sources = [dict(item, input=" ") for item in data]
    offline = create_summarization_scorer("offline")

    blank = asyncio.run(run_evals(scorers=[offline], data=no_sources))
    mixed = asyncio.run(run_evals(scorers=[Unreadable()], data=data, max_error_rate=1.0))

    assert (blank.counts.unscorable, blank.status) == (3, "completed")
    assert not blank.passed  # every source was blank: nothing was measured
    assert blank.means == {offline.id: None}
    assert (mixed.counts.scored, mixed.counts.errors) == (2, 1)
    assert mixed.means == {"mine": pytest.approx(0.9)}
    (failed,) = [item for item in mixed.items if item.status == "error"]
    assert failed.error is not None
    assert failed.error.type == "InvalidScorerResult"
    assert "returned NoneType None, which is not a score" in failed.error.message


def test_blank_summaries_count_as_0_in_the_means_and_a_blank_source_is_left_out() -> None:
    """SPEC §1.3: a system that returns nothing for its hardest items cannot raise its mean."""
    sources = [f"Item {i} opened in May. It cost {i} euros." for i in range(5)]
    full = [{"id": f"d{i}", "input": s, "output": s} for i, s in enumerate(sources)]
    blanked = [dict(item, output="" if i >= 3 else item["output"]) for i, item in enumerate(full)]
    no_source = [*full, {"id": "empty", "input": "  ", "output": "Something."}]
    scorer = create_summarization_scorer("offline")

    whole = asyncio.run(run_evals(scorers=[scorer], data=full))
    two_blank = asyncio.run(run_evals(scorers=[scorer], data=blanked))
    with_gap = asyncio.run(run_evals(scorers=[scorer], data=no_source))

    assert whole.means[scorer.id] == pytest.approx(1.0)
    assert two_blank.means[scorer.id] == pytest.approx(3 / 5)
    counts = two_blank.counts
    assert (counts.scored, counts.blank_summaries, counts.counted) == (3, 2, 5)
    assert {i.item_id: i.status for i in two_blank.items}["d4"] == "blank_summary"
    assert two_blank.passed  # measured: the blanks are the system's failure, scored 0
    assert (with_gap.counts.unscorable, with_gap.means[scorer.id]) == (1, pytest.approx(1.0))


def test_a_cancelled_error_raised_by_a_target_is_an_item_error_not_a_lost_item() -> None:
    def target(text: str) -> str:
        if "Item 1 " in text:
            raise asyncio.CancelledError()
        return text

    data = [{"id": f"d{i}", "input": f"Item {i} opened. It cost {i}."} for i in range(4)]

    result = asyncio.run(
        run_evals(target=target, scorers=[create_summarization_scorer("offline")], data=data)
    )

    assert (result.counts.total, result.counts.errors, result.unfinished) == (4, 1, 0)
    (failed,) = [item for item in result.items if item.status == "error"]
    assert (failed.item_id, failed.error and failed.error.type) == ("d1", "CancelledError")


def test_without_a_directory_the_result_still_counts_cache_hits(
    chat_server: ChatServer, openai_key: None
) -> None:
    data = [{"id": "a", "input": SOURCE, "output": "The dam opened in May."}]

    first = asyncio.run(run_evals(scorers=[openai_scorer(chat_server)], data=data))
    again = asyncio.run(run_evals(scorers=[openai_scorer(chat_server)], data=data))

    assert (first.judge_traffic.requests, first.judge_traffic.cache.stored) == (3, 3)
    assert (again.judge_traffic.requests, again.judge_traffic.cache.hits) == (0, 3)
    assert again.judge_traffic.cache.mode == "readwrite"


def test_a_resume_with_a_callers_config_still_checks_the_scorers_and_the_data_mapping(
    tmp_path: Path,
) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text(
        json.dumps({"id": "a", "text": SOURCE, "body": "Other."}) + "\n", encoding="utf-8"
    )
    data = DatasetFile(path, FieldMap(input="text"))
    asyncio.run(
        run_evals(
            target=first_sentence,
            scorers=[create_summarization_scorer("offline")],
            data=data,
            output_dir=tmp_path / "run",
            config={"experiment": "nightly"},
        )
    )

    def resume(scorer: Any, data: DatasetFile) -> None:
        asyncio.run(
            run_evals(
                target=first_sentence,
                scorers=[scorer],
                data=data,
                output_dir=tmp_path / "run",
                resume=True,
                config={"experiment": "nightly"},
            )
        )

    scaled = create_summarization_scorer("offline", {"scale": 10})
    with pytest.raises(ConfigError, match=r"setup\.scorer\.summarization-scorer\.scale was 1\.0"):
        resume(scaled, data)
    other_field = DatasetFile(path, FieldMap(input="body"))
    with pytest.raises(ConfigError, match=r"setup\.data\.fields\.input was 'text', now 'body'"):
        resume(create_summarization_scorer("offline"), other_field)


def test_a_cancelled_run_leaves_no_item_running(
    tmp_path: Path, chat_server: ChatServer, openai_key: None
) -> None:
    # The server answers 6 requests and holds the rest: the run is cancelled in the middle, as
    # asyncio.wait_for or a cancelled notebook cell does, with more items waiting to start.
    chat_server.hold_after(6)
    data = [{"id": f"d{i}", "input": SOURCE, "output": f"The dam opened {i}."} for i in range(40)]

    async def main() -> set[asyncio.Task[Any]]:
        run = asyncio.create_task(
            run_evals(
                scorers=[openai_scorer(chat_server)],
                data=data,
                cache="off",
                max_items_in_flight=4,
                output_dir=tmp_path / "run",
            )
        )
        # The run going on, until requests are held at the server.
        await until(lambda: chat_server.arrivals >= 8, "8 requests at the server", task=run)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return asyncio.all_tasks() - {asyncio.current_task()}

    try:
        left_running = asyncio.run(main())
    finally:
        chat_server.release()

    # Nothing of the run goes on sending requests (and paying for them) after it returned.
    assert left_running == set()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text("utf-8"))
    # Six answers finish two items at most (three calls each), whichever items they went to.
    assert manifest["status"] == "interrupted"
    assert manifest["counts"]["total"] <= 2
    assert manifest["unfinished"] == 40 - manifest["counts"]["total"]


class CancelsTheRun(JudgeBase):
    """Its first call cancels the run as its reply comes in (as a notebook cell is interrupted,
    or a caller's wait_for runs out, the moment a reply arrives); every later call is held, as
    a server holds a request, until it is cancelled."""

    def __init__(self) -> None:
        self.calls = 0
        self.run: asyncio.Task[Any] | None = None
        self.never = asyncio.Event()

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.calls += 1
        if self.calls == 1:
            assert self.run is not None
            self.run.cancel()
        else:
            await self.never.wait()
        return JudgeReply(content=REPLIES[request.step])


def test_a_run_cancelled_as_a_reply_comes_in_stops_there(tmp_path: Path) -> None:
    """Before: each judge call ran under asyncio.wait_for, which on Python 3.11 returns a reply
    that comes in as its task is cancelled and drops the cancellation: the item went on to its
    next call, held, timed out and retried (in the suite, under load, a cancelled run kept
    calling a server that held its requests until their 120 s timeouts: six minutes). The
    request timeout here only makes that failure come sooner; the run stops by cancellation."""
    judge = CancelsTheRun()
    data = [{"id": f"d{i}", "input": SOURCE, "output": f"The dam opened {i}."} for i in range(5)]

    async def main() -> set[asyncio.Task[Any]]:
        run = asyncio.create_task(
            run_evals(
                scorers=[create_summarization_scorer(judge)],
                data=data,
                cache="off",
                max_items_in_flight=1,
                request_timeout_s=0.5,
                retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.01),
                output_dir=tmp_path / "run",
            )
        )
        judge.run = run
        with pytest.raises(asyncio.CancelledError):
            await run
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert asyncio.run(main()) == set()
    # The cancelling call, and at most the next one, started before the cancellation reached
    # the item's task and ended by it: never a call tried again.
    assert judge.calls <= 2
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "interrupted"


def test_a_stream_cannot_be_resumed_and_a_list_is_checked_before_any_work(tmp_path: Path) -> None:
    calls: list[str] = []

    def target(text: str) -> str:
        calls.append(text)
        return text

    with pytest.raises(ConfigError, match="resume=True needs data whose content can be checked"):
        asyncio.run(
            run_evals(
                target=target,
                scorers=[create_summarization_scorer("offline")],
                data=({"input": SOURCE} for _ in range(2)),
                output_dir=tmp_path,
                resume=True,
            )
        )
    with pytest.raises(InputError, match="data item 1: 'input' must be text or chat messages"):
        asyncio.run(
            run_evals(
                target=target,
                scorers=[create_summarization_scorer("offline")],
                data=[{"input": SOURCE}, {"input": 42}],
            )
        )
    assert calls == []
