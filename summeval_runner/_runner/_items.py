"""The items a run draws: each checked as ``summeval-run`` checks a dataset's rows, with its
dataset position, and what is known of them before the run starts."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from summeval_runner._errors import InputError
from summeval_runner._io._datasets import DatasetError, DatasetFile, IdAllocator, Item
from summeval_runner._io._manifest import DatasetInfo
from summeval_runner._io._shards import Shard


def shown(value: Any) -> str:
    """A value as an error message shows it: its type and the start of its repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _as_item(raw: Mapping[str, Any] | Item, index: int, ids: IdAllocator, has_target: bool) -> Item:
    where = f"data item {index}"
    if isinstance(raw, Item):
        item = replace(raw, id=ids.assign(raw.id, raw.input, where=where, position=where))
    elif isinstance(raw, Mapping):
        if "input" not in raw:
            raise InputError(f"{where}: no 'input'; got keys {sorted(map(str, raw))}")
        item = Item(
            id=ids.assign(raw.get("id"), raw["input"], where=where, position=where),
            input=raw["input"],
            output=raw.get("output"),
            ground_truth=raw.get("ground_truth"),
            metadata=dict(raw.get("metadata") or {}),
        )
    else:
        raise InputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    for name in ("input", "output"):
        value = getattr(item, name)
        if value is not None and not isinstance(value, str | list | Mapping):
            raise InputError(f"{where}: {name!r} must be text or chat messages, got {shown(value)}")
    if not has_target and item.output is None:
        raise InputError(f"{where}: no 'output', and no target to produce one")
    return item


@dataclass(frozen=True)
class Items:
    """The items a run draws, each with its dataset position, and what is known in advance."""

    draw: Callable[[], Iterator[tuple[int, Item]]]
    # Items the run is to finish (the shard's, when sharded); None when not known in advance.
    selected: int | None
    dataset: DatasetInfo | None


def prepare(
    data: Iterable[Mapping[str, Any] | Item],
    has_target: bool,
    shard: Shard | None,
    total: int | None,
) -> Items:
    """Check what can be checked before any work: a list or a dataset file whole, each row of
    a file read once to check it and again as items start; other iterables item by item."""

    def wanted(item: Item) -> bool:
        return shard is None or shard.holds(item.id)

    def chosen(entries: Iterator[tuple[int, Item]]) -> Iterator[tuple[int, Item]]:
        return ((p, item) for p, item in entries if wanted(item))

    if isinstance(data, DatasetFile):
        count = selected = 0
        checked = IdAllocator()
        first: Item | None = None
        for position, raw in enumerate(data):
            item = _as_item(raw, position, checked, has_target)
            if first is None:
                first = item
            count += 1
            selected += wanted(item)
        if first is None:
            raise DatasetError(f"{data.path}: the dataset has no rows")
        info = DatasetInfo(
            path=str(data.path), items=count, sha256=data.sha256(), ids=_file_ids(data, first)
        )

        def read_file() -> Iterator[tuple[int, Item]]:
            ids = IdAllocator()
            return chosen((p, _as_item(raw, p, ids, has_target)) for p, raw in enumerate(data))

        return Items(read_file, selected, info)
    if isinstance(data, Sequence):
        ids = IdAllocator()
        items = [_as_item(raw, index, ids, has_target) for index, raw in enumerate(data)]
        generated = any(isinstance(raw, Mapping) and raw.get("id") is None for raw in data)
        info = DatasetInfo(
            items=len(items),
            sha256=_fingerprint(items),
            ids="generated" if generated else "given",
        )
        return Items(lambda: chosen(enumerate(items)), sum(map(wanted, items)), info)
    stream = iter(data)

    def read_stream() -> Iterator[tuple[int, Item]]:
        ids = IdAllocator()
        return chosen((p, _as_item(raw, p, ids, has_target)) for p, raw in enumerate(stream))

    return Items(read_stream, total, None)


def _file_ids(data: DatasetFile, first: Item) -> Literal["given", "generated"]:
    """Whether a file's ids are its own or generated from its rows' content (a comparison of
    runs over changed data warns of the latter, since a changed row gets another id)."""
    if data.fields.id is None:
        return "generated"
    # The id field may be absent from the file (then every row lacks it): the first row read
    # as if there were no id field gets the id it was given only if that id was generated.
    unnamed = replace(data, fields=replace(data.fields, id=None), limit=1)
    return "generated" if next(iter(unnamed)).id == first.id else "given"


def _fingerprint(items: Sequence[Item]) -> str:
    """A SHA-256 of the items' ids, inputs and outputs: a resume of a run over a changed list is
    refused as one over a changed file is."""
    digest = hashlib.sha256()
    for item in items:
        entry = [item.id, item.input, item.output]
        digest.update(json.dumps(entry, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()
