"""Datasets in: JSONL, CSV and Parquet through one field mapping, and every bad input named."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from summeval_runner import DatasetError, FieldMap, load_dataset

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
        load_dataset(path, FIELDS)


def test_a_missing_file_and_an_unknown_format_are_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"dataset.path: no such file: .*nope\.jsonl"):
        load_dataset(tmp_path / "nope.jsonl", FIELDS)
    (tmp_path / "data.txt").write_text("x", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"set dataset\.format to jsonl, csv or parquet"):
        load_dataset(tmp_path / "data.txt", FIELDS)
