"""Datasets in: JSONL, CSV and Parquet rows mapped onto evaluation items, validated up front.

Every problem is found before any judge call and reported with the file, the row and the field:
``data/docs.jsonl row 7: field 'text' (dataset.fields.input) must be text, got int 42``.
"""

from __future__ import annotations

import codecs
import csv
import functools
import hashlib
import json
import sys
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow.parquet as pq

from summeval_runner._errors import ConfigError, DatasetError

Format = Literal["auto", "jsonl", "csv", "parquet"]
_SUFFIXES: dict[str, Format] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


# The fields that hold a row's summary when ``FieldMap.output`` names none, in this order: the
# seed's name, and the one people give a column of summaries.
OUTPUT_NAMES = ("output", "summary")


@dataclass(frozen=True)
class FieldMap:
    """Which field of a row holds what. ``id=None`` or an absent id column: ids are generated.
    ``output=None``: the row's ``output`` or ``summary`` field, where it has one (``OUTPUT_NAMES``;
    ``DatasetFile.output_field``)."""

    input: str = "input"
    id: str | None = "id"
    output: str | None = None
    ground_truth: str | None = None
    metadata: tuple[str, ...] = ()
    # What an item's coverage is measured against (SPEC §1.7): a field of key facts, of
    # questions (a list of strings, or one string of lines), or of reference summaries. At most
    # one of these and ground_truth (whose value names its own kind) is named.
    key_facts: str | None = None
    questions: str | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        named = [option for option, _ in self._coverage_fields() if option is not None]
        if len(named) > 1:
            options = ", ".join(
                f"dataset.fields.{kind}={column}"
                for column, kind in self._coverage_fields()
                if column is not None
            )
            raise ConfigError(
                f"name one field for what coverage is measured against, got {options}: an item "
                "is measured on key facts, on questions or on a reference summary, not two"
            )

    def _coverage_fields(self) -> tuple[tuple[str | None, str], ...]:
        return (
            (self.key_facts, "key_facts"),
            (self.questions, "questions"),
            (self.reference, "reference"),
            (self.ground_truth, "ground_truth"),
        )

    def coverage_field(self) -> tuple[str, str, str] | None:
        """The field that holds an item's coverage reference: (its column, the option that
        names it, its kind: key_facts, questions, reference or ground_truth); None for none."""
        return next(
            (
                (column, f"dataset.fields.{kind}", kind)
                for column, kind in self._coverage_fields()
                if column is not None
            ),
            None,
        )

    def ground_truth_of(self, row: Mapping[str, Any]) -> Any:
        """A row's ground truth: its coverage field's value, marked with its kind (a
        ground_truth field's value names its own kind). A row with none in a field named for
        key facts, questions or a reference is kept as such (``{kind: None}``), so that it is
        refused, not measured on the source's questions unseen."""
        named = self.coverage_field()
        if named is None:
            return None
        column, _, kind = named
        value = row.get(column)
        return value if kind == "ground_truth" else {kind: value}


@dataclass(frozen=True)
class Item:
    """One evaluation item. ``output`` is ``None`` unless the dataset carries a precomputed one."""

    id: str
    input: Any
    output: Any = None
    ground_truth: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


def detect_format(path: Path, format: str) -> Format:
    if format in ("jsonl", "csv", "parquet"):
        return format  # type: ignore[return-value]
    if format != "auto":
        raise DatasetError(f"dataset.format must be auto, jsonl, csv or parquet, got {format!r}")
    detected = _SUFFIXES.get(path.suffix.lower())
    if detected is None:
        raise DatasetError(
            f"{path}: cannot tell the format from the suffix {path.suffix!r}; "
            "set dataset.format to jsonl, csv or parquet"
        )
    return detected


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, a byte order mark at its start dropped.

    Decoded line by line, so that bytes that are not UTF-8 are named by their line and their
    offset in the file, where an editor or ``xxd -s`` finds them.
    """
    offset = 0
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            skip = 3 if number == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:
                text = raw[skip:].decode("utf-8")
            except UnicodeDecodeError as error:
                start = skip + error.start
                raise DatasetError(
                    f"{path} line {number}: not valid UTF-8 at byte offset {offset + start} "
                    f"({raw[start : start + 4]!r}...: {error.reason}); "
                    "save the file as UTF-8"
                ) from None
            offset += len(raw)
            yield number, text


@functools.cache
def _allow_long_csv_fields() -> None:
    """Lift the csv module's limit on a field's length (131,072 characters by default).

    One long article is a valid cell: the default refuses it. The limit is global to Python's
    csv module (there is no per-reader setting), so it is raised for the process, once, to the
    largest value the platform's C ``long`` holds (``sys.maxsize`` overflows it on Windows).
    """
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row) of a CSV file; a malformed file is a ``DatasetError`` naming its line.

    Read strictly: leniently, a quote that is never closed takes every line after it into one
    cell, and those rows are silently lost.
    """
    _allow_long_csv_fields()
    read = 0

    def lines() -> Iterator[str]:
        nonlocal read
        for read, line in _text_lines(path):  # noqa: B007 (read: the last line given)
            yield line

    reader = csv.DictReader(lines(), strict=True)
    # The header is line 1, so the first row a spreadsheet shows as line 2 is row 2.
    number, start = 1, 1
    while True:
        try:
            if number == 1:
                _ = reader.fieldnames  # the header, read first: rows start after it
                # The next row starts on the line after the last one read whole (a cell may
                # span lines).
                start = read + 1
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            where = f"{path} line {start}"
            if "end of data" in str(error):
                raise DatasetError(
                    f"{where}: not valid CSV: a quoted field that starts in this row is never "
                    f'closed (no closing " before the end of the file, line {read}); rows '
                    "after it would be read as part of that field"
                ) from None
            raise DatasetError(f"{where}: not valid CSV ({error})") from None
        number += 1
        start = read + 1
        yield number, row


def _rows(path: Path, format: Format) -> Iterator[tuple[int, Any]]:
    """(row number as a person counts it in that file, row) pairs."""
    if format == "jsonl":
        for number, line in _text_lines(path):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except ValueError as error:
                raise DatasetError(f"{path} line {number}: not valid JSON ({error})") from None
    elif format == "csv":
        yield from _csv_rows(path)
    else:
        try:
            parquet = pq.ParquetFile(path)
        except Exception as error:
            raise DatasetError(f"{path}: not a readable Parquet file ({error})") from None
        number = 0
        for batch in parquet.iter_batches(batch_size=1024):
            for row in batch.to_pylist():
                number += 1
                yield number, row


def _is_text(value: Any) -> bool:
    # Text, or chat messages (a list, or a mapping holding them) that the scorer reads.
    return isinstance(value, str | list | Mapping)


def _describe(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown[:60]}{'…' if len(shown) > 60 else ''}"


def generated_id(input: Any, output: Any = None) -> str:
    """A stable id from the item's content: the same input (and precomputed output, when the
    item carries one) gets the same id in every run, wherever its row is in the data."""
    # Without an output the input alone, as ever, so ids of data without outputs do not change.
    content = input if output is None else {"input": input, "output": output}
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class _SeenIds:
    """The ids seen so far and where each was first, in two arrays of 8-byte numbers: an id's
    64-bit BLAKE2b digest, open-addressed (at most half the slots full), and its item's number.
    32 to 64 bytes an id, where a dict of the ids took about 140: RSS grew 39 MB over a million
    assignments, 142 MB for a dict of the same ids. Two distinct ids share a digest with a
    chance of about n^2 / 2^65 (3e-8 for a million): the second would be refused as a
    duplicate (loud), or a copy's suffix would skip a number."""

    def __init__(self) -> None:
        self._digests: array[int] = array("q", bytes(8 * 1024))
        self._numbers: array[int] = array("q", bytes(8 * 1024))
        self._count = 0

    @staticmethod
    def _digest(item_id: str) -> int:
        digest = int.from_bytes(
            hashlib.blake2b(item_id.encode(), digest_size=8).digest(), "little", signed=True
        )
        return digest or 1  # 0 marks an empty slot

    def _slot(self, digest: int) -> int:
        mask = len(self._digests) - 1
        slot = digest & mask
        while self._digests[slot] not in (0, digest):
            slot = (slot + 1) & mask
        return slot

    def first_or_add(self, item_id: str, number: int) -> int | None:
        """The number of the item that had ``item_id`` first; or None, and it is ``number``'s."""
        if 2 * (self._count + 1) > len(self._digests):
            self._grow()
        digest = self._digest(item_id)
        slot = self._slot(digest)
        if self._digests[slot] == digest:
            return self._numbers[slot]
        self._count += 1
        self._digests[slot] = digest
        self._numbers[slot] = number
        return None

    def _grow(self) -> None:
        digests, numbers = self._digests, self._numbers
        self._digests = array("q", bytes(16 * len(digests)))
        self._numbers = array("q", bytes(16 * len(numbers)))
        for digest, number in zip(digests, numbers, strict=True):
            if digest:
                slot = self._slot(digest)
                self._digests[slot] = digest
                self._numbers[slot] = number


class IdAllocator:
    """Gives each item a unique id: the data's own, or a stable hash of its input and output.

    Only an exact copy (the same input and output) of an earlier item without an id gets a
    ``-2``, ``-3`` suffix, in order; copies cannot be told apart, so reordered data keeps every
    id on the same content. The same explicit id twice is an error that names both places.
    """

    def __init__(self, field_note: str = "", place: str = "row {}") -> None:
        self._field_note = field_note
        # Where an item is, as a message names it, from its number (``row 3``).
        self._place = place
        # Each id given and the number of the item it was given to: a number, not its place's
        # text, and the id as a digest, so that a million items' ids take about 40 MB.
        self._seen = _SeenIds()

    def assign(
        self, raw_id: Any, input: Any, output: Any = None, *, where: str, position: int
    ) -> str:
        """The id of the item numbered ``position`` (``where`` prefixes an error's message)."""
        item_id = str(raw_id) if raw_id is not None else generated_id(input, output)
        first = self._seen.first_or_add(item_id, position)
        if first is None:
            return item_id
        if raw_id is not None:
            raise DatasetError(
                f"{where}: duplicate id {item_id!r}{self._field_note}; "
                f"first seen at {self._place.format(first)}"
            )
        copy = 2
        while self._seen.first_or_add(f"{item_id}-{copy}", position) is not None:
            copy += 1
        return f"{item_id}-{copy}"


@dataclass(frozen=True)
class DatasetFile:
    """A dataset file (JSONL, CSV or Parquet), read each time it is iterated and never held.

    ``run_evals`` reads it twice: once to check every row before any judge call, and once as
    items start, so a dataset of any size runs in flat memory; the file's SHA-256 goes into the
    run's manifest, and a resume of the run is refused if the file changed.
    """

    path: Path
    fields: FieldMap = field(default_factory=FieldMap)
    format: str = "auto"
    limit: int | None = None
    # The rows' summaries are not read, so that an agent's are scored instead: the one way to run
    # an agent over data that holds summaries (``run_evals`` refuses it otherwise).
    ignore_outputs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def __iter__(self) -> Iterator[Item]:
        return (item for _, item in self.rows())

    def rows(self) -> Iterator[tuple[str, Item]]:
        """Each item with where it is, as an error names it: ``(<path> row <n>, item)``."""
        output = self.output_field()
        return _located_items(
            self.path,
            replace(self.fields, output=output),
            format=self.format,
            limit=self.limit,
            # Summaries under a name the first row does not have would be ignored unseen.
            refuse_unnamed_outputs=output is None and not self.ignore_outputs,
        )

    def output_field(self) -> str | None:
        """The field that holds the rows' summaries: the one ``fields.output`` names, else the
        first row's ``output`` or ``summary`` field (``OUTPUT_NAMES``); ``None`` when there is
        none, or when ``ignore_outputs`` says not to read them."""
        if self.ignore_outputs:
            return None
        if self.fields.output is not None:
            return self.fields.output
        first = self.columns()
        return next((name for name in OUTPUT_NAMES if name in first), None)

    def columns(self) -> list[str]:
        """The first row's fields (a CSV's or a Parquet file's columns: its schema's, read
        without its rows); ``[]`` when there is no row. ``DatasetError`` when the file cannot
        be read."""
        _check_path(self.path)
        kind = detect_format(self.path, self.format)
        if kind == "parquet":
            try:
                return sorted(pq.read_schema(self.path).names)
            except Exception as error:
                raise DatasetError(f"{self.path}: not a readable Parquet file ({error})") from None
        for _, row in _rows(self.path, kind):
            return sorted(map(str, row)) if isinstance(row, Mapping) else []
        return []

    def sha256(self) -> str:
        """The SHA-256 of the file's bytes."""
        return file_sha256(self.path)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a block at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_dataset(
    path: Path | str, fields: FieldMap, *, format: str = "auto", limit: int | None = None
) -> list[Item]:
    """Read and validate every row; raise ``DatasetError`` at the first problem found."""
    items = list(DatasetFile(Path(path), fields, format, limit))
    if not items:
        raise DatasetError(f"{path}: the dataset has no rows")
    return items


def _check_path(path: Path) -> None:
    if path.is_dir():
        raise DatasetError(
            f"dataset.path: {path} is a directory; name a JSONL, CSV or Parquet file"
        )
    if not path.is_file():
        raise DatasetError(f"dataset.path: no such file: {path}")


def _located_items(
    path: Path,
    fields: FieldMap,
    *,
    format: str = "auto",
    limit: int | None = None,
    refuse_unnamed_outputs: bool = False,
) -> Iterator[tuple[str, Item]]:
    _check_path(path)
    if limit is not None and limit < 1:
        raise DatasetError(f"dataset.limit must be >= 1 or null, got {limit}")
    kind = detect_format(path, format)
    ids = IdAllocator(" (dataset.fields.id)")
    has_ids: bool | None = None
    # The optional fields named (metadata, ground truth) that no row read so far has. A CSV's
    # or a Parquet file's columns are every row's, so its first row tells; a JSONL row may
    # leave out a field others have, so a field is missing only when no row has it.
    unseen = _named_optional_fields(fields)
    first_row: Mapping[str, Any] = {}
    count = 0
    for count, (number, row) in enumerate(_rows(path, kind), 1):
        where = f"{path} row {number}"
        if not isinstance(row, Mapping):
            raise DatasetError(
                f"{where}: a row must be an object with fields, got {_describe(row)}"
            )
        if count == 1:
            first_row = row
        if unseen:
            unseen = {name: option for name, option in unseen.items() if name not in row}
            if unseen and kind != "jsonl":
                raise _missing_field(path, unseen, row, columns=True)
        value = row.get(fields.input)
        if value is None:
            raise DatasetError(
                f"{where}: no field {fields.input!r} (dataset.fields.input); "
                f"the row has {sorted(map(str, row))}"
            )
        if not _is_text(value):
            raise DatasetError(
                f"{where}: field {fields.input!r} (dataset.fields.input) must be text, "
                f"got {_describe(value)}"
            )
        output = None
        if fields.output is not None:
            output = row.get(fields.output)
            if output is None:
                raise DatasetError(
                    f"{where}: no field {fields.output!r} (dataset.fields.output); the row has "
                    f"{sorted(map(str, row))}"
                )
            if not _is_text(output):
                raise DatasetError(
                    f"{where}: field {fields.output!r} (dataset.fields.output) must be text, "
                    f"got {_describe(output)}"
                )
        if refuse_unnamed_outputs and (
            unnamed := next((name for name in OUTPUT_NAMES if name in row), None)
        ):
            raise DatasetError(
                f"{where}: field {unnamed!r} holds summaries the first row does not have; "
                f"name it in every row, or set dataset.fields.output={unnamed}"
            )
        raw_id = row.get(fields.id) if fields.id is not None else None
        if raw_id == "":
            raw_id = None
        if has_ids is None:
            has_ids = raw_id is not None
        elif has_ids != (raw_id is not None):
            raise DatasetError(
                f"{where}: field {fields.id!r} (dataset.fields.id) is "
                f"{'missing' if has_ids else 'present'} here but "
                f"{'present' if has_ids else 'missing'} in earlier rows; "
                "give every row an id or none"
            )
        if raw_id is not None and not isinstance(raw_id, str | int):
            raise DatasetError(
                f"{where}: field {fields.id!r} (dataset.fields.id) must be a string or an integer, "
                f"got {_describe(raw_id)}"
            )
        yield (
            where,
            Item(
                id=ids.assign(raw_id, value, output, where=where, position=number),
                input=value,
                output=output,
                ground_truth=fields.ground_truth_of(row),
                metadata={name: row.get(name) for name in fields.metadata},
            ),
        )
        if limit is not None and count >= limit:
            break
    if unseen and count:
        raise _missing_field(path, unseen, first_row, columns=False)


def _named_optional_fields(fields: FieldMap) -> dict[str, str]:
    """The optional fields a field map names (field -> the option that names it)."""
    named = dict.fromkeys(fields.metadata, "dataset.fields.metadata")
    coverage = fields.coverage_field()
    if coverage is not None:
        named[coverage[0]] = coverage[1]
    return named


def _missing_field(
    path: Path, unseen: Mapping[str, str], row: Mapping[str, Any], *, columns: bool
) -> DatasetError:
    """A named field the data does not have: read as null in every item, it would pass for
    data (a config's metadata list kept when only ``dataset.path`` changed)."""
    name, option = next(iter(unseen.items()))
    found = sorted(map(str, row))
    where = (
        f"{path}: no column {name!r} ({option}); its columns are {found}"
        if columns
        else f"{path}: no row has the field {name!r} ({option}); the first row has {found}"
    )
    remedy = (
        "name the columns to carry into the items table, or dataset.fields.metadata=[] for none"
        if option == "dataset.fields.metadata"
        else f"name the field that holds it, or {option}=null"
    )
    return DatasetError(f"{where}; {remedy}")
