"""The ``metadata`` column: a struct of the dataset's metadata fields, each with its own type.

Each field's kind is read from the data the run reads before any work (every row of a dataset
file or a list, shards included): ``int``, ``float``, ``bool`` or ``string``. A field whose
values are ints and floats is ``float``; one whose values mix other kinds (a number in one row,
text in another), or hold lists, mappings, dates, is ``string``, its non-text values written as
JSON; a field with no value at all is ``string``. A stream, whose rows are not read ahead, has
every field it carries as ``string``. The kinds are kept in the manifest
(``dataset.metadata_types``), so every part of a resumed run and every shard of a merge write
the same schema.

Parquet cannot hold a struct of no field: a run whose data has no metadata field has a
``metadata`` column of Arrow's null type, null in every row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

MetadataKind = Literal["int", "float", "bool", "string"]
_ARROW: Mapping[MetadataKind, pa.DataType] = {
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
}
_INT64 = range(-(2**63), 2**63)


def kind_of(value: Any) -> MetadataKind | None:
    """The kind one value asks for (``None``: a missing value asks for none).

    >>> [kind_of(v) for v in (3, 2.5, True, "x", None, [1], 2**70)]
    ['int', 'float', 'bool', 'string', None, 'string', 'string']
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if value in _INT64 else "string"
    if isinstance(value, float):
        return "float"
    return "string"


def _joined(kinds: Iterable[MetadataKind]) -> MetadataKind:
    found = set(kinds)
    if not found:
        return "string"
    if len(found) == 1:
        (kind,) = found
        return kind
    return "float" if found == {"int", "float"} else "string"


@dataclass(frozen=True)
class MetadataTypes:
    """Each metadata field's kind, in the data's order of fields."""

    kinds: tuple[tuple[str, MetadataKind], ...] = ()

    @classmethod
    def of(cls, kinds: Mapping[str, MetadataKind]) -> MetadataTypes:
        return cls(tuple(kinds.items()))

    @classmethod
    def strings(cls, names: Iterable[str]) -> MetadataTypes:
        """Every field ``string``: the fields of data whose rows were not read ahead."""
        return cls(tuple((name, "string") for name in dict.fromkeys(names)))

    def as_dict(self) -> dict[str, MetadataKind]:
        return dict(self.kinds)

    def arrow_type(self) -> pa.DataType:
        """The column's Arrow type: a struct of the fields, or null when there is none."""
        if not self.kinds:
            return pa.null()
        return pa.struct([pa.field(name, _ARROW[kind]) for name, kind in self.kinds])

    def value(self, metadata: Mapping[str, Any]) -> dict[str, Any] | None:
        """An item's metadata as the column holds it: each field's value of its kind (a
        missing one null, a ``string`` field's other values as JSON text).

        >>> types = MetadataTypes.of({"year": "int", "score": "float", "tags": "string"})
        >>> types.value({"year": 2024, "score": 3, "tags": ["a", "b"]})
        {'year': 2024, 'score': 3.0, 'tags': '["a", "b"]'}
        """
        if not self.kinds:
            return None
        return {name: _as(kind, metadata.get(name)) for name, kind in self.kinds}


def _as(kind: MetadataKind, value: Any) -> Any:
    """``value`` as a value of ``kind``; null when it is none of that kind (a value that the
    data the kinds were read from did not hold)."""
    if value is None:
        return None
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    found = kind_of(value)
    if found == kind:
        return value
    if kind == "float" and found == "int":
        return float(value)
    return None


class MetadataReader:
    """Reads each item's metadata as the run checks its data, and says each field's kind.

    ``names`` are the fields the data declares (a dataset file's ``fields.metadata``), in their
    order; other fields found are added in the order they are first seen.
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._kinds: dict[str, set[MetadataKind]] = {name: set() for name in names}

    def add(self, metadata: Mapping[str, Any]) -> None:
        for name, value in metadata.items():
            kinds = self._kinds.setdefault(str(name), set())
            kind = kind_of(value)
            if kind is not None:
                kinds.add(kind)

    def types(self) -> MetadataTypes:
        return MetadataTypes(tuple((name, _joined(kinds)) for name, kinds in self._kinds.items()))
