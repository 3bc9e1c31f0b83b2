"""Coverage questions drawn once per source (``scorer.questions=per_source``, the default): every
item with the same source, in one run, in another variant of a sweep and on a later night, is
asked the same questions; ``per_item`` keeps each item's own draw."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from summeval_runner import (
    FakeJudge,
    JudgeAPIError,
    JudgeRequest,
    create_summarization_scorer,
    run_evals,
)
from tests.app import ENV, openai_run, run_app, run_sweep, summeval_compare, table
from tests.chat_server import QUESTION_POOL, ChatServer

SOURCE_A = "The bridge opened on Monday. It cost 40 million dollars. Traffic fell by half."
SOURCE_B = "The river flooded the town. The mayor was there. A toll was charged on the road."


def questions_by_item(run_dir: Path) -> dict[str, tuple[str, ...]]:
    coverage = table(run_dir, "coverage").sort_values(["item_id", "position"])
    return {item: tuple(rows["question"]) for item, rows in coverage.groupby("item_id", sort=True)}


def run_dirs(sweep: Path) -> list[Path]:
    """The sweep's run directories, in job order."""
    found = [manifest.parent for manifest in sweep.rglob("manifest.json")]
    return sorted(found, key=lambda d: json.loads((d / "manifest.json").read_text())["started_at"])


def sweep_steps(server: ChatServer, first: int, last: int) -> list[str]:
    return [request.step for request in server.requests[first:last]]


@pytest.mark.parametrize("mode", ["per_source", "per_item"])
def test_variants_over_the_same_sources_are_asked_the_same_questions_and_draw_them_once(
    tmp_path: Path, chat_server: ChatServer, mode: str
) -> None:
    # A judge whose choice of questions follows the summary it is shown.
    chat_server.questions_follow_summary = True
    dataset = tmp_path / "docs.jsonl"
    dataset.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "input": t}) + "\n"
            for i, t in enumerate((SOURCE_A, SOURCE_B))
        ),
        encoding="utf-8",
    )

    completed = run_sweep(
        tmp_path / "sweep",
        *openai_run(chat_server.base_url, dataset),
        f"scorer.questions={mode}",
        "target.k=1,2",
        # The jobs' directories by number: the overrides above would name them past NAME_MAX.
        "hydra.sweep.subdir=${hydra.job.num}",
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    first, second = run_dirs(tmp_path / "sweep")
    # The basic launcher runs the variants one after the other: the first's 2 items x 3 calls,
    # then the second's (a reason request the first made already is answered by the cache).
    assert sorted(sweep_steps(chat_server, 0, 6)) == [
        "analyze",
        "analyze",
        "preprocess",
        "preprocess",
        "reason",
        "reason",
    ]
    later = sweep_steps(chat_server, 6, len(chat_server.requests))
    asked_first, asked_second = questions_by_item(first), questions_by_item(second)
    if mode == "per_source":
        # The second variant drew no question: it asked for claims only, and was asked the
        # first variant's questions, item for item.
        assert (later.count("preprocess"), later.count("claims")) == (0, 2)
        assert asked_second == asked_first
        shared = table(second, "questions")
        assert set(shared["origin"]) == {"stored"}
        assert set(table(first, "questions")["origin"]) == {"drawn"}
        assert sorted(shared.groupby("source_sha256")["question"].apply(tuple)) == sorted(
            asked_first.values()
        )
        assert table(second, "items")["score"].notna().all()
    else:
        # Each variant drew its own, with its own summary in view, and they differ.
        assert (later.count("preprocess"), later.count("claims")) == (2, 0)
        assert asked_second != asked_first
        assert table(second, "questions").empty
    for asked in (*asked_first.values(), *asked_second.values()):
        assert set(asked) <= set(QUESTION_POOL)

    # A rerun of the second variant (same config, the cache holds every reply): no call at all.
    sent = len(chat_server.requests)
    again = run_app(
        tmp_path / "again",
        *openai_run(chat_server.base_url, dataset),
        f"scorer.questions={mode}",
        "target.k=2",
        env=ENV,
    )
    assert again.returncode == 0, again.stderr
    assert len(chat_server.requests) == sent
    assert questions_by_item(tmp_path / "again") == asked_second


def summaries_of_one_source(count: int) -> list[dict[str, Any]]:
    return [
        {"id": f"s{i}", "input": SOURCE_A, "output": f"Summary {i}: the bridge opened."}
        for i in range(count)
    ]


class CachedFakeJudge(FakeJudge):
    """A fake judge the response cache keeps the replies of (as it keeps a model's)."""

    def cache_identity(self) -> dict[str, str]:
        return {"judge": "scripted"}


def scripted_judge(
    fail_first_draw: bool = False, failing_draws: int = 0, cached: bool = False
) -> FakeJudge:
    draws = 0

    def preprocess(request: JudgeRequest) -> dict[str, Any] | BaseException:
        nonlocal draws
        claims = [{"claim": "The bridge opened.", "supported": True, "reason": "said"}]
        if request.schema_name == "summarization_claims":
            return {"alignment": claims}
        draws += 1
        if (fail_first_draw and draws == 1) or draws <= failing_draws:
            return JudgeAPIError("bad request", status_code=400)
        return {"alignment": claims, "questions": [f"Question {draws}.{i}?" for i in range(3)]}

    return (CachedFakeJudge if cached else FakeJudge)(
        preprocess=preprocess,
        analyze=lambda request: {
            "coverage": [{"answered": True, "reason": "r"} for _ in request.payload.questions]  # type: ignore[union-attr]
        },
    )


def test_items_of_one_source_in_flight_at_once_wait_for_one_draw() -> None:
    judge = scripted_judge()
    scorer = create_summarization_scorer(judge)

    result = asyncio.run(
        run_evals(scorers=[scorer], data=summaries_of_one_source(8), max_items_in_flight=8)
    )

    assert result.counts.scored == 8
    schemas = [r.schema_name for r in judge.requests_for("preprocess")]
    assert schemas.count("summarization_preprocess") == 1
    assert schemas.count("summarization_claims") == 7
    asked = {item.results["summarization-scorer"].asked_questions for item in result.items}
    assert asked == {("Question 1.0?", "Question 1.1?", "Question 1.2?")}
    shared = [item.results["summarization-scorer"].questions_shared for item in result.items]
    assert sorted(shared) == [False] + [True] * 7


def test_when_the_item_drawing_the_questions_fails_the_next_one_draws() -> None:
    judge = scripted_judge(fail_first_draw=True)
    scorer = create_summarization_scorer(judge)

    result = asyncio.run(
        run_evals(
            scorers=[scorer],
            data=summaries_of_one_source(5),
            max_items_in_flight=5,
            max_error_rate=1.0,
        )
    )

    # One item errored on its draw; another drew in its place, and the rest shared that.
    assert (result.counts.errors, result.counts.scored) == (1, 4)
    schemas = [r.schema_name for r in judge.requests_for("preprocess")]
    assert schemas.count("summarization_preprocess") == 2
    assert schemas.count("summarization_claims") == 3
    asked = {
        item.results["summarization-scorer"].asked_questions
        for item in result.items
        if item.status == "scored"
    }
    assert asked == {("Question 2.0?", "Question 2.1?", "Question 2.2?")}


def test_a_source_whose_draw_fails_twice_in_a_row_has_its_items_draw_side_by_side() -> None:
    # The judge fails the first three draws (as for a source too long for it): after two in a
    # row, the items still waiting stop waiting for one another and each draws.
    judge = scripted_judge(failing_draws=3)
    scorer = create_summarization_scorer(judge)

    result = asyncio.run(
        run_evals(
            scorers=[scorer],
            data=summaries_of_one_source(6),
            max_items_in_flight=6,
            max_error_rate=1.0,
        )
    )

    # Two failed one after the other; the four left drew at once (one more failed), and the
    # first set published is the one every item that started after would be asked.
    assert (result.counts.errors, result.counts.scored) == (3, 3)
    schemas = [r.schema_name for r in judge.requests_for("preprocess")]
    assert schemas == ["summarization_preprocess"] * 6
    asked = {
        item.results["summarization-scorer"].asked_questions
        for item in result.items
        if item.status == "scored"
    }
    assert asked == {("Question 4.0?", "Question 4.1?", "Question 4.2?")}


def test_items_that_drew_side_by_side_are_answered_by_the_cache_when_run_again(
    tmp_path: Path,
) -> None:
    # As above, with the response cache: three items fail, three draw side by side and one
    # publishes its set. Each of the three that drew is kept as a drawer of the set, so run
    # again each repeats its own cached call: no judge call for an item that was scored.
    def run(judge: FakeJudge) -> Any:
        return asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer(judge)],
                data=summaries_of_one_source(6),
                max_items_in_flight=6,
                max_error_rate=1.0,
                cache_path=tmp_path / "cache.sqlite",
            )
        )

    first = run(scripted_judge(failing_draws=3, cached=True))
    assert (first.counts.errors, first.counts.scored) == (3, 3)

    again_judge = scripted_judge(cached=True)
    again = run(again_judge)

    # Only the three items that failed are judged: the set is held, so claims only.
    assert again.counts.scored == 6
    schemas = [r.schema_name for r in again_judge.requests_for("preprocess")]
    assert schemas == ["summarization_claims"] * 3
    scores = {item.item_id: item.results["summarization-scorer"].score for item in first.items}
    for item in again.items:
        if item.item_id in scores and scores[item.item_id] is not None:
            assert item.results["summarization-scorer"].score == scores[item.item_id]


def test_a_draw_with_no_question_is_asked_again_and_its_set_shared_by_every_item() -> None:
    replies = iter([[], ["Was it drawn again?"]])

    def preprocess(request: JudgeRequest) -> dict[str, Any]:
        claims = [{"claim": "c", "supported": True, "reason": "r"}]
        if request.schema_name == "summarization_claims":
            return {"alignment": claims}
        return {"alignment": claims, "questions": next(replies)}

    judge = FakeJudge(
        preprocess=preprocess,
        analyze=lambda r: {
            "coverage": [{"answered": True, "reason": "r"} for _ in r.payload.questions]  # type: ignore[union-attr]
        },
    )
    scorer = create_summarization_scorer(judge)
    first = scorer.run_sync(input=SOURCE_A, output="One.")
    second = scorer.run_sync(input=SOURCE_A, output="Two.")
    third = scorer.run_sync(input=SOURCE_A, output="Three.")

    # An empty set measures nothing and cannot be shared: the drawing item is told so and asked
    # again, and every item of the source is measured on the set it then wrote.
    reask = judge.requests[1]
    assert (reask.step, reask.attempt) == ("preprocess", 2)
    assert "questions is empty" in reask.messages[-1].content
    assert first.asked_questions == second.asked_questions == third.asked_questions
    assert first.asked_questions == ("Was it drawn again?",)
    assert (first.score, first.questions_shared, second.questions_shared) == (1.0, False, True)
    assert [r.schema_name for r in judge.requests if r.step == "preprocess"] == [
        "summarization_preprocess",
        "summarization_preprocess",
        "summarization_claims",
        "summarization_claims",
    ]


def test_a_judge_that_never_writes_a_question_gets_the_specs_rule_after_being_asked_again() -> None:
    judge = FakeJudge(preprocess={"alignment": [], "questions": []}, analyze={"coverage": []})

    result = create_summarization_scorer(judge).run_sync(input=SOURCE_A, output="One.")

    # Asked again as often as a malformed reply (max_reasks, 2), then no question: score 0.
    assert [(r.step, r.attempt) for r in judge.requests] == [
        ("preprocess", 1),
        ("preprocess", 2),
        ("preprocess", 3),
        ("analyze", 1),
        ("reason", 1),
    ]
    assert (result.status, result.score, result.asked_questions) == ("scored", 0.0, ())


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])


def test_a_resumed_run_asks_its_remaining_items_the_questions_it_drew(
    tmp_path: Path, chat_server: ChatServer, openai_key: None
) -> None:
    """With the cache off, the journal keeps each source's questions: items scored after a
    resume are asked the set drawn before it, and the source is not drawn again."""
    chat_server.questions_follow_summary = True
    data = [
        {"id": f"{doc}-{n}", "input": source, "output": f"System {n}: {source.split('.')[n]}."}
        for doc, source in (("a", SOURCE_A), ("b", SOURCE_B))
        for n in range(3)
    ]
    scorer = create_summarization_scorer(
        {"provider": "openai", "name": "gpt-4o-mini", "base_url": chat_server.base_url}
    )
    run_dir = tmp_path / "run"
    stop = asyncio.Event()
    finished: list[str] = []

    def stop_after_two(item: Any) -> None:
        finished.append(item.item_id)
        if len(finished) == 2:
            stop.set()

    first = asyncio.run(
        run_evals(
            scorers=[scorer],
            data=data,
            output_dir=run_dir,
            cache="off",
            max_items_in_flight=1,
            on_item_complete=stop_after_two,
            stop=stop,
        )
    )
    assert (first.status, first.counts.total, first.unfinished) == ("interrupted", 2, 4)
    before = len(chat_server.requests)

    resumed = asyncio.run(
        run_evals(
            scorers=[scorer],
            data=data,
            output_dir=run_dir,
            resume=True,
            cache="off",
            max_items_in_flight=1,
        )
    )

    assert (resumed.status, resumed.counts.total) == ("completed", 6)
    steps = [request.step for request in chat_server.requests[before:]]
    # a-2 is asked source A's set (claims only); only source B is drawn, by b-0.
    assert steps.count("preprocess") == 1
    assert steps.count("claims") == 3
    asked = questions_by_item(run_dir)
    assert asked["a-0"] == asked["a-1"] == asked["a-2"]
    assert asked["b-0"] == asked["b-1"] == asked["b-2"]
    assert len(table(run_dir, "questions").groupby("source_sha256")) == 2


def test_runs_that_drew_questions_differently_are_not_compared_unless_allowed(
    tmp_path: Path,
) -> None:
    assert run_app(tmp_path / "shared", "dataset.limit=4", "runner.progress=false").returncode == 0
    own = run_app(
        tmp_path / "own", "dataset.limit=4", "runner.progress=false", "scorer.questions=per_item"
    )
    assert own.returncode == 0, own.stderr

    refused = summeval_compare(str(tmp_path / "shared"), str(tmp_path / "own"), cwd=tmp_path)

    assert refused.returncode == 2
    assert "questions:" in refused.stderr
    assert "'per_item'" in refused.stderr
    assert "'per_source'" in refused.stderr
    # The offline judge draws from the source alone: both modes ask the same questions.
    assert questions_by_item(tmp_path / "shared") == questions_by_item(tmp_path / "own")
    scores = [table(tmp_path / name, "items")["score"].tolist() for name in ("shared", "own")]
    assert scores[0] == scores[1]
    assert pd.read_parquet(tmp_path / "own" / "questions.parquet").empty
