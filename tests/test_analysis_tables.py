"""The run's tables as an analyst reads them: typed metadata, described columns, integers that
stay integers in pandas, and DuckDB queries on the metadata's fields."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from summeval_runner import (
    DatasetFile,
    FieldMap,
    create_summarization_scorer,
    merge_runs,
    run_evals,
)
from summeval_runner._inputs._shards import shard_of
from summeval_runner._rundir._parquet import descriptions
from summeval_runner._rundir._tables import TABLES
from summeval_runner._scorers._questions import source_fingerprint
from tests.app import run_app

TEXT = "The council approved the new bridge on Monday. It will cost 40 million. Work starts in May."
ROWS = [
    # domain: text; year: int; rating: ints and floats; flagged: bool; mixed: a number and text;
    # tags: lists; empty: never a value (in one row, as null: a field no row has is refused).
    {"domain": "city", "year": 2024, "rating": 4, "flagged": True, "mixed": 7, "tags": ["a"]},
    {"domain": "sports", "year": 2023, "rating": 3.5, "flagged": False, "mixed": "seven"},
    {
        "domain": "city",
        "year": None,
        "rating": 2,
        "flagged": None,
        "mixed": None,
        "tags": [],
        "empty": None,
    },
]
FIELDS = ["domain", "year", "rating", "flagged", "mixed", "tags", "empty"]


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as file:
        for index, row in enumerate(rows):
            record = {"id": f"d{index}", "input": f"{TEXT} Copy {index}.", **row}
            file.write(json.dumps(record) + "\n")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("analysis")
    data = write_rows(tmp / "docs.jsonl", ROWS)
    run = tmp / "run"
    completed = run_app(
        run,
        f"dataset.path={data}",
        f"dataset.fields.metadata=[{','.join(FIELDS)}]",
        "scorer.questions=per_item",
        "runner.progress=false",
    )
    assert completed.returncode == 0, completed.stderr
    return run


def test_metadata_is_a_struct_of_the_datas_fields_with_their_types(run_dir: Path) -> None:
    kind = pq.read_schema(run_dir / "items.parquet").field("metadata").type

    assert kind == pa.struct(
        [
            ("domain", pa.string()),
            ("year", pa.int64()),
            ("rating", pa.float64()),
            ("flagged", pa.bool_()),
            ("mixed", pa.string()),
            ("tags", pa.string()),
            ("empty", pa.string()),
        ]
    )
    metadata = pd.read_parquet(run_dir / "items.parquet")["metadata"].tolist()
    assert metadata[1] == {
        "domain": "sports",
        "year": 2023,
        "rating": 3.5,
        "flagged": False,
        "mixed": "seven",
        "tags": None,
        "empty": None,
    }
    # A field whose values mix kinds is text, its other values as JSON.
    assert [m["mixed"] for m in metadata] == ["7", "seven", None]
    assert [m["tags"] for m in metadata] == ['["a"]', None, "[]"]


def test_duckdb_reads_the_metadatas_fields(run_dir: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    items = run_dir / "items.parquet"

    rows = duckdb.sql(
        f"SELECT metadata.domain, count(*), sum(metadata.year), avg(metadata.rating) "
        f"FROM '{items}' GROUP BY ALL ORDER BY 1"
    ).fetchall()

    assert rows == [("city", 2, 2024, 3.0), ("sports", 1, 2023, 3.5)]
    year = duckdb.sql(f"SELECT metadata.year FROM '{items}'").description[0][1]
    assert str(year) == "BIGINT"


def test_every_column_of_every_table_is_described(run_dir: Path) -> None:
    for name in TABLES:
        described = descriptions(pq.read_schema(run_dir / f"{name}.parquet"))
        assert set(described) == set(TABLES[name].names), name
        assert all(described.values()), (name, described)


def test_pandas_reads_counts_as_integers_and_flags_as_booleans_in_every_table(
    run_dir: Path,
) -> None:
    items = pd.read_parquet(run_dir / "items.parquet")
    coverage = pd.read_parquet(run_dir / "coverage.parquet")
    aggregates = pd.read_parquet(run_dir / "aggregates.parquet")
    # Each source's questions are in coverage.parquet with questions=per_item: an empty table,
    # still typed.
    questions = pd.read_parquet(run_dir / "questions.parquet")

    assert items["claims"].dtype == "Int32"
    assert items["input_tokens"].dtype == "Int64"
    assert items["trial"].dtype == "Int32"
    assert coverage["answered"].dtype == "boolean"
    assert aggregates["n"].dtype == "Int64"
    assert questions.empty
    assert questions["position"].dtype == "Int32"
    assert questions["max_questions"].dtype == "Int32"


def test_an_error_rows_counts_are_missing_not_floats(tmp_path: Path) -> None:
    data = [{"id": "a", "input": TEXT, "output": TEXT}]

    async def run() -> None:
        class Breaks:
            id = "breaks"

            async def run(self, *, input: Any, output: Any) -> Any:
                raise RuntimeError("no")

        async with create_summarization_scorer("offline") as scorer:
            await run_evals(scorers=[scorer, Breaks()], data=data, output_dir=tmp_path / "run")

    asyncio.run(run())
    items = pd.read_parquet(tmp_path / "run" / "items.parquet").set_index("scorer_id")

    assert items.loc["breaks", "claims"] is pd.NA
    assert items["claims"].dtype == "Int32"
    assert items.loc["summarization-scorer", "claims"] > 0
    # No metadata field: the column is there, null.
    assert items["metadata"].isna().all()


def test_shards_type_the_metadata_alike_and_their_merge_too(tmp_path: Path) -> None:
    # "rating" is an integer in the rows of one shard and a float in the other's: every shard
    # reads every row's, so each types it float, and the merge keeps it. The run shares
    # questions per source, so its shards are split by each row's source (its text).
    in_shard_1 = [
        shard_of(source_fingerprint(f"{TEXT} Copy {index}."), 2) == 1 for index in range(6)
    ]
    assert any(in_shard_1)
    assert not all(in_shard_1)
    rows = [{"rating": 2 + index if in_shard_1[index] else 2.5} for index in range(6)]
    data = DatasetFile(
        write_rows(tmp_path / "docs.jsonl", rows),
        FieldMap(id="id", metadata=("rating",)),
    )

    async def shard(index: int) -> None:
        async with create_summarization_scorer("offline") as scorer:
            await run_evals(
                scorers=[scorer],
                data=data,
                target=lambda text: text.split(". ")[0] + ".",
                output_dir=tmp_path / f"shard{index}",
                shard=f"{index}/2",
            )

    for index in range(2):
        asyncio.run(shard(index))
    merged = merge_runs([tmp_path / "shard0", tmp_path / "shard1"], tmp_path / "merged")

    for run in ("shard0", "shard1", "merged"):
        kind = pq.read_schema(tmp_path / run / "items.parquet").field("metadata").type
        assert kind == pa.struct([("rating", pa.float64())]), run
    ratings = pd.read_parquet(merged.tables["items"])["metadata"].map(lambda m: m["rating"])
    assert sorted(ratings) == sorted(float(row["rating"]) for row in rows)


def test_a_streams_metadata_is_text(tmp_path: Path) -> None:
    def stream() -> Iterator[dict[str, Any]]:
        yield {"id": "a", "input": TEXT, "output": TEXT, "metadata": {"year": 2024}}
        yield {"id": "b", "input": TEXT, "output": TEXT, "metadata": {"domain": "city"}}

    async def run() -> None:
        async with create_summarization_scorer("offline") as scorer:
            await run_evals(scorers=[scorer], data=stream(), output_dir=tmp_path / "run")

    asyncio.run(run())
    items = pd.read_parquet(tmp_path / "run" / "items.parquet")

    assert items["metadata"].tolist() == [
        {"year": "2024", "domain": None},
        {"year": None, "domain": "city"},
    ]
