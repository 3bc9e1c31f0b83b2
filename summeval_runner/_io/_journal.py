"""The journal: each finished item on disk at once, and its compaction into the Parquet tables.

Each completed item is appended to ``journal.jsonl`` as one line (its ``ItemRecord``), flushed
at once, so finished work is on disk while the run goes on. ``RunWriter.finish`` then compacts
the journal into the tables: every item's last entry, in dataset order, its rows built by
``rows_of``, and the aggregates computed from the item rows. A resumed run and a merge of
shards compact the same way, so their tables equal an uninterrupted one-process run's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one writer per run directory is up to you
    fcntl = None  # type: ignore[assignment]

from summeval_runner._errors import ConfigError, InputError
from summeval_runner._io._rows import ItemRecord, rows_of
from summeval_runner._io._tables import AGGREGATES_SCHEMA, TABLES, Summary
from summeval_runner._scorers._outcome import RunCounts
from summeval_runner._scorers._result import Status
from summeval_runner._secrets import scrub

JOURNAL = "journal.jsonl"
_COMPACT_BATCH = 2000
_SYNC_INTERVAL_S = 1.0
# A journal line starts with its position, item id and status (a record's first fields, in the
# compact form pydantic writes), so indexing the journal needs no full parse of each line.
_HEAD = re.compile(rb'^\{"position":(\d+),"item_id":("(?:[^"\\]|\\.)*"),"status":"(\w+)"')


class RunWriter:
    """Writes a run's tables into ``run_dir``: the journal as items complete, Parquet at the end.

    Each journal line is one item's record. A line is flushed as soon as it is written, so a
    killed process loses no finished item, and synced to the disk at least every second, so a
    power cut loses at most the last second. ``resume=True`` opens an existing journal to append
    to it, dropping a last line cut short by a crash.

    The journal is locked while the writer holds it: a second process writing the same run
    directory (an overlapping nightly job, a resume of a run still going) is refused with
    ``ConfigError`` instead of interleaving its lines.
    """

    def __init__(self, run_dir: Path, *, resume: bool = False) -> None:
        self.run_dir = run_dir
        self.journal_path = run_dir / JOURNAL
        run_dir.mkdir(parents=True, exist_ok=True)
        self._journal: TextIO = self.journal_path.open("a", encoding="utf-8")
        try:
            _lock(self._journal)
        except OSError:
            self._journal.close()
            raise ConfigError(
                f"{run_dir} is being written by another summeval-run; wait for it to finish "
                "(or stop it) before resuming it"
            ) from None
        if resume:
            _drop_cut_line(self.journal_path)
        self._synced = time.monotonic()

    def write(self, record: ItemRecord) -> None:
        """Append one item's record to the journal, flushed so that a crash cannot lose it.

        Every known secret is scrubbed first (``_secrets``): an error message or a raw reply
        that quoted a key must not carry it to disk.
        """
        self._journal.write(scrub(record.model_dump_json()) + "\n")
        self._journal.flush()
        now = time.monotonic()
        if now - self._synced >= _SYNC_INTERVAL_S:
            os.fsync(self._journal.fileno())
            self._synced = now

    def close(self) -> None:
        """Flush the journal to the disk and release the directory's lock."""
        if not self._journal.closed:
            self._journal.flush()
            os.fsync(self._journal.fileno())
            self._journal.close()

    def compact(self, *, run_id: str, variant: str) -> Compacted:
        """Compact the journal into Parquet tables and write the aggregates.

        Rows come out in dataset order whatever order items finished in, and an item journaled
        twice (tried again on resume) keeps its last entry, so the tables of a resumed run equal
        those of an uninterrupted one. Every row carries ``run_id`` and ``variant``. The
        journal stays locked (``close`` releases it), so nothing else writes the directory
        while its tables and manifest are written.
        """
        self._journal.flush()
        os.fsync(self._journal.fileno())
        paths = {name: self.run_dir / f"{name}.parquet" for name in TABLES}
        writers = {
            name: pq.ParquetWriter(_partial(paths[name]), TABLES[name])
            for name in ("items", "alignment", "coverage")
        }
        summary = Summary()
        statuses: list[Status] = []
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in writers}

        def flush() -> None:
            for name, writer in writers.items():
                writer.write_table(pa.Table.from_pylist(rows[name], schema=TABLES[name]))
                rows[name] = []

        try:
            # A few thousand items' rows at a time: memory stays flat however long the run.
            for count, record in enumerate(_latest_records(self.journal_path), 1):
                statuses.append(record.status)
                for name, table in rows_of(record, run_id=run_id, variant=variant).items():
                    rows[name] += table
                    if name == "items":
                        for row in table:
                            summary.add(row)
                if count % _COMPACT_BATCH == 0:
                    flush()
            flush()
        finally:
            for writer in writers.values():
                writer.close()
        pq.write_table(
            pa.Table.from_pylist(summary.rows(), schema=AGGREGATES_SCHEMA),
            _partial(paths["aggregates"]),
        )
        for path in paths.values():
            os.replace(_partial(path), path)
        return Compacted(tables=paths, counts=RunCounts.of(statuses))


@dataclass(frozen=True)
class Compacted:
    """A compacted run: its tables (name -> path), and its items' counts (each item once)."""

    tables: dict[str, Path]
    counts: RunCounts


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock (the one a ``RunWriter`` holds) while the block writes in it;
    ``ConfigError`` if another process holds it."""
    with (run_dir / JOURNAL).open("a", encoding="utf-8") as journal:
        try:
            _lock(journal)
        except OSError:
            raise ConfigError(f"{run_dir} is being written by another summeval-run") from None
        yield


def journaled_statuses(run_dir: Path) -> dict[str, Status]:
    """Each journaled item's id and status (its last entry's)."""
    journal = run_dir / JOURNAL
    if not journal.exists():
        return {}
    return {item_id: status for item_id, (_, _, status) in _latest_entries(journal).items()}


def journaled_ids(run_dir: Path) -> frozenset[str]:
    """The ids of the items in a run's journal, read from each line's head only."""
    return frozenset(_latest_entries(run_dir / JOURNAL))


def journal_records(journal: Path) -> Iterator[ItemRecord]:
    """Every whole line of a journal as a record, in the order written.

    A last line cut short by a crash was never acknowledged and is skipped; a line that is not
    a record is an ``InputError`` naming the file and the line.
    """
    with journal.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.endswith(b"\n"):
                break
            yield _record(line, f"{journal} line {number}")


def _record(line: bytes, where: str) -> ItemRecord:
    try:
        return ItemRecord.model_validate_json(line)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(map(str, first["loc"])) or "the line"
        raise InputError(f"{where}: not an item record ({field}: {first['msg']})") from None


def _lock(file: TextIO) -> None:
    """An exclusive lock on an open file, released when it is closed (POSIX; elsewhere none)."""
    if fcntl is not None:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _drop_cut_line(journal: Path) -> None:
    """Truncate the journal after its last complete line: a crash may have cut the one after."""
    if not journal.exists():
        return
    with journal.open("rb+") as file:
        # Read back from the end, a block at a time: a journal can be gigabytes.
        size = end = file.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - (1 << 16))
            file.seek(start)
            cut = file.read(end - start).rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        if end != size:
            file.truncate(end)


def _partial(path: Path) -> Path:
    # Tables appear under their real name only when complete: a reader never sees half a file.
    return path.with_name(f".{path.name}.partial")


def _latest_entries(journal: Path) -> dict[str, tuple[int, int, Status]]:
    """Each journaled item's id: the dataset position, byte offset and status of its last
    entry."""
    latest: dict[str, tuple[int, int, Status]] = {}
    offset = 0
    with journal.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.endswith(b"\n"):
                break  # a line cut short by a crash was never acknowledged
            head = _HEAD.match(line)
            if head is not None and head[3] in (b"scored", b"unscorable", b"error"):
                position, item_id = int(head[1]), json.loads(head[2])
                status: Status = head[3].decode()  # type: ignore[assignment]
            else:
                record = _record(line, f"{journal} line {number}")
                position, item_id, status = record.position, record.item_id, record.status
            latest[item_id] = (position, offset, status)
            offset += len(line)
    return latest


def _latest_records(journal: Path) -> Iterator[ItemRecord]:
    """Every item's last record, in dataset order."""
    index = sorted((position, offset) for position, offset, _ in _latest_entries(journal).values())
    with journal.open("rb") as lines:
        for _, offset in index:
            lines.seek(offset)
            yield _record(lines.readline(), f"{journal} at byte {offset}")
