"""The Batch API mode (``RunOptions.mode="batch"``): each round of judge calls as one batch.

``BatchedJudge`` stands where ``LimitedJudge`` stands in interactive mode (behind the response
cache, so a request the cache answers never reaches a batch). The scorers run as they always do,
one awaited call at a time; their requests gather here until every evaluation in flight is
waiting on the judge (``IdleWatch``: the run counts evaluations at work and those waiting), and
then go out as one batch: a JSONL file uploaded, a batch created on it, polled every
``batch_poll_s`` until it ends, its output and error files read, and each request's reply handed
back. With 10,000 items in flight, the preprocess calls of all of them are one batch, their
analyze calls the next, their reason calls the one after.

A line that failed (an HTTP error in the error file, a request the batch did not reach before it
expired, a batch cancelled) is a ``JudgeAPIError`` of that status, retried in a later batch as the
retry policy says (a 400 is not) and then an item error, as in the interactive mode; a batch the
provider refused whole (its validation failed) fails its requests with its reasons.

Every batch is journaled as it is created and as it ends (``BatchRecord``). A run killed while a
batch is in flight is resumed by reading that batch (and every other batch the run made) before
anything is sent: its replies answer the resumed run's requests, so nothing is paid twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from summeval_runner._errors import (
    BudgetExhaustedError,
    JudgeAPIError,
    JudgeAuthError,
    JudgeUnavailableError,
    JudgeUnreachableError,
)
from summeval_runner._judges._protocol import (
    ROUND_TAG,
    RUN_TAG,
    BatchJudge,
    BatchState,
    Judge,
    JudgeReply,
    JudgeRequest,
    close_judge,
    judge_name,
    judge_price,
    learn_refusal_of,
    request_body_of,
    run_tag,
)
from summeval_runner._rundir._journal import BatchRecord
from summeval_runner._runner._cache import request_key
from summeval_runner._runner._item_time import item_held, item_work
from summeval_runner._runner._retry import RetryPolicy
from summeval_runner._runner._spend import Hold, Spend, reply_counts

logger = logging.getLogger("summeval_runner")
_T = TypeVar("_T")
# A hold its reply has settled (``Spend.settle``): nothing left to release.
_SETTLED = Hold(0.0, 0)

# Loop turns with nothing at work but waiters, in a row, before the gathered requests go out:
# an item between two steps (its judge call answered, its next not yet asked) takes a turn or
# two to ask again.
_SETTLE_TURNS = 8
# The batches whose replies are kept after they end, for a request asked again a round later.
_RECENT_BATCHES = 2


class IdleWatch:
    """Which of a run's evaluations are at work and which wait on the judge (or on another
    evaluation's draw of a source's questions): the batch goes out when they all wait."""

    def __init__(self) -> None:
        self.active = 0
        self.waiting = 0
        self._changed = asyncio.Event()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """An evaluation (an agent call, a scorer's run) is at work inside the block: its
        item's own time runs (``item_timeout_s``), but while it waits inside a judge request."""
        self.active += 1
        self._note()
        try:
            with item_work():
                yield
        finally:
            self.active -= 1
            self._note()

    @contextlib.contextmanager
    def waiting_on(self) -> Iterator[None]:
        """An evaluation at work waits on the judge or on another's draw inside the block: not
        its item's own time."""
        self.waiting += 1
        self._note()
        try:
            with item_held():
                yield
        finally:
            self.waiting -= 1
            self._note()

    def _note(self) -> None:
        self._changed.set()

    @property
    def idle(self) -> bool:
        return self.waiting >= self.active

    async def settled(self) -> bool:
        """Whether every evaluation has been waiting for ``_SETTLE_TURNS`` loop turns running
        (nothing else changed meanwhile)."""
        for _ in range(_SETTLE_TURNS):
            if not self.idle:
                return False
            self._changed.clear()
            await asyncio.sleep(0)
            if self._changed.is_set() and not self.idle:
                return False
        return self.idle

    async def changed(self) -> None:
        self._changed.clear()
        await self._changed.wait()


@dataclass
class _Pending:
    request: JudgeRequest
    key: str
    retry: bool
    futures: list[asyncio.Future[JudgeReply]] = field(default_factory=list)
    # The body its line was last sent with: a refusal of one of its parameters is learned from it.
    body: dict[str, Any] | None = None


class BatchedJudge:
    """A judge whose requests go to its provider's Batch API, a round at a time.

    ``recover`` gives it the batches an earlier part of the run made (from its journal): they
    are read first, and their replies answer this part's requests. ``on_batch`` hears of each batch
    as it is created and as it ends; ``on_traffic`` counts requests, retries, tokens and cost as
    elsewhere.
    """

    def __init__(
        self,
        judge: Judge,
        *,
        identity: Mapping[str, Any],
        retry: RetryPolicy,
        max_requests: int,
        poll_s: float,
        idle: IdleWatch,
        outage_timeout_s: float = 60.0,
        spend: Spend | None = None,
        on_batch: Callable[[BatchRecord, Mapping[str, float]], None] | None = None,
        on_traffic: Callable[[Mapping[str, float]], None] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(judge, BatchJudge):
            raise TypeError(f"judge {judge_name(judge)} has no Batch API")
        self.judge = judge
        # The same judge, as its Batch API.
        self._provider: BatchJudge = judge
        self.name = judge_name(judge)
        self.throttled = 0  # a batch meets no 429: the provider paces it
        self._identity = dict(identity)
        self._retry = retry
        self._max_requests = max_requests
        self._poll_s = poll_s
        self._outage_timeout_s = outage_timeout_s
        self._idle = idle
        self._spend = spend
        self._price = judge_price(judge)
        # Its judge's, for those it serves to read (``judge_price``: None, not known).
        self.price = self._price
        self._on_batch = on_batch
        self._on_traffic = on_traffic
        self._metadata = dict(metadata or {})
        self._recorded: list[BatchRecord] = []
        self._known: set[str] = set()
        self._resumed = False
        self._since = 0.0
        self._recovered: dict[str, JudgeReply] = {}
        # The replies of the last batches to end: an evaluation a round behind may ask what
        # another asked the round before, before the response cache holds it.
        self._recent: list[dict[str, JudgeReply]] = []
        self._recovery: asyncio.Task[None] | None = None
        self._pending: dict[str, _Pending] = {}
        # What a refused line's body said (its "error"), by request key, until it is read.
        self._refusals: dict[str, Mapping[str, Any]] = {}
        # Requests in a batch out now, by key.
        self._out: dict[str, _Pending] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._fatal: JudgeUnavailableError | None = None
        # Figures: batches made, requests sent, their states.
        self.batches_submitted = 0
        self.requests_sent = 0
        self.retries = 0
        self.recovered_replies = 0
        self._in_flight: dict[str, BatchState] = {}

    def recover(
        self, recorded: Sequence[BatchRecord], *, run_id: str, since: float, resumed: bool
    ) -> None:
        """Tag this run's batches with ``run_id`` and this judge (``run_tag``, their metadata's
        ``RUN_TAG``); for a resumed run, the batches its earlier parts made (its journal's, and
        any the provider holds with its tag since ``since``, Unix seconds: one created the
        moment before a kill could not be journaled) are read before anything is sent, their
        replies answering this part's requests."""
        self._metadata = {**self._metadata, RUN_TAG: run_tag(run_id, self.name)}
        # A panel's judges each read their own batches (read by every judge, a batch out at
        # the kill was counted once per judge); every batch of the run is known, so that none
        # of another judge's is taken for one this judge made and did not journal.
        self._known = {line.id for line in recorded}
        self._recorded = [line for line in recorded if line.judge in (None, self.name)]
        self._resumed = resumed
        self._since = since

    # --- the judge protocol ------------------------------------------------------------------

    def request_body(self, request: JudgeRequest) -> Mapping[str, Any] | None:
        """What the wrapped judge sends for ``request`` (a transcript shows it)."""
        return request_body_of(self.judge, request)

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        await self._recovered_first()
        key = request_key(self._identity, request)
        attempt = 1
        while True:
            known = self._recovered.get(key) or self._recently(key)
            if known is not None:
                # Its cost goes to the first evaluation it answers, as a reply the response
                # cache holds costs the later ones nothing.
                self._recovered[key] = replace(known, cost=0.0, shared=True)
                return known if attempt == 1 else replace(known, retries=attempt - 1)
            if self._fatal is not None:
                raise self._fatal
            future = self._enqueue(key, request, retry=attempt > 1)
            try:
                with self._idle.waiting_on():
                    reply = await asyncio.shield(future)
            except JudgeAPIError as error:
                retryable = self._retry.is_retryable(error)
                if not retryable or attempt >= self._retry.max_attempts:
                    error.attempts = attempt
                    raise
                attempt += 1
                continue
            return reply if attempt == 1 else replace(reply, retries=attempt - 1)

    def describe(self) -> str:
        """Figures for the progress display: batches made and the ones out now."""
        text = f"batches {self.batches_submitted}, requests {self.requests_sent}"
        for state in self._in_flight.values():
            text += f", {state.id} {state.status} {state.completed + state.failed}/{state.total}"
        if self._pending:
            text += f", {len(self._pending)} gathering"
        return text

    async def aclose(self) -> None:
        for task in (self._flusher, self._recovery, *self._batches):
            if task is not None:
                task.cancel()
        tasks = [t for t in (self._flusher, self._recovery, *self._batches) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        for pending in self._pending.values():
            for future in pending.futures:
                future.cancel()
        await close_judge(self.judge)

    # --- gathering requests into rounds ------------------------------------------------------

    def _enqueue(
        self, key: str, request: JudgeRequest, *, retry: bool
    ) -> asyncio.Future[JudgeReply]:
        future: asyncio.Future[JudgeReply] = asyncio.get_running_loop().create_future()
        pending = self._out.get(key) or self._pending.get(key)
        if pending is None:
            # The same request asked twice in a round (two items alike), or while its batch is
            # out, is one line.
            pending = self._pending[key] = _Pending(request, key, retry)
        pending.futures.append(future)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._gather_rounds())
        return future

    async def _gather_rounds(self) -> None:
        """Send what is gathered whenever every evaluation waits (or a batch is full)."""
        while self._pending:
            if len(self._pending) >= self._max_requests or await self._idle.settled():
                keys = list(self._pending)[: self._max_requests]
                round_ = [self._pending.pop(key) for key in keys]
                task = asyncio.create_task(self._run_batch(round_))
                self._batches.add(task)
                task.add_done_callback(self._batches.discard)
                continue
            await self._idle.changed()

    async def _run_batch(self, round_: list[_Pending]) -> None:
        holds: list[Hold] = []
        sent: list[_Pending] = []
        created: BatchState | None = None
        try:
            admitted, holds = self._admit(round_)
            if not admitted:
                return
            # A request asked again from here on (while its batch is being made, or is out)
            # waits for this batch's line rather than become a line of the next one.
            sent = admitted
            self._out.update((pending.key, pending) for pending in sent)
            state = created = await self._submit(admitted, holds)
            self._in_flight[state.id] = state
            try:
                state = await self._poll(state)
                replies, errors = await self._results(state, {p.key for p in sent})
            finally:
                self._in_flight.pop(state.id, None)
            # Counted in the very line that journals the batch as ended: a resume counts the
            # replies of the batches that had not ended, so no kill may part the two.
            counts: dict[str, float] = {}
            for number, pending in enumerate(sent):
                reply = replies.get(pending.key)
                if reply is not None:
                    _add(counts, reply_counts(reply))
                    if self._spend is not None:
                        if pending.request.attempt == 1:
                            self._spend.learn(pending.request, reply.usage.output_tokens)
                        _add(counts, self._spend.settle(holds[number], reply))
                        holds[number] = _SETTLED
            self._record(
                BatchRecord(
                    id=state.id,
                    state="ended",
                    status=state.status,
                    completed=len(replies),
                    failed=len(sent) - len(replies),
                ),
                counts,
            )
            self._recent = [*self._recent[-(_RECENT_BATCHES - 1) :], replies]
            for pending in sent:
                reply = replies.get(pending.key)
                if reply is not None:
                    self._resolve(pending, reply)
                elif self._learned_from(pending):
                    # A parameter the model refuses, now dropped: the line goes in the next
                    # round, as the interactive mode sends the request again.
                    self._pending.setdefault(pending.key, pending)
                else:
                    self._fail(pending, errors.get(pending.key) or _unanswered(state))
            if self._pending and (self._flusher is None or self._flusher.done()):
                self._flusher = asyncio.create_task(self._gather_rounds())
        except JudgeUnavailableError as error:
            # The judge has no Batch API, refused the key, or a batch out could not be read for
            # outage_timeout_s: the run stops (a batch out is journaled, and a resume reads it).
            self._stop(round_, error)
        except Exception as error:
            if created is not None:
                # The batch was made and its lines may be paid: an error now must not send
                # them again (a retry would). The run stops, and a resume reads the batch.
                self._stop(
                    round_,
                    JudgeUnavailableError(
                        f"batch {created.id} was sent but could not be followed "
                        f"({type(error).__name__}: {error}); the run stops, and a resume reads "
                        "the batch rather than send its requests again"
                    ),
                )
            elif isinstance(error, JudgeAPIError):
                # The batch could not be made (a refused file, a 400): nothing of it was sent.
                for pending in round_:
                    self._fail(pending, error)
            else:
                # A provider answering in a shape it should not: the round's items fail (loud
                # in their rows) rather than wait for ever.
                failure = JudgeAPIError(
                    f"a batch could not be handled: {type(error).__name__}: {error}",
                    status_code=400,
                )
                for pending in round_:
                    self._fail(pending, failure)
        finally:
            for pending in sent:
                if self._out.get(pending.key) is pending:
                    self._out.pop(pending.key)
            if self._spend is not None:
                for hold in holds:
                    if hold is not _SETTLED:
                        self._spend.release(hold)

    def _learned_from(self, pending: _Pending) -> bool:
        """Whether the judge learned from its line's refusal (a parameter the model refuses:
        ``_judges._learned``), so that the line is sent again without it."""
        refusal = self._refusals.pop(pending.key, None)
        if refusal is None or pending.body is None:
            return False
        return learn_refusal_of(self.judge, pending.body, refusal)

    def _stop(self, round_: list[_Pending], error: JudgeUnavailableError) -> None:
        self._fatal = error
        for pending in round_:
            self._fail(pending, error)

    def _admit(self, round_: list[_Pending]) -> tuple[list[_Pending], list[Hold]]:
        """The round's requests that fit the run's budget; the others are refused."""
        if self._spend is None:
            return round_, []
        admitted, holds = [], []
        for pending in round_:
            try:
                holds.append(self._spend.admit_judge(pending.request, self._price))
            except BudgetExhaustedError as refused:
                self._fail(pending, refused)
                continue
            admitted.append(pending)
        return admitted, holds

    async def _submit(self, admitted: list[_Pending], holds: list[Hold]) -> BatchState:
        for pending in admitted:
            pending.body = self._provider.request_body(pending.request)
        lines = b"".join(
            json.dumps(
                {
                    "custom_id": pending.key,
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": pending.body,
                },
                separators=(",", ":"),
            ).encode()
            + b"\n"
            for pending in admitted
        )
        # A creation whose answer was lost (a timeout, a dropped connection, a 5xx) may have
        # made the batch: before trying again, the provider's batches are searched for this
        # round's tag, and one found is followed rather than paid for twice.
        tag = uuid.uuid4().hex
        metadata = {**self._metadata, ROUND_TAG: tag}
        run_id = self._metadata.get(RUN_TAG)
        since = time.time() - 60
        tries = 0

        async def create() -> BatchState:
            nonlocal tries
            tries += 1
            if tries > 1 and run_id is not None:
                for made in await self._provider.tagged_batches(run_id, since):
                    if made.round == tag:
                        logger.warning(
                            "batch %s was made though its creation failed; following it, not "
                            "sending its requests again",
                            made.id,
                        )
                        return made
            return await self._provider.submit_batch(lines, metadata)

        state = await self._persist("created", create, submitting=True)
        self.batches_submitted += 1
        self.requests_sent += len(admitted)
        retried = sum(pending.retry for pending in admitted)
        self.retries += retried
        # Its requests are counted in the line that journals it: a kill before that line leaves
        # both to the resume (which finds the batch by its tag and counts them then).
        self._record(
            BatchRecord(
                id=state.id,
                state="submitted",
                requests=len(admitted),
                held_cost=sum(hold.cost for hold in holds),
                held_tokens=sum(hold.tokens for hold in holds),
            ),
            {"requests": len(admitted), **({"retries": retried} if retried else {})},
        )
        logger.info("batch %s: %d requests sent to %s", state.id, len(admitted), self.name)
        return state

    async def _persist(
        self, doing: str, call: Callable[[], Awaitable[_T]], *, submitting: bool = False
    ) -> _T:
        """``call``, tried again on a transient failure (a 5xx, a 429, a dropped connection)
        until it succeeds or ``outage_timeout_s`` has passed since its first failure in a row:
        then ``JudgeUnreachableError`` stops the run, resumable. A batch out is never given up
        while it can still answer: its requests are paid for, and sending them again would pay
        twice. A server with no Batch API (404 on its files endpoint) stops the run at once."""
        first_failure: float | None = None
        attempt = 0
        while True:
            try:
                return await call()
            except JudgeAuthError:
                raise
            except JudgeAPIError as error:
                if submitting and error.status_code in (404, 405, 501):
                    raise JudgeUnavailableError(
                        f"judge {self.name} has no Batch API (HTTP {error.status_code} to a batch "
                        f"{doing}): {error}; run it with runner.mode=interactive"
                    ) from error
                if not self._retry.is_retryable(error):
                    raise
                now = time.monotonic()
                first_failure = first_failure if first_failure is not None else now
                if now - first_failure >= self._outage_timeout_s:
                    raise JudgeUnreachableError(
                        f"a batch could not be {doing} for {now - first_failure:.0f} s "
                        f"(outage_timeout_s is {self._outage_timeout_s:g} s): {error}; the run "
                        "stops, and a resume reads every batch it made"
                    ) from error
                attempt += 1
                wait = self._retry.delay_s(attempt, error)
                logger.warning(
                    "judge %s: a batch could not be %s (%s); trying again in %.1f s",
                    self.name,
                    doing,
                    error,
                    wait,
                )
                await asyncio.sleep(
                    max(0.0, min(wait, first_failure + self._outage_timeout_s - now))
                )

    async def _poll(self, state: BatchState) -> BatchState:
        """Read the batch every ``poll_s`` until it ends."""
        while not state.ended:
            await asyncio.sleep(self._poll_s)
            state = await self._persist("read", partial(self._provider.batch_state, state.id))
            self._in_flight[state.id] = state
        return state

    async def _results(
        self, state: BatchState, wanted: set[str] | None
    ) -> tuple[dict[str, JudgeReply], dict[str, JudgeAPIError]]:
        """The replies the batch's output file holds, and the errors its error file says, by
        request key (those of ``wanted`` only, when given). A line that cannot be read is
        warned about and left out: its request is sent again."""
        replies: dict[str, JudgeReply] = {}
        errors: dict[str, JudgeAPIError] = {}
        if state.output_file_id:
            content = await self._persist(
                "read", partial(self._provider.batch_file, state.output_file_id)
            )
            for line in _lines(content, state):
                key = line.get("custom_id")
                if not isinstance(key, str) or (wanted is not None and key not in wanted):
                    continue
                response = line.get("response") or {}
                body = response.get("body") if isinstance(response, Mapping) else None
                if (
                    isinstance(response, Mapping)
                    and response.get("status_code") == 200
                    and (isinstance(body, Mapping))
                ):
                    try:
                        replies[key] = self._provider.batch_reply(body)
                    except (KeyError, TypeError, ValueError, IndexError) as error:
                        errors[key] = JudgeAPIError(
                            f"batch {state.id}: the reply to a request could not be read "
                            f"({type(error).__name__}: {error})"
                        )
                else:
                    errors[key] = _line_error(line, state)
                    self._note_refusal(key, response)
        if state.error_file_id:
            content = await self._persist(
                "read", partial(self._provider.batch_file, state.error_file_id)
            )
            for line in _lines(content, state):
                key = line.get("custom_id")
                if isinstance(key, str) and (wanted is None or key in wanted):
                    errors.setdefault(key, _line_error(line, state))
                    self._note_refusal(key, line.get("response"))
        return replies, errors

    def _note_refusal(self, key: str, response: Any) -> None:
        """Keep what an HTTP 400 line's body says of its error, for ``_learned_from``."""
        if not isinstance(response, Mapping) or response.get("status_code") != 400:
            return
        body = response.get("body")
        if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
            self._refusals[key] = body["error"]

    def _recently(self, key: str) -> JudgeReply | None:
        for replies in reversed(self._recent):
            reply = replies.get(key)
            if reply is not None:
                # Paid by the evaluation that asked first.
                return replace(reply, cost=0.0, shared=True)
        return None

    def _resolve(self, pending: _Pending, reply: JudgeReply) -> None:
        # One line, paid once: the first evaluation still waiting for it carries its cost.
        paid = False
        for future in pending.futures:
            if not future.done():
                future.set_result(replace(reply, cost=0.0, shared=True) if paid else reply)
                paid = True

    def _fail(self, pending: _Pending, error: BaseException) -> None:
        for future in pending.futures:
            if not future.done():
                future.set_exception(error)
                # Retrieved here too: an item cancelled meanwhile no longer awaits it.
                future.add_done_callback(_retrieved)

    def _count(self, counts: Mapping[str, float]) -> None:
        if self._on_traffic is not None:
            self._on_traffic(counts)

    def _record(self, line: BatchRecord, counts: Mapping[str, float] | None = None) -> None:
        """Journal ``line`` with what it counts, in one line (without a journal: counted)."""
        counts = dict(counts or {})
        if self._on_batch is not None:
            self._on_batch(line.model_copy(update={"judge": self.name}), counts)
        elif counts:
            self._count(counts)

    # --- a resumed run: the batches of its earlier parts ---------------------------------------

    async def _recovered_first(self) -> None:
        if not self._resumed:
            return
        if self._recovery is None:
            self._recovery = asyncio.create_task(self._recover())
        await asyncio.shield(self._recovery)

    async def _recover(self) -> None:
        """Read every batch an earlier part made (waiting for those still out): its replies
        answer this part's requests. A batch that ended before is not counted again; one that
        was still out when that part stopped is counted now, once."""
        ended = {line.id for line in self._recorded if line.state == "ended"}
        submitted = [line for line in self._recorded if line.state == "submitted"]
        known = self._known | {line.id for line in self._recorded}
        try:
            tagged = await self._persist(
                "listed",
                partial(self._provider.tagged_batches, self._metadata[RUN_TAG], self._since),
            )
        except JudgeUnavailableError:
            raise
        except JudgeAPIError as error:
            logger.warning("the provider's batches could not be listed (%s)", error)
            tagged = []
        for state in tagged:
            if state.id not in known:
                logger.info("batch %s of the run being resumed was not journaled; reading it",
                            state.id)  # fmt: skip
                known.add(state.id)
                # Made and killed before it was journaled: its requests were never counted. Both
                # now, in one line, so that a later part reads it like any batch of the run.
                found = BatchRecord(id=state.id, state="submitted", requests=state.total)
                self._record(found, {"requests": state.total})
                submitted.append(found)
        for line in submitted:
            try:
                state = await self._persist("read", partial(self._provider.batch_state, line.id))
                if not state.ended:
                    logger.info("batch %s of the run being resumed is %s; waiting for it",
                                line.id, state.status)  # fmt: skip
                    self._in_flight[state.id] = state
                    try:
                        state = await self._poll(state)
                    finally:
                        self._in_flight.pop(state.id, None)
                replies, _ = await self._results(state, None)
            except JudgeUnavailableError:
                raise
            except JudgeAPIError as error:
                logger.warning(
                    "batch %s of the run being resumed could not be read (%s): its requests "
                    "are sent again",
                    line.id,
                    error,
                )
                if line.id not in ended:
                    # Given up: journaled as ended, so that it holds no later resume back.
                    self._record(BatchRecord(id=line.id, state="ended", status="unreadable"))
                continue
            if line.id not in ended:
                counts: dict[str, float] = {}
                unknown = 0
                for reply in replies.values():
                    _add(counts, reply_counts(reply))
                    unknown += reply.cost is None
                if unknown and line.requests:
                    # What the part that sent them held back for them, a line's share each:
                    # a budget blind to replies of unknown cost would never stop.
                    counts["judge_cost_assumed"] = line.held_cost * unknown / line.requests
                    counts["judge_tokens_assumed"] = round(
                        line.held_tokens * unknown / line.requests
                    )
                self._record(
                    BatchRecord(
                        id=line.id, state="ended", status=state.status, completed=len(replies)
                    ),
                    counts,
                )
            for key, reply in replies.items():
                # Counted when the earlier part read it (its batch journaled as ended): paid,
                # but no item of this part's has it yet.
                self._recovered.setdefault(key, reply)
            self.recovered_replies += len(replies)
        self._recorded = []
        self._resumed = False


def _add(counts: dict[str, float], more: Mapping[str, float]) -> None:
    for name, amount in more.items():
        counts[name] = counts.get(name, 0) + amount


def _retrieved(future: asyncio.Future[JudgeReply]) -> None:
    if not future.cancelled():
        future.exception()


def _lines(content: bytes, state: BatchState) -> Iterator[dict[str, Any]]:
    for number, raw in enumerate(content.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            logger.warning("batch %s: line %d of a results file is not JSON; left out", state.id,
                           number)  # fmt: skip
            continue
        if isinstance(line, dict):
            yield line


def _line_error(line: Mapping[str, Any], state: BatchState) -> JudgeAPIError:
    """A failed line as the error the interactive mode would have met: its HTTP status (a 500,
    a 429, a 400), or none for a request the batch never reached (expired, cancelled)."""
    response = line.get("response") or {}
    error = line.get("error") or {}
    status = response.get("status_code") if isinstance(response, Mapping) else None
    body = response.get("body") if isinstance(response, Mapping) else None
    message = None
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        message = body["error"].get("message")
    if isinstance(error, Mapping) and error:
        message = f"{error.get('code') or 'error'}: {error.get('message') or ''}"
    return JudgeAPIError(
        f"batch {state.id} ({state.status}): the request failed"
        + (f" (HTTP {status})" if status else "")
        + (f": {message}" if message else ""),
        status_code=status if isinstance(status, int) else None,
    )


def _unanswered(state: BatchState) -> JudgeAPIError:
    """A request the batch holds no line for: refused whole (its reasons), or not reached."""
    if state.status == "failed":
        reasons = "; ".join(state.errors) or "no reason given"
        return JudgeAPIError(f"the provider refused batch {state.id}: {reasons}", status_code=400)
    return JudgeAPIError(f"batch {state.id} ended {state.status} before answering the request")
