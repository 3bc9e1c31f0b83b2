"""The judges of one run, behind the run's limits, retries and response cache.

``run_evals`` gives every scorer that takes a judge (``judge`` and ``with_judge``, as the
summarization scorer has) the same judge wrapped in this run's machinery: the response cache
outside (a hit costs no request slot), then ``LimitedJudge`` (requests in flight, rate, retries,
adaptive slow-down on 429s, request timeout, and the outage watch that stops the run with
``JudgeUnreachableError`` when the judge cannot be reached for ``outage_timeout_s``). A judge
that retries on its own (the OpenAI provider's SDK) is first replaced by a copy that does not
(``without_retries()``), owned and closed by the run. Scorers that share one judge share one
set of limits, and one ``QuestionBank``: a source's coverage questions are drawn once per judge
and run, kept in the journal (``on_questions``) and, for a cached judge, in the response cache.
An agent that keeps its model calls in the cache (``with_cache``: the LLM summarizer) is given
the same cache (``bind_target``), so a rerun with another judge or scorer calls no agent again.
Each judge of a ``JudgePanel`` is wrapped on its own (its limits, its cache keys, the budget
count it) and reads the bank of the panel's first judge, which draws the questions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from summeval_runner._errors import ConfigError
from summeval_runner._judges._panel import JudgePanel
from summeval_runner._judges._prices import GIVEN, looked_up_price
from summeval_runner._judges._protocol import (
    BatchJudge,
    Judge,
    cache_identity_of,
    close_judge,
    judge_name,
    judge_price,
    learned_parameters_of,
    without_retries_of,
)
from summeval_runner._rundir._journal import BatchRecord
from summeval_runner._rundir._manifest import (
    CacheUse,
    JudgeTraffic,
    LearnedParameter,
    PriceUsed,
    merged_lessons,
)
from summeval_runner._runner._batch_api import BatchedJudge, IdleWatch
from summeval_runner._runner._cache import (
    AgentCache,
    CachedJudge,
    CachedQuestions,
    ResponseCache,
    default_cache_path,
)
from summeval_runner._runner._limits import LimitedJudge
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._spend import Spend
from summeval_runner._scorers._questions import (
    QuestionBank,
    QuestionKey,
    QuestionSet,
    SharedQuestions,
)


@runtime_checkable
class JudgedScorer(Protocol):
    """A scorer whose judge the runner may wrap: the summarization scorer, or a user's own."""

    @property
    def judge(self) -> Judge | JudgePanel: ...

    def with_judge(self, judge: Judge | JudgePanel) -> Any: ...


@runtime_checkable
class CachedTarget(Protocol):
    """An agent whose model calls the runner may keep in the run's response cache: it offers
    ``with_cache(cache)``, a copy of itself that makes each call through ``cache.complete``."""

    def with_cache(self, cache: AgentCache) -> Any: ...


class JudgeStack:
    """Each distinct judge of a run, wrapped once; traffic counts and closing for all of them."""

    def __init__(self, options: RunOptions, spend: Spend | None = None) -> None:
        self._options = options
        # What the run has spent, and its budget: every request is admitted by it.
        self.spend = spend
        # Each judge as its requests are sent: within the run's limits, or (batch mode) as
        # batches of the provider's Batch API.
        self._limited: dict[int, LimitedJudge | BatchedJudge] = {}
        # Which evaluations are at work and which wait (batch mode sends when all wait).
        self.idle = IdleWatch()
        # Hears of each provider batch as it is created and as it ends (the journal).
        # With what it counts (requests, tokens, cost), in one journal line.
        self.on_batch: Callable[[BatchRecord, Mapping[str, float]], None] | None = None
        self._wrapped: dict[int, Judge] = {}
        # Each panel's name, and the judges of panels (their names are the panel's).
        self._panels: set[str] = set()
        self._in_panels: set[int] = set()
        # How many of the run's scorers use each judge (bind), a panel's judges each once.
        self._sharing: Counter[int] = Counter()
        self._banks: dict[int, QuestionBank] = {}
        # Judges this run made (copies without SDK retries): the run closes them.
        self._owned: list[Any] = []
        self.cache: ResponseCache | None = None
        # Hears each request, retry, 429, reply's tokens and cost, and cache hit or store as it
        # happens (the spend counts them, a recorded run journals them); set before the first
        # request.
        self.on_traffic: Callable[[Mapping[str, float]], None] | None = None
        # Hears each source's question set as a judge's bank first holds it (the journal).
        self.on_questions: Callable[[str, SharedQuestions], None] | None = None

    def bind(self, scorers: Sequence[Any]) -> list[Any]:
        """The scorers as this run uses them: each judged scorer with its judge wrapped, and,
        if it shares questions per source, the judge's question bank."""
        bound = []
        # Scorers that share a judge share its bound on requests in flight (and need it wider).
        self._sharing = Counter(
            id(judge)
            for s in scorers
            if isinstance(s, JudgedScorer)
            for judge in (s.judge.judges if isinstance(s.judge, JudgePanel) else (s.judge,))
        )
        for scorer in scorers:
            if isinstance(scorer, JudgedScorer):
                judge = scorer.judge
                if isinstance(judge, JudgePanel):
                    # Each judge of a panel within its own limits, cache and budget; the
                    # questions are its first judge's, whose bank every judge of it reads.
                    members = [self._wrap(member) for member in judge.judges]
                    self._panels.add(judge.name)
                    self._in_panels.update(id(member) for member in judge.judges)
                    key, wrapped = id(judge.judges[0]), members[0]
                    scorer = scorer.with_judge(judge.with_judges(members))
                else:
                    key = id(judge)
                    wrapped = self._wrap(judge)
                    scorer = scorer.with_judge(wrapped)
                with_bank = getattr(scorer, "with_question_bank", None)
                if callable(with_bank):
                    scorer = with_bank(self._bank(key, wrapped))
            bound.append(scorer)
        return bound

    def bind_target(self, target: Any) -> Any:
        """The agent as this run calls it: with the run's response cache when it offers
        ``with_cache`` and ``cache`` is not ``off``; otherwise as it is."""
        if not isinstance(target, CachedTarget) or self._options.cache == "off":
            return target
        return target.with_cache(AgentCache(self._open_cache(), on_traffic=self._count))

    def _open_cache(self) -> ResponseCache:
        if self.cache is None:
            options = self._options
            self.cache = ResponseCache(options.cache_path or default_cache_path(), options.cache)
        return self.cache

    def _bank(self, key: int, wrapped: Judge) -> QuestionBank:
        if key not in self._banks:
            name = judge_name(wrapped)
            identity = cache_identity_of(self._limited[key].judge)
            store = None
            if self.cache is not None and identity is not None:
                store = CachedQuestions(self.cache, identity, name)

            def shared(questions: SharedQuestions) -> None:
                if self.on_questions is not None:
                    self.on_questions(name, questions)

            self._banks[key] = QuestionBank(
                store=store, on_shared=shared, waiting=self.idle.waiting_on
            )
        return self._banks[key]

    def seed_questions(self, recorded: Mapping[str, Mapping[QuestionKey, QuestionSet]]) -> None:
        """Give each judge's bank the question sets an earlier part of the run recorded (judge
        name -> key -> questions): a resumed run asks its items the same questions."""
        for key, bank in self._banks.items():
            sets = recorded.get(judge_name(self._wrapped[key]))
            if sets:
                bank.seed(sets)

    def seed_batches(
        self, recorded: tuple[BatchRecord, ...], *, run_id: str, since: float, resumed: bool
    ) -> None:
        """Batch mode: tag the run's batches with its id; for a resumed run, the batches its
        earlier parts made are read before anything is sent."""
        for limited in self._limited.values():
            if isinstance(limited, BatchedJudge):
                limited.recover(recorded, run_id=run_id, since=since, resumed=resumed)

    def _wrap(self, judge: Judge) -> Judge:
        key = id(judge)
        if key in self._wrapped:
            return self._wrapped[key]
        options = self._options
        if options.mode == "batch" and not isinstance(judge, BatchJudge):
            raise ConfigError(
                f"mode batch sends the judge's requests through its provider's Batch API, and "
                f"judge {judge_name(judge)} has none: use a judge whose provider has one "
                "(model=openai, anthropic or google), or mode interactive"
            )
        sent = without_retries_of(judge)
        if sent is not judge:
            self._owned.append(sent)  # the run's copy: the run closes it
        identity = cache_identity_of(judge)
        limited: LimitedJudge | BatchedJudge
        if options.mode == "batch":
            limited = BatchedJudge(
                sent,
                identity=identity or {"judge": judge_name(judge)},
                retry=options.retry,
                max_requests=options.batch_max_requests,
                poll_s=options.batch_poll_s,
                outage_timeout_s=options.outage_timeout_s,
                idle=self.idle,
                spend=self.spend,
                on_batch=self._batch,
                on_traffic=self._count,
            )
        else:
            limited = LimitedJudge(
                sent,
                max_in_flight=options.judge_requests_bound(self._sharing[key]),
                requests_per_minute=options.judge_rpm,
                tokens_per_minute=options.judge_tpm,
                retry=options.retry,
                request_timeout_s=options.request_timeout_s,
                outage_timeout_s=options.outage_timeout_s,
                on_traffic=self._count,
                spend=self.spend,
            )
        wrapped: Judge = limited
        if options.cache != "off" and identity is not None:
            wrapped = CachedJudge(limited, self._open_cache(), identity, on_traffic=self._count)
        self._limited[key] = limited
        self._wrapped[key] = wrapped
        return wrapped

    def _count(self, counts: Mapping[str, float]) -> None:
        if self.on_traffic is not None:
            self.on_traffic(counts)

    def _batch(self, record: BatchRecord, counts: Mapping[str, float]) -> None:
        if self.on_batch is not None:
            self.on_batch(record, counts)
        elif counts:
            self._count(counts)

    def traffic(self, before: JudgeTraffic | None = None) -> JudgeTraffic:
        """What this run's judges were asked and answered, added to ``before`` (the earlier
        parts of a resumed run)."""
        before = before or JudgeTraffic()
        cache = self.cache
        return JudgeTraffic(
            name=self.name or before.name,
            requests=before.requests + self.requests,
            retries=before.retries + self.retries,
            throttled_429=before.throttled_429 + self.throttled,
            cache=CacheUse(
                mode=self._options.cache,
                path=str(cache.path) if cache else before.cache.path,
                hits=before.cache.hits + (cache.hits if cache else 0),
                stored=before.cache.stored + (cache.stored if cache else 0),
            ),
            learned=merged_lessons(before.learned, self.learned),
            price=self.price or before.price,
        )

    @property
    def learned(self) -> tuple[LearnedParameter, ...]:
        """The parameters the judges' models refused this run, and what is sent instead."""
        found = []
        for limited in self._limited.values():
            for lesson in learned_parameters_of(limited.judge):
                found.append(
                    LearnedParameter(
                        model=lesson.model,
                        param=lesson.param,
                        action=lesson.action,
                        renamed_to=lesson.renamed_to,
                        code=lesson.code,
                        message=lesson.message,
                        refused=lesson.refused,
                    )
                )
        return tuple(found)

    @property
    def price(self) -> PriceUsed | None:
        """What the judge's tokens are counted at, and where that price came from; ``None``
        when it is not known, or the run has judges of several."""
        judges = {id(limited.judge): limited.judge for limited in self._limited.values()}
        if len(judges) != 1:
            return None
        (judge,) = judges.values()
        price = judge_price(judge)
        if price is None:
            return None
        known = looked_up_price(judge)
        return PriceUsed(
            input=price.input,
            output=price.output,
            batch=price.batch,
            source=known.source if known is not None else GIVEN,
            model=known.model if known is not None else None,
        )

    @property
    def name(self) -> str | None:
        """The judges' names (a panel's own: ``panel(mean): a, b``), sorted."""
        names = sorted(
            {
                judge_name(limited.judge)
                for key, limited in self._limited.items()
                if key not in self._in_panels
            }
            | self._panels
        )
        return ", ".join(names) or None

    @property
    def requests(self) -> int:
        return sum(limited.requests_sent for limited in self._limited.values())

    @property
    def retries(self) -> int:
        return sum(limited.retries for limited in self._limited.values())

    @property
    def throttled(self) -> int:
        return sum(
            limited.throttled
            for limited in self._limited.values()
            if isinstance(limited, LimitedJudge)
        )

    def describe(self) -> str:
        """The judges' figures for the progress display; each named, when there are several
        (a panel's), so that one judge's held slots or rate limit is told from another's."""
        several = len(self._limited) > 1
        return "; ".join(
            f"{limited.name} {limited.describe()}" if several else limited.describe()
            for limited in self._limited.values()
        )

    def __bool__(self) -> bool:
        """Whether any scorer's judge is wrapped (a run of other scorers has none)."""
        return bool(self._limited)

    async def aclose(self) -> None:
        """Close the judges this run made, and the cache; the caller's own judges stay open."""
        try:
            for judge in self._owned:
                await close_judge(judge)
        finally:
            if self.cache is not None:
                self.cache.close()
