"""One call of ``run_evals`` at work: items launched as slots free up, each evaluated, journaled,
counted and handed to the hooks; stopped, cancelled and failed items accounted for."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from summeval_runner._errors import (
    AgentAuthError,
    AgentUnreachableError,
    BudgetExhaustedError,
    InputError,
    JudgeUnavailableError,
    RunRecordError,
)
from summeval_runner._inputs._datasets import Item
from summeval_runner._judges._panel import JudgePanel
from summeval_runner._judges._protocol import Price, TokenUsage, agent_pricing
from summeval_runner._rundir._noise import NoiseTally
from summeval_runner._rundir._rows import ItemRecord
from summeval_runner._runner._batch_api import IdleWatch
from summeval_runner._runner._item_time import ITEM_TIME, ItemTime
from summeval_runner._runner._items import shown
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._outage import AgentWatch
from summeval_runner._runner._progress import ProgressReporter
from summeval_runner._runner._record import RunRecorder
from summeval_runner._runner._setup import callable_name
from summeval_runner._runner._spend import Spend
from summeval_runner._scorers._outcome import (
    ItemResult,
    RunCounts,
    status_of,
    unreadable,
)
from summeval_runner._scorers._reference import takes_ground_truth
from summeval_runner._scorers._result import (
    EVALUATION_PROGRESS,
    ErrorInfo,
    EvaluationProgress,
    FailedStep,
    Status,
    SummarizationResult,
)
from summeval_runner._stats import RunningMean

logger = logging.getLogger("summeval_runner")
Hook: TypeAlias = Callable[[ItemResult], Any]


def _error(error: BaseException, step: FailedStep) -> ErrorInfo:
    """An error raised by the target or a scorer, made data: one call of ``step``, failed."""
    return ErrorInfo(
        type=type(error).__name__, message=str(error) or repr(error), step=step, attempts=1
    )


def _first_failure(trials: Sequence[Mapping[str, Any]]) -> ErrorInfo | None:
    for results in trials:
        for result in results.values():
            if isinstance(result, ErrorInfo):
                return result
            error = getattr(result, "error", None)
            if status_of(result) == "error" and isinstance(error, ErrorInfo):
                return error
    return None


def _for_trial(scorer: Any, trial: int) -> Any:
    """The scorer making trial ``trial`` (from 0) of an item's judgment: one that knows trials
    (the summarization scorer's ``with_trial``) puts it in its judge requests; another is run
    again as it is."""
    with_trial = getattr(scorer, "with_trial", None)
    return with_trial(trial) if trial and callable(with_trial) else scorer


def _keeping_transcripts(scorer: Any, keep: bool) -> Any:
    """The scorer keeping a transcript of its judge requests in each result, when the run keeps
    them (``RunOptions.transcripts``) and it can (the summarization scorer's
    ``with_transcripts``); otherwise the scorer as it is."""
    with_transcripts = getattr(scorer, "with_transcripts", None)
    return with_transcripts(True) if keep and callable(with_transcripts) else scorer


def _is_async_callable(target: Callable[..., Any]) -> bool:
    call = getattr(target, "__call__", None)  # noqa: B004 - instances with an async __call__
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(call)


async def _call_target(target: Callable[[Any], Any], input: Any) -> Any:
    if _is_async_callable(target):
        return await target(input)
    # A sync target may block (an HTTP call, a model): keep it off the event loop.
    output = await asyncio.to_thread(target, input)
    return await output if inspect.isawaitable(output) else output


async def _run_scorer(scorer: Any, input: Any, output: Any, ground_truth: Any = None) -> Any:
    """A scorer's result; a ``SystemExit`` it raised, as a value. Raised in the task gather
    makes of it, asyncio would let it out of the event loop and end the run with its code.
    ``ground_truth`` is passed only when given (None: the scorer does not take it)."""
    try:
        if ground_truth is not None:
            return await scorer.run(input=input, output=output, ground_truth=ground_truth)
        return await scorer.run(input=input, output=output)
    except SystemExit as exit_:
        return exit_


class Batch:
    """One call of ``run_evals``: its parts, its bounds, and what it has gathered so far."""

    def __init__(
        self,
        *,
        scorers: Sequence[Any],
        ids: list[str],
        target: Callable[[Any], Any] | None,
        hooks: list[Hook],
        options: RunOptions,
        reporter: ProgressReporter | None,
        recorder: RunRecorder | None,
        keep_results: bool,
        spend: Spend | None = None,
        count: Callable[[Mapping[str, float]], None] | None = None,
        idle: IdleWatch | None = None,
    ) -> None:
        self.scorers = scorers
        # Each trial's scorers (RunOptions.trials): the first trial's are the scorers.
        kept = [_keeping_transcripts(scorer, options.transcripts) for scorer in scorers]
        self.trial_scorers = [
            [_for_trial(scorer, trial) for scorer in kept] for trial in range(options.trials)
        ]
        # The scorers whose run takes ground_truth, by identity: read from their signatures
        # once, not for every item of a million.
        self._taking_ground_truth = {
            id(scorer)
            for trial in self.trial_scorers
            for scorer in trial
            if takes_ground_truth(scorer)
        }
        self.ids = ids
        self.target = target
        self.hooks = hooks
        self.reporter = reporter
        self.recorder = recorder
        if recorder is not None:
            # The first write that fails in the run directory stops every call at once.
            recorder.on_failure = self.stop_at_once
        self.keep_results = keep_results
        self.spend = spend
        # Counts each agent call's tokens and cost into the run's traffic (and journal).
        self.count = count
        # What a call the target reports no cost for costs (agent_pricing): at its price (the
        # lead-k baseline's is free), not known (a price setting left unset), or $0 unreported.
        self._target_price = getattr(target, "price", None)
        self._target_pricing = agent_pricing(target)
        # The budget (max_cost, max_tokens) stopped the run: no further item starts, those in
        # flight finish what they can, and the run ends interrupted.
        self.budget_stop: BudgetExhaustedError | None = None
        # Which evaluations are at work: in batch mode a round of judge calls goes out when
        # every one waits on the judge.
        self.idle = idle or IdleWatch()
        batched = options.mode == "batch"
        # A batch is answered within the provider's window (hours): no item timeout applies,
        # and a round's batch holds the calls of every item in flight.
        self.item_timeout_s = None if batched else options.item_timeout_s
        self.item_slots = asyncio.Semaphore(
            max(options.max_items_in_flight, options.batch_max_requests // options.trials)
            if batched
            else options.max_items_in_flight
        )
        self.target_slots = asyncio.Semaphore(options.max_target_calls_in_flight)
        # An agent nobody can connect to stops the run as an unreachable judge does: its items
        # are left unfinished, never turned into errors that a max_error_rate lets through.
        self.agent_watch = (
            AgentWatch(
                callable_name(target),
                outage_timeout_s=options.outage_timeout_s,
                base_delay_s=options.retry.base_delay_s,
                max_delay_s=options.retry.max_delay_s,
            )
            if target is not None
            else None
        )
        # Finished items' results, when kept; counts and score sums always.
        self.done: list[tuple[int, ItemResult]] = []
        self.finished = 0
        self.drawn = 0
        self.statuses: Counter[Status] = Counter()
        # Items a manipulation check tripped on (SummarizationResult.flags).
        self.flagged = 0
        # Each scorer's mean over its scored items, kept as they come (constant memory).
        self.means: dict[str, RunningMean] = {scorer_id: RunningMean() for scorer_id in ids}
        self.hook_errors = 0
        # How the trials of each item disagreed, for a run with no directory (a recorded run
        # counts it from its journal, every part of it).
        self.trials = options.trials
        panel = any(isinstance(getattr(s, "judge", None), JudgePanel) for s in scorers)
        self.noise = NoiseTally() if (options.trials > 1 or panel) and recorder is None else None
        # What stops the run at once: a judge that no call can reach or that refuses the key
        # (every later call would fail the same way), or an item that could not be recorded.
        self.fatal: list[BaseException] = []
        # Items in flight: cancelled at once when the run must stop.
        self._tasks: set[asyncio.Task[None]] = set()
        # Every item was drawn (the run was not stopped before the end of the data).
        self.exhausted = False
        # The grace period after a stop ran out and the items in flight were cancelled.
        self.cancelling = False

    @property
    def counts(self) -> RunCounts:
        return RunCounts.tallied(self.statuses, self.flagged)

    async def run(
        self, items: Iterator[tuple[int, Item]], stop: asyncio.Event | None, grace_s: float
    ) -> None:
        """Launch items as slots free up (never all at once), then wait for those in flight.

        When ``stop`` is set, no further item starts; those in flight get ``grace_s`` seconds
        to finish and are then cancelled (they stay unfinished, with no result). ``exhausted``
        says whether every item was drawn.
        """
        tasks = self._tasks
        watcher = asyncio.create_task(self._cancel_after_stop(stop, grace_s, tasks))

        def done(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            # A task ends in an exception only for what is beyond one item's failure (an item
            # that could not be recorded is caught before): it stops the run, loudly.
            if not task.cancelled() and task.exception() is not None:
                self.stop_at_once(task.exception())  # type: ignore[arg-type]

        try:
            # Items are drawn only as slots free up: an iterator (a dataset read as it goes) is
            # never read ahead of the work, so memory stays flat however long it is.
            try:
                for position, item in items:
                    await self.item_slots.acquire()
                    stopping = self.budget_stop is not None or (stop is not None and stop.is_set())
                    if self.fatal or stopping:
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

    def stop_at_once(self, cause: BaseException) -> None:
        """Stop the run for ``cause``: no item starts, and those in flight are cancelled (left
        unfinished): their judge calls would be paid for and lost, since the judge cannot
        answer or their results cannot be recorded. Cancelled, a call that waits for its turn
        (a slot, the pacer) is never sent; one on its way is the only one paid for after the
        cause."""
        if cause in self.fatal:
            return
        self.fatal.append(cause)
        if self.spend is not None:
            self.spend.stop(cause)
        if len(self.fatal) == 1:
            self.cancelling = True
            current = asyncio.current_task()
            for task in list(self._tasks):
                if task is not current:
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
        progress = EvaluationProgress()
        EVALUATION_PROGRESS.set(progress)  # this item's task's own context
        try:
            try:
                result = await self.evaluate_in_time(item, progress)
            except asyncio.CancelledError:
                if self._cancel_requested():
                    raise  # unfinished: the run stops it
                result = self.failed(
                    item,
                    ErrorInfo(
                        type="CancelledError",
                        message="the target or a scorer raised CancelledError, though the run "
                        "did not cancel the item",
                        step=progress.step or "scorer",
                        attempts=max(progress.calls, 1),
                    ),
                )
            except (JudgeUnavailableError, AgentAuthError, AgentUnreachableError) as error:
                self.stop_at_once(error)
                return
            except BudgetExhaustedError as error:
                # The item is left unfinished: its next call was not made. The others in flight
                # go on as far as the budget lets them (their calls are paid for).
                if self.budget_stop is None:
                    self.budget_stop = error
                return
            if self.recorder is not None:
                try:
                    self.recorder.write(result, position)
                except RunRecordError as error:
                    self.stop_at_once(error)  # the first failed write in the run directory
                    return
                except Exception as error:
                    # An item that cannot be recorded is not finished: stop, and say so.
                    self.stop_at_once(
                        RunRecordError(
                            f"item {item.id!r} could not be recorded in the run directory: "
                            f"{type(error).__name__}: {error}"
                        )
                    )
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
                errored = result.status == "error"
                self.reporter.update(score=result.score(self.ids[0]), error=errored)
        finally:
            self.item_slots.release()

    async def evaluate_in_time(self, item: Item, progress: EvaluationProgress) -> ItemResult:
        """The item evaluated within ``item_timeout_s`` of its own work (``_item_time``): the
        waits the run makes it do (pacers, slots, holds, probes) are not counted."""
        if self.item_timeout_s is None:
            return await self.evaluate(item, progress)
        clock = ItemTime(self.item_timeout_s)
        # The clock goes with the evaluation's task (and every task it starts) in its context.
        token = ITEM_TIME.set(clock)
        try:
            work = asyncio.ensure_future(self.evaluate(item, progress))
        finally:
            ITEM_TIME.reset(token)
        clock.on_expired = work.cancel
        try:
            await asyncio.wait({work})
        except asyncio.CancelledError:
            # The item itself is cancelled: its work stops before it returns, as wait_for's.
            work.cancel()
            await asyncio.wait({work})
            if not work.cancelled():
                work.exception()  # retrieved: the cancellation is what goes on
            raise
        finally:
            clock.close()
        if not (clock.expired and work.cancelled()):
            return work.result()
        step = progress.step or "scorer"
        message = (
            f"the item took longer than item_timeout_s ({self.item_timeout_s:g} s) of its own "
            f"work (its agent and judge calls in progress), in its {step} step"
        )
        return self.failed(
            item,
            ErrorInfo(
                type="ItemTimeoutError", message=message, step=step, attempts=max(progress.calls, 1)
            ),
        )

    def record(self, position: int, result: ItemResult) -> None:
        self.finished += 1
        self.statuses[result.status] += 1
        self.flagged += any(
            isinstance(outcome, SummarizationResult) and bool(outcome.flags)
            for trial in result.trials
            for outcome in trial.values()
        )
        for scorer_id, mean in self.means.items():
            score = result.score(scorer_id)
            if score is not None:
                mean.add(score)
        if self.noise is not None:
            self.noise.add(ItemRecord.of(result, position))
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
            target_usage=known.get("target_usage"),
            target_cost=known.get("target_cost"),
        )

    async def _call_agent(self, input: Any) -> Any:
        target, watch = self.target, self.agent_watch
        assert target is not None
        assert watch is not None
        return await watch.call(lambda: _call_target(target, input))

    async def evaluate(self, item: Item, progress: EvaluationProgress) -> ItemResult:
        output, latency = item.output, None
        target_usage: TokenUsage | None = None
        target_cost: float | None = None
        if self.target is not None:
            progress.step, progress.calls = "target", 1
            started = time.perf_counter()
            try:
                async with self.target_slots:
                    hold = self.spend.admit_target() if self.spend is not None else None
                    try:
                        with self.idle.working():
                            output = await self._call_agent(item.input)
                    finally:
                        if self.spend is not None and hold is not None:
                            self.spend.release(hold)
                        target_usage, target_cost, reported = self._target_spend(progress)
                        if self.spend is not None:
                            # Whether the agent returned or raised: a call it paid for and
                            # did not price leaves a max_cost budget blind either way.
                            self.spend.check_agent_cost(target_cost if reported else None)
                if not isinstance(output, str | list | Mapping):
                    raise InputError(
                        f"the target must return a string or messages, got {type(output).__name__}"
                    )
            except (
                JudgeUnavailableError,
                AgentAuthError,
                AgentUnreachableError,
                BudgetExhaustedError,
            ):
                raise  # an agent behind a refused key fails every item the same way
            except (Exception, SystemExit) as error:
                # sys.exit() in an agent is the agent's failure, not the run's end: let out, it
                # would end the run with the agent's code (0 for nothing done).
                latency = time.perf_counter() - started
                # The item's error is data (its type and message); where it came from is here.
                logger.info(
                    "item %s: the target raised %s; the item is an error (error_step target)",
                    item.id,
                    type(error).__name__,
                    exc_info=error,
                )
                return self.failed(
                    item,
                    _error(error, "target"),
                    output=None,
                    latency=latency,
                    target_usage=target_usage,
                    target_cost=target_cost,
                )
            latency = time.perf_counter() - started
        progress.step, progress.calls = "scorer", 0
        # Every trial runs to its end before a failure of one is raised: none goes on sending
        # requests after its item is done.
        outcomes = await asyncio.gather(
            *(
                self.score(scorers, item.input, output, item.ground_truth)
                for scorers in self.trial_scorers
            ),
            return_exceptions=True,
        )
        trials: list[dict[str, Any]] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            trials.append(outcome)
        return ItemResult(
            item_id=item.id,
            input=item.input,
            output=output,
            metadata=item.metadata,
            results=trials[0],
            error=_first_failure(trials),
            target_latency_s=latency,
            trial_results=tuple(trials) if len(trials) > 1 else (),
            target_usage=target_usage,
            target_cost=target_cost,
        )

    def _target_spend(
        self, progress: EvaluationProgress
    ) -> tuple[TokenUsage | None, float | None, bool]:
        """What the agent's call used, as it reported it (``report_target_usage``), counted into
        the run's traffic: its tokens, its cost (``None`` when not known), and whether that
        cost was reported or priced. A target that reports nothing and has a price (the lead-k
        baseline: free) cost nothing. One that reports nothing and has no price setting at all
        (a Python function of one's own) is counted at $0, as ``target_unreported``: nothing it
        told us was billed, and the cost line says how it was counted; a budget in dollars
        still stops at it. One with a price setting left unset (the LLM summarizer's
        ``target.price``) that reports no cost: not known."""
        counts: dict[str, float] = {"target_calls": 1}
        if progress.target_reported:
            # Billed: a call its cache answered was paid for by the run that stored it.
            usage = TokenUsage(
                progress.target_input_tokens - progress.target_cached_input_tokens,
                progress.target_output_tokens - progress.target_cached_output_tokens,
            )
            cost = progress.target_cost
            if (
                cost is None
                and isinstance(self._target_price, Price)
                and (usage.input_tokens or usage.output_tokens)
            ):
                # Tokens without a cost: the agent's price prices them.
                cost = self._target_price.cost(usage)
            counts |= {
                "target_input_tokens": usage.input_tokens,
                "target_output_tokens": usage.output_tokens,
            }
        elif self._target_pricing == "priced":
            usage, cost = TokenUsage(), 0.0
        elif self._target_pricing == "none":
            usage, cost = TokenUsage(), 0.0
            counts |= {"target_unreported": 1}
        else:
            usage, cost = None, None
        counts |= {"target_cost_unknown": 1} if cost is None else {"target_cost": cost}
        if self.count is not None:
            self.count(counts)
        return usage, cost, "target_unreported" not in counts

    async def _working(self, scorer: Any, input: Any, output: Any, ground_truth: Any) -> Any:
        # The scorer's coroutine is made here, not by the caller: a task cancelled before its
        # first step (a run cancelled as its items start) would leave one never awaited.
        # Whether it takes the ground truth was read once, when the batch was made.
        given = ground_truth if id(scorer) in self._taking_ground_truth else None
        with self.idle.working():
            return await _run_scorer(scorer, input, output, given)

    async def score(
        self, scorers: Sequence[Any], input: Any, output: Any, ground_truth: Any = None
    ) -> dict[str, Any]:
        """Every scorer's result (of one trial), or the ErrorInfo of the scorer that raised."""
        outcomes = await asyncio.gather(
            *(self._working(scorer, input, output, ground_truth) for scorer in scorers),
            return_exceptions=True,
        )
        results: dict[str, Any] = {}
        for scorer_id, outcome in zip(self.ids, outcomes, strict=True):
            if isinstance(outcome, JudgeUnavailableError | BudgetExhaustedError):
                raise outcome
            # A scorer that raised CancelledError on its own (a cancellation of the item would
            # have been raised here, not returned) failed this item like any other error.
            if isinstance(outcome, Exception | asyncio.CancelledError | SystemExit):
                outcome = _error(outcome, "scorer")
            elif isinstance(outcome, BaseException):
                raise outcome  # an interrupt (KeyboardInterrupt) is not an item's
            elif unreadable(outcome):
                outcome = ErrorInfo(
                    step="scorer",
                    attempts=1,
                    type="InvalidScorerResult",
                    message=f"scorer {scorer_id!r} returned {shown(outcome)}, which is not a "
                    "score: give a number, a bool, or an object or mapping with a 'score'",
                )
            results[scorer_id] = outcome
        return results
