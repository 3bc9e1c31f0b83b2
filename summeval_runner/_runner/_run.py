"""``run_evals`` (SPEC §2): run a target over items, score each output, call hooks, aggregate."""

from __future__ import annotations

import asyncio
import inspect
import logging
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeAlias, runtime_checkable

from summeval_runner._errors import ConfigError, InputError, JudgeAuthError
from summeval_runner._io._datasets import IdAllocator, Item
from summeval_runner._runner._progress import ProgressReporter
from summeval_runner._scorers._result import ErrorInfo, FailedStep, Status, number_of, status_of

logger = logging.getLogger("summeval_runner")


@runtime_checkable
class Scorer(Protocol):
    """What ``run_evals`` needs of a scorer: an ``id`` and an async ``run(input=, output=)``."""

    @property
    def id(self) -> str: ...

    def run(self, *, input: Any, output: Any) -> Awaitable[Any]: ...


@dataclass(frozen=True)
class ItemResult:
    """One item's outcome: what the target produced and what each scorer made of it.

    ``results`` maps each scorer's id to its result, or to an ``ErrorInfo`` when the scorer
    raised. ``error`` is the item's first failure: the target's, else a scorer's.
    """

    item_id: str
    input: Any
    output: Any
    metadata: Mapping[str, Any]
    results: Mapping[str, Any]
    error: ErrorInfo | None
    target_latency_s: float | None

    @property
    def status(self) -> Status:
        """``error`` if anything failed, else ``unscorable`` if a scorer said so, else scored."""
        statuses = {status_of(result) for result in self.results.values()}
        if self.error is not None or "error" in statuses:
            return "error"
        return "unscorable" if "unscorable" in statuses else "scored"


Hook: TypeAlias = Callable[[ItemResult], Any]


@dataclass(frozen=True)
class RunCounts:
    total: int
    scored: int
    unscorable: int
    errors: int


@dataclass(frozen=True)
class EvalRunResult:
    """The mean score per scorer over its scored items, item counts, and each item's result."""

    means: Mapping[str, float | None]
    counts: RunCounts
    items: tuple[ItemResult, ...]
    hook_errors: int
    # Items not finished because the run was told to stop (``stop``); they have no result.
    unfinished: int = 0


def scored_number(result: Any) -> float | None:
    """A scored result's number; ``None`` for an unscorable or failed one."""
    return number_of(result) if status_of(result) == "scored" else None


def _first_failure(results: Mapping[str, Any]) -> ErrorInfo | None:
    for result in results.values():
        if isinstance(result, ErrorInfo):
            return result
        error = getattr(result, "error", None)
        if status_of(result) == "error" and isinstance(error, ErrorInfo):
            return error
    return None


def _error(error: BaseException, step: FailedStep | None) -> ErrorInfo:
    return ErrorInfo(type=type(error).__name__, message=str(error) or repr(error), step=step)


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
    if not has_target and item.output is None:
        raise InputError(f"{where}: no 'output', and no target to produce one")
    return item


def _as_items(data: Iterable[Mapping[str, Any] | Item], has_target: bool) -> Iterable[Item]:
    """A sequence is checked whole before any work; other iterables item by item as drawn."""
    ids = IdAllocator()
    if isinstance(data, Sequence):
        return [_as_item(raw, index, ids, has_target) for index, raw in enumerate(data)]
    return (_as_item(raw, index, ids, has_target) for index, raw in enumerate(data))


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
        max_items_in_flight: int,
        max_target_calls_in_flight: int,
        reporter: ProgressReporter | None,
        item_timeout_s: float | None,
        keep_results: bool,
    ) -> None:
        self.scorers = scorers
        self.keep_results = keep_results
        self.item_timeout_s = item_timeout_s
        self.ids = ids
        self.target = target
        self.hooks = hooks
        self.reporter = reporter
        self.item_slots = asyncio.Semaphore(max_items_in_flight)
        self.target_slots = asyncio.Semaphore(max_target_calls_in_flight)
        # Finished items' results, when kept; counts and score sums always.
        self.done: list[tuple[int, ItemResult]] = []
        self.finished = 0
        self.drawn = 0
        self.statuses = {"scored": 0, "unscorable": 0, "error": 0}
        # Scored values per scorer, for the means (floats only: a few MB for 100,000 items).
        self.scores: dict[str, list[float]] = {scorer_id: [] for scorer_id in ids}
        self.hook_errors = 0
        self.fatal: list[JudgeAuthError] = []

    async def run(self, items: Iterable[Item], stop: asyncio.Event | None, grace_s: float) -> None:
        """Launch items as slots free up (never all at once), then wait for those in flight.

        When ``stop`` is set, no further item starts; those in flight get ``grace_s`` seconds
        to finish and are then cancelled (they stay unfinished, with no result).
        """
        tasks: set[asyncio.Task[None]] = set()
        watcher = asyncio.create_task(self._cancel_after_stop(stop, grace_s, tasks))
        try:
            # Items are drawn only as slots free up: an iterator (a dataset read as it goes) is
            # never read ahead of the work, so memory stays flat however long it is.
            try:
                for position, item in enumerate(items):
                    await self.item_slots.acquire()
                    if self.fatal or (stop is not None and stop.is_set()):
                        self.item_slots.release()
                        break
                    self.drawn += 1
                    task = asyncio.create_task(self.process(position, item))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            except Exception:
                # Drawing the next item failed (a bad row): those started finish (and reach
                # the hooks) before the error is raised.
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            watcher.cancel()
            if self.reporter is not None:
                self.reporter.close()

    @staticmethod
    async def _cancel_after_stop(
        stop: asyncio.Event | None, grace_s: float, tasks: set[asyncio.Task[None]]
    ) -> None:
        if stop is None:
            return
        await stop.wait()
        await asyncio.sleep(grace_s)
        for task in list(tasks):
            task.cancel()

    async def process(self, position: int, item: Item) -> None:
        try:
            if self.item_timeout_s is None:
                result = await self.evaluate(item)
            else:
                try:
                    result = await asyncio.wait_for(self.evaluate(item), self.item_timeout_s)
                except asyncio.TimeoutError:
                    result = self.timed_out(item)
        except JudgeAuthError as error:
            self.fatal.append(error)
            return
        finally:
            self.item_slots.release()
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

    def record(self, position: int, result: ItemResult) -> None:
        self.finished += 1
        self.statuses[result.status] += 1
        for scorer_id, scores in self.scores.items():
            score = scored_number(result.results.get(scorer_id))
            if score is not None:
                scores.append(score)
        if self.keep_results:
            self.done.append((position, result))

    def timed_out(self, item: Item) -> ItemResult:
        error = ErrorInfo(
            type="ItemTimeoutError",
            message=f"the item took longer than item_timeout_s ({self.item_timeout_s:g} s)",
        )
        return ItemResult(
            item_id=item.id,
            input=item.input,
            output=item.output,
            metadata=item.metadata,
            results=dict.fromkeys(self.ids, error),
            error=error,
            target_latency_s=None,
        )

    async def evaluate(self, item: Item) -> ItemResult:
        output, target_error, latency = item.output, None, None
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
                output, target_error = None, _error(error, "target")
            latency = time.perf_counter() - started
        results = {} if target_error else await self.score(item.input, output)
        return ItemResult(
            item_id=item.id,
            input=item.input,
            output=output,
            metadata=item.metadata,
            results=results,
            error=target_error or _first_failure(results),
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
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome  # cancellation and interrupts are not item failures
                outcome = _error(outcome, None)
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


async def run_evals(
    *,
    scorers: Sequence[Scorer],
    data: Iterable[Mapping[str, Any] | Item],
    target: Callable[[Any], Any] | None = None,
    on_item_complete: Hook | Sequence[Hook] | None = None,
    max_items_in_flight: int = 16,
    max_target_calls_in_flight: int | None = None,
    progress: bool = False,
    progress_details: Callable[[], str] | None = None,
    item_timeout_s: float | None = None,
    stop: asyncio.Event | None = None,
    shutdown_grace_s: float = 30.0,
    keep_results: bool = True,
    total: int | None = None,
) -> EvalRunResult:
    """Run ``target`` on each item's input (or take the item's ``output``), score it, report it.

    Items run concurrently, at most ``max_items_in_flight`` at once; target calls have their own
    bound. ``on_item_complete`` (one hook or several, sync or async) is called once per item with
    its ``ItemResult``, failed items included; a hook that raises is logged and counted, and the
    run goes on. One item's failure never stops the others; only a refused key or an exhausted
    quota (``JudgeAuthError``) stops the run, since every later call would fail the same way.

    ``item_timeout_s`` bounds one item's target call and scoring together; an item that takes
    longer ends in error (``ItemTimeoutError``). Setting ``stop`` (for example from a signal
    handler) starts no further item and gives those in flight ``shutdown_grace_s`` seconds to
    finish; the rest are counted in ``unfinished``. ``progress_details`` adds figures (the
    judge's request rate, retries, limits) to the progress display.

    ``data`` as a list (any sequence) is checked whole before any work. Any other iterable (a
    generator reading a large dataset) is drawn only as items start, so memory stays flat; an
    invalid item then raises ``InputError`` when it is reached, and ``total`` sizes the progress
    bar. ``keep_results=False`` keeps no ``ItemResult`` (``EvalRunResult.items`` is empty;
    means and counts are still computed): for runs whose hooks store each item as it completes.
    """
    ids = _scorer_ids(scorers)
    if max_items_in_flight < 1:
        raise ConfigError(f"max_items_in_flight must be >= 1, got {max_items_in_flight}")
    if item_timeout_s is not None and item_timeout_s <= 0:
        raise ConfigError(f"item_timeout_s must be > 0 or None, got {item_timeout_s}")
    items = _as_items(data, has_target=target is not None)
    if isinstance(items, list):
        total = len(items)
    if on_item_complete is None:
        hooks: list[Hook] = []
    elif callable(on_item_complete):
        hooks = [on_item_complete]
    else:
        hooks = list(on_item_complete)
    batch = _Batch(
        scorers=scorers,
        ids=ids,
        target=target,
        hooks=hooks,
        max_items_in_flight=max_items_in_flight,
        max_target_calls_in_flight=max_target_calls_in_flight or max_items_in_flight,
        reporter=ProgressReporter(total, details=progress_details) if progress else None,
        item_timeout_s=item_timeout_s,
        keep_results=keep_results,
    )
    await batch.run(items, stop, shutdown_grace_s)
    if batch.fatal:
        raise batch.fatal[0]
    ordered = tuple(result for _, result in sorted(batch.done, key=lambda pair: pair[0]))
    return EvalRunResult(
        means={
            scorer_id: statistics.fmean(scores) if scores else None
            for scorer_id, scores in batch.scores.items()
        },
        counts=RunCounts(
            total=batch.finished,
            scored=batch.statuses["scored"],
            unscorable=batch.statuses["unscorable"],
            errors=batch.statuses["error"],
        ),
        items=ordered,
        hook_errors=batch.hook_errors,
        unfinished=(total if total is not None else batch.drawn) - batch.finished,
    )


def run_evals_sync(**kwargs: Any) -> EvalRunResult:
    """``run_evals`` for callers without a running event loop."""
    return asyncio.run(run_evals(**kwargs))
