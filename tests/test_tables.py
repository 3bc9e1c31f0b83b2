"""The run writer: journal, compaction, aggregates; and the one function that builds rows."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from summeval_runner import ErrorInfo, ItemResult
from summeval_runner._rundir._journal import RunWriter, journaled_statuses
from summeval_runner._rundir._rows import ItemRecord, rows_of
from summeval_runner._stats import t_critical_95


def record(item_id: str, result: object, position: int = 0) -> ItemRecord:
    """The journal record of an item whose one scorer ("s") gave ``result``."""
    item = ItemResult(
        item_id=item_id,
        input="src",
        output="sum",
        metadata={},
        results={"s": result},
        error=None,
        target_latency_s=0.1,
    )
    return ItemRecord.of(item, position)


def rows(item_id: str, result: object) -> dict[str, list[dict[str, object]]]:
    return rows_of(record(item_id, result), run_id="r1", variant="v")


def finish(writer: RunWriter) -> dict[str, Path]:
    try:
        return writer.compact(run_id="r1", variant="v").tables
    finally:
        writer.close()


class Scored:
    status = "scored"
    reason = "ok"

    def __init__(self, score: float) -> None:
        self.score = score


@pytest.mark.parametrize(
    "secret",
    ["sk-live-abcdef123456", 'pa"ss\\word-123456'],
    ids=["plain", "quote-and-backslash"],
)
def test_a_secret_quoted_in_an_error_never_reaches_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("MY_SERVICE_API_KEY", secret)
    writer = RunWriter(tmp_path)
    error = ErrorInfo(type="JudgeAPIError", message=f"bad request with key {secret}")

    writer.write(record("a", error))
    finish(writer)

    # Neither as it is nor as JSON escapes it (a quote, a backslash).
    escaped = json.dumps(secret)[1:-1]
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert secret.encode() not in data, path
        assert escaped.encode() not in data, path
    assert (
        pd.read_parquet(tmp_path / "items.parquet")["error_message"].item()
        == "bad request with key ***"
    )


def journal_cut_short_after_a(run_dir: Path) -> None:
    """A journal holding item "a", then item "b"'s line cut short, as a crash leaves it."""
    writer = RunWriter(run_dir)
    writer.write(record("a", Scored(0.5)))
    writer.close()
    with (run_dir / "journal.jsonl").open("a", encoding="utf-8") as journal:
        journal.write(record("b", Scored(0.25), 1).model_dump_json()[:40])


def test_a_journal_line_cut_short_by_a_crash_is_ignored(tmp_path: Path) -> None:
    journal_cut_short_after_a(tmp_path)

    finish(RunWriter(tmp_path))

    assert pd.read_parquet(tmp_path / "items.parquet")["item_id"].tolist() == ["a"]


def test_a_resumed_journal_drops_the_cut_line_and_appends_whole_lines(tmp_path: Path) -> None:
    journal_cut_short_after_a(tmp_path)

    resumed = RunWriter(tmp_path, resume=True)
    resumed.write(record("b", Scored(0.25), 1))
    finish(resumed)

    assert journaled_statuses(tmp_path) == {"a": "scored", "b": "scored"}
    items = pd.read_parquet(tmp_path / "items.parquet")
    assert items[["item_id", "score"]].values.tolist() == [["a", 0.5], ["b", 0.25]]


def test_tables_are_in_dataset_order_with_the_last_entry_of_each_item(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    # Items finish out of order, and "b" errored and was tried again on resume.
    writer.write(record("c", Scored(0.3), 2))
    writer.write(record("b", ErrorInfo(type="JudgeAPIError", message="HTTP 500"), 1))
    writer.write(record("a", Scored(0.1), 0))
    writer.write(record("b", Scored(0.2), 1))
    finish(writer)

    items = pd.read_parquet(tmp_path / "items.parquet")
    assert items[["item_id", "status", "score"]].values.tolist() == [
        ["a", "scored", 0.1],
        ["b", "scored", 0.2],
        ["c", "scored", 0.3],
    ]
    aggregates = pd.read_parquet(tmp_path / "aggregates.parquet").set_index("metric")
    assert (aggregates.loc["score", "items"], aggregates.loc["score", "errors"]) == (3, 0)


def test_aggregates_count_statuses_and_clip_the_interval(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    for index, score in enumerate([1.0, 1.0, 1.0, 0.2]):
        writer.write(record(str(index), Scored(score), index))
    writer.write(record("failed", ErrorInfo(type="TimeoutError", message="slow", step="target"), 4))
    finish(writer)

    (aggregate,) = (
        pd.read_parquet(tmp_path / "aggregates.parquet")
        .query("metric == 'score'")
        .to_dict("records")
    )
    assert (aggregate["items"], aggregate["scored"], aggregate["errors"], aggregate["n"]) == (
        5,
        4,
        1,
        4,
    )
    assert aggregate["mean"] == pytest.approx(0.8)
    half_width = t_critical_95(3) * pd.Series([1.0, 1.0, 1.0, 0.2]).std() / 2
    assert aggregate["ci95_low"] == pytest.approx(0.8 - half_width)
    # A generic scorer's results carry no scale, so the interval is not clipped.
    assert aggregate["ci95_high"] == pytest.approx(0.8 + half_width)


@pytest.mark.parametrize(
    ("df", "value"), [(1, 12.706), (10, 2.228), (30, 2.042), (60, 2.0), (1000, 1.962)]
)
def test_t_critical_values(df: int, value: float) -> None:
    assert t_critical_95(df) == pytest.approx(value, abs=0.003)


def test_a_summarization_interval_never_leaves_the_metric_range(tmp_path: Path) -> None:
    from summeval_runner import FakeJudge, create_summarization_scorer

    def result(answered: list[bool]) -> object:
        judge = FakeJudge(
            preprocess={
                "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                "questions": [f"q{i}" for i in range(len(answered))],
            },
            analyze={
                "coverage": [
                    {"question": f"q{i}", "answered": a, "reason": "r"}
                    for i, a in enumerate(answered)
                ]
            },
        )
        return create_summarization_scorer(judge).run_sync(input="Source.", output="Summary.")

    writer = RunWriter(tmp_path)
    for index, answered in enumerate([[True], [True], [True], [True, False, False, False, False]]):
        writer.write(record(str(index), result(answered), index))
    finish(writer)

    aggregates = pd.read_parquet(tmp_path / "aggregates.parquet").set_index("metric")
    assert aggregates.loc["coverage", "mean"] == pytest.approx(0.8)
    half_width = t_critical_95(3) * pd.Series([1.0, 1.0, 1.0, 0.2]).std() / 2
    assert aggregates.loc["coverage", "ci95_high"] == 1.0  # the t-interval alone reaches 1.44
    assert aggregates.loc["coverage", "ci95_low"] == pytest.approx(0.8 - half_width)


class Custom:
    """A user's scorer result with a status of its own and a boolean verdict."""

    def __init__(self, status: str, score: object) -> None:
        self.status = status
        self.score = score


@pytest.mark.parametrize(
    ("result", "status", "score"),
    [
        (Custom("ok", 0.5), "scored", 0.5),  # an unknown status is a scored result, as in run_evals
        (Custom("scored", True), "scored", None),  # a bool is a verdict, not a score
        (Custom("unscorable", 0.0), "unscorable", 0.0),
        (Custom("error", 0.0), "error", None),  # an error never carries a score
        (0.75, "scored", 0.75),
    ],
)
def test_other_scorers_results_are_read_as_run_evals_reads_them(
    result: object, status: str, score: float | None
) -> None:
    (row,) = rows("a", result)["items"]
    item = ItemResult(
        item_id="a",
        input="i",
        output="o",
        metadata={},
        results={"s": result},
        error=None,
        target_latency_s=None,
    )

    assert (row["status"], row["score"]) == (status, score)
    assert item.status == status


def test_rows_hold_the_texts_the_scorer_judged_not_a_second_reading_of_the_payload() -> None:
    from summeval_runner import FakeJudge, create_summarization_scorer

    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze={"coverage": [{"question": "q", "answered": True, "reason": "r"}]},
    )
    scorer = create_summarization_scorer(judge, {"source": "The source the option names."})
    chat = [
        {"role": "assistant", "content": "A first draft."},
        {"role": "assistant", "content": "The summary that was judged."},
    ]
    result = scorer.run_sync(input="The input, which is not the source here.", output=chat)

    (row,) = rows("a", result)["items"]

    assert (row["source"], row["summary"]) == (
        "The source the option names.",
        "The summary that was judged.",
    )
    assert (result.source, result.summary) == (row["source"], row["summary"])


def test_a_failed_target_gives_every_scorer_a_row_with_the_error() -> None:
    error = ErrorInfo(type="RuntimeError", message="agent crashed", step="target")
    item = ItemResult(
        item_id="a",
        input="src",
        output=None,
        metadata={"section": "news"},
        results={"s1": error, "s2": error},
        error=error,
        target_latency_s=0.2,
    )

    items = rows_of(ItemRecord.of(item, 0), run_id="r1", variant="v")["items"]

    assert [(r["scorer_id"], r["status"], r["error_step"]) for r in items] == [
        ("s1", "error", "target"),
        ("s2", "error", "target"),
    ]
    assert all(r["score"] is None and r["metadata"] == {"section": "news"} for r in items)


def test_a_cut_line_longer_than_a_read_block_is_dropped_on_resume(tmp_path: Path) -> None:
    journal_cut_short_after_a(tmp_path)
    with (tmp_path / "journal.jsonl").open("a", encoding="utf-8") as journal:
        journal.write("x" * 200_000)  # the cut line goes on past several 64 KiB blocks

    resumed = RunWriter(tmp_path, resume=True)
    resumed.write(record("b", Scored(0.25), 1))
    finish(resumed)

    assert journaled_statuses(tmp_path) == {"a": "scored", "b": "scored"}
    assert len((tmp_path / "journal.jsonl").read_text("utf-8").splitlines()) == 2


def test_every_journal_line_is_indexed_by_its_head_and_reads_back_whole(tmp_path: Path) -> None:
    # Indexing a million-line journal reads each line's head (position, id, status) without a
    # full parse; the writer puts that head first itself, whatever the record's field order.
    from summeval_runner._rundir._journal import _HEAD

    awkward = ['quo"te\\back', "café \u2028 line", "plain", ""]
    writer = RunWriter(tmp_path)
    written = [record(item_id, Scored(0.5), position) for position, item_id in enumerate(awkward)]
    for each in written:
        writer.write(each)
    writer.close()

    lines = (tmp_path / "journal.jsonl").read_bytes().splitlines()
    heads = [_HEAD.match(line) for line in lines]
    assert all(head is not None for head in heads)
    assert [json.loads(head[2]) for head in heads if head] == awkward
    assert [ItemRecord.model_validate_json(line) for line in lines] == written
