"""Coverage questions drawn once per source, shared by every item with that source.

With ``questions="per_source"`` the summarization scorer asks a ``QuestionBank`` for a source's
questions before its preprocess call. The first evaluation of a source gets none and draws them
(its preprocess call asks for claims and questions) and publishes what it drew; every other
evaluation of that source, in flight at the same time or later, waits for them and asks for
claims only. An evaluation that fails before it publishes (a judge error, or no question
written) gives its turn to the next one waiting: a source never goes without questions because
one item failed, and a failure that passes (a 500 after its retries) costs one draw more. When
a second draw of the source fails in a row, the source itself is the likely cause (too long for
the judge's context, a prompt the judge refuses): the source opens, every evaluation of it
waiting or to come draws for itself at once, and the first to publish a non-empty set shares
it with those that start after. Its items fail side by side, not one after another.

Waiting is not bounded by time: the drawer's own call is (its request timeout and retries,
then a failure that opens the source), and a waiter that drew for itself after a while would
pay for the very call the bank saves (in batch mode a draw takes as long as a batch).

A bank holds the sets of the sources it met last (``capacity``): a run over a million sources
keeps a few thousand in memory, and a source met again after its set was dropped finds it in
the store (a cached judge's) or has it drawn again (a judge without a cache, such as the offline
judge, whose draw depends on the source alone).

Each set remembers which evaluations drew it (``drawn_with``: fingerprints of the summary and
the trial; more than one where evaluations of an open source drew side by side). When one of
them comes again (a rerun, a resumed item), it repeats its own
preprocess call, which the response cache answers, rather than a claims-only call the cache has
never seen: a rerun of a finished run still makes no judge call. In a sweep the drawing item of
each source is judged on claims its combined call extracted, the others on a claims-only call:
the same prompt rules, but a variant that drew no set of its own (a later one, reading the
cache) has every item on claims-only calls. Comparisons between variants hold the questions
fixed, which is the point; the claims' calls differ for one item per source in the first.

A bank is an object passed to the scorer, not state of the scorer: ``run_evals`` gives the
scorers of a run one bank per judge, backed by the run's journal (a resumed run keeps the
questions it drew) and by the response cache (other variants of a sweep and later nights ask
the same questions), through a ``QuestionStore``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol

QuestionsMode = Literal["per_source", "per_item"]
QUESTIONS_MODES: tuple[QuestionsMode, ...] = ("per_source", "per_item")
# ``also_drawn``: a set held already, heard of again because one more evaluation drew it too.
QuestionOrigin = Literal["drawn", "stored", "recorded", "also_drawn"]
# The question sets a bank keeps in memory, the most recently used (about 1.5 KB each).
BANK_CAPACITY = 10_000
# Failed draws of a source in a row after which its evaluations stop waiting for one another.
OPEN_AFTER_FAILURES = 2


def source_fingerprint(source: str) -> str:
    """The SHA-256 of a source's text (UTF-8): what a shared question set is kept under."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


def drawer_fingerprint(summary: str, trial: int) -> str:
    """Which evaluation of a source drew its questions: its summary and trial, hashed."""
    return hashlib.sha256(f"{trial}\n{summary}".encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class QuestionKey:
    """What a question set is shared under: the source's text, the question budget and the
    prompts that drew it (the judge is the bank's own: a run keeps one bank per judge)."""

    source_sha256: str
    max_questions: int
    prompt_version: str

    @property
    def text(self) -> str:
        """The key as one string (a journal line's, a cache row's)."""
        return f"{self.prompt_version}:{self.max_questions}:{self.source_sha256}"


@dataclass(frozen=True)
class QuestionSet:
    """A source's questions, and the evaluations that drew them (``drawer_fingerprint``s,
    separated by spaces: the first publishes the set, others drawing side by side with it, an
    open source's, are added)."""

    questions: tuple[str, ...]
    drawn_with: str

    def drew(self, drawer: str) -> bool:
        """Whether the evaluation ``drawer`` drew this set (its preprocess call asked for it)."""
        return drawer in self.drawn_with.split()

    def with_drawer(self, drawer: str) -> QuestionSet:
        return QuestionSet(self.questions, f"{self.drawn_with} {drawer}".strip())


@dataclass(frozen=True)
class SharedQuestions:
    """A source's question set as a bank first holds it: where it came from (``drawn`` by an
    evaluation of this bank, ``stored`` by an earlier run in the response cache)."""

    key: QuestionKey
    questions: QuestionSet
    origin: QuestionOrigin


@dataclass(frozen=True)
class Claim:
    """What a bank answers an evaluation: the source's questions, or ``None`` (draw them); and
    whether to draw anyway, being the evaluation that drew the set (its own call is cached)."""

    questions: tuple[str, ...] | None
    draw: bool


class QuestionStore(Protocol):
    """Where question sets outlive a run: the response cache, for one judge."""

    def get(self, key: QuestionKey) -> QuestionSet | None: ...

    def put(self, key: QuestionKey, drawn: QuestionSet) -> QuestionSet:
        """Keep ``drawn`` unless the store holds a set for ``key`` already (another process
        drew it at the same moment); return the set the store holds now."""
        ...

    def add_drawer(self, key: QuestionKey, held: QuestionSet) -> None:
        """Replace the stored set's drawers by ``held``'s (the same questions, one drawer
        more)."""
        ...


class QuestionBank:
    """The question sets of one judge's evaluations: each source's drawn once, then shared.

    ``known`` seeds it (the sets a resumed run recorded); ``store`` keeps sets across runs;
    ``on_shared`` hears of each set the first time this bank holds it (a run journals it);
    ``waiting`` marks an evaluation waiting for another's draw (batch mode counts it idle).
    """

    def __init__(
        self,
        *,
        known: Mapping[QuestionKey, QuestionSet] | None = None,
        store: QuestionStore | None = None,
        on_shared: Callable[[SharedQuestions], None] | None = None,
        waiting: Callable[[], AbstractContextManager[None]] | None = None,
        capacity: int = BANK_CAPACITY,
    ) -> None:
        self._capacity = capacity
        self._known: OrderedDict[QuestionKey, QuestionSet] = OrderedDict()
        self.seed(known or {})
        self._waiting = waiting or contextlib.nullcontext
        self._store = store
        self._on_shared = on_shared
        # Sources being drawn now: set when the drawing evaluation publishes or gives up.
        self._drawing: dict[QuestionKey, asyncio.Future[None]] = {}
        # Failed draws in a row, by source; at OPEN_AFTER_FAILURES each evaluation of the
        # source draws for itself until one publishes.
        self._failures: dict[QuestionKey, int] = {}
        self.drawn = 0
        self.shared = 0

    def seed(self, sets: Mapping[QuestionKey, QuestionSet]) -> None:
        """Hold these sets (an earlier part of the run recorded them), without hearing of them."""
        for key, found in sets.items():
            self._hold(key, found)

    def _hold(self, key: QuestionKey, found: QuestionSet) -> None:
        self._known[key] = found
        self._known.move_to_end(key)
        while len(self._known) > self._capacity:
            self._known.popitem(last=False)

    def known(self) -> Mapping[QuestionKey, QuestionSet]:
        """Every set this bank holds now."""
        return dict(self._known)

    def peek(self, key: QuestionKey) -> QuestionSet | None:
        """The set for ``key`` if the bank or its store holds one; never waits, draws nothing."""
        found = self._known.get(key)
        if found is None and self._store is not None:
            found = self._store.get(key)
        return found

    async def claim(self, key: QuestionKey, drawer: str) -> Claim:
        """The questions of ``key``'s source, waiting while another evaluation draws them; or
        none, and the caller (``drawer``: its ``drawer_fingerprint``) draws them and must then
        ``publish`` them or ``release`` the key. The evaluation that drew a set is told to draw
        again (its call is the cached one) and its ``publish`` returns the same set."""
        while True:
            found = self._known.get(key)
            if found is not None:
                self._known.move_to_end(key)
            if found is None and self._store is not None:
                found = self._store.get(key)
                if found is not None:
                    self._remember(key, found, "stored")
            if found is not None:
                again = found.drew(drawer)
                self.shared += not again
                return Claim(found.questions, draw=again)
            if self._failures.get(key, 0) >= OPEN_AFTER_FAILURES:
                return Claim(None, draw=True)
            pending = self._drawing.get(key)
            if pending is None:
                self._drawing[key] = asyncio.get_running_loop().create_future()
                return Claim(None, draw=True)
            # asyncio.wait, not await: a waiter that is cancelled must not cancel the draw.
            with self._waiting():
                await asyncio.wait([pending])

    def publish(self, key: QuestionKey, questions: tuple[str, ...], drawer: str) -> tuple[str, ...]:
        """The set drawn for ``key``, or the one the bank or the store already held (drawn
        before, or elsewhere at the same moment): the set every evaluation of the source is
        asked. An empty set is never shared (every item of the source would be measured on no
        question; the scorer asks a draw with none again before it gets here): the next
        evaluation draws again."""
        held = self._known.get(key)
        if held is not None:
            self._done(key)
            self._also_drew(key, held, drawer)
            return held.questions
        if not questions:
            self.release(key)
            return questions
        drawn = QuestionSet(questions, drawer)
        shared = self._store.put(key, drawn) if self._store is not None else drawn
        self._remember(key, shared, "drawn" if shared == drawn else "stored")
        self.drawn += shared == drawn
        self._also_drew(key, shared, drawer)
        self._failures.pop(key, None)
        self._done(key)
        return shared.questions

    def release(self, key: QuestionKey) -> None:
        """The drawing evaluation failed: the next one waiting draws instead; after
        ``OPEN_AFTER_FAILURES`` failures in a row, every one waiting or to come draws."""
        self._failures[key] = self._failures.get(key, 0) + 1
        self._done(key)

    def _done(self, key: QuestionKey) -> None:
        pending = self._drawing.pop(key, None)
        # A loop already closed (a drawing evaluation collected after its run ended) has no
        # waiter left to wake, and would raise from set_result.
        if pending is not None and not pending.done() and not pending.get_loop().is_closed():
            pending.set_result(None)

    def _also_drew(self, key: QuestionKey, held: QuestionSet, drawer: str) -> None:
        """``drawer`` drew ``key``'s source too (side by side, its source open; or at the same
        moment in another process) and is asked the held set: it is kept as a drawer of the
        set, so that run again it repeats its own cached call rather than a claims-only call
        the cache has never seen."""
        if held.drew(drawer):
            return
        more = held.with_drawer(drawer)
        self._hold(key, more)
        if self._store is not None:
            self._store.add_drawer(key, more)
        if self._on_shared is not None:
            self._on_shared(SharedQuestions(key, more, "also_drawn"))

    def _remember(self, key: QuestionKey, found: QuestionSet, origin: QuestionOrigin) -> None:
        self._hold(key, found)
        if self._on_shared is not None:
            self._on_shared(SharedQuestions(key, found, origin))
