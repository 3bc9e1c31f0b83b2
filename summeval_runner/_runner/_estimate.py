"""What a run will ask of its judge before it asks anything: requests, tokens and cost.

``estimate_evals`` walks the run's items through the real scorer with a judge that answers
from the response cache where the cache holds the reply (a request the run will not pay for)
and otherwise with a reply sized like a careful model's (``model_reply``), counting each request
it would send: its prompt as rendered (four bytes of text a token, the JSON schema included)
and that reply. The scorer's own flow decides what is asked: three calls an item, claims only
where a source's questions are shared, the re-asks it would make none. An agent under test is not
called: its summaries are taken to be the source's first three sentences (the agent's own
estimate of its call, when it gives one, is counted apart). Nothing is written, nothing is sent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from summeval_runner._errors import ConfigError
from summeval_runner._inputs._datasets import Item
from summeval_runner._judges._panel import JudgePanel, judges_of
from summeval_runner._judges._prices import looked_up_price
from summeval_runner._judges._protocol import (
    AnalyzeInput,
    Judge,
    JudgeReply,
    JudgeRequest,
    PreprocessInput,
    Price,
    TokenUsage,
    agent_pricing,
    cache_identity_of,
    judge_name,
    judge_price,
)
from summeval_runner._judges._request import estimate_tokens
from summeval_runner._judges._text import split_sentences
from summeval_runner._messages import extract_source
from summeval_runner._runner._cache import (
    AgentCache,
    CachedQuestions,
    ResponseCache,
    agent_key,
    default_cache_path,
    request_key,
)
from summeval_runner._runner._items import prepare, shard_rule
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._sync import sync_twin
from summeval_runner._scorers._questions import QuestionBank
from summeval_runner._scorers._reference import takes_ground_truth
from summeval_runner._scorers._result import add_costs

# How a careful model's replies are sized (bench/loopback_judge.py answers the same way): a
# one-sentence reason per claim and per verdict, questions of at most 12 words, a two-sentence
# explanation.
_REASON = "The source states this in its second paragraph, with the same figure."
_EXPLANATION = (
    "Coverage set the score: the summary answers 7 of the 10 questions and the source supports "
    "3 of its 4 claims. It leaves out the figures and the dates the source gives."
)
# The agent's summary, when an agent under test would write it: the source's first sentences.
_SUMMARY_SENTENCES = 3


def request_tokens(request: JudgeRequest) -> int:
    """A request's prompt in tokens, as a provider would count it: its messages at four bytes of
    text a token, and the JSON schema it carries."""
    schema = json.dumps(request.json_schema, separators=(",", ":"))
    return estimate_tokens(m.content for m in request.messages) + math.ceil(len(schema) / 4)


def model_reply(request: JudgeRequest) -> dict[str, Any]:
    """A reply to ``request`` sized like a careful model's: one claim per summary sentence,
    the questions asked for, a verdict per question, a two-sentence explanation."""
    payload = request.payload
    if isinstance(payload, PreprocessInput):
        claims = [
            {"claim": sentence, "supported": True, "reason": _REASON}
            for sentence in split_sentences(payload.summary)
        ]
        if request.schema_name == "summarization_claims":
            return {"alignment": claims}
        if payload.reference is not None:
            # A reference summary's key facts: one a sentence of it.
            return {
                "alignment": claims,
                "key_facts": split_sentences(payload.reference)[: payload.max_questions],
            }
        facts = split_sentences(payload.source)[: payload.max_questions]
        questions = [
            f"Does it say {' '.join(fact.split()[:9]).rstrip('.').lower()}?" for fact in facts
        ]
        return {"alignment": claims, "questions": questions}
    if isinstance(payload, AnalyzeInput):
        return {"coverage": [{"answered": True, "reason": _REASON} for _ in payload.questions]}
    return {"reason": _EXPLANATION}


def reply_tokens(content: Mapping[str, Any]) -> int:
    """A reply's tokens at four bytes of text a token."""
    return math.ceil(len(json.dumps(content, separators=(",", ":"))) / 4)


def expected_output_tokens(request: JudgeRequest) -> int:
    """The tokens a careful model's reply to ``request`` would have."""
    return reply_tokens(model_reply(request))


@dataclass
class StepEstimate:
    """One kind of request of the run: how many go out, how many the cache answers, and the
    tokens of those that go out."""

    requests: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class JudgeEstimate:
    """One judge's part of an estimate (each judge of a panel has its own): its requests, those
    the cache answers, the tokens of those sent, and their cost (``None``: its price is not
    known)."""

    requests: int = 0
    cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0


@dataclass
class RunEstimate:
    """What a run would send and spend, estimated before any call (``estimate_evals``).

    ``steps`` counts the judge's requests by kind (``preprocess``: claims and questions,
    ``claims``: claims only, the source's questions being shared, ``analyze``, ``reason``).
    Costs are in US dollars, ``None`` where the price is not known; ``batch`` prices the
    judge's calls at its Batch API share. ``assumptions`` says what was taken for what could not
    be known. ``judges`` is each judge's part, by name: the judge's alone, or each of a panel's
    (whose ``price`` is then ``None``: each judge has its own).
    """

    items: int
    scorable: int
    trials: int
    judge: str
    price: Price | None
    batch: bool
    steps: dict[str, StepEstimate] = field(default_factory=dict)
    judge_cost: float | None = 0.0
    target_calls: int = 0
    target_cached: int = 0
    target_input_tokens: int = 0
    target_output_tokens: int = 0
    target_cost: float | None = 0.0
    assumptions: list[str] = field(default_factory=list)
    # Where the judge's price came from when it was not given: the price table's version.
    price_source: str | None = None
    judges: dict[str, JudgeEstimate] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(step.requests for step in self.steps.values())

    @property
    def cached(self) -> int:
        return sum(step.cached for step in self.steps.values())

    @property
    def input_tokens(self) -> int:
        return sum(step.input_tokens for step in self.steps.values())

    @property
    def output_tokens(self) -> int:
        return sum(step.output_tokens for step in self.steps.values())

    @property
    def total_cost(self) -> float | None:
        return add_costs((self.judge_cost, self.target_cost))


class _EstimatingJudge:
    """A judge that sends nothing: cached replies where the cache holds them, else a model
    reply, each request counted into the estimate."""

    def __init__(
        self,
        judge: Judge,
        estimate: RunEstimate,
        cache: ResponseCache | None,
        identity: Mapping[str, Any] | None,
    ) -> None:
        self.name = judge_name(judge)
        self._price = judge_price(judge)
        self._mine = estimate.judges.setdefault(
            self.name, JudgeEstimate(cost=0.0 if self._price is not None else None)
        )
        self._estimate = estimate
        self._cache = cache
        self._identity = identity

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        kind = "claims" if request.schema_name == "summarization_claims" else request.step
        step = self._estimate.steps.setdefault(kind, StepEstimate())
        if self._cache is not None and self._identity is not None:
            cached = self._cache.get(request_key(self._identity, request))
            if cached is not None:
                step.cached += 1
                self._mine.cached += 1
                return replace(cached, cost=0.0)
        content = model_reply(request)
        usage = TokenUsage(request_tokens(request), reply_tokens(content))
        step.requests += 1
        step.input_tokens += usage.input_tokens
        step.output_tokens += usage.output_tokens
        mine = self._mine
        mine.requests += 1
        mine.input_tokens += usage.input_tokens
        mine.output_tokens += usage.output_tokens
        price = self._price
        cost = price.cost(usage, batch=self._estimate.batch) if price is not None else None
        mine.cost = add_costs((mine.cost, cost))
        self._estimate.judge_cost = add_costs((self._estimate.judge_cost, cost))
        return JudgeReply(content=content, usage=usage, cost=cost)


def _lead(input: Any) -> str:
    return " ".join(split_sentences(extract_source(input))[:_SUMMARY_SENTENCES])


class _NotCached(Exception):
    """The agent's call is not in the cache: the estimate does not make it."""


class _PeekingAgentCache(AgentCache):
    """The response cache as an agent sees it in an estimate: a call it holds is answered (its
    summary is then the one the run will judge), any other raises ``_NotCached``, unmade."""

    async def complete(
        self,
        identity: Mapping[str, Any],
        request: Mapping[str, Any],
        call: Callable[[], Any],
    ) -> JudgeReply:
        found = self._cache.lookup(agent_key(identity, request)) if self._cache.reads else None
        if found is None:
            raise _NotCached
        return found


async def estimate_evals(
    *,
    scorers: Sequence[Any],
    data: Iterable[Mapping[str, Any] | Item],
    target: Callable[[Any], Any] | None = None,
    options: RunOptions | Mapping[str, Any] | None = None,
    **option_values: Any,
) -> RunEstimate:
    """Estimate the judge requests, tokens and cost of ``run_evals`` with the same arguments,
    making no judge call and calling no agent; the data is checked as a run checks it.

    Only the first scorer that takes a judge is estimated (the summarization scorer); each
    judge of a panel is counted on its own (``RunEstimate.judges``). The
    response cache is read (never written) when ``options.cache`` reads: requests it answers
    are counted apart, at no cost.
    """
    opts = RunOptions.of(options, option_values)
    judged = [s for s in scorers if callable(getattr(s, "with_judge", None))]
    if not judged:
        raise ConfigError("estimate_evals needs a scorer that takes a judge, got none")
    scorer = judged[0]
    judge = scorer.judge
    members = judges_of(judge)
    panel = isinstance(judge, JudgePanel)
    by = shard_rule(scorers, target is not None, opts.shard)
    items = prepare(data, scorers, target is not None, opts.shard, None, by or "id")
    estimate = RunEstimate(
        items=0,
        scorable=0,
        trials=opts.trials,
        judge=judge.name if isinstance(judge, JudgePanel) else judge_name(judge),
        price=None if panel else judge_price(members[0]),
        batch=opts.mode == "batch",
    )
    if any(judge_price(member) is None for member in members):
        estimate.judge_cost = None
    known = None if panel else looked_up_price(members[0])
    if known is not None:
        estimate.price_source = f"{known.source}'s price for {known.model}"
    identities = [cache_identity_of(member) for member in members]
    # The questions are the first judge's (a panel's first draws them).
    identity, first_name = identities[0], judge_name(members[0])
    cache = None
    agent_cached = callable(getattr(target, "with_cache", None))
    cached_judge = any(each is not None for each in identities)
    if opts.cache in ("read", "readwrite") and (cached_judge or agent_cached):
        path = opts.cache_path or default_cache_path()
        if path.exists():
            cache = ResponseCache(path, "read")
    try:
        wrapped = [
            _EstimatingJudge(member, estimate, cache if each else None, each)
            for member, each in zip(members, identities, strict=True)
        ]
        bound = scorer.with_judge(
            judge.with_judges(wrapped) if isinstance(judge, JudgePanel) else wrapped[0]
        )
        if callable(getattr(bound, "with_question_bank", None)):
            store = (
                CachedQuestions(cache, identity, first_name)
                if cache is not None and identity is not None
                else None
            )
            bound = bound.with_question_bank(QuestionBank(store=store))
        trial_scorers = [
            bound.with_trial(trial)
            if trial and callable(getattr(bound, "with_trial", None))
            else bound
            for trial in range(opts.trials)
        ]
        taking_ground_truth = [takes_ground_truth(each) for each in trial_scorers]
        estimate_target = getattr(target, "estimate_usage", None)
        # An agent that keeps its calls in the response cache (the LLM summarizer): a call the
        # cache holds gives the summary the run will judge, at no cost.
        with_cache = getattr(target, "with_cache", None)
        peeking = (
            with_cache(_PeekingAgentCache(cache))
            if cache is not None and callable(with_cache)
            else None
        )
        for _, item in items.draw():
            estimate.items += 1
            output = item.output
            if peeking is not None:
                try:
                    output = await peeking(item.input)
                    estimate.target_cached += 1
                    target_answered = True
                except _NotCached:
                    target_answered = False
            else:
                target_answered = False
            if target is not None and not target_answered:
                output = _lead(item.input)
                estimate.target_calls += 1
                if callable(estimate_target):
                    usage, cost = estimate_target(item.input, output)
                    estimate.target_input_tokens += usage.input_tokens
                    estimate.target_output_tokens += usage.output_tokens
                    estimate.target_cost = add_costs((estimate.target_cost, cost))
                elif agent_pricing(target) == "unset":
                    estimate.target_cost = None
            for each, taking in zip(trial_scorers, taking_ground_truth, strict=True):
                if item.ground_truth is not None and taking:
                    result = await each.run(
                        input=item.input, output=output, ground_truth=item.ground_truth
                    )
                else:
                    result = await each.run(input=item.input, output=output)
            # A blank text (summary or source) is scored by rule, with no judge call.
            estimate.scorable += getattr(result, "status", "scored") not in (
                "unscorable",
                "blank_summary",
            )
    finally:
        if cache is not None:
            cache.close()
    if target is not None:
        estimate.assumptions.append(
            f"the agent's summaries, where the cache does not hold its call, are taken to be each "
            f"source's first {_SUMMARY_SENTENCES} sentences"
        )
    estimate.assumptions.append(
        "prompts are counted as rendered, replies as a careful model's (one claim per summary "
        "sentence, every question asked), at four bytes of text a token; no re-ask or retry"
    )
    return estimate


estimate_evals_sync = sync_twin(estimate_evals)
