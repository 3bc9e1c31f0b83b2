"""``run_evals`` (SPEC §2): the engine. Run a target over items, score each output, call hooks,
aggregate; within the run's limits, and written to a run directory when asked.

Python callers and ``summeval-run`` reach the same code: the app only turns its config into
``RunOptions`` and the arguments below.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from summeval_runner._errors import (
    AgentAuthError,
    AgentUnreachableError,
    ConfigError,
    JudgeAuthError,
    JudgeUnreachableError,
    RunRecordError,
)
from summeval_runner._inputs._datasets import DatasetFile, Item
from summeval_runner._judges._panel import judges_of
from summeval_runner._judges._protocol import agent_pricing, judge_price
from summeval_runner._rundir._journal import BatchRecord, IdSet
from summeval_runner._rundir._manifest import (
    JudgeNoise,
    JudgeTraffic,
    Manifest,
    PanelDisagreement,
    RunCost,
    RunStatus,
    TokenTotals,
)
from summeval_runner._runner._fanout import Batch, Hook
from summeval_runner._runner._items import prepare, shard_rule
from summeval_runner._runner._judge_stack import JudgeStack
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._progress import ProgressReporter
from summeval_runner._runner._record import (
    RunPlan,
    RunRecorder,
    final_status,
    recorded_shard_rule,
    unfinished_items,
)
from summeval_runner._runner._setup import describe_setup
from summeval_runner._runner._spend import Spend
from summeval_runner._runner._sync import sync_twin
from summeval_runner._scorers._outcome import ItemResult, RunCounts, gate_failure
from summeval_runner._secrets import scrub

logger = logging.getLogger("summeval_runner")


@runtime_checkable
class Scorer(Protocol):
    """What ``run_evals`` needs of a scorer: an ``id`` and an async ``run(input=, output=)``."""

    @property
    def id(self) -> str: ...

    def run(self, *, input: Any, output: Any) -> Awaitable[Any]: ...


RunResultStatus = Literal["completed", "interrupted"]


@dataclass(frozen=True)
class EvalRunResult:
    """What a run came to.

    ``means`` is each scorer's mean score over its scored items; ``counts`` the finished items
    (of a resumed run: every part); ``items`` each finished item's result in dataset order (this
    call's items only, and none with ``keep_results=False``). ``unfinished`` items were not
    finished because the run was told to stop; ``status`` is then ``interrupted``.
    ``judge_traffic`` counts the requests sent to the judges (retries included), the retries,
    the 429s and the cache's hits. ``judge_noise``, with several trials of each item, how much
    they disagreed; ``judge_panel``, with a panel of judges, how much its judges disagreed. For a
    run written to a directory, ``run_dir``, its ``manifest`` and its
    ``tables`` (name -> Parquet path). ``budget_exhausted`` when a budget stopped the run,
    ``budget_limit`` naming it (``max_cost`` or ``max_tokens``).
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
    judge_noise: JudgeNoise | None = None
    judge_panel: PanelDisagreement | None = None
    cost: RunCost = field(default_factory=RunCost)
    target_tokens: TokenTotals = field(default_factory=TokenTotals)
    budget_exhausted: bool = False
    stopped_because: str | None = None
    # The budget that stopped the run (``max_cost`` or ``max_tokens``), when one did.
    budget_limit: str | None = None

    @property
    def error_rate(self) -> float:
        return self.counts.error_rate

    @property
    def passed(self) -> bool:
        """What a CI gate on the run should check: the run finished every item, scored at
        least one, and had no more errors than ``max_error_rate`` allows (the rule
        ``summeval-compare --fail-if-drop`` applies to the runs it compares)."""
        failure = gate_failure(self.status, self.unfinished, self.counts, self.max_error_rate)
        return failure is None


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
    computed): for runs that store each item as it completes. Judge requests in flight follow
    the items unless capped (``RunOptions.judge_requests_bound``).

    **Hooks and failures.** ``on_item_complete`` (one hook or several, sync or async) is called
    once per item with its ``ItemResult``, failed items included; a hook that raises is logged
    and counted, and the run goes on. One item's failure never stops the others; only a refused
    key or an exhausted quota (``JudgeAuthError``, or the agent's model's ``AgentAuthError``)
    stops the run, since every later call would fail the same way: it is raised once the run's
    state is written. ``item_timeout_s`` bounds one item's own work (its agent and judge calls
    in progress, not its waits for slots, pacers or holds: ``_item_time``); an item past it ends
    in error (``ItemTimeoutError``). Setting ``stop`` starts no
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

    **Shards.** ``shard="I/N"`` scores shard I of N of the items: split by each item's source
    when a summarization scorer shares questions per source (so that all the items of a source
    are in one shard, asked one set of questions), else by item id; a resumed shard keeps the
    split it was made with (``shard_rule``).
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
    _check_budget(opts, scorers, target)
    # A resumed shard keeps the split it was made with (a run recorded before splits by source
    # were made was split by id), so that it draws the same items.
    recorded_by = (
        recorded_shard_rule(Path(output_dir))
        if resume and output_dir is not None and opts.shard is not None
        else None
    )
    by = shard_rule(scorers, target is not None, opts.shard, recorded_by)
    items = prepare(data, scorers, target is not None, opts.shard, total, by or "id")
    spend = Spend(max_cost=opts.max_cost, max_tokens=opts.max_tokens, batch=opts.mode == "batch")
    judges = JudgeStack(opts, spend)
    recorder: RunRecorder | None = None

    def count(counts: Mapping[str, float]) -> None:
        # Every request, reply and agent call: the spend (and the budget) hear of it, and a
        # recorded run journals it, as it happens.
        spend.observe(counts)
        if recorder is not None:
            failed = recorder.failure
            recorder.count_traffic(counts)
            if failed is None and recorder.failure is not None and _unsent(counts, opts):
                # The line counting this request, about to go out, was the write that failed:
                # it is not sent, and not counted. (A batch's lines are counted once it is
                # made: they are out.)
                undo = {name: -amount for name, amount in counts.items()}
                spend.observe(undo)
                recorder.note_traffic(undo)
                raise asyncio.CancelledError(f"the run stopped: {recorder.failure}")

    judges.on_traffic = count
    try:
        # Opens the response cache: a cache that cannot be opened fails before any write.
        bound = judges.bind(scorers)
        agent = judges.bind_target(target)
        if output_dir is not None:
            plan = RunPlan(
                options=opts,
                setup=describe_setup(scorers, target, data, opts.trials),
                config=config or {},
                overrides=tuple(overrides),
                dataset=items.dataset,
                selected=items.selected,
                shard_by=by or "id",
            )
            recorder = RunRecorder.open(Path(output_dir), resume=resume, plan=plan)
            spend.add_earlier(recorder.traffic())
            judges.on_questions = recorder.write_questions
            judges.seed_questions(recorder.recorded_questions)
            journal = recorder

            def journal_batch(record: BatchRecord, counts: Mapping[str, float]) -> None:
                # What a batch counts is journaled in its own line: never one without the other.
                spend.observe(counts)
                journal.write_batch(record, counts)

            judges.on_batch = journal_batch
            judges.seed_batches(
                recorder.recorded_batches,
                run_id=recorder.manifest.run_id,
                since=recorder.manifest.started_at.timestamp() - 60,
                resumed=resume,
            )
        # A price not given is a cost not known, whether or not a call is paid for.
        unpriced = _unpriced(scorers, target)
        spend.observe(unpriced)
        if recorder is not None:
            recorder.note_traffic(unpriced)
        kept = recorder.kept if recorder is not None else IdSet(())
        to_do = None if items.selected is None else items.selected - len(kept)
        batch = Batch(
            scorers=bound,
            ids=ids,
            target=agent,
            hooks=hooks,
            options=opts,
            reporter=(
                ProgressReporter(
                    to_do if to_do is not None else total,
                    details=lambda: "; ".join(
                        part for part in (judges.describe(), spend.describe()) if part
                    ),
                )
                if opts.progress
                else None
            ),
            recorder=recorder,
            keep_results=keep_results,
            spend=spend,
            count=count,
            idle=judges.idle,
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
    if batch.reporter is not None:
        batch.reporter.start()
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
                try:
                    recorded = recorder.finish(
                        status=status,
                        selected=items.selected,
                        drawn=batch.drawn,
                        judges=judges,
                        hook_errors=batch.hook_errors,
                        stopped_because=because,
                    )
                except RunRecordError as error:
                    first = batch.fatal[0] if batch.fatal else None
                    # The write that failed first is the cause a user must fix; the tables
                    # that could not be written after it say the same thing again.
                    if isinstance(first, RunRecordError):
                        raise _with_manifest(first, recorder) from error
                    _with_manifest(error, recorder)
                    raise
        _log_ending(batch, recorded, stopped, items.selected, judges, spend)
    if batch.fatal:
        first = batch.fatal[0]
        raise _with_manifest(first, recorder) if isinstance(first, RunRecordError) else first
    result = _result(batch, recorded, items.selected, stopped, opts, judges, output_dir, spend)
    _warn_of_losses(result)
    return result


def _unsent(counts: Mapping[str, float], opts: RunOptions) -> bool:
    """Whether ``counts`` are those of an interactive judge request not yet sent (the runner
    counts each as it is about to go out)."""
    return bool(counts.get("requests")) and opts.mode != "batch"


def _with_manifest(error: RunRecordError, recorder: RunRecorder | None) -> RunRecordError:
    """``error`` with the manifest the failed run ended with, and whether it could be written
    (where it could not, the caller has it to show)."""
    if recorder is not None and recorder.failed_manifest is not None:
        error.manifest = recorder.failed_manifest
        error.manifest_written = recorder.failed_manifest_written
    return error


def _result(
    batch: Batch,
    recorded: tuple[Manifest, dict[str, Path]] | None,
    selected: int | None,
    stopped: BaseException | None,
    opts: RunOptions,
    judges: JudgeStack,
    output_dir: str | Path | None,
    spend: Spend,
) -> EvalRunResult:
    budget_exhausted = batch.budget_stop is not None
    budget_limit = batch.budget_stop.limit if batch.budget_stop is not None else None
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
            judge_noise=manifest.judge_noise,
            judge_panel=manifest.judge_panel,
            cost=manifest.cost or RunCost(),
            target_tokens=manifest.target_tokens or TokenTotals(),
            budget_exhausted=budget_exhausted,
            stopped_because=manifest.stopped_because,
            budget_limit=budget_limit,
        )
    unfinished = unfinished_items(selected, kept=0, drawn=batch.drawn, finished=batch.finished)
    ending, because = _ending(batch, stopped)
    status = final_status(ending, unfinished)
    spent = spend.traffic()
    return EvalRunResult(
        means={scorer_id: mean.mean for scorer_id, mean in batch.means.items()},
        counts=batch.counts,
        items=_ordered(batch),
        hook_errors=batch.hook_errors,
        unfinished=unfinished,
        status="interrupted" if status == "interrupted" else "completed",
        max_error_rate=opts.max_error_rate,
        judge_traffic=judges.traffic(),
        judge_noise=batch.noise.result(opts.trials) if batch.noise is not None else None,
        judge_panel=batch.noise.panel() if batch.noise is not None else None,
        cost=spent.cost(),
        target_tokens=TokenTotals(
            input=spent.target_input_tokens, output=spent.target_output_tokens
        ),
        budget_exhausted=budget_exhausted,
        stopped_because=because,
        budget_limit=budget_limit,
    )


def _warn_of_losses(result: EvalRunResult) -> None:
    """Say what a run did not do, even when nobody reads the tables: items it left unfinished,
    and hooks that raised (each was logged with its traceback as it happened)."""
    if result.unfinished:
        logger.warning(
            "run_evals: %d items unfinished (%s)%s",
            result.unfinished,
            result.status,
            f"; resume the run in {result.run_dir}" if result.run_dir is not None else "",
        )
    if result.hook_errors:
        logger.warning(
            "run_evals: %d on_item_complete hook calls raised; the run went on without them",
            result.hook_errors,
        )


def _log_ending(
    batch: Batch,
    recorded: tuple[Manifest, dict[str, Path]] | None,
    stopped: BaseException | None,
    selected: int | None,
    judges: JudgeStack,
    spend: Spend,
) -> None:
    """The run's final counts in the log (``summeval-run.log``): a recorded run's as its
    manifest has them (every part of a resumed run), another's as this call counted them."""
    if recorded is not None:
        manifest = recorded[0]
        status, counts, unfinished = manifest.status, manifest.counts, manifest.unfinished
        traffic, hook_errors = manifest.judge or JudgeTraffic(), manifest.hook_errors
    else:
        ending, _ = _ending(batch, stopped)
        unfinished = unfinished_items(selected, kept=0, drawn=batch.drawn, finished=batch.finished)
        status, counts, traffic = final_status(ending, unfinished), batch.counts, judges.traffic()
        hook_errors = batch.hook_errors
    counts = counts or RunCounts()
    logger.info(
        "run_evals: %s: %d items: %d scored, %d blank summaries (scored 0), %d unscorable, "
        "%d errors; %d unfinished; %d hook "
        "errors; judge requests %d (retries %d, 429s %d), cache hits %d; agent cache hits %d",
        status,
        counts.total,
        counts.scored,
        counts.blank_summaries,
        counts.unscorable,
        counts.errors,
        unfinished or 0,
        hook_errors,
        traffic.requests,
        traffic.retries,
        traffic.throttled_429,
        traffic.cache.hits,
        spend.traffic().target_cache_hits,
    )


def _ordered(batch: Batch) -> tuple[ItemResult, ...]:
    return tuple(result for _, result in sorted(batch.done, key=lambda pair: pair[0]))


def _ending(batch: Batch, stopped: BaseException | None) -> tuple[RunStatus, str | None]:
    """How a run ended, and what cut it short: ``aborted`` (a refused key, a bad row),
    ``failed`` (an item that could not be recorded), ``interrupted`` (the judge unreachable,
    stopped before every item was drawn, or cancelled), else ``completed`` (which becomes
    ``interrupted`` if items were left unfinished: the one who counts them decides)."""
    fatal = batch.fatal[0] if batch.fatal else None
    if fatal is None and batch.budget_stop is not None:
        return "interrupted", scrub(str(batch.budget_stop))
    if isinstance(fatal, JudgeAuthError | AgentAuthError):
        return "aborted", scrub(str(fatal))
    if isinstance(fatal, JudgeUnreachableError | AgentUnreachableError):
        return "interrupted", scrub(str(fatal))
    if isinstance(fatal, RunRecordError):
        return "failed", scrub(str(fatal))
    if fatal is not None:
        return "aborted", scrub(f"an item could not be finished: {fatal!r}")
    if isinstance(stopped, Exception):
        return "aborted", scrub(f"{type(stopped).__name__}: {stopped}")
    if stopped is not None or not batch.exhausted:
        return "interrupted", None
    return "completed", None


def _judges(scorers: Sequence[Scorer]) -> list[Any]:
    """Every judge that makes the scorers' calls: each of a panel's."""
    found: list[Any] = []
    for scorer in scorers:
        judge = getattr(scorer, "judge", None)
        if judge is not None:
            found += judges_of(judge)
    return found


def _unpriced(scorers: Sequence[Scorer], target: Any) -> dict[str, float]:
    """Traffic counts that mark this part's cost not known: a judge without a price, an agent
    with a price setting left unset (the LLM summarizer's ``target.price``)."""
    counts: dict[str, float] = {}
    if any(judge_price(judge) is None for judge in _judges(scorers)):
        counts["judge_unpriced"] = 1
    if target is not None and agent_pricing(target) == "unset":
        counts["target_unpriced"] = 1
    return counts


def _check_budget(opts: RunOptions, scorers: Sequence[Scorer], target: Any) -> None:
    """A budget in US dollars needs every call's price: refuse it before any call when the
    judge's (or an agent's that has a price setting) is not known."""
    if opts.max_cost is None:
        return
    for judge in _judges(scorers):
        if judge_price(judge) is None:
            raise ConfigError(
                f"max_cost ({opts.max_cost:g} USD) needs the judge's price, and judge "
                f"{getattr(judge, 'name', type(judge).__name__)} has none: give its price per "
                "million tokens (model.price={input: ..., output: ...}), or cap tokens with "
                "max_tokens instead"
            )
    if target is not None and agent_pricing(target) == "unset":
        raise ConfigError(
            f"max_cost ({opts.max_cost:g} USD) needs the agent's price too, and it has none: "
            "give target.price={input: ..., output: ...} (US dollars per million tokens)"
        )


run_evals_sync = sync_twin(run_evals)
