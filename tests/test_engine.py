"""run_evals is the engine: Python callers get the limits, retries, cache, run directory and
resume that summeval-run has, from the same code; and nothing a run opens is left open."""

from __future__ import annotations

import asyncio
import contextlib
import gc
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
    ItemResult,
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
            data=DatasetFile(dataset, FieldMap(input="text")),
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

    with nothing_left_open() as left_open:
        for _ in range(3):
            result = asyncio.run(scorer.run(input=SOURCE, output="The dam opened in May."))
            assert result.status == "scored"
        scorer.run_sync(input=SOURCE, output="The dam opened.")

    assert left_open == []
    assert len(chat_server.requests) == 4 * 3


def test_context_managers_and_run_evals_close_what_they_open(
    chat_server: ChatServer, openai_key: None
) -> None:
    judge = OpenAIJudge(OpenAIJudgeConfig(name="gpt-4o-mini", base_url=chat_server.base_url))

    async def main() -> None:
        async with create_summarization_scorer(judge) as scorer:
            await scorer.run(input=SOURCE, output="The dam opened in May.")
            result = await run_evals(
                scorers=[scorer], data=[{"input": SOURCE, "output": "It cost 9 million."}]
            )
            assert result.counts.scored == 1
        async with judge:
            await create_summarization_scorer(judge).run(input=SOURCE, output="Traffic fell.")

    with nothing_left_open() as left_open:
        # One event loop that stays open after the work: nothing may rely on its shutdown.
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(main())
            gc.collect()
            assert left_open == []
        finally:
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
    assert str(RunOptions.of(None, {"shard": "1/4"}).shard) == "1/4"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"concurrency": 0}, "max_items_in_flight must be an integer >= 1, got 0"),
        ({"concurrency": 2, "max_items_in_flight": 3}, "max_items_in_flight is given twice"),
        ({"max_items_in_flights": 3}, "unknown run option 'max_items_in_flights'"),
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
    assert {f.name for f in fields(RunnerConfig)} == names | {"resume"}
    app, library = asdict(RunnerConfig()), asdict(RunOptions())
    # The app shows progress where a Python caller gets none unless asked; all else is shared.
    assert {name: app[name] for name in names - {"progress"}} == {
        name: library[name] for name in names - {"progress"}
    }
