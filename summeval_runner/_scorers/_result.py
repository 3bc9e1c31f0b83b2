"""The summarization scorer's result: an immutable value that round-trips through JSON."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from summeval_runner._judges._panel import Aggregate
from summeval_runner._judges._protocol import (
    AnalyzeStepResult,
    CoverageBasis,
    PreprocessStepResult,
    PromptMessage,
    Step,
)
from summeval_runner._scorers._flags import FlagName, FlagSpan

Status = Literal["scored", "blank_summary", "unscorable", "error"]
# Every status, in the order a run's counts list them.
STATUSES: tuple[Status, ...] = ("scored", "blank_summary", "unscorable", "error")
# The statuses whose score counts in every mean, interval, comparison and gate (SPEC §1.3): a
# judged summary's, and a blank summary's 0 (the system under test returned nothing, so it
# cannot raise its mean by leaving its hardest items blank). An unscorable item (a blank
# source: the data's failure) and an error are left out, and counted apart.
COUNTED: frozenset[Status] = frozenset({"scored", "blank_summary"})
# The summarization scorer's id, in every row it writes.
SUMMARIZATION_SCORER_ID = "summarization-scorer"
# The dimensions a summarization result reports: each metric's name, and the result's (and the
# items table's) column that holds it.
METRICS: Mapping[str, str] = {
    "score": "score",
    "alignment": "alignment_score",
    "coverage": "coverage_score",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepUsage(_Frozen):
    """What one step cost: judge calls (re-asks included), tokens, wall time in seconds, and
    US dollars.

    ``retries`` counts requests sent again after a transient failure (a 429, a 5xx, a timeout)
    by a retrying wrapper such as ``summeval-run``'s; ``calls`` does not include them. The
    tokens and ``cost`` are what this evaluation's calls were billed: a reply paid for
    elsewhere (the response cache held it, or another evaluation's alike request was answered
    by it: ``JudgeReply.shared``) adds none, and is counted in ``reused``, so that a run's
    evaluations add up to its bill. ``cost`` is ``None`` when the judge's price is not known.
    ``reasoning_tokens`` are a reasoning model's, of ``output_tokens`` (billed among them),
    shown apart.
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    latency_s: float = 0.0
    retries: int = 0
    cost: float | None = 0.0
    reused: int = 0


class Usage(_Frozen):
    """Usage per step, and totals over the steps."""

    preprocess: StepUsage = StepUsage()
    analyze: StepUsage = StepUsage()
    reason: StepUsage = StepUsage()

    @property
    def calls(self) -> int:
        return self.preprocess.calls + self.analyze.calls + self.reason.calls

    @property
    def input_tokens(self) -> int:
        return self.preprocess.input_tokens + self.analyze.input_tokens + self.reason.input_tokens

    @property
    def retries(self) -> int:
        return self.preprocess.retries + self.analyze.retries + self.reason.retries

    @property
    def reused(self) -> int:
        """Calls answered by a reply paid for elsewhere (the response cache, another
        evaluation's alike request): their tokens and cost are not this evaluation's."""
        return self.preprocess.reused + self.analyze.reused + self.reason.reused

    @property
    def output_tokens(self) -> int:
        return (
            self.preprocess.output_tokens + self.analyze.output_tokens + self.reason.output_tokens
        )

    @property
    def reasoning_tokens(self) -> int:
        """A reasoning model's reasoning tokens over the steps, of ``output_tokens``."""
        steps = (self.preprocess, self.analyze, self.reason)
        return sum(step.reasoning_tokens for step in steps)

    @property
    def cost(self) -> float | None:
        """US dollars over the steps; ``None`` when any step's cost is not known."""
        return add_costs(step.cost for step in (self.preprocess, self.analyze, self.reason))


def add_costs(costs: Iterable[float | None]) -> float | None:
    """The sum of some costs, or ``None`` if any of them is not known.

    >>> add_costs([0.5, 0.25]), add_costs([0.5, None])
    (0.75, None)
    """
    total = 0.0
    for cost in costs:
        if cost is None:
            return None
        total += cost
    return total


FailedStep = Literal["target", "preprocess", "analyze", "reason", "scorer"]


class ErrorInfo(_Frozen):
    """Why an evaluation failed: the error's type and message, the step, and the judge's reply.

    ``step`` is the scorer step that failed (for an item past its timeout, the step it was in),
    ``"target"`` when the agent under test failed, or ``"scorer"`` when a scorer raised outside
    its judge steps (a user's scorer, a result that is not a score). ``attempts`` is the number
    of calls made for that step (judge requests, re-asks and retries included; 1 for a target
    or a scorer). The runner sets both on every error it records.
    """

    type: str
    message: str
    step: FailedStep | None = None
    attempts: int = 0
    raw_reply: str | None = None


ExchangeStatus = Literal["ok", "invalid", "failed"]


class JudgeExchange(_Frozen):
    """One judge request of an evaluation and what came of it: a line of its transcript, kept
    when asked (``RunOptions.transcripts``; ``SummarizationScorer.with_transcripts``).

    ``step`` and ``attempt`` (1 for the step's first ask, 2 and on for each re-ask after a reply
    that did not fit the step's schema); ``trial`` (``RunOptions.trials``, from 0). ``judge`` is
    the judge's name, ``model`` the model the request named (the judge's name for a judge that
    sends no request body: the offline judge). ``messages`` are the messages as sent (system,
    user; a re-ask adds the previous reply and the problem found in it), ``settings`` the rest
    of the request body as sent (temperature, seed, response_format with its schema,
    max_tokens; ``None`` for a judge that sends none). ``reply`` is the judge's reply text
    (``None`` when the request failed). ``status``: ``ok`` (the reply fit: ``verdict`` is it,
    parsed), ``invalid`` (it did not: ``error`` says why, and the step was re-asked while a
    re-ask was left) or ``failed`` (the request raised, after the run's retries: ``error``).
    ``cached``: the response cache held the reply, so no request went out for it; it is the
    reply stored when the same request was first answered. ``retries``, the tokens and
    ``latency_s`` are the request's own, as in ``Usage``.
    """

    step: Step
    attempt: int
    trial: int = 0
    judge: str
    model: str
    messages: tuple[PromptMessage, ...]
    settings: dict[str, Any] | None = None
    reply: str | None = None
    status: ExchangeStatus
    verdict: dict[str, Any] | None = None
    error: str | None = None
    cached: bool = False
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0


@dataclass
class EvaluationProgress:
    """Where one item's evaluation has got to: the step in progress and the judge calls made so
    far. The runner reads it when it stops an item from outside (``item_timeout_s``), so the
    error names the step that was slow, not only the item. The agent under test adds what its
    calls used (``report_target_usage``): the runner counts it apart from the judge's."""

    step: FailedStep | None = None
    calls: int = 0
    target_input_tokens: int = 0
    target_output_tokens: int = 0
    target_cost: float | None = 0.0
    target_reported: bool = False
    # Of those tokens, the ones of calls a cache answered: not on the item's row, in the run's
    # traffic or its budget (no model spent them in this run).
    target_cached_input_tokens: int = 0
    target_cached_output_tokens: int = 0


# Set by the runner for each item; the summarization scorer reports each judge call into it.
EVALUATION_PROGRESS: ContextVar[EvaluationProgress | None] = ContextVar(
    "summeval_evaluation_progress", default=None
)


def report_target_usage(
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost: float | None = None,
    cached: bool = False,
) -> None:
    """Tell the run what a call of the agent under test used: its tokens, and its cost in US
    dollars (``None``: not known; then the agent's ``price``, when it has one, prices the
    tokens). Call it from the agent, once per model call, while ``run_evals`` runs it; the run
    counts the agent's tokens and cost apart from the judge's (``target_*`` columns of
    ``items.parquet``, the manifest's ``cost``), and a budget (``RunOptions.max_cost``,
    ``max_tokens``) counts them. ``cached``: a cache answered the call (give ``cost=0``): as a
    cached judge reply's, its tokens were paid for by the run that stored it, and are not on
    the item's row, in the run's traffic or its budget. Outside a run it does nothing.
    """
    progress = EVALUATION_PROGRESS.get()
    if progress is None:
        return
    progress.target_reported = True
    progress.target_input_tokens += input_tokens
    progress.target_output_tokens += output_tokens
    if cached:
        progress.target_cached_input_tokens += input_tokens
        progress.target_cached_output_tokens += output_tokens
    progress.target_cost = (
        None if cost is None or progress.target_cost is None else progress.target_cost + cost
    )


# The coverage bases whose questions (or key facts) the data gives: every one is asked, whatever
# max_questions says (it bounds what the judge draws).
GIVEN_BASES: frozenset[CoverageBasis] = frozenset({"key_facts", "questions"})


def asked_questions(
    questions: Sequence[str], max_questions: int, basis: CoverageBasis = "source_questions"
) -> tuple[str, ...]:
    """The questions coverage is measured on: the first N, N = min(len(questions), max_questions)
    of those the judge drew (from the source, or key facts from a reference summary); all of
    those the data gives (key facts, questions).

    The judge may return more than ``max_questions``; only these are asked and counted.

    >>> asked_questions(["a", "b", "c"], 2)
    ('a', 'b')
    >>> asked_questions(["a", "b", "c"], 2, "key_facts")
    ('a', 'b', 'c')
    """
    return tuple(questions if basis in GIVEN_BASES else questions[:max_questions])


def alignment_of(preprocess: PreprocessStepResult) -> float:
    """Supported claims over all claims; 0 when there is no claim."""
    claims = preprocess.alignment
    return sum(v.supported for v in claims) / len(claims) if claims else 0.0


def coverage_of(
    preprocess: PreprocessStepResult,
    analyze: AnalyzeStepResult,
    max_questions: int,
    basis: CoverageBasis = "source_questions",
) -> float:
    """Answered over N (``asked_questions``' rule), matching verdicts by position.

    A missing verdict counts as unanswered and verdicts beyond N are ignored; 0 when N is 0.
    """
    asked = len(asked_questions(preprocess.questions, max_questions, basis))
    if asked == 0:
        return 0.0
    return sum(v.answered for v in analyze.coverage[:asked]) / asked


def score_of(alignment: float, coverage: float, scale: float) -> float:
    """The lower dimension times ``scale``, unrounded."""
    return min(alignment, coverage) * scale


def panel_figure(values: Iterable[float | None], aggregate: Aggregate) -> float | None:
    """A panel's figure from its judges' own: their mean or median; ``None`` unless every judge
    has one (an evaluation a judge failed is the panel's error, never a figure of the others).

    >>> panel_figure([0.5, 1.0], "mean"), panel_figure([0.2, 0.5, 1.0], "median")
    (0.75, 0.5)
    >>> panel_figure([0.5, None], "mean") is None
    True
    """
    numbers = list(values)
    if not numbers or any(number is None for number in numbers):
        return None
    known = [number for number in numbers if number is not None]
    return statistics.fmean(known) if aggregate == "mean" else statistics.median(known)


def add_usage(usages: Iterable[Usage]) -> Usage:
    """Usage added up step by step (a panel's, over its judges)."""
    steps: dict[str, StepUsage] = {}
    for usage in usages:
        for step in ("preprocess", "analyze", "reason"):
            mine, so_far = getattr(usage, step), steps.get(step, StepUsage())
            steps[step] = StepUsage(
                calls=so_far.calls + mine.calls,
                input_tokens=so_far.input_tokens + mine.input_tokens,
                output_tokens=so_far.output_tokens + mine.output_tokens,
                reasoning_tokens=so_far.reasoning_tokens + mine.reasoning_tokens,
                latency_s=so_far.latency_s + mine.latency_s,
                retries=so_far.retries + mine.retries,
                cost=add_costs((so_far.cost, mine.cost)),
                reused=so_far.reused + mine.reused,
            )
    return Usage(**steps)


class SummarizationResult(_Frozen):
    """The outcome of one evaluation.

    ``status`` is ``"scored"``, ``"blank_summary"`` (the summary is blank: the system's failure,
    score 0 on every dimension, counted in every mean; no judge call), ``"unscorable"`` (the
    source is blank: the data's failure, score 0 by rule but left out of the means; no judge
    call) or ``"error"`` (``score`` is ``None`` and ``error`` says why; never a 0 that could
    be averaged in). ``alignment_score`` and ``coverage_score`` are derived from the verdicts.
    ``source`` and ``summary`` are the texts that were judged, as the scorer read them from the
    input and the output. ``questions_shared`` says the questions were drawn by another
    evaluation of the same source (``questions="per_source"``), not by this one's preprocess call.
    ``transcript`` holds every judge request the evaluation made, in order, when transcripts
    were asked for (``RunOptions.transcripts``); it is empty otherwise. ``flags`` names the
    manipulation checks the summary or the source tripped (``_flags.CHECKS``; empty when none)
    and ``flag_spans`` where each matched; they never change the score. ``coverage_basis`` says
    what coverage was measured on (SPEC §1.7): ``"source_questions"`` drawn by the judge, or the
    item's ground truth: ``"key_facts"``, ``"questions"`` (every one asked, whatever
    ``max_questions``), ``"reference"`` (key facts the judge drew from a reference summary).

    A panel's result (``JudgePanel``) holds each judge's own result in ``panel``, in the panel's
    order (the first drew the questions); its ``judge`` is the panel's name, its
    ``alignment_score``, ``coverage_score`` and ``score`` the ``aggregate`` (mean or median) of
    the judges', its status an error when any judge's is (``error`` is the first failure), its
    usage and transcript theirs together. Its own step results are ``None``: the verdicts are
    each judge's.

    >>> result = SummarizationResult(status="unscorable", score=0.0, reason="The summary is empty.",
    ...                              max_questions=10, scale=1.0, judge="offline",
    ...                              prompt_version="v")
    >>> SummarizationResult.model_validate_json(result.model_dump_json()) == result
    True
    """

    status: Status
    score: float | None
    reason: str
    preprocess_step_result: PreprocessStepResult | None = None
    analyze_step_result: AnalyzeStepResult | None = None
    usage: Usage = Usage()
    error: ErrorInfo | None = None
    max_questions: int
    scale: float
    judge: str
    prompt_version: str
    source: str | None = None
    summary: str | None = None
    questions_shared: bool = False
    transcript: tuple[JudgeExchange, ...] = ()
    panel: tuple[SummarizationResult, ...] = ()
    aggregate: Aggregate = "mean"
    flags: tuple[FlagName, ...] = ()
    flag_spans: tuple[FlagSpan, ...] = ()
    coverage_basis: CoverageBasis = "source_questions"

    @property
    def asked_questions(self) -> tuple[str, ...]:
        """The questions coverage was measured on (the first ``max_questions``); a panel's are
        those its first judge drew, which every judge answered."""
        if self.panel:
            return self.panel[0].asked_questions
        if self.preprocess_step_result is None:
            return ()
        return asked_questions(
            self.preprocess_step_result.questions, self.max_questions, self.coverage_basis
        )

    @property
    def alignment_score(self) -> float | None:
        """Supported claims / claims, or ``None`` when the claims were not judged; a panel's:
        the aggregate of its judges'; 0 for a blank summary, as its score."""
        if self.status == "blank_summary":
            return 0.0
        if self.panel:
            return panel_figure((r.alignment_score for r in self.panel), self.aggregate)
        if self.preprocess_step_result is None:
            return None
        return alignment_of(self.preprocess_step_result)

    @property
    def coverage_score(self) -> float | None:
        """Answered questions / N, or ``None`` when the questions were not answered; a panel's:
        the aggregate of its judges'; 0 for a blank summary, which answers nothing."""
        if self.status == "blank_summary":
            return 0.0
        if self.panel:
            return panel_figure((r.coverage_score for r in self.panel), self.aggregate)
        if self.preprocess_step_result is None or self.analyze_step_result is None:
            return None
        return coverage_of(
            self.preprocess_step_result,
            self.analyze_step_result,
            self.max_questions,
            self.coverage_basis,
        )
