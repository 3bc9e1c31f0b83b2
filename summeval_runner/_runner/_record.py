"""A run written to a directory: journal as items finish, tables and manifest at the end, resume.

``RunRecorder.open`` checks the directory (a new run never overwrites another; a resumed one
must be the same run), locks its journal, and writes the manifest with status ``running``
before any item starts, so a run killed at any moment can be resumed. ``write`` appends each
finished item to the journal, and ``count_traffic`` each request, retry, 429, reply's tokens and
cache hit as it happens (a traffic line), so that a run killed at any moment has counted them.
``finish`` compacts the journal into the Parquet tables and writes the final manifest, whose
traffic, tokens and duration are every part's: those of earlier parts read from the journal.

The first write that fails in the run directory (an item line, a traffic line, a question set,
a batch record, the log file, a response cache kept there: ``_failed_writes``) is the run's
``failure``: ``on_failure`` hears of it at once (the run stops its calls), nothing more is
written to the journal (a later line could land after a hole), and the run ends ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import platform
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from summeval_runner._errors import ConfigError, InputError, RunRecordError
from summeval_runner._inputs._shards import ShardRule
from summeval_runner._rundir._failed_writes import watch
from summeval_runner._rundir._journal import (
    JOURNAL,
    BatchRecord,
    IdSet,
    JournalContents,
    PartTraffic,
    QuestionsLine,
    RunWriter,
)
from summeval_runner._rundir._manifest import (
    MANIFEST_SCHEMA_VERSION,
    DatasetInfo,
    JudgeTokenTotals,
    Manifest,
    Resources,
    Resumption,
    RunStatus,
    ShardInfo,
    TokenTotals,
    config_differences,
    metadata_types,
    read_manifest,
    setup_differences,
    write_manifest,
)
from summeval_runner._rundir._rows import ItemRecord
from summeval_runner._rundir._runs_table import write_runs_table
from summeval_runner._rundir._tables import score_means
from summeval_runner._runner._judge_stack import JudgeStack
from summeval_runner._runner._options import RunOptions
from summeval_runner._scorers._outcome import ItemResult, RunCounts
from summeval_runner._scorers._prompts import PROMPT_VERSION
from summeval_runner._scorers._questions import (
    BANK_CAPACITY,
    QuestionKey,
    QuestionSet,
    SharedQuestions,
)
from summeval_runner._secrets import redact

logger = logging.getLogger("summeval_runner")
# A finished item also notes the part's seconds of work, at most this often, so that a killed
# part that sent no request for a while (every reply cached) still has its duration counted.
_ELAPSED_EVERY_S = 1.0
# What a disk says when it cannot take a write: a run that meets it is failed, not misconfigured.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


@dataclass(frozen=True)
class RunPlan:
    """What a recorded run is about to do: its items, and what decides its results."""

    options: RunOptions
    # What decides the results, as run_evals sees them (compared whole on resume).
    setup: Mapping[str, Any]
    # What the caller records beside it (the app: its resolved config).
    config: Mapping[str, Any]
    overrides: tuple[str, ...]
    dataset: DatasetInfo | None
    # Items this run is to finish: the dataset's, or its shard's (None: not known in advance).
    selected: int | None
    # What a sharded run's items were split by (items.shard_rule).
    shard_by: ShardRule = "id"


class RunRecorder:
    """One run directory, from the first manifest to the last."""

    def __init__(
        self,
        run_dir: Path,
        writer: RunWriter,
        manifest: Manifest,
        kept: IdSet,
        earlier: PartTraffic,
        options: RunOptions,
        questions: tuple[QuestionsLine, ...] = (),
        batches: tuple[BatchRecord, ...] = (),
    ) -> None:
        self.run_dir = run_dir
        # The provider batches an earlier part of the run made (batch mode).
        self.recorded_batches = batches
        self._options = options
        self.manifest = manifest
        # Items finished in an earlier part of the run, not scored again.
        self.kept = kept
        self._writer = writer
        # What the earlier parts of a resumed run sent, met and took, read from the journal.
        self._earlier = earlier
        # This part's traffic so far (each process that writes the journal is one part).
        self._part = PartTraffic(part=uuid.uuid4().hex[:12])
        # The first write that failed in the run directory (None: none has).
        self.failure: RunRecordError | None = None
        # Hears of that failure as it happens, on the run's event loop (the run stops).
        self.on_failure: Callable[[RunRecordError], None] | None = None
        # The manifest a failed run ended with, and whether it could be written (finish).
        self.failed_manifest: Manifest | None = None
        self.failed_manifest_written = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._loop_thread = threading.get_ident()
        self._unwatch = watch(run_dir, self._failed_elsewhere)
        # The question sets an earlier part of the run recorded: judge -> key -> questions.
        self.recorded_questions: dict[str, dict[QuestionKey, QuestionSet]] = {}
        for line in questions:
            key = QuestionKey(line.source_sha256, line.max_questions, line.prompt_version)
            held = QuestionSet(line.questions, line.drawn_with)
            self.recorded_questions.setdefault(line.judge, {})[key] = held
        self._clock = time.perf_counter()
        self._noted = self._clock
        self._cpu_clock = time.process_time()

    @classmethod
    def open(cls, run_dir: Path, *, resume: bool, plan: RunPlan) -> RunRecorder:
        """Check ``run_dir``, lock its journal and write the starting manifest.

        ``ConfigError`` when a new run would write into a directory that holds one, or a
        resumed run is not the same run (config, dataset, shard or layout differ).
        """
        started_at = datetime.now(UTC)
        previous = _previous(run_dir, plan) if resume else None
        if previous is None and (run_dir / JOURNAL).exists():
            # Appending would mix two runs in one set of tables; replacing would lose one.
            raise ConfigError(
                f"{run_dir} already holds a run; choose another directory, or continue that "
                f"run (summeval-run runner.resume={run_dir}; in Python, resume=True)"
            )
        # Locks the run directory's journal before anything in it is written.
        try:
            writer = RunWriter(run_dir, resume=previous is not None)
        except OSError as error:
            if error.errno not in _DISK_FULL:
                raise
            raise RunRecordError(
                _cause(f"the journal could not be opened in {run_dir}", error)
            ) from error
        try:
            # A judge's bank holds its last BANK_CAPACITY sets: those are all a resume seeds
            # it with, and all that is read into memory of a million sources' sets.
            contents = (
                writer.contents(questions_kept=BANK_CAPACITY)
                if previous is not None
                else JournalContents({}, {})
            )
            if plan.options.mode != "batch":
                _check_no_batch_out(run_dir, contents.batches)
            finished = contents.statuses
            # Items that ended in error are tried again on resume: most errors are transient.
            kept = IdSet(item for item, status in finished.items() if status != "error")
            options = plan.options
            shard = options.shard
            manifest = Manifest(
                schema_version=MANIFEST_SCHEMA_VERSION,
                run_id=previous.run_id if previous else uuid.uuid4().hex[:12],
                variant=previous.variant if previous else options.variant or "default",
                status="running",
                started_at=previous.started_at if previous else started_at,
                package_version=_package_version(),
                prompt_version=PROMPT_VERSION,
                python_version=platform.python_version(),
                # Where it ran: a sharded run's parts run on several machines or processes.
                host=platform.node(),
                pid=os.getpid(),
                setup=dict(redact(plan.setup)),
                config=dict(redact(plan.config)),
                overrides=previous.overrides if previous else plan.overrides,
                dataset=plan.dataset,
                shard=(
                    ShardInfo(
                        index=shard.index, count=shard.count, items=plan.selected, by=plan.shard_by
                    )
                    if shard
                    else None
                ),
                # What the earlier parts of a resumed run sent and met, added to at the end.
                judge=previous.judge if previous else None,
                hook_errors=previous.hook_errors if previous else 0,
                duration_s=previous.duration_s if previous else None,
                resumptions=(
                    (
                        *previous.resumptions,
                        Resumption(
                            at=started_at,
                            items_kept=len(kept),
                            items_to_score=(
                                None if plan.selected is None else plan.selected - len(kept)
                            ),
                            overrides=plan.overrides,
                        ),
                    )
                    if previous
                    else ()
                ),
            )
            # Written first, so that a run killed at any moment can be resumed: it holds the
            # config.
            try:
                write_manifest(run_dir, manifest)
            except OSError as error:
                raise RunRecordError(
                    _cause(f"the manifest could not be written in {run_dir}", error)
                ) from error
        except BaseException:
            writer.close()
            raise
        earlier = _earlier_traffic(contents, previous)
        if previous is not None:
            retried = sum(status == "error" for status in finished.values())
            logger.info(
                "resuming run %s in %s: %d finished items kept, %d that ended in error tried "
                "again, %s items to score",
                manifest.run_id,
                run_dir,
                len(kept),
                retried,
                "?" if plan.selected is None else plan.selected - len(kept),
            )
        return cls(
            run_dir,
            writer,
            manifest,
            kept,
            earlier,
            plan.options,
            contents.questions,
            contents.batches,
        )

    def write(self, result: ItemResult, position: int) -> None:
        """Journal a finished item. ``RunRecordError`` when it cannot be (this write failed,
        or an earlier one did: nothing is written after a failed write)."""
        record = ItemRecord.of(result, position)
        if self.failure is not None:
            raise self.failure
        try:
            self._writer.write(record)
        except (OSError, ValueError) as error:  # ValueError: the journal is already closed
            raise self._fail(f"item {result.item_id!r} could not be recorded", error) from error
        if time.perf_counter() - self._noted >= _ELAPSED_EVERY_S:
            self.count_traffic({})

    def _fail(self, what: str, error: BaseException) -> RunRecordError:
        """The run's failure: this one, if it is the first write that failed in the run
        directory (``on_failure`` is told), else the first."""
        if self.failure is not None:
            return self.failure
        where = "" if str(self.run_dir) in what else f" in the run directory {self.run_dir}"
        failure = RunRecordError(f"{what}{where}: {type(error).__name__}: {error}")
        self.failure = failure
        logger.info("%s; the run stops its judge and agent calls", failure)
        if self.on_failure is not None:
            if self._loop is None or threading.get_ident() == self._loop_thread:
                self.on_failure(failure)
            else:  # a write of another thread (a sync agent's log line)
                with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                    self._loop.call_soon_threadsafe(self.on_failure, failure)
        return failure

    def _failed_elsewhere(self, what: str, error: BaseException) -> None:
        """A write reported failed in the run directory by another writer (the log file, a
        response cache kept there)."""
        self._fail(f"{what} could not be written", error)

    def write_questions(self, judge: str, shared: SharedQuestions) -> None:
        """Journal a source's question set as the run first holds it, so that a resumed run
        asks the source's remaining items the same questions. Never raises: a line that cannot
        be written (a full disk) is the run's failure, which stops it."""
        if self.failure is not None:
            return
        key = shared.key
        line = QuestionsLine(
            key=key.text,
            judge=judge,
            source_sha256=key.source_sha256,
            max_questions=key.max_questions,
            prompt_version=key.prompt_version,
            origin=shared.origin,
            questions=shared.questions.questions,
            drawn_with=shared.questions.drawn_with,
        )
        try:
            self._writer.write_questions(line)
        except (OSError, ValueError) as error:
            self._fail("a source's coverage questions could not be recorded", error)

    def write_batch(self, record: BatchRecord, counts: Mapping[str, float]) -> None:
        """Journal a provider batch as it is created or ends, with ``counts`` (its requests when
        made, its replies' tokens and cost when it ends) added to this part's traffic in the
        same line. A batch that cannot be journaled is the run's failure, which stops it (its
        id is in the cause: a resume may find it at the provider by the run's tag)."""
        now = time.perf_counter()
        self._noted = now
        self._part = self._part.plus(counts, elapsed_s=now - self._clock)
        if self.failure is not None:
            return
        try:
            self._writer.write_batch(record, self._part)
        except (OSError, ValueError) as error:
            self._fail(f"batch {record.id} ({record.state}) could not be recorded", error)

    def note_traffic(self, counts: Mapping[str, float]) -> None:
        """Add ``counts`` to this part's traffic, journaled with its next line (and in the
        manifest): what is known of the part before any call (``judge_unpriced``)."""
        self._part = self._part.plus(counts)

    def count_traffic(self, counts: Mapping[str, float]) -> None:
        """Add ``counts`` (``requests``, ``retries``, ``throttled_429``, ``input_tokens``,
        ``output_tokens``, ``cache_hits``, ``cache_stored`` -> amount) to this part's traffic and
        journal it at once: a request is counted as it goes out, before any reply.

        Never raises: a traffic line that cannot be written (a full disk) is the run's failure,
        which stops it; the counts stay in memory for the final manifest.
        """
        now = time.perf_counter()
        self._noted = now
        self._part = self._part.plus(counts, elapsed_s=now - self._clock)
        if self.failure is not None:
            return
        try:
            self._writer.write_traffic(self._part)
        except (OSError, ValueError) as error:  # ValueError: the journal is already closed
            self._fail("the judge traffic could not be recorded", error)

    def traffic(self) -> PartTraffic:
        """Every part's traffic, and seconds of work, as last counted."""
        return PartTraffic.total((self._earlier, self._part))

    def finish(
        self,
        *,
        status: RunStatus,
        selected: int | None,
        drawn: int,
        judges: JudgeStack,
        hook_errors: int,
        stopped_because: str | None,
    ) -> tuple[Manifest, dict[str, Path]]:
        """Compact the journal into the tables and write the final manifest; the directory's
        lock is held until the manifest is written.

        ``RunRecordError`` when the tables or the manifest cannot be written (a full disk):
        the journal keeps every item recorded, the manifest says ``failed`` where it can be
        written, and a resume writes the tables once the cause is fixed.
        """
        try:
            try:
                compacted = self._writer.compact(
                    run_id=self.manifest.run_id,
                    variant=self.manifest.variant,
                    metadata=metadata_types(self.manifest.dataset),
                    transcripts=self._options.transcripts,
                )
            except Exception as error:
                cause = _cause(f"the tables could not be written in {self.run_dir}", error)
                self._record_failure(
                    stopped_because or cause,
                    selected=selected,
                    judges=judges,
                    hook_errors=hook_errors,
                )
                raise RunRecordError(cause) from error
            # This part's last traffic line, its duration included: a later resume adds it to
            # the run's totals.
            self.count_traffic({})
            if self.failure is not None and status != "failed":
                # A write failed after the last item (the last traffic line, a log line): the
                # journal does not hold all this part did, and the run says so.
                status, stopped_because = "failed", str(self.failure)
            traffic = self.traffic()
            counts = compacted.counts
            unfinished = unfinished_items(
                selected, kept=len(self.kept), drawn=drawn, finished=counts.total
            )
            manifest = self.manifest.model_copy(
                update={
                    "status": final_status(status, unfinished),
                    "stopped_because": stopped_because,
                    "finished_at": datetime.now(UTC),
                    "duration_s": round(traffic.elapsed_s, 3),
                    "counts": counts,
                    "unscorable_items": compacted.unscorable_items,
                    "coverage_bases": compacted.coverage_bases,
                    "verdicts_missing": compacted.verdicts_missing,
                    "unfinished": unfinished,
                    "hook_errors": self.manifest.hook_errors + hook_errors,
                    "means": score_means(compacted.tables["aggregates"]),
                    "judge_noise": compacted.noise.result(self._options.trials),
                    "judge_panel": compacted.noise.panel(),
                    # Every attempt of every part: retried, failed and killed requests too.
                    "judge": traffic.judge_traffic(judges.traffic(self.manifest.judge)),
                    "tokens": judge_tokens(traffic),
                    "target_tokens": TokenTotals(
                        input=traffic.target_input_tokens, output=traffic.target_output_tokens
                    ),
                    "cost": traffic.cost(),
                    "resources": Resources(
                        cpu_s=round(time.process_time() - self._cpu_clock, 3),
                        peak_rss_mb=peak_rss_mb(),
                    ),
                    "tables": {name: path.name for name, path in compacted.tables.items()},
                }
            )
            if manifest.status == "failed":
                self.failed_manifest = manifest
            try:
                write_manifest(self.run_dir, manifest)
                write_runs_table(self.run_dir, manifest)
            except OSError as error:
                raise RunRecordError(
                    _cause(f"the manifest could not be written in {self.run_dir}", error)
                ) from error
            self.failed_manifest_written = manifest.status == "failed"
        finally:
            self.close()
        self.manifest = manifest
        return manifest, compacted.tables

    def _duration_s(self) -> float:
        """Every part's seconds of work, this one's up to now."""
        return round(self._earlier.elapsed_s + time.perf_counter() - self._clock, 3)

    def _record_failure(
        self, because: str, *, selected: int | None, judges: JudgeStack, hook_errors: int
    ) -> None:
        """Mark the run ``failed`` where the manifest can still be written, with what its
        journal holds (counts, unfinished items, traffic); where it cannot, the starting
        manifest (``running``) stays, which a resume accepts just the same."""
        contents = self._writer.contents()
        counts = RunCounts.of(contents.statuses.values(), len(contents.flagged))
        self.count_traffic({})
        traffic = self.traffic()
        failed = self.manifest.model_copy(
            update={
                "status": "failed",
                "stopped_because": because,
                "finished_at": datetime.now(UTC),
                "duration_s": round(traffic.elapsed_s, 3),
                "counts": counts,
                "unfinished": None if selected is None else max(selected - counts.total, 0),
                "hook_errors": self.manifest.hook_errors + hook_errors,
                "judge": traffic.judge_traffic(judges.traffic(self.manifest.judge)),
                "tokens": judge_tokens(traffic),
                "target_tokens": TokenTotals(
                    input=traffic.target_input_tokens, output=traffic.target_output_tokens
                ),
                "cost": traffic.cost(),
            }
        )
        self.failed_manifest = failed
        with contextlib.suppress(OSError):
            write_manifest(self.run_dir, failed)
            self.failed_manifest_written = True
            write_runs_table(self.run_dir, failed)
            self.manifest = failed

    def close(self) -> None:
        """Release the directory. A journal that cannot be flushed now (a full disk) holds
        nothing unacknowledged: each item's line was flushed when it was written, and the one
        whose write failed stopped the run."""
        self._unwatch()
        with contextlib.suppress(OSError):
            self._writer.close()


def _cause(what: str, error: BaseException) -> str:
    return f"{what}: {type(error).__name__}: {error}"


def judge_tokens(traffic: PartTraffic) -> JudgeTokenTotals:
    """The judges' tokens of a run's traffic, for its manifest."""
    return JudgeTokenTotals(
        input=traffic.input_tokens,
        output=traffic.output_tokens,
        reasoning=traffic.reasoning_tokens,
    )


def unfinished_items(selected: int | None, *, kept: int, drawn: int, finished: int) -> int:
    """Items a run was to finish and did not: of the dataset's (or its shard's) when their
    number is known, else of those drawn from a stream (one stopped early has more, uncounted,
    and its status says it was interrupted).

    >>> unfinished_items(10, kept=3, drawn=5, finished=7)
    3
    >>> unfinished_items(None, kept=0, drawn=5, finished=4)
    1
    """
    expected = selected if selected is not None else kept + drawn
    return max(expected - finished, 0)


def final_status(ending: RunStatus, unfinished: int) -> RunStatus:
    """A run that ended without a stop or a failure but left items unfinished (cancelled in
    flight) was interrupted, not completed.

    >>> final_status("completed", 2), final_status("aborted", 2)
    ('interrupted', 'aborted')
    """
    return "interrupted" if ending == "completed" and unfinished else ending


def _earlier_traffic(contents: JournalContents, previous: Manifest | None) -> PartTraffic:
    """What the earlier parts of a run sent, met and took: their journal's traffic lines, or
    for a journal without any (written before they were), the last manifest's figures."""
    if contents.parts or previous is None:
        return PartTraffic.total(contents.parts.values())
    judge, tokens = previous.judge, previous.tokens
    return PartTraffic(
        elapsed_s=previous.duration_s or 0.0,
        requests=judge.requests if judge else 0,
        retries=judge.retries if judge else 0,
        throttled_429=judge.throttled_429 if judge else 0,
        input_tokens=tokens.input if tokens else 0,
        output_tokens=tokens.output if tokens else 0,
        reasoning_tokens=tokens.reasoning if tokens else 0,
        cache_hits=judge.cache.hits if judge else 0,
        cache_stored=judge.cache.stored if judge else 0,
    )


def recorded_shard_rule(run_dir: Path) -> ShardRule | None:
    """What the sharded run in ``run_dir`` split its items by, so that its resume draws the same
    items (``None``: no shard recorded, or no manifest to read, which the resume's own checks
    report)."""
    try:
        shard = read_manifest(run_dir).shard
    except InputError:
        return None
    return shard.by if shard is not None else None


def _previous(run_dir: Path, plan: RunPlan) -> Manifest:
    """The manifest of the run to resume, checked to be the same run as the one planned."""
    try:
        previous = read_manifest(run_dir)
    except InputError as error:
        raise ConfigError(f"resume: {error}") from None
    if previous.schema_version != MANIFEST_SCHEMA_VERSION:
        raise ConfigError(
            f"resume: {run_dir} was written by another version of summeval_runner (run "
            f"directory schema {previous.schema_version}, this version writes "
            f"{MANIFEST_SCHEMA_VERSION}); resume it with the version that started it"
        )
    differences = config_differences(previous.config, redact(plan.config))
    differences += setup_differences(previous.setup, redact(plan.setup))
    if differences:
        raise ConfigError(
            "resume: the config differs from the run being resumed, so its items would not be "
            "comparable: " + "; ".join(differences[:5])
        )
    before = f"{previous.shard.index}/{previous.shard.count}" if previous.shard else None
    now = str(plan.options.shard) if plan.options.shard else None
    if before != now:
        raise ConfigError(
            f"resume: the run being resumed is shard {before or 'none (all items)'}, now "
            f"shard={now or 'null'}; resume it with the same shard"
        )
    sha_before = previous.dataset.sha256 if previous.dataset else None
    sha_now = plan.dataset.sha256 if plan.dataset else None
    if sha_before is None:
        raise ConfigError(
            f"resume: the run in {run_dir} read its items from a stream, whose content was not "
            "fingerprinted, so no data can be shown to be the same: run it again in a new "
            "directory"
        )
    if sha_before != sha_now:
        path = plan.dataset.path if plan.dataset else None
        what = f"the dataset {path}" if path else "the data"
        raise ConfigError(
            f"resume: {what} changed since the run began "
            f"(sha256 {str(sha_before)[:12]}..., now {str(sha_now)[:12]}...)"
        )
    return previous


def _check_no_batch_out(run_dir: Path, batches: tuple[BatchRecord, ...]) -> None:
    """An interactive resume of a run with batches still out would send their requests again
    and pay twice: refused, before anything is written."""
    ended = {line.id for line in batches if line.state == "ended"}
    out = [line.id for line in batches if line.state == "submitted" and line.id not in ended]
    if out:
        raise ConfigError(
            f"resume: the run in {run_dir} has {len(out)} batch(es) out at its judge's Batch "
            f"API ({', '.join(out[:3])}{', ...' if len(out) > 3 else ''}), paid for and not yet "
            "read; resume it with runner.mode=batch, which reads them (an interactive resume "
            "would send their requests again)"
        )


def _package_version() -> str:
    return version("summeval_runner")


def peak_rss_mb() -> float | None:
    """The process's peak resident memory so far, in MB (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux counts kilobytes, macOS bytes.
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)
