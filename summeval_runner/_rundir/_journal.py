"""The journal: each finished item on disk at once, and its compaction into the Parquet tables.

Each completed item is appended to ``journal.jsonl`` as one line (its ``ItemRecord``), flushed
at once, so finished work is on disk while the run goes on. ``RunWriter.finish`` then compacts
the journal into the tables: every item's last entry, in dataset order, its rows built by
``rows_of``, and the aggregates computed from the item rows. A resumed run and a merge of
shards compact the same way, so their tables equal an uninterrupted one-process run's.

Between the items, traffic lines (``{"traffic": {...}}``, a ``PartTraffic``) carry what each
part of the run (each process that wrote the journal) has sent and met so far: requests, retries,
429s, tokens, cache hits and stores, and its seconds of work. A line is written as each request
goes out, so a process killed with requests in flight has counted them; the manifest sums the
last line of every part. Question lines (``{"questions": {...}}``, a ``QuestionsLine``) hold
each source's coverage questions as they are first shared (``questions="per_source"``): a
resumed run asks the same ones, and ``questions.parquet`` is made of them. Readers of items skip
these lines.

A line that is neither (damaged on disk, edited by hand) is reported with its file and line
number and skipped, never raised: the item it held counts as not finished, and a resume scores
it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one writer per run directory is up to you
    fcntl = None  # type: ignore[assignment]

from summeval_runner._errors import ConfigError
from summeval_runner._inputs._metadata import MetadataTypes
from summeval_runner._memory import hand_back_memory
from summeval_runner._rundir._manifest import CacheUse, JudgeTraffic, RunCost
from summeval_runner._rundir._noise import NoiseTally
from summeval_runner._rundir._rows import ItemRecord, rows_of
from summeval_runner._rundir._tables import (
    AGGREGATES_SCHEMA,
    QUESTIONS_SCHEMA,
    TABLES,
    TRANSCRIPTS_SCHEMA,
    Summary,
    items_schema,
)
from summeval_runner._scorers._outcome import RunCounts
from summeval_runner._scorers._result import STATUSES, Status
from summeval_runner._secrets import scrub

logger = logging.getLogger("summeval_runner")

JOURNAL = "journal.jsonl"
# The table of judge requests (RunOptions.transcripts): written only by a run that keeps them.
TRANSCRIPTS = "transcripts"
# Items whose rows are built as Python values at once (a few MB of dicts), and items a row
# group holds: the batches' Arrow tables wait for a row group's worth. A writer keeps every row
# group's metadata (about 0.8 kB a column) until it closes, and a reader parses all of it first:
# a million items in row groups of 1,000 held 50 MB of it across the three tables, and 54 MB
# in a reader of items.parquet alone; in groups of 2,500, two fifths as many groups hold about
# 20 MB, and the Arrow rows waiting for a group (about 5 kB an item, estimated) about 12 MB.
# Groups of 5,000 peaked higher in a 200,000-item merge (251 MB against 236, RSS sampler): the
# rows waiting, and a larger group's write, outgrew the saving.
_COMPACT_BATCH = 500
_ROW_GROUP_ITEMS = 2500
_SYNC_INTERVAL_S = 1.0
# A journal line starts with its position, item id and status, so indexing the journal needs no
# full parse of each line. ``_record_line`` writes that head itself: it does not rest on the
# order in which the model's fields are declared (a reorder would send every line of a million
# to the full parse, silently).
_HEAD = re.compile(rb'^\{"position":(\d+),"item_id":("(?:[^"\\]|\\.)*"),"status":"(\w+)"')
_HEAD_FIELDS = {"position", "item_id", "status"}
_STATUS_BYTES = frozenset(status.encode() for status in STATUSES)
# How many unscorable items (a blank source) a run's manifest names; the count is whole.
NAMED_UNSCORABLE = 20
_TRAFFIC = b'{"traffic":'
_QUESTIONS = b'{"questions":'
_BATCH = b'{"batch":'
# Lines that are not item records: a reader of items skips them.
_SIDE_LINES = (_TRAFFIC, _QUESTIONS, _BATCH)
# Damaged lines named one by one in a read; beyond that, only how many more.
_NAMED_DAMAGE = 10


def _record_line(record: ItemRecord) -> str:
    """The record as one line of JSON, its head (``_HEAD``) first."""
    head = (
        f'{{"position":{record.position},'
        f'"item_id":{json.dumps(record.item_id, ensure_ascii=False)},'
        f'"status":"{record.status}"'
    )
    rest = record.model_dump_json(exclude=_HEAD_FIELDS)
    return f"{head},{rest[1:]}" if rest != "{}" else f"{head}}}"


class PartTraffic(BaseModel):
    """What one part of a run (one process) has sent and met so far, as its traffic lines say.

    Counts are totals since the part began, so the part's last line holds them all, and a
    damaged line loses nothing that a later one does not repeat. ``elapsed_s`` is the part's
    seconds of work when the line was written: a killed part's duration is its last line's.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    part: str = ""
    elapsed_s: float = 0.0
    requests: int = 0
    retries: int = 0
    throttled_429: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    # A reasoning model's, of output_tokens.
    reasoning_tokens: int = 0
    cache_hits: int = 0
    cache_stored: int = 0
    # What the judge's replies cost (US dollars), and how many had no known cost.
    judge_cost: float = 0.0
    judge_cost_unknown: int = 0
    # Replies of unknown cost (a server that reported no token usage), at the estimate they
    # were admitted on: the budget counts them so, across a resume too.
    judge_cost_assumed: float = 0.0
    judge_tokens_assumed: int = 0
    # The agent's calls, their tokens and cost as it reported them.
    target_calls: int = 0
    target_input_tokens: int = 0
    target_output_tokens: int = 0
    target_cost: float = 0.0
    target_cost_unknown: int = 0
    # Calls of an agent with no price setting that reported no usage: counted at $0 (RunCost).
    target_unreported: int = 0
    # The agent's calls the response cache answered (the judge's hits are cache_hits).
    target_cache_hits: int = 0
    # Parts run with a judge (or an agent with a price setting) whose price was not given:
    # their cost is not known, even where no reply was paid for (every call failed, or the
    # cache answered each).
    judge_unpriced: int = 0
    target_unpriced: int = 0

    def plus(self, counts: Mapping[str, float], *, elapsed_s: float | None = None) -> PartTraffic:
        """These counts with ``counts`` (counter name -> amount) added."""
        update: dict[str, float] = {name: getattr(self, name) + n for name, n in counts.items()}
        if elapsed_s is not None:
            update["elapsed_s"] = round(elapsed_s, 3)
        return self.model_copy(update=update)

    @classmethod
    def total(cls, parts: Iterable[PartTraffic]) -> PartTraffic:
        """The sum of several parts (its ``part`` is empty)."""
        total = cls()
        for part in parts:
            total = total.plus(
                {name: getattr(part, name) for name in _COUNTERS},
                elapsed_s=total.elapsed_s + part.elapsed_s,
            )
        return total

    @property
    def tokens(self) -> int:
        """Every token counted: the judge's and the agent's, in and out."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.target_input_tokens
            + self.target_output_tokens
        )

    def cost(self) -> RunCost:
        """What these calls cost, ``None`` where any call's cost was not known."""
        judge = None if self.judge_cost_unknown or self.judge_unpriced else self.judge_cost
        target = None if self.target_cost_unknown or self.target_unpriced else self.target_cost
        total = None if judge is None or target is None else judge + target
        return RunCost(
            judge=judge, target=target, total=total, target_unreported=self.target_unreported
        )

    def judge_traffic(self, like: JudgeTraffic) -> JudgeTraffic:
        """``like`` (its judge's name, the cache's mode and path) with these counts."""
        cache = like.cache or CacheUse()
        return like.model_copy(
            update={
                "requests": self.requests,
                "retries": self.retries,
                "throttled_429": self.throttled_429,
                "cache": cache.model_copy(
                    update={"hits": self.cache_hits, "stored": self.cache_stored}
                ),
            }
        )


_COUNTERS = tuple(name for name in PartTraffic.model_fields if name not in ("part", "elapsed_s"))


class _TrafficLine(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    traffic: PartTraffic


class QuestionsLine(BaseModel):
    """One source's coverage questions, as a judge's evaluations of that source are asked them:
    drawn in this run (``origin`` ``drawn``) or found in the response cache, drawn by an earlier
    run (``stored``); ``also_drawn`` repeats a set with one evaluation more that drew it (the
    last line of a key holds them all; ``questions.parquet`` has the set once). ``key`` is the
    bank's key (prompt version, budget, source fingerprint)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    key: str
    judge: str
    source_sha256: str
    max_questions: int
    prompt_version: str
    origin: str
    questions: tuple[str, ...]
    # Which evaluation drew the set (its summary and trial, hashed): that one, run again,
    # repeats its own cached preprocess call.
    drawn_with: str = ""


class BatchRecord(BaseModel):
    """A provider batch the run made (``RunOptions.mode="batch"``), journaled when it is created
    (``state`` ``submitted``) and when it ends (``ended``): a resumed run reads its results
    rather than send its requests again."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    state: str
    requests: int = 0
    status: str | None = None
    completed: int = 0
    failed: int = 0
    # What its requests held back of the budget when it was made (``submitted``): a resume
    # counts a reply of unknown cost at its share of it.
    held_cost: float = 0.0
    held_tokens: int = 0
    # The judge whose batch it is (its name): a panel's judges each read their own on resume.
    # None in a journal written before it was recorded.
    judge: str | None = None


class _BatchLine(BaseModel):
    """A batch's journal line, and the part's traffic with what the batch counts (its requests
    when made, its replies' tokens and cost when it ends): one line, so that no kill can leave
    a batch recorded and its counts not, or the other way round."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    batch: BatchRecord
    traffic: PartTraffic | None = None


class _QuestionsLineWrapper(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    questions: QuestionsLine


@dataclass
class _Damage:
    """The damaged lines of one journal met so far, each reported once."""

    lines: set[int] = field(default_factory=set)
    unnamed: int = 0

    def note(self, journal: Path, number: int, error: ValidationError) -> None:
        if number in self.lines:
            return
        self.lines.add(number)
        if len(self.lines) > _NAMED_DAMAGE:
            self.unnamed += 1
            return
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"]))
        reason = f"{where}: {first['msg']}" if where else first["msg"]
        logger.warning(
            "%s line %d is damaged and was skipped (not an item record or a traffic line: "
            "%s); the item it held, if any, counts as not finished and a resume scores it "
            "again",
            journal,
            number,
            reason,
        )

    def summarize(self, journal: Path) -> None:
        if self.unnamed:
            logger.warning("%s: %d more damaged lines were skipped", journal, self.unnamed)
            self.unnamed = 0


@dataclass(frozen=True)
class JournalContents:
    """What a journal holds: each item's last status, and each part's last traffic line."""

    statuses: dict[str, Status]
    parts: dict[str, PartTraffic]
    damaged_lines: tuple[int, ...] = ()
    # Each (judge, key)'s question set, as first recorded.
    questions: tuple[QuestionsLine, ...] = ()
    # The provider batches the run made, in the order journaled.
    batches: tuple[BatchRecord, ...] = ()
    # The items whose last record tripped a manipulation check.
    flagged: frozenset[str] = frozenset()


class RunWriter:
    """Writes a run's tables into ``run_dir``: the journal as items complete, Parquet at the end.

    A journal line is one item's record, or a traffic line (this process's running totals of
    judge requests, retries, 429s, tokens and cache use). A line is flushed as soon as it is
    written, so a killed process loses no finished item and no count, and synced to the disk at
    least every second, so a power cut loses at most the last second. ``resume=True`` opens an
    existing journal to append to it, dropping a last line cut short by a crash.

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
        # Damaged lines met by this writer's reads: each is reported once per run.
        self._damage = _Damage()

    def write(self, record: ItemRecord) -> None:
        """Append one item's record to the journal, flushed so that a crash cannot lose it.

        Every known secret is scrubbed first (``_secrets``): an error message or a raw reply
        that quoted a key must not carry it to disk.
        """
        self._journal.write(scrub(_record_line(record)) + "\n")
        self._written()

    def write_traffic(self, traffic: PartTraffic) -> None:
        """Append a part's traffic so far: flushed, so that a killed process has counted it;
        synced with the items (at least every second), not line by line."""
        line = _TrafficLine(traffic=traffic).model_dump_json(exclude_defaults=True)
        self._journal.write(line + "\n")
        self._written()

    def write_questions(self, line: QuestionsLine) -> None:
        """Append a source's shared questions: a resumed run asks its items the same ones."""
        self._journal.write(scrub(_QuestionsLineWrapper(questions=line).model_dump_json()) + "\n")
        self._written()

    def write_batch(self, record: BatchRecord, traffic: PartTraffic | None = None) -> None:
        """Journal a batch as it is created or ends, with the part's traffic that counts it:
        flushed and synced at once, since a run killed the moment after creating it must find
        it on resume."""
        line = _BatchLine(batch=record, traffic=traffic).model_dump_json(exclude_defaults=True)
        self._journal.write(line + "\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def _written(self) -> None:
        self._journal.flush()
        now = time.monotonic()
        if now - self._synced >= _SYNC_INTERVAL_S:
            os.fsync(self._journal.fileno())
            self._synced = now

    def contents(self, *, questions_kept: int | None = None) -> JournalContents:
        """What the journal holds, each line read whole: the statuses a resume keeps or retries,
        and the traffic of the run's earlier parts. Damaged lines are reported and skipped.
        ``questions_kept``: of each judge's question sets, only the last that many first
        recorded (what a bank of that capacity, seeded in order, keeps); None: all."""
        return _contents(self.journal_path, self._damage, questions_kept)

    @property
    def damaged_lines(self) -> tuple[int, ...]:
        """The journal's damaged lines that this writer's reads met (and reported)."""
        return tuple(sorted(self._damage.lines))

    def close(self) -> None:
        """Flush the journal to the disk and release the directory's lock."""
        if not self._journal.closed:
            try:
                self._journal.flush()
                os.fsync(self._journal.fileno())
            finally:
                # Closed (and the lock released) even when the disk refuses the flush.
                self._journal.close()

    def compact(
        self,
        *,
        run_id: str,
        variant: str,
        metadata: MetadataTypes | None = None,
        transcripts: bool = False,
    ) -> Compacted:
        """Compact the journal into Parquet tables and write the aggregates.

        ``metadata`` is the data's metadata fields and their kinds, read before the run (the
        manifest's ``dataset.metadata_types``); without it (a stream's), every field the
        journal's items carry is text.

        ``transcripts.parquet`` is written when ``transcripts`` asks for it (the run keeps
        transcripts), or when any journaled item holds a transcript (an earlier part of the
        run, or a shard, kept them); otherwise none is left in the directory. Its rows come
        from the items' last entries, as every table's: each item's requests once.

        Rows come out in dataset order whatever order items finished in, and an item journaled
        twice (tried again on resume) keeps its last entry, so the tables of a resumed run equal
        those of an uninterrupted one. Every row carries ``run_id`` and ``variant``. The
        journal stays locked (``close`` releases it), so nothing else writes the directory
        while its tables and manifest are written.
        """
        self._journal.flush()
        os.fsync(self._journal.fileno())
        if metadata is None:
            records = _latest_records(self.journal_path, self._damage)
            metadata = MetadataTypes.strings(
                name for record in records for name in json.loads(record.metadata)
            )
        schemas = {**TABLES, "items": items_schema(metadata)}
        paths = {name: self.run_dir / f"{name}.parquet" for name in schemas}
        writers = {
            name: pq.ParquetWriter(
                _partial(paths[name]),
                schemas[name],
                write_statistics=_statistics_columns(schemas[name]),
            )
            for name in ("items", "alignment", "coverage")
        }
        transcript_path = self.run_dir / f"{TRANSCRIPTS}.parquet"
        schemas[TRANSCRIPTS] = TRANSCRIPTS_SCHEMA

        def open_transcripts() -> None:
            writers[TRANSCRIPTS] = pq.ParquetWriter(
                _partial(transcript_path),
                TRANSCRIPTS_SCHEMA,
                write_statistics=_statistics_columns(TRANSCRIPTS_SCHEMA),
            )

        if transcripts:
            open_transcripts()
        summary = Summary()
        noise = NoiseTally()
        statuses: Counter[Status] = Counter()
        unscorable: list[str] = []
        flagged = 0
        bases: Counter[str] = Counter()
        verdicts_missing = 0
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in schemas}
        waiting: dict[str, list[pa.Table]] = {name: [] for name in schemas}

        def convert() -> None:
            for name in schemas:
                if rows[name]:
                    waiting[name].append(pa.Table.from_pylist(rows[name], schema=schemas[name]))
                    rows[name] = []

        def flush() -> None:
            convert()
            if waiting[TRANSCRIPTS] and TRANSCRIPTS not in writers:
                # Kept by an earlier part of the run (or a shard) though not by this one.
                open_transcripts()
            for name, writer in writers.items():
                # One row group of the batches' rows (an empty one for a table with no rows
                # yet, as before: every table is written, with its schema).
                writer.write_table(pa.concat_tables(waiting[name] or [schemas[name].empty_table()]))
                waiting[name] = []
            # The allocators keep what a group freed for the next one, and the next group's
            # sizes differ: handed back (Arrow's alone), the compaction of 200,000 items peaked
            # 28 MB lower.
            hand_back_memory()

        try:
            # A few thousand items' rows at a time: memory stays flat however long the run.
            records = _latest_records(self.journal_path, self._damage)
            for count, record in enumerate(records, 1):
                statuses[record.status] += 1
                if record.status == "unscorable" and len(unscorable) < NAMED_UNSCORABLE:
                    unscorable.append(record.item_id)
                flagged += record.flagged
                noise.add(record)
                built = rows_of(record, run_id=run_id, variant=variant, metadata=metadata)
                verdicts_missing += any(row["verdict_missing"] for row in built["coverage"]) or any(
                    # No claim at all in a summary that is not blank, after the re-asks: the
                    # spec's 0 for its alignment, counted with the verdicts missing.
                    row["status"] == "scored" and row["claims"] == 0
                    for row in built["items"]
                )
                for name, table in built.items():
                    rows[name] += table
                    if name == "items":
                        summary.add_item(table)
                        bases.update(
                            row["coverage_basis"]
                            for row in table
                            if row.get("coverage_basis") is not None and not row.get("trial")
                        )
                if count % _ROW_GROUP_ITEMS == 0:
                    flush()
                elif count % _COMPACT_BATCH == 0:
                    convert()
            flush()
        finally:
            for writer in writers.values():
                writer.close()
        pq.write_table(
            pa.Table.from_pylist(summary.rows(), schema=AGGREGATES_SCHEMA),
            _partial(paths["aggregates"]),
        )
        _write_questions(
            self.journal_path, _partial(paths["questions"]), run_id=run_id, variant=variant
        )
        if TRANSCRIPTS in writers:
            paths[TRANSCRIPTS] = transcript_path
        else:
            # A table an earlier part wrote, that no item's entry holds now: not left stale.
            transcript_path.unlink(missing_ok=True)
        for path in paths.values():
            os.replace(_partial(path), path)
        return Compacted(
            tables=paths,
            counts=RunCounts.tallied(statuses, flagged),
            noise=noise,
            unscorable_items=tuple(unscorable),
            coverage_bases=dict(sorted(bases.items())),
            verdicts_missing=verdicts_missing,
        )


def _statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns whose row groups carry min/max statistics: all but text and lists. A text
    column's (a source, a summary, a reason) would repeat two of its values in the file's
    footer for every row group, held in memory until the writer closes: for statistics no
    query of these tables uses."""
    return [
        field.name
        for field in schema
        if not (
            pa.types.is_string(field.type)
            or pa.types.is_large_string(field.type)
            or pa.types.is_list(field.type)
        )
    ]


def _write_questions(journal: Path, path: Path, *, run_id: str, variant: str) -> None:
    """``questions.parquet``: every question set the journal recorded, read line by line and
    written a few thousand sets at a time (a million sources' sets never sit in memory)."""
    writer = pq.ParquetWriter(path, QUESTIONS_SCHEMA)
    try:
        batch: list[QuestionsLine] = []
        for read in _question_lines(journal):
            if read.origin == "also_drawn":
                continue  # a set written already, with one drawer more: the same questions
            batch.append(read)
            if len(batch) >= _COMPACT_BATCH:
                writer.write_table(_questions_table(batch, run_id=run_id, variant=variant))
                batch = []
        writer.write_table(_questions_table(batch, run_id=run_id, variant=variant))
    finally:
        writer.close()


def _questions_table(lines: Iterable[QuestionsLine], *, run_id: str, variant: str) -> pa.Table:
    return pa.Table.from_pylist(
        _questions_rows(lines, run_id=run_id, variant=variant), schema=QUESTIONS_SCHEMA
    )


def _questions_rows(
    lines: Iterable[QuestionsLine], *, run_id: str, variant: str
) -> list[dict[str, Any]]:
    """``questions.parquet``'s rows: each shared question set's questions, in order."""
    return [
        {
            "run_id": run_id,
            "variant": variant,
            "judge": line.judge,
            "prompt_version": line.prompt_version,
            "source_sha256": line.source_sha256,
            "max_questions": line.max_questions,
            "origin": line.origin,
            "position": position,
            "question": question,
        }
        for line in lines
        for position, question in enumerate(line.questions)
    ]


@dataclass(frozen=True)
class Compacted:
    """A compacted run: its tables (name -> path), its items' counts (each item once), how
    the judge's trials of its items disagreed, and the first unscorable items' ids (a blank
    source: the data's failure, named in the manifest and the run's summary)."""

    tables: dict[str, Path]
    counts: RunCounts
    noise: NoiseTally
    unscorable_items: tuple[str, ...] = ()
    # Items per coverage basis (source_questions, key_facts, questions, reference): what each
    # summarization item's coverage was measured on (its first trial's row).
    coverage_bases: dict[str, int] = field(default_factory=dict)
    # Items whose judge left verdicts out even after its re-asks: counted unanswered (SPEC §1.3).
    verdicts_missing: int = 0


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
    """Each journaled item's id and status (its last entry's), every line read whole: an item
    whose line is damaged is not among them, so a resume scores it again."""
    return _contents(run_dir / JOURNAL, _Damage()).statuses


def journaled_questions(run_dir: Path) -> tuple[QuestionsLine, ...]:
    """The question sets a run's journal recorded, the first of each judge and source."""
    return _contents(run_dir / JOURNAL, _Damage()).questions


def journal_questions(journal: Path) -> Iterator[QuestionsLine]:
    """The question sets a journal recorded, the first of each judge and source, in the order
    written: ``journaled_questions`` read line by line, so that a million sources' sets never
    sit in memory (which sets were met is kept as 8-byte digests, ``DigestSet``)."""
    met = DigestSet()
    for shared in _question_lines(journal):
        if met.add(f"{shared.judge}\n{shared.key}"):
            yield shared


def _question_lines(journal: Path) -> Iterator[QuestionsLine]:
    """Every question-set line of a journal, parsed, in the order written; a line that does not
    parse is passed over here: it is reported with its line number when the items are read."""
    for _, _, line in _lines(journal):
        if not line.startswith(_QUESTIONS):
            continue
        try:
            read = _QuestionsLineWrapper.model_validate_json(line).questions
        except ValidationError:
            continue
        yield read


def journaled_ids(run_dir: Path) -> IdSet:
    """The ids of the items in a run's journal (damaged lines reported and skipped), each line
    read whole; its question sets are not kept."""
    return IdSet(_contents(run_dir / JOURNAL, _Damage(), 0).statuses)


class IdSet:
    """A set of item ids, exact, in about 20 bytes an id where a ``frozenset`` of them takes
    about 90: the ids' UTF-8 bytes, sorted, in one buffer with where each ends. A resume keeps
    the ids of a killed run's finished items (half a million, half way through a million), and
    a merge each shard's; looked up by bisection (``in``), walked in order (``shared``)."""

    def __init__(self, ids: Iterable[str]) -> None:
        # Sorted as strings, encoded one at a time: code point order is UTF-8 byte order, and a
        # set of the ids themselves costs no copy of each (half a million bytes objects, 22 MB).
        blob = bytearray()
        self._ends: array[int] = array("q")
        for item in sorted(set(ids)):
            blob += item.encode("utf-8", "surrogatepass")
            self._ends.append(len(blob))
        self._blob = bytes(blob)

    def __len__(self) -> int:
        return len(self._ends)

    def _at(self, index: int) -> bytes:
        return self._blob[self._ends[index - 1] if index else 0 : self._ends[index]]

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, str):
            return False
        key = item.encode("utf-8", "surrogatepass")
        low, high = 0, len(self._ends)
        while low < high:
            middle = (low + high) // 2
            if self._at(middle) < key:
                low = middle + 1
            else:
                high = middle
        return low < len(self._ends) and self._at(low) == key

    def __iter__(self) -> Iterator[str]:
        for index in range(len(self._ends)):
            yield self._at(index).decode("utf-8", "surrogatepass")

    def shared(self, other: IdSet) -> tuple[int, str | None]:
        """How many ids both hold, and the first of them in sorted order (None: none)."""
        count, first, mine, theirs = 0, None, 0, 0
        while mine < len(self) and theirs < len(other):
            here, there = self._at(mine), other._at(theirs)
            if here == there:
                if first is None:
                    first = here.decode("utf-8", "surrogatepass")
                count, mine, theirs = count + 1, mine + 1, theirs + 1
            elif here < there:
                mine += 1
            else:
                theirs += 1
        return count, first


class DigestSet:
    """Texts met, as their 64-bit BLAKE2b digests in an open-addressed table (at most half its
    slots full): 16 bytes a text. Two distinct texts share a digest with a chance of about
    n^2 / 2^65 (3e-8 for a million); the second would be taken as met."""

    def __init__(self) -> None:
        self._slots: array[int] = array("q", bytes(8 * 1024))
        self._count = 0

    def add(self, text: str) -> bool:
        """Whether ``text`` is new (and now met)."""
        if 2 * (self._count + 1) > len(self._slots):
            old, self._slots = self._slots, array("q", bytes(16 * len(self._slots)))
            for digest in old:
                if digest:
                    self._slots[self._slot(digest)] = digest
        digest = (
            int.from_bytes(
                hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                "little",
                signed=True,
            )
            or 1
        )  # 0 marks an empty slot
        slot = self._slot(digest)
        if self._slots[slot] == digest:
            return False
        self._slots[slot] = digest
        self._count += 1
        return True

    def _slot(self, digest: int) -> int:
        mask = len(self._slots) - 1
        slot = digest & mask
        while self._slots[slot] not in (0, digest):
            slot = (slot + 1) & mask
        return slot


def journal_records(journal: Path) -> Iterator[ItemRecord]:
    """Every item record of a journal, in the order written.

    Traffic lines are not records and are skipped. A last line cut short by a crash was never
    acknowledged and is skipped; a damaged line is reported (file and line) and skipped.
    """
    damage = _Damage()
    for number, _, line in _lines(journal):
        if line.startswith(_SIDE_LINES):
            continue
        try:
            yield ItemRecord.model_validate_json(line)
        except ValidationError as error:
            damage.note(journal, number, error)
    damage.summarize(journal)


def _lines(journal: Path) -> Iterator[tuple[int, int, bytes]]:
    """Each whole line of a journal: its number (from 1), its byte offset, and its bytes."""
    offset = 0
    with journal.open("rb") as lines:
        for number, line in enumerate(lines, 1):
            if not line.endswith(b"\n"):
                break  # a line cut short by a crash was never acknowledged
            yield number, offset, line
            offset += len(line)


def _contents(journal: Path, damage: _Damage, questions_kept: int | None = None) -> JournalContents:
    statuses: dict[str, Status] = {}
    parts: dict[str, PartTraffic] = {}
    questions: dict[tuple[str, str], QuestionsLine] = {}
    # Bounded (``questions_kept``): the sets met are remembered as digests, so that a set
    # dropped from ``questions`` is not taken up again by a later line of its key.
    met = DigestSet() if questions_kept is not None else None
    kept: dict[str, dict[str, QuestionsLine]] = {}
    batches: list[BatchRecord] = []
    flagged: set[str] = set()
    if not journal.exists():
        return JournalContents(statuses, parts)
    for number, _, line in _lines(journal):
        try:
            if line.startswith(_TRAFFIC):
                traffic = _TrafficLine.model_validate_json(line).traffic
                parts[traffic.part] = traffic  # a part's later line holds all its earlier ones
            elif line.startswith(_QUESTIONS):
                shared = _QuestionsLineWrapper.model_validate_json(line).questions
                # The first set recorded is the one the run's items were asked.
                if met is None:
                    questions.setdefault((shared.judge, shared.key), shared)
                elif questions_kept and met.add(f"{shared.judge}\n{shared.key}"):
                    held = kept.setdefault(shared.judge, {})
                    held[shared.key] = shared
                    if len(held) > questions_kept:
                        del held[next(iter(held))]  # the judge's oldest set
            elif line.startswith(_BATCH):
                read = _BatchLine.model_validate_json(line)
                batches.append(read.batch)
                if read.traffic is not None:
                    parts[read.traffic.part] = read.traffic
            else:
                record = ItemRecord.model_validate_json(line)
                statuses[record.item_id] = record.status
                if record.flagged:
                    flagged.add(record.item_id)
                else:
                    flagged.discard(record.item_id)
        except ValidationError as error:
            damage.note(journal, number, error)
    damage.summarize(journal)
    for held in kept.values():
        questions.update(((line.judge, key), line) for key, line in held.items())
    return JournalContents(
        statuses,
        parts,
        tuple(sorted(damage.lines)),
        tuple(questions.values()),
        tuple(batches),
        frozenset(flagged),
    )


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


def _latest_entries(journal: Path, damage: _Damage) -> tuple[array[int], array[int]]:
    """Where each journaled item's last entry is, by its dataset position (which tells items of
    one run apart, as their ids do): the entry's byte offset and line number, -1 where no item
    of that position was journaled. Two arrays of 8-byte numbers: a million items' index takes
    16 MB. Lines are read by their head where it is whole (see ``_latest_records``)."""
    offsets: array[int] = array("q")
    numbers: array[int] = array("q")
    # A hash of each position's item id: two items at one position would be one lost.
    ids: array[int] = array("q")
    for number, offset, line in _lines(journal):
        if line.startswith(_SIDE_LINES):
            continue
        head = _HEAD.match(line)
        if head is not None and head[3] in _STATUS_BYTES:
            position, item_id = int(head[1]), json.loads(head[2])
        else:
            try:
                record = ItemRecord.model_validate_json(line)
            except ValidationError as error:
                damage.note(journal, number, error)
                continue
            position, item_id = record.position, record.item_id
        if position >= len(offsets):
            grow = position + 1 - len(offsets)
            offsets.extend(repeat(-1, grow))
            numbers.extend(repeat(-1, grow))
            ids.extend(repeat(0, grow))
        if offsets[position] >= 0 and ids[position] != hash(item_id):
            raise ConfigError(
                f"{journal} line {number}: item {item_id!r} has position {position}, "
                f"which an earlier line gave another item (line {numbers[position]}): the "
                "journal mixes two datasets and cannot be compacted"
            )
        offsets[position] = offset
        numbers[position] = number
        ids[position] = hash(item_id)
    return offsets, numbers


def _latest_records(journal: Path, damage: _Damage) -> Iterator[ItemRecord]:
    """Every item's last record, in dataset order. A last entry damaged past its head is
    reported and skipped: the item counts as not finished. (A resume reads every line whole
    first, so an item whose entry is damaged is scored again and its new entry is the last.)"""
    offsets, numbers = _latest_entries(journal, damage)
    with journal.open("rb") as lines:
        for offset, number in zip(offsets, numbers, strict=True):
            if offset < 0:
                continue
            lines.seek(offset)
            try:
                yield ItemRecord.model_validate_json(lines.readline())
            except ValidationError as error:
                damage.note(journal, number, error)
    damage.summarize(journal)
