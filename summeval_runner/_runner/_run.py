"""``run_evals`` (SPEC §2): the engine. Run a target over items, score each output, call hooks,
aggregate; within the run's limits, and written to a run directory when asked.

Python callers and ``summeval-run`` reach the same code: the app only turns its config into
``RunOptions`` and the arguments below.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from summeval_runner._errors import ConfigError, InputError, JudgeAuthError
from summeval_runner._io._datasets import DatasetError, DatasetFile, IdAllocator, Item
from summeval_runner._io._manifest import DatasetInfo, JudgeTraffic, Manifest, RunStatus, scrub
from summeval_runner._io._shards import Shard
from summeval_runner._runner._judge_stack import JudgeStack
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._progress import ProgressReporter
from summeval_runner._runner._record import RunPlan, RunRecorder, unfinished_items
from summeval_runner._runner._setup import describe_setup
from summeval_runner._scorers._outcome import ItemResult, RunCounts, scored_number, status_of
from summeval_runner._scorers._result import ErrorInfo, FailedStep

logger = logging.getLogger("summeval_runner")


@runtime_checkable
class Scorer(Protocol):
    """What ``run_evals`` needs of a scorer: an ``id`` and an async ``run(input=, output=)``."""

    @property
    def id(self) -> str: ...

    def run(self, *, input: Any, output: Any) -> Awaitable[Any]: ...


Hook: TypeAlias = Callable[[ItemResult], Any]
RunResultStatus = Literal["completed", "interrupted"]


@dataclass(frozen=True)
class EvalRunResult:
    """What a run came to.

    ``means`` is each scorer's mean score over its scored items; ``counts`` the finished items
    (of a resumed run: every part); ``items`` each finished item's result in dataset order (this
    call's items only, and none with ``keep_results=False``). ``unfinished`` items were not
    finished because the run was told to stop; ``status`` is then ``interrupted``.
    ``judge_traffic`` counts the requests sent to the judges (retries included), the retries,
    the 429s and the cache's hits. For a run written to a directory, ``run_dir``, its
    ``manifest`` and its ``tables`` (name -> Parquet path).
    """

    means: Mapping[str, float | None]
    counts: RunCounts
    items: tuple[ItemResult, ...]
    hook_errors: int
    unfinished: int = 0
    status: RunResultStatus = "completed"
    max_error_rate: float = 0.0
    judge_traffic: JudgeTraffic = field(default_factory=JudgeTraffic)
    run_dir: Path | None = None
    manifest: Manifest | None = None
    tables: Mapping[str, Path] = field(default_factory=dict)

    @property
    def error_rate(self) -> float:
        return self.counts.error_rate

    @property
    def passed(self) -> bool:
        """What a CI gate on the run should check: the run finished every item, scored at
        least one, and had no more errors than ``max_error_rate`` allows."""
        return (
            self.status == "completed"
            and not self.unfinished
            and self.counts.scored > 0
            and self.error_rate <= self.max_error_rate
        )


def _declared_status(result: Any) -> Any:
    return result.get("status") if isinstance(result, Mapping) else getattr(result, "status", None)


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _error(error: BaseException, step: FailedStep | None) -> ErrorInfo:
    return ErrorInfo(type=type(error).__name__, message=str(error) or repr(error), step=step)


def _first_failure(results: Mapping[str, Any]) -> ErrorInfo | None:
    for result in results.values():
        if isinstance(result, ErrorInfo):
            return result
        error = getattr(result, "error", None)
        if status_of(result) == "error" and isinstance(error, ErrorInfo):
            return error
    return None


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
            raise InputError(
                f"{where}: {name!r} must be text or chat messages, got {_shown(value)}"
            )
    if not has_target and item.output is None:
        raise InputError(f"{where}: no 'output', and no target to produce one")
    return item


@dataclass(frozen=True)
class _Items:
    """The items a run draws, each with its dataset position, and what is known in advance."""

    draw: Callable[[], Iterator[tuple[int, Item]]]
    # Items the run is to finish (the shard's, when sharded); None when not known in advance.
    selected: int | None
    dataset: DatasetInfo | None


def _prepare(
    data: Iterable[Mapping[str, Any] | Item],
    has_target: bool,
    shard: Shard | None,
    total: int | None,
) -> _Items:
    """Check what can be checked before any work: a list or a dataset file whole, each row of
    a file read once to check it and again as items start; other iterables item by item."""

    def selected_of(items: Iterable[Item]) -> int:
        return sum(shard is None or shard.holds(item.id) for item in items)

    def chosen(entries: Iterator[tuple[int, Item]]) -> Iterator[tuple[int, Item]]:
        return ((p, item) for p, item in entries if shard is None or shard.holds(item.id))

    if isinstance(data, DatasetFile):
        count = selected = 0
        checked = IdAllocator()
        for position, raw in enumerate(data):
            item = _as_item(raw, position, checked, has_target)
            count += 1
            selected += shard is None or shard.holds(item.id)
        if not count:
            raise DatasetError(f"{data.path}: the dataset has no rows")
        info = DatasetInfo(path=str(data.path), items=count, sha256=data.sha256())

        def read_file() -> Iterator[tuple[int, Item]]:
            ids = IdAllocator()
            return chosen((p, _as_item(raw, p, ids, has_target)) for p, raw in enumerate(data))

        return _Items(read_file, selected, info)
    if isinstance(data, Sequence):
        ids = IdAllocator()
        items = [_as_item(raw, index, ids, has_target) for index, raw in enumerate(data)]
        info = DatasetInfo(items=len(items), sha256=_fingerprint(items))
        return _Items(lambda: chosen(enumerate(items)), selected_of(items), info)
    stream = iter(data)

    def read_stream() -> Iterator[tuple[int, Item]]:
        ids = IdAllocator()
        return chosen((p, _as_item(raw, p, ids, has_target)) for p, raw in enumerate(stream))

    return _Items(read_stream, total, None)


def _fingerprint(items: Sequence[Item]) -> str:
    """A SHA-256 of the items' ids, inputs and outputs: a resume of a run over a changed list is
    refused as one over a changed file is."""
    digest = hashlib.sha256()
    for item in items:
        entry = [item.id, item.input, item.output]
        digest.update(json.dumps(entry, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()


def _is_async_callable(target: Callable[..., Any]) -> bool:
    call = getattr(target, "__call__", None)  # noqa: B004 - instances with an async __call__
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(call)


async def _call_target(target: Callable[[Any], Any], input: Any) -> Any:
    if _is_async_callable(target):
        return await target(input)
    # A sync target may block (an HTTP call, a model): keep it off the event loop.
    output = await asyncio.to_thread(target, input)
    return await output if inspect.isawaitable(output) else output


class _Batch:
    """One call of ``run_evals``: its parts, its bounds, and what it has gathered so far."""

    def __init__(
        self,
        *,
        scorers: Sequence[Scorer],
        ids: list[str],
        target: Callable[[Any], Any] | None,
        hooks: list[Hook],
        options: RunOptions,
        reporter: ProgressReporter | None,
        recorder: RunRecorder | None,
        keep_results: bool,
    ) -> None:
        self.scorers = scorers
        self.ids = ids
        self.target = target
        self.hooks = hooks
        self.reporter = reporter
        self.recorder = recorder
        self.keep_results = keep_results
        self.item_timeout_s = options.item_timeout_s
        self.item_slots = asyncio.Semaphore(options.max_items_in_flight)
        self.target_slots = asyncio.Semaphore(options.max_target_calls_in_flight)
        # Finished items' results, when kept; counts and score sums always.
        self.done: list[tuple[int, ItemResult]] = []
        self.finished = 0
        self.drawn = 0
        self.statuses = {"scored": 0, "unscorable": 0, "error": 0}
        # Scored values per scorer, for the means (floats only: a few MB for 100,000 items).
        self.scores: dict[str, list[float]] = {scorer_id: [] for scorer_id in ids}
        self.hook_errors = 0
        # What stops the run at once: a refused key (every later call would fail the same way),
        # or a finished item that could not be recorded.
        self.fatal: list[BaseException] = []
        # Every item was drawn (the run was not stopped before the end of the data).
        self.exhausted = False
        # The grace period after a stop ran out and the items in flight were cancelled.
        self.cancelling = False

    @property
    def counts(self) -> RunCounts:
        return RunCounts(
            total=self.finished,
            scored=self.statuses["scored"],
            unscorable=self.statuses["unscorable"],
            errors=self.statuses["error"],
        )

    async def run(
        self, items: Iterator[tuple[int, Item]], stop: asyncio.Event | None, grace_s: float
    ) -> None:
        """Launch items as slots free up (never all at once), then wait for those in flight.

        When ``stop`` is set, no further item starts; those in flight get ``grace_s`` seconds
        to finish and are then cancelled (they stay unfinished, with no result). ``exhausted``
        says whether every item was drawn.
        """
        tasks: set[asyncio.Task[None]] = set()
        watcher = asyncio.create_task(self._cancel_after_stop(stop, grace_s, tasks))

        def done(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            # A task ends in an exception only for what is beyond one item's failure (an item
            # that could not be recorded is caught before): it stops the run, loudly.
            if not task.cancelled() and task.exception() is not None:
                self.fatal.append(task.exception())  # type: ignore[arg-type]

        try:
            # Items are drawn only as slots free up: an iterator (a dataset read as it goes) is
            # never read ahead of the work, so memory stays flat however long it is.
            try:
                for position, item in items:
                    await self.item_slots.acquire()
                    if self.fatal or (stop is not None and stop.is_set()):
                        self.item_slots.release()
                        break
                    self.drawn += 1
                    task = asyncio.create_task(self.process(position, item))
                    tasks.add(task)
                    task.add_done_callback(done)
                else:
                    self.exhausted = True
            except Exception:
                # Drawing the next item failed (a bad row): those started finish (and reach
                # the hooks) before the error is raised.
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            await asyncio.gather(*tasks, return_exceptions=True)
        except BaseException:
            # The run itself is cancelled or interrupted: its items stop with it, before the
            # run closes its judges; none may go on sending requests after it returns.
            self.cancelling = True
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            watcher.cancel()
            if self.reporter is not None:
                self.reporter.close()

    async def _cancel_after_stop(
        self, stop: asyncio.Event | None, grace_s: float, tasks: set[asyncio.Task[None]]
    ) -> None:
        if stop is None:
            return
        await stop.wait()
        await asyncio.sleep(grace_s)
        self.cancelling = True
        for task in list(tasks):
            task.cancel()

    def _cancel_requested(self) -> bool:
        """Whether the CancelledError in this item's task was asked for (the run's grace ran
        out, or the whole run is cancelled), rather than raised by a target or a scorer."""
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        return self.cancelling or (cancelling is not None and cancelling() > 0)

    async def process(self, position: int, item: Item) -> None:
        # The item holds its slot until its hooks are done: slow hooks slow the run down
        # instead of piling up finished items.
        try:
            try:
                result = await self.evaluate_in_time(item)
            except asyncio.CancelledError:
                if self._cancel_requested():
                    raise  # unfinished: the run stops it
                result = self.failed(
                    item,
                    ErrorInfo(
                        type="CancelledError",
                        message="the target or a scorer raised CancelledError, though the run "
                        "did not cancel the item",
                    ),
                )
            except JudgeAuthError as error:
                self.fatal.append(error)
                return
            if self.recorder is not None:
                try:
                    self.recorder.write(result, position)
                except Exception as error:
                    # An item that cannot be recorded is not finished: stop, and say so.
                    self.fatal.append(error)
                    return
            self.record(position, result)
            for hook in self.hooks:
                try:
                    returned = hook(result)
                    if inspect.isawaitable(returned):
                        await returned
                except Exception:
                    self.hook_errors += 1
                    logger.exception("on_item_complete hook %r failed on item %s", hook, item.id)
            if self.reporter is not None:
                first = result.results.get(self.ids[0])
                self.reporter.update(score=scored_number(first), error=result.status == "error")
        finally:
            self.item_slots.release()

    async def evaluate_in_time(self, item: Item) -> ItemResult:
        if self.item_timeout_s is None:
            return await self.evaluate(item)
        try:
            return await asyncio.wait_for(self.evaluate(item), self.item_timeout_s)
        except asyncio.TimeoutError:
            message = f"the item took longer than item_timeout_s ({self.item_timeout_s:g} s)"
            return self.failed(item, ErrorInfo(type="ItemTimeoutError", message=message))

    def record(self, position: int, result: ItemResult) -> None:
        self.finished += 1
        self.statuses[result.status] += 1
        for scorer_id, scores in self.scores.items():
            score = scored_number(result.results.get(scorer_id))
            if score is not None:
                scores.append(score)
        if self.keep_results:
            self.done.append((position, result))

    def failed(self, item: Item, error: ErrorInfo, **known: Any) -> ItemResult:
        """The result of an item that failed before its scorers could say: every scorer's
        result is the error, so every table has the item."""
        return ItemResult(
            item_id=item.id,
            input=item.input,
            output=known.get("output", item.output),
            metadata=item.metadata,
            results=dict.fromkeys(self.ids, error),
            error=error,
            target_latency_s=known.get("latency"),
        )

    async def evaluate(self, item: Item) -> ItemResult:
        output, latency = item.output, None
        if self.target is not None:
            started = time.perf_counter()
            try:
                async with self.target_slots:
                    output = await _call_target(self.target, item.input)
                if not isinstance(output, str | list | Mapping):
                    raise InputError(
                        f"the target must return a string or messages, got {type(output).__name__}"
                    )
            except JudgeAuthError:
                raise  # an agent behind a refused key fails every item the same way
            except Exception as error:
                latency = time.perf_counter() - started
                return self.failed(item, _error(error, "target"), output=None, latency=latency)
            latency = time.perf_counter() - started
        results = await self.score(item.input, output)
        return ItemResult(
            item_id=item.id,
            input=item.input,
            output=output,
            metadata=item.metadata,
            results=results,
            error=_first_failure(results),
            target_latency_s=latency,
        )

    async def score(self, input: Any, output: Any) -> dict[str, Any]:
        """Every scorer's result, or the ErrorInfo of the scorer that raised."""
        outcomes = await asyncio.gather(
            *(scorer.run(input=input, output=output) for scorer in self.scorers),
            return_exceptions=True,
        )
        results: dict[str, Any] = {}
        for scorer_id, outcome in zip(self.ids, outcomes, strict=True):
            if isinstance(outcome, JudgeAuthError):
                raise outcome
            # A scorer that raised CancelledError on its own (a cancellation of the item would
            # have been raised here, not returned) failed this item like any other error.
            if isinstance(outcome, Exception | asyncio.CancelledError):
                outcome = _error(outcome, None)
            elif isinstance(outcome, BaseException):
                raise outcome  # an interrupt (KeyboardInterrupt, SystemExit) is not an item's
            elif status_of(outcome) == "error" and _declared_status(outcome) != "error":
                outcome = ErrorInfo(
                    type="InvalidScorerResult",
                    message=f"scorer {scorer_id!r} returned {_shown(outcome)}, which is not a "
                    "score: give a number, a bool, or an object or mapping with a 'score'",
                )
            results[scorer_id] = outcome
        return results


def _scorer_ids(scorers: Sequence[Scorer]) -> list[str]:
    if not scorers:
        raise ConfigError("scorers must hold at least one scorer, got none")
    ids: list[str] = []
    for scorer in scorers:
        scorer_id = getattr(scorer, "id", None)
        if not isinstance(scorer_id, str) or not callable(getattr(scorer, "run", None)):
            raise ConfigError(f"a scorer needs a string id and an async run(), got {scorer!r}")
        ids.append(scorer_id)
    if len(set(ids)) != len(ids):
        raise ConfigError(f"scorer ids must be unique, got {ids}")
    return ids


def _hooks(on_item_complete: Hook | Sequence[Hook] | None) -> list[Hook]:
    if on_item_complete is None:
        return []
    if callable(on_item_complete):
        return [on_item_complete]
    return list(on_item_complete)


async def run_evals(
    *,
    scorers: Sequence[Scorer],
    data: Iterable[Mapping[str, Any] | Item],
    target: Callable[[Any], Any] | None = None,
    on_item_complete: Hook | Sequence[Hook] | None = None,
    options: RunOptions | Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    resume: bool = False,
    config: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    stop: asyncio.Event | None = None,
    keep_results: bool = True,
    total: int | None = None,
    **option_values: Any,
) -> EvalRunResult:
    """Run ``target`` on each item's input (or take the item's ``output``), score it, report it.

    **Limits.** ``options`` (a ``RunOptions`` or a mapping) and keyword arguments with the same
    names (``max_items_in_flight`` or ``concurrency``, ``max_judge_requests_in_flight``,
    ``judge_rpm``, ``retry``, ``request_timeout_s``, ``item_timeout_s``, ``cache``, ...) set
    how the run goes; keywords win. Scorers that take a judge (the summarization scorer) get it
    behind this run's bound on requests in flight, its request rate, its retries (with the
    server's ``Retry-After``, slowing down on 429s) and its response cache. The run closes what
    it opens (its copies of the judges, their connections, the cache).

    **Items.** Items run concurrently, at most ``max_items_in_flight`` at once; target calls have
    their own bound. ``data`` as a list (any sequence) or a ``DatasetFile`` is checked whole
    before any work; any other iterable (a generator) is drawn only as items start, so memory
    stays flat, an invalid item raises ``InputError`` when it is reached, and ``total`` sizes the
    progress bar. ``keep_results=False`` keeps no ``ItemResult`` (means and counts are still
    computed): for runs that store each item as it completes.

    **Hooks and failures.** ``on_item_complete`` (one hook or several, sync or async) is called
    once per item with its ``ItemResult``, failed items included; a hook that raises is logged
    and counted, and the run goes on. One item's failure never stops the others; only a refused
    key or an exhausted quota (``JudgeAuthError``) stops the run, since every later call would
    fail the same way: it is raised once the run's state is written. ``item_timeout_s`` bounds
    one item; a slower one ends in error (``ItemTimeoutError``). Setting ``stop`` starts no
    further item and gives those in flight ``shutdown_grace_s`` seconds to finish; the rest are
    counted in ``unfinished``.

    **A run directory.** With ``output_dir``, each finished item is appended to its journal at
    once, and at the end the journal becomes Parquet tables (items, alignment, coverage,
    aggregates) and a manifest: what decides the results (``setup``: the target, each scorer's
    judge and settings, how a dataset file is read), and the caller's ``config`` and
    ``overrides`` as given. ``resume=True`` continues the run in ``output_dir``: items finished
    there are kept, those that ended in error are tried again, and the run is refused
    (``ConfigError``) if its setup, its config's dataset, target, model or scorer sections, its
    data or its shard differ.
    """
    opts = RunOptions.of(options, option_values)
    ids = _scorer_ids(scorers)
    hooks = _hooks(on_item_complete)
    if resume and output_dir is None:
        raise ConfigError("resume=True needs the output_dir of the run to continue")
    if resume and not isinstance(data, DatasetFile | Sequence):
        # A stream cannot be checked against the run's data before items are drawn, so a
        # changed one would mix two datasets in one run without a word.
        raise ConfigError(
            "resume=True needs data whose content can be checked against the run's: a list of "
            f"items or a DatasetFile, got {type(data).__name__}"
        )
    items = _prepare(data, target is not None, opts.shard, total)
    judges = JudgeStack(opts)
    recorder: RunRecorder | None = None
    try:
        # Opens the response cache: a cache that cannot be opened fails before any write.
        bound = judges.bind(scorers)
        if output_dir is not None:
            plan = RunPlan(
                options=opts,
                setup=describe_setup(scorers, target, data),
                config=config or {},
                overrides=tuple(overrides),
                dataset=items.dataset,
                selected=items.selected,
            )
            recorder = RunRecorder.open(Path(output_dir), resume=resume, plan=plan)
        kept = recorder.kept if recorder is not None else frozenset()
        to_do = None if items.selected is None else items.selected - len(kept)
        batch = _Batch(
            scorers=bound,
            ids=ids,
            target=target,
            hooks=hooks,
            options=opts,
            reporter=(
                ProgressReporter(
                    to_do if to_do is not None else total,
                    details=judges.describe if judges else None,
                )
                if opts.progress
                else None
            ),
            recorder=recorder,
            keep_results=keep_results,
        )
    except BaseException:
        try:
            await judges.aclose()
        finally:
            if recorder is not None:
                recorder.close()  # its manifest says running: a resume starts it afresh
        raise
    todo = ((p, item) for p, item in items.draw() if item.id not in kept)
    stopped: BaseException | None = None
    recorded: tuple[Manifest, dict[str, Path]] | None = None
    try:
        await batch.run(todo, stop, opts.shutdown_grace_s)
    except BaseException as error:  # an interrupt, a cancellation, a bad row: still recorded
        stopped = error
        raise
    finally:
        try:
            await judges.aclose()
        finally:
            if recorder is not None:
                status, because = _ending(batch, stopped)
                recorded = recorder.finish(
                    status=status,
                    selected=items.selected,
                    drawn=batch.drawn,
                    judges=judges,
                    hook_errors=batch.hook_errors,
                    aborted_because=because,
                )
    if batch.fatal:
        raise batch.fatal[0]
    if recorded is not None:
        manifest, tables = recorded
        assert manifest.counts is not None
        return EvalRunResult(
            means=manifest.means,
            counts=manifest.counts,
            items=_ordered(batch),
            hook_errors=batch.hook_errors,
            unfinished=manifest.unfinished or 0,
            status="interrupted" if manifest.status == "interrupted" else "completed",
            max_error_rate=opts.max_error_rate,
            judge_traffic=manifest.judge or JudgeTraffic(),
            run_dir=Path(output_dir) if output_dir is not None else None,
            manifest=manifest,
            tables=tables,
        )
    unfinished = unfinished_items(
        items.selected, kept=0, drawn=batch.drawn, finished=batch.finished
    )
    ending, _ = _ending(batch, stopped)
    return EvalRunResult(
        means={
            scorer_id: statistics.fmean(scores) if scores else None
            for scorer_id, scores in batch.scores.items()
        },
        counts=batch.counts,
        items=_ordered(batch),
        hook_errors=batch.hook_errors,
        unfinished=unfinished,
        status="completed" if ending == "completed" and not unfinished else "interrupted",
        max_error_rate=opts.max_error_rate,
        judge_traffic=judges.traffic(),
    )


def _ordered(batch: _Batch) -> tuple[ItemResult, ...]:
    return tuple(result for _, result in sorted(batch.done, key=lambda pair: pair[0]))


def _ending(batch: _Batch, stopped: BaseException | None) -> tuple[RunStatus, str | None]:
    """How a run ended, and what cut it short: ``aborted`` (a refused key, an item that could
    not be recorded, a bad row), ``interrupted`` (stopped before every item was drawn, or
    cancelled), else ``completed`` (which becomes ``interrupted`` if items were left
    unfinished: the one who counts them decides)."""
    fatal = batch.fatal[0] if batch.fatal else None
    if isinstance(fatal, JudgeAuthError):
        return "aborted", scrub(str(fatal))
    if fatal is not None:
        return "aborted", scrub(f"a finished item could not be recorded: {fatal!r}")
    if isinstance(stopped, Exception):
        return "aborted", scrub(f"{type(stopped).__name__}: {stopped}")
    if stopped is not None or not batch.exhausted:
        return "interrupted", None
    return "completed", None


def run_evals_sync(**kwargs: Any) -> EvalRunResult:
    """``run_evals`` for callers without a running event loop."""
    return asyncio.run(run_evals(**kwargs))
