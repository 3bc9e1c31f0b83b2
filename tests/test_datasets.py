"""Datasets in: JSONL, CSV and Parquet through one field mapping, and every bad input named."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from summeval_runner import (
    DatasetError,
    DatasetFile,
    FakeJudge,
    FieldMap,
    InputError,
    Item,
    create_summarization_scorer,
    load_dataset,
    run_evals_sync,
)

ROWS = [
    {"doc": "a1", "body": "The first text.", "topic": "x", "extra": 1},
    {"doc": "a2", "body": "The second text.", "topic": "y", "extra": 2},
]
FIELDS = FieldMap(input="body", id="doc", metadata=("topic",))


def write(path: Path, rows: list[dict[str, object]]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_every_format_reads_to_the_same_items(tmp_path: Path, suffix: str) -> None:
    items = load_dataset(write(tmp_path / f"data{suffix}", ROWS), FIELDS)

    assert [(i.id, i.input, dict(i.metadata)) for i in items] == [
        ("a1", "The first text.", {"topic": "x"}),
        ("a2", "The second text.", {"topic": "y"}),
    ]


def test_precomputed_outputs_and_chat_messages(tmp_path: Path) -> None:
    rows = [{"id": "m", "messages": [{"role": "user", "content": "Source."}], "answer": "Summary."}]

    (item,) = load_dataset(
        write(tmp_path / "chat.jsonl", rows), FieldMap(input="messages", output="answer")
    )

    assert item.input == [{"role": "user", "content": "Source."}]
    assert item.output == "Summary."


def test_ids_are_generated_from_content_when_the_data_has_none(tmp_path: Path) -> None:
    rows = [{"body": "Alpha."}, {"body": "Beta."}, {"body": "Gamma."}]
    forward = load_dataset(write(tmp_path / "f.jsonl", rows), FieldMap(input="body"))
    backward = load_dataset(write(tmp_path / "b.jsonl", rows[::-1]), FieldMap(input="body"))
    repeated = load_dataset(write(tmp_path / "r.jsonl", [*rows, rows[0]]), FieldMap(input="body"))

    # Stable: an input keeps its id when the file is reordered.
    assert {i.input: i.id for i in forward} == {i.input: i.id for i in backward}
    assert len({item.id for item in forward}) == 3
    # The same input twice still gets two ids.
    assert repeated[3].id == f"{repeated[0].id}-2"


def test_limit_takes_the_first_rows(tmp_path: Path) -> None:
    items = load_dataset(write(tmp_path / "d.jsonl", ROWS), FIELDS, limit=1)

    assert [item.id for item in items] == ["a1"]


@pytest.mark.parametrize(
    ("content", "fields", "message"),
    [
        ("", FIELDS, "the dataset has no rows"),
        ('{"doc": "a1", "body": "ok"}\n{"doc": "a2", "text": "wrong field"}\n', FIELDS, "row 2: no field 'body' (dataset.fields.input); the row has ['doc', 'text']"),
        ('{"doc": "a1", "body": 42}\n', FIELDS, "row 1: field 'body' (dataset.fields.input) must be text, got int 42"),
        ('{"doc": "a1", "body": "x"}\n{"doc": "a1", "body": "y"}\n', FIELDS, "row 2: duplicate id 'a1' (dataset.fields.id); first seen at row 1"),
        ('{"doc": "a1", "body": "x"}\n{"body": "y"}\n', FIELDS, "row 2: field 'doc' (dataset.fields.id) is missing here but present in earlier rows"),
        ('{"doc": "a1", "body": "x"}\n{not json\n', FIELDS, "line 2: not valid JSON"),
        ('["a list"]\n', FIELDS, "row 1: a row must be an object with fields, got list"),
        ('{"doc": "a1", "body": "x"}\n', FieldMap(input="body", id="doc", output="summary"), "row 1: no field 'summary' (dataset.fields.output)"),
    ],
)  # fmt: skip
def test_bad_rows_name_the_file_row_and_field(
    content: str, fields: FieldMap, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(DatasetError) as raised:
        load_dataset(path, fields)

    assert str(raised.value).startswith(str(path))
    assert message in str(raised.value)


def test_a_csv_row_number_is_its_line_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("doc,body\na1,first\na1,second\n", encoding="utf-8")

    with pytest.raises(DatasetError, match=r"row 3: duplicate id 'a1'.*first seen at row 2"):
        load_dataset(path, FieldMap(input="body", id="doc"))


def test_a_duplicate_is_found_among_many_ids_and_copies_are_numbered(tmp_path: Path) -> None:
    # Enough ids that the table of ids seen grows several times before the duplicate comes.
    rows = [{"doc": f"d{i}", "body": f"text {i}"} for i in range(5000)]
    rows.append({"doc": "d1234", "body": "again"})
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    with pytest.raises(
        DatasetError, match=r"row 5001: duplicate id 'd1234'.*first seen at row 1235"
    ):
        load_dataset(path, FIELDS)

    copies = tmp_path / "copies.jsonl"
    copies.write_text('{"body": "same"}\n' * 3 + '{"body": "other"}\n', encoding="utf-8")
    ids = [item.id for item in load_dataset(copies, FieldMap(input="body"))]
    assert ids[1:3] == [f"{ids[0]}-2", f"{ids[0]}-3"]
    assert len(set(ids)) == 4


def test_a_missing_file_and_an_unknown_format_are_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"dataset.path: no such file: .*nope\.jsonl"):
        load_dataset(tmp_path / "nope.jsonl", FIELDS)
    (tmp_path / "data.txt").write_text("x", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"set dataset\.format to jsonl, csv or parquet"):
        load_dataset(tmp_path / "data.txt", FIELDS)


# --- What the scorer cannot read is refused when the data is checked, before any judge call ---

SUMMARY = "The harbour opened."
SOURCE = "The harbour opened in spring. It cost four million."
UNREADABLE = [
    # (value, where it is refused, what the message says)
    ({"foo": "bar"}, "a mapping must hold a message ('role', 'content') or a list", "keys ['foo']"),
    ([[SOURCE]], "message 0: a message must be a string or a mapping", "got list"),
    ([{"role": "user", "content": {"body": SOURCE}}], "message 0: content as a mapping must hold", "keys ['body']"),
    ([{"role": "user", "content": [{"body": SOURCE}]}], "message 0 part 0: a content part must have a 'type' or a 'text'", "keys ['body']"),
    ([{"role": "user", "content": [7]}], "message 0 part 0: a content part must be a string or a mapping", "got int 7"),
]  # fmt: skip


def scorer_that_counts() -> tuple[Any, FakeJudge]:
    judge = FakeJudge(
        preprocess={"alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                    "questions": ["q"]},
        analyze={"coverage": [{"question": "q", "answered": True, "reason": "r"}]},
    )  # fmt: skip
    return create_summarization_scorer(judge), judge


@pytest.mark.parametrize("column", ["body", "answer"])
@pytest.mark.parametrize(("value", "rule", "found"), UNREADABLE)
def test_a_dataset_value_the_scorer_cannot_read_is_refused_naming_file_row_and_field(
    column: str, value: object, rule: str, found: str, tmp_path: Path
) -> None:
    rows: list[dict[str, object]] = [
        {"doc": "a1", "body": SOURCE, "answer": SUMMARY},
        {"doc": "a2", "body": SOURCE, "answer": SUMMARY} | {column: value},
    ]
    path = write(tmp_path / "data.jsonl", rows)
    scorer, judge = scorer_that_counts()
    option = "input" if column == "body" else "output"

    with pytest.raises(DatasetError) as raised:
        run_evals_sync(
            scorers=[scorer],
            data=DatasetFile(path, FieldMap(input="body", id="doc", output="answer")),
        )

    message = str(raised.value)
    assert message.startswith(f"{path} row 2: the scorer cannot read this {option}: ")
    assert f"field {column!r} (dataset.fields.{option})" in message
    assert rule in message
    assert found in message
    assert judge.requests == []


@pytest.mark.parametrize(("value", "rule", "found"), UNREADABLE)
def test_a_listed_item_the_scorer_cannot_read_is_refused_before_any_work(
    value: object, rule: str, found: str
) -> None:
    scorer, judge = scorer_that_counts()
    for name in ("input", "output"):
        data = [{"input": SOURCE, "output": SUMMARY}, {"input": SOURCE, "output": SUMMARY}]
        data[1] = data[1] | {name: value}

        with pytest.raises(InputError) as raised:
            run_evals_sync(scorers=[scorer], data=data)

        assert str(raised.value).startswith(f"data item 1: the scorer cannot read this {name}: ")
        assert rule in str(raised.value)
        assert found in str(raised.value)
    assert judge.requests == []


def test_a_generator_is_checked_as_it_is_drawn() -> None:
    scorer, _ = scorer_that_counts()

    def items() -> Iterator[dict[str, object]]:
        yield {"input": SOURCE, "output": SUMMARY}
        yield {"input": {"foo": "bar"}, "output": SUMMARY}

    with pytest.raises(InputError, match=r"data item 1: the scorer cannot read this input"):
        run_evals_sync(scorers=[scorer], data=items())


def test_only_what_the_scorer_reads_is_checked() -> None:
    """A source given another way leaves the input to the user's extractor; a target computes
    the outputs; metadata is never read as text (ground truth is read as what coverage is
    measured against: tests/test_coverage_reference.py)."""
    record = {"doc": 7, "text": SOURCE}
    extractor = create_summarization_scorer(
        FakeJudge(
            preprocess={
                "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
                "questions": ["q"],
            },
            analyze={"coverage": [{"answered": True, "reason": "r"}]},
        ),
        {"source_extractor": lambda input, output: input["text"]},
    )
    by_extractor = run_evals_sync(
        scorers=[extractor],
        data=[
            {"input": record, "output": SUMMARY, "ground_truth": ["a fact"], "metadata": {"m": [1]}}
        ],
    )
    scorer, _ = scorer_that_counts()
    with_target = run_evals_sync(
        scorers=[scorer], target=lambda input: SUMMARY, data=[{"input": SOURCE}]
    )

    assert by_extractor.counts.total == 1
    assert by_extractor.counts.errors == 0
    assert with_target.counts.scored == 1


# --- Ids of data without an id column ---


def test_reordered_rows_without_ids_keep_their_ids(tmp_path: Path) -> None:
    rows = [
        {"body": "Alpha.", "answer": "A."},
        {"body": "Alpha.", "answer": "A shorter one."},
        {"body": "Beta.", "answer": "B."},
        # An exact copy: only its occurrence tells it apart, and copies are interchangeable.
        {"body": "Alpha.", "answer": "A shorter one."},
    ]
    fields = FieldMap(input="body", output="answer")

    def mapping(items: list[Item]) -> set[tuple[str, str, str]]:
        return {(item.id, item.input, item.output) for item in items}

    forward = load_dataset(write(tmp_path / "f.jsonl", rows), fields)
    backward = load_dataset(write(tmp_path / "b.jsonl", rows[::-1]), fields)
    as_lists = [
        run_evals_sync(scorers=[scorer_that_counts()[0]], data=[
            {"input": row["body"], "output": row["answer"]} for row in order
        ]).items
        for order in (rows, rows[::-1])
    ]  # fmt: skip

    assert mapping(forward) == mapping(backward)
    assert len({item.id for item in forward}) == 4
    by_id = [{r.item_id: (r.input, r.output) for r in results} for results in as_lists]
    assert by_id[0] == by_id[1]
    assert {(i, *content) for i, content in by_id[0].items()} == mapping(forward)


def test_ids_given_by_the_data_are_kept(tmp_path: Path) -> None:
    rows = [
        {"doc": "x-1", "body": "Alpha.", "answer": "A."},
        {"doc": 7, "body": "Alpha.", "answer": "B."},
    ]
    items = load_dataset(
        write(tmp_path / "d.jsonl", rows), FieldMap(input="body", id="doc", output="answer")
    )

    assert [item.id for item in items] == ["x-1", "7"]


# --- Files that are not what they should be ---


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("bad.jsonl", b'{"id": "a", "body": "ok"}\n{"id": "b", "body": "caf\xe9"}\n', "line 2: not valid UTF-8 at byte offset 50"),
        ("bad.csv", b"doc,body\na1,ok\na2,caf\xe9\n", "line 3: not valid UTF-8 at byte offset 21"),
        ("bom.csv", b"\xef\xbb\xbfdoc,body\na1,\xff\n", "line 2: not valid UTF-8 at byte offset 15"),
    ],
)  # fmt: skip
def test_invalid_utf8_is_named_by_line_and_byte_offset(
    name: str, content: bytes, where: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_bytes(content)

    with pytest.raises(DatasetError) as raised:
        load_dataset(path, FieldMap(input="body", id="doc"))

    assert str(raised.value).startswith(f"{path} {where} ")
    assert content[int(where.rsplit(" ", 1)[1]) :].startswith((b"\xe9", b"\xff"))


def test_a_csv_cell_longer_than_the_csv_module_default_is_read(tmp_path: Path) -> None:
    # Python's csv refuses a field over 131,072 characters unless its limit is raised.
    article = "A long article sentence. " * 8_000
    path = write(
        tmp_path / "long.csv", [{"doc": "a1", "body": article}, {"doc": "a2", "body": "Short."}]
    )

    items = load_dataset(path, FieldMap(input="body", id="doc"))

    assert [item.id for item in items] == ["a1", "a2"]
    assert items[0].input == article


@pytest.mark.parametrize(
    ("content", "where"),
    [
        # Leniently read, row a2 would become part of a1's text, and be gone.
        ('doc,body\na1,"unterminated\na2,second. row\n', "line 2: not valid CSV: a quoted field that starts in this row is never closed (no closing \" before the end of the file, line 3)"),
        ('doc,body\na1,ok\na2,"quoted" then more\n', "line 3: not valid CSV (',' expected after '\"')"),
    ],
)  # fmt: skip
def test_a_malformed_csv_is_refused_naming_its_line(
    content: str, where: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(DatasetError) as raised:
        load_dataset(path, FieldMap(input="body", id="doc"))

    assert str(raised.value).startswith(f"{path} {where}")


def test_a_directory_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=rf"dataset.path: {tmp_path} is a directory; name a"):
        load_dataset(tmp_path, FIELDS)
