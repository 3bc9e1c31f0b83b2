"""Tables made for analysis: an explicit Arrow schema with a description on every column, read
back by pandas with the same types.

pandas reads an int64 or bool column that holds a null as float64 or object, so the same
column would change type from one file to the next. Frames here use pandas' nullable types
(``Int64``, ``boolean``), and files are written with pandas' metadata, so that a plain
``pd.read_parquet`` gives them back as they were: integers stay integers, flags stay flags, and
a missing value is ``<NA>``. DuckDB, Polars and Spark read the Arrow types themselves (BIGINT,
BOOLEAN, TIMESTAMP WITH TIME ZONE, VARCHAR[]).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

# Arrow types pandas reads as nullable types of its own, rather than float64 or object.
_NULLABLE: Mapping[pa.DataType, Any] = {
    pa.int64(): pd.Int64Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def described(name: str, kind: pa.DataType, description: str, *, nullable: bool = True) -> pa.Field:
    """A column with its description in the Parquet schema (field metadata ``description``)."""
    return pa.field(name, kind, nullable=nullable, metadata={"description": description})


def descriptions(schema: pa.Schema) -> dict[str, str]:
    """Each column's description, as written in the schema."""
    return {
        field.name: (field.metadata or {}).get(b"description", b"").decode("utf-8")
        for field in schema
    }


def for_pandas(schema: pa.Schema) -> pa.Schema:
    """``schema`` with pandas' metadata naming its integer and boolean columns' nullable types,
    for a file written from Arrow rows (not from a frame): a plain ``pd.read_parquet`` gives
    ``Int32``, ``Int64`` and ``boolean`` columns back, an empty table included."""
    empty = frame_of(schema.empty_table())
    pandas = pa.Schema.from_pandas(empty, preserve_index=False).metadata[b"pandas"]
    return schema.with_metadata({**(schema.metadata or {}), b"pandas": pandas})


def typed_frame(rows: Iterable[Mapping[str, Any]], schema: pa.Schema) -> pd.DataFrame:
    """``rows`` as a DataFrame of ``schema``'s columns and types (nullable ints and bools)."""
    table = pa.Table.from_pylist(list(rows), schema=schema)
    return frame_of(table)


def frame_of(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as a DataFrame with nullable ints and bools."""
    frame: pd.DataFrame = table.to_pandas(types_mapper=_NULLABLE.get)
    return frame


def write_typed(frame: pd.DataFrame, schema: pa.Schema, path: Path) -> Path:
    """Write ``frame`` with ``schema`` (types and descriptions) to ``path``, under a temporary
    name renamed when complete: a reader never sees half a table."""
    table = pa.Table.from_pandas(frame[schema.names], schema=schema, preserve_index=False)
    partial = path.with_name(f".{path.name}.partial")
    try:
        pq.write_table(table, partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return path
