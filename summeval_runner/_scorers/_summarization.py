"""The summarization scorer (SPEC §1): alignment and coverage, three judge calls."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar, get_args

from pydantic import BaseModel, ValidationError, model_validator

from summeval_runner._errors import (
    ConfigError,
    InputError,
    JudgeAPIError,
    JudgeError,
    JudgeOutputError,
    JudgeUnavailableError,
)
from summeval_runner._judges._panel import JudgePanel, resolve_model
from summeval_runner._judges._protocol import (
    REPLY_MODELS,
    AnalyzeInput,
    AnalyzeReply,
    AnalyzeStepResult,
    AsyncClosing,
    ClaimsReply,
    CoverageBasis,
    Judge,
    JudgeReply,
    JudgeRequest,
    KeyFactsReply,
    PreprocessInput,
    PreprocessStepResult,
    PromptMessage,
    QuestionVerdict,
    ReasonInput,
    ReasonStepResult,
    Step,
    StepInput,
    close_judge,
    judge_name,
    judge_price,
    request_body_of,
    strict_json_schema,
)
from summeval_runner._messages import extract_source, extract_summary
from summeval_runner._scorers._fences import new_marker
from summeval_runner._scorers._flags import flag_names, flag_spans
from summeval_runner._scorers._outcome import item_status
from summeval_runner._scorers._prompts import (
    PROMPT_VERSION,
    analyze_messages,
    preprocess_messages,
    reask_messages,
    reason_messages,
)
from summeval_runner._scorers._questions import (
    QUESTIONS_MODES,
    QuestionBank,
    QuestionKey,
    QuestionsMode,
    drawer_fingerprint,
    source_fingerprint,
)
from summeval_runner._scorers._reference import CoverageReference, coverage_reference
from summeval_runner._scorers._result import (
    EVALUATION_PROGRESS,
    SUMMARIZATION_SCORER_ID,
    ErrorInfo,
    ExchangeStatus,
    JudgeExchange,
    Status,
    StepUsage,
    SummarizationResult,
    Usage,
    add_costs,
    add_usage,
    alignment_of,
    asked_questions,
    coverage_of,
    panel_figure,
    score_of,
)
from summeval_runner._secrets import scrub

SourceExtractor = Callable[[Any, Any], str]
_Output = TypeVar("_Output", bound=BaseModel)
# Enough of a bad reply to see what went wrong, not enough to bloat a results table.
_RAW_REPLY_LIMIT = 2000


class _DrawnQuestions(PreprocessStepResult):
    """A source's questions drawn for every item of it (``per_source``), as the scorer insists
    on them: at least one. An empty set is not shared (each item of the source would get
    coverage 0), and kept for the item that drew it, it would measure that item on no question
    while the others of its source are asked a set drawn after it: so it is re-asked as a reply
    that does not fit, and only a judge that still writes none gets the spec's rule (no
    question: score 0)."""

    @model_validator(mode="after")
    def _at_least_one_question(self) -> _DrawnQuestions:
        if not any(question.strip() for question in self.questions):
            raise ValueError(
                "questions is empty: write at least one closed question about the source"
            )
        return self


class _DrawnKeyFacts(KeyFactsReply):
    """A reference summary's key facts as the scorer insists on them: at least one (none would
    measure the item on nothing); re-asked like a draw of no question."""

    @model_validator(mode="after")
    def _at_least_one_key_fact(self) -> _DrawnKeyFacts:
        if not any(fact.strip() for fact in self.key_facts):
            raise ValueError("key_facts is empty: write at least one key fact of the reference")
        return self


_SCHEMAS = {name: strict_json_schema(model) for name, model in REPLY_MODELS.items()}


@dataclass(frozen=True, kw_only=True)
class SummarizationMetricOptions:
    """Options of the summarization scorer; every rule is checked when the object is built.

    ``source_extractor(input, output)`` takes precedence over ``source``, which takes precedence
    over the first user message of the input. ``max_reasks`` bounds how often a malformed judge
    reply is asked again, per step. ``questions`` is ``"per_source"`` (the coverage questions of
    a source are drawn once, by its first evaluation, and every evaluation of that source is
    asked the same ones) or ``"per_item"`` (each evaluation draws its own, with its summary in
    view).
    """

    source: str | None = None
    source_extractor: SourceExtractor | None = None
    max_questions: int = 10
    scale: float = 1.0
    max_reasks: int = 2
    questions: QuestionsMode = "per_source"

    def __post_init__(self) -> None:
        _require_count("max_questions", self.max_questions, minimum=1)
        _require_count("max_reasks", self.max_reasks, minimum=0)
        if self.questions not in get_args(QuestionsMode):
            raise ConfigError(
                f"questions must be one of {', '.join(QUESTIONS_MODES)}, got {self.questions!r}"
            )
        scale: object = self.scale
        if isinstance(scale, bool) or not isinstance(scale, int | float):
            raise ConfigError(f"scale must be a number > 0, got {scale!r} ({type(scale).__name__})")
        if not math.isfinite(scale) or scale <= 0:
            raise ConfigError(f"scale must be > 0 and finite, got {scale!r}")
        if self.source is not None and not isinstance(self.source, str):
            raise ConfigError(f"source must be a string, got {type(self.source).__name__}")
        if self.source_extractor is not None and not callable(self.source_extractor):
            raise ConfigError(
                "source_extractor must be a callable (input, output) -> str, "
                f"got {type(self.source_extractor).__name__}"
            )

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> SummarizationMetricOptions:
        """Build from a plain mapping with the same keys; an unknown key is an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(map(str, options)) - known)
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r}; expected one of: {', '.join(sorted(known))}"
            )
        return cls(**options)


def _require_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})"
        )
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")


@dataclass
class _Meter:
    # Local to one run() call: the scorer itself holds no per-evaluation state.
    usage: dict[Step, StepUsage] = field(default_factory=dict)
    # Each judge request and what came of it, when transcripts are kept; None: not kept, and
    # nothing of them is built.
    exchanges: list[JudgeExchange] | None = None

    def add(
        self,
        step: Step,
        *,
        input_tokens: int,
        output_tokens: int,
        latency_s: float,
        retries: int = 0,
        cost: float | None = 0.0,
        reasoning_tokens: int = 0,
        paid: bool = True,
    ) -> None:
        """One call of ``step``. ``paid``: this call paid for its reply; one paid for
        elsewhere (the cache's, a shared one) adds no tokens: they are counted where paid."""
        so_far = self.usage.get(step, StepUsage())
        if not paid:
            input_tokens = output_tokens = reasoning_tokens = 0
        self.usage[step] = StepUsage(
            calls=so_far.calls + 1,
            input_tokens=so_far.input_tokens + input_tokens,
            output_tokens=so_far.output_tokens + output_tokens,
            reasoning_tokens=so_far.reasoning_tokens + reasoning_tokens,
            latency_s=so_far.latency_s + latency_s,
            retries=so_far.retries + retries,
            cost=add_costs((so_far.cost, cost)),
            reused=so_far.reused + (not paid),
        )

    def frozen(self) -> Usage:
        return Usage(**self.usage)

    @property
    def transcript(self) -> tuple[JudgeExchange, ...]:
        return tuple(self.exchanges) if self.exchanges is not None else ()


@dataclass(frozen=True)
class SummarizationScorer(AsyncClosing):
    """Scores a summary against its source: ``min(alignment, coverage) * scale``.

    Stateless: one instance serves any number of concurrent evaluations. Build it with
    ``create_summarization_scorer``.

    With a ``JudgePanel`` as its judge, every judge of the panel makes the three steps of each
    evaluation: the first draws the coverage questions (per source or per item, as
    ``options.questions`` says) and every judge answers those; the others' preprocess call asks
    for claims only, sent while the first draws. The result is the panel's
    (``SummarizationResult.panel`` holds each judge's own).

    A judge that holds connections (the OpenAI provider) keeps one HTTP client per event loop
    and closes it when that loop ends (``asyncio.run`` ends it), so a scorer used alone leaks
    nothing. ``async with scorer:`` or ``await scorer.aclose()`` closes it sooner.
    """

    judge: Judge | JudgePanel
    options: SummarizationMetricOptions
    # Where a source's questions are drawn once and shared (questions="per_source"); the runner
    # gives each run's scorers a bank backed by its journal and the response cache.
    question_bank: QuestionBank = field(default_factory=QuestionBank, compare=False, repr=False)
    # Which repeated judgment of an item this scorer makes (RunOptions.trials; from 0): its
    # requests carry it, so a sampling judge varies its seed and the cache keeps trials apart.
    trial: int = 0
    # Keep each judge request, its reply and its verdict in the result (its ``transcript``):
    # RunOptions.transcripts turns it on for a run.
    transcripts: bool = False

    id: ClassVar[str] = SUMMARIZATION_SCORER_ID
    name: ClassVar[str] = "Summarization"
    description: ClassVar[str] = (
        "Alignment (every claim of the summary is supported by the source) and coverage (closed "
        "questions drawn from the source, answered from the summary alone); the score is the "
        "lower of the two times the scale."
    )

    def with_judge(self, judge: Judge | JudgePanel) -> SummarizationScorer:
        """The same scorer with another judge or panel (the runner wraps judges in its
        limits)."""
        return replace(self, judge=judge)

    def with_question_bank(self, bank: QuestionBank) -> SummarizationScorer:
        """The same scorer drawing and sharing questions through ``bank`` (a run's)."""
        return replace(self, question_bank=bank)

    def with_trial(self, trial: int) -> SummarizationScorer:
        """The same scorer making trial ``trial`` of a repeated judgment (from 0)."""
        return replace(self, trial=trial)

    def with_transcripts(self, keep: bool = True) -> SummarizationScorer:
        """The same scorer keeping (or not) a transcript of its judge requests in each result:
        the messages as sent, the settings, the reply and its verdict or error, re-asks
        included (``SummarizationResult.transcript``)."""
        return replace(self, transcripts=keep)

    async def aclose(self) -> None:
        """Close the judge's connections opened from the running event loop, if it holds any.

        The scorer stays usable: a later call opens a new connection.
        """
        judges = self.judge.judges if isinstance(self.judge, JudgePanel) else (self.judge,)
        for judge in judges:
            await close_judge(judge)

    @property
    def _one(self) -> Judge:
        """The judge of this evaluation: a panel's evaluation runs judge by judge."""
        if isinstance(self.judge, JudgePanel):
            raise TypeError("a panel's evaluation is made by each of its judges in turn")
        return self.judge

    def source_of(self, input: Any, output: Any) -> str:
        """The text the summary is judged against, by the precedence of SPEC §1.2."""
        if self.options.source_extractor is not None:
            source = self.options.source_extractor(input, output)
            if not isinstance(source, str):
                raise InputError(
                    f"source_extractor must return a string, got {type(source).__name__}"
                )
            return source
        if self.options.source is not None:
            return self.options.source
        return extract_source(input)

    async def run(
        self, *, input: Any, output: Any, ground_truth: Any = None
    ) -> SummarizationResult:
        """Score one evaluation. Judge failures become a result with status ``"error"``.

        ``ground_truth`` (the seed's ``groundTruth``) is what coverage is measured against
        (SPEC §1.7): ``None``, questions drawn from the source; a string, a reference summary
        whose key facts the judge draws; a list of strings, key facts; a mapping naming its
        kind (``{"key_facts": [...]}``, ``{"questions": [...]}``, ``{"reference": "..."}``).

        Raises ``InputError`` for a payload or a ground truth that cannot be read, and
        ``JudgeUnavailableError`` when the judge refuses the credentials or cannot be reached
        (no other evaluation could succeed either).
        """
        reference = coverage_reference(ground_truth)
        summary = extract_summary(output)
        source = self.source_of(input, output)
        if not source.strip():
            # The data's failure: nothing to judge against, whatever the summary says; left out
            # of the means and counted apart (SPEC §1.3).
            both = "" if summary.strip() else " (and so is the summary)"
            return self._result(
                source=source,
                summary=summary,
                status="unscorable",
                score=0.0,
                reason=f"The source is empty{both}, so there is nothing to judge the summary "
                "against; the item is unscorable and left out of the means.",
                usage=Usage(),
                reference=reference,
            )
        if not summary.strip():
            # The system's failure: it returned nothing. Scored 0 and counted as 0 everywhere,
            # so a system cannot raise its mean by leaving its hardest items blank.
            return self._result(
                source=source,
                summary=summary,
                status="blank_summary",
                score=0.0,
                reason="The summary is empty, so it states nothing of the source; "
                "the score is 0 by rule and counts as 0 in the means.",
                usage=Usage(),
                reference=reference,
            )
        if isinstance(self.judge, JudgePanel):
            return await self._by_panel(self.judge, summary, source, reference)
        return await self._evaluate(summary, source, reference)

    async def _by_panel(
        self,
        panel: JudgePanel,
        summary: str,
        source: str,
        reference: CoverageReference | None,
    ) -> SummarizationResult:
        """Every judge of the panel judges the evaluation; the first draws the questions."""
        drawn: asyncio.Future[tuple[str, ...] | None] = asyncio.get_running_loop().create_future()
        first, *others = panel.judges

        async def drawing() -> SummarizationResult:
            try:
                return await replace(self, judge=first)._evaluate(
                    summary, source, reference, _PanelDraw(drawn, draws=True)
                )
            finally:
                # A first judge that failed before it drew: the others are told so.
                if not drawn.done():
                    drawn.set_result(None)

        tasks = [asyncio.ensure_future(drawing())] + [
            asyncio.ensure_future(
                replace(self, judge=judge)._evaluate(
                    summary, source, reference, _PanelDraw(drawn, draws=False)
                )
            )
            for judge in others
        ]
        try:
            members = tuple(await asyncio.gather(*tasks))
        except BaseException:
            # One judge cannot go on (JudgeUnavailableError), or the item was stopped: none
            # of the others goes on sending.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return self._panel_result(panel, members, source, summary)

    def _panel_result(
        self,
        panel: JudgePanel,
        members: tuple[SummarizationResult, ...],
        source: str,
        summary: str,
    ) -> SummarizationResult:
        status = item_status(member.status for member in members)
        failed = next((m for m in members if m.status == "error"), None)
        score = (
            panel_figure((m.score for m in members), panel.aggregate)
            if status == "scored"
            else None
        )
        if failed is not None:
            reason = f"The panel's judge {failed.judge} failed: {failed.reason}"
        else:
            each = " ".join(
                f"[{m.judge}: {m.score if m.score is not None else 0.0:.3f}] {m.reason}"
                for m in members
            )
            shown = f"{score:.3f}" if score is not None else "n/a"
            reason = f"The {panel.aggregate} of {len(members)} judges' scores is {shown}. {each}"
        return SummarizationResult(
            status=status,
            score=score,
            reason=reason,
            usage=add_usage(m.usage for m in members),
            error=failed.error if failed is not None else None,
            max_questions=self.options.max_questions,
            scale=float(self.options.scale),
            judge=panel.name,
            prompt_version=PROMPT_VERSION,
            source=source,
            summary=summary,
            questions_shared=members[0].questions_shared,
            transcript=tuple(exchange for m in members for exchange in m.transcript),
            panel=members,
            aggregate=panel.aggregate,
            # The texts are the same for every judge: so are their flags.
            flags=members[0].flags,
            flag_spans=members[0].flag_spans,
            coverage_basis=members[0].coverage_basis,
        )

    async def _evaluate(
        self,
        summary: str,
        source: str,
        reference: CoverageReference | None = None,
        draw: _PanelDraw | None = None,
    ) -> SummarizationResult:
        """One judge's three steps; ``reference``: what the item's coverage is measured on, when
        the data gives it; ``draw``: as a panel's judge (its first, which draws the questions,
        or another, which answers them)."""
        basis = reference.basis if reference is not None else "source_questions"
        meter = _Meter(exchanges=[] if self.transcripts else None)
        preprocess: PreprocessStepResult | None = None
        analyze: AnalyzeStepResult | None = None
        shared = False
        try:
            preprocess, shared = await self._preprocess(summary, source, reference, meter, draw)
            asked = asked_questions(preprocess.questions, self.options.max_questions, basis)
            answers = await self._ask(
                AnalyzeInput(summary, asked, basis),
                AnalyzeReply,
                meter,
                check=functools.partial(_verdicts_for, len(asked)),
            )
            if asked and not answers.coverage:
                # No verdict at all is the judge's failure, never a coverage of 0.
                raise JudgeOutputError(
                    f"the judge's analyze reply held no verdict for the {len(asked)} questions "
                    f"after {self.options.max_reasks + 1} attempts",
                    step="analyze",
                    raw_reply=answers.model_dump_json(),
                    attempts=self.options.max_reasks + 1,
                )
            analyze = AnalyzeStepResult(
                coverage=tuple(
                    QuestionVerdict(question=question, answered=v.answered, reason=v.reason)
                    for question, v in zip(asked, answers.coverage, strict=False)
                )
            )
            alignment = alignment_of(preprocess)
            coverage = coverage_of(preprocess, analyze, self.options.max_questions, basis)
            score = score_of(alignment, coverage, self.options.scale)
            unanswered = tuple(
                question
                for position, question in enumerate(asked)
                if position >= len(analyze.coverage) or not analyze.coverage[position].answered
            )
            explanation = await self._ask(
                ReasonInput(
                    score=score,
                    scale=self.options.scale,
                    alignment_score=alignment,
                    coverage_score=coverage,
                    claim_count=len(preprocess.alignment),
                    question_count=len(asked),
                    unsupported_claims=tuple(v for v in preprocess.alignment if not v.supported),
                    unanswered_questions=unanswered,
                    basis=basis,
                ),
                ReasonStepResult,
                meter,
            )
        except JudgeUnavailableError:
            raise
        except JudgeError as error:
            step = _failed_step(preprocess, analyze)
            calls = meter.usage.get(step, StepUsage()).calls
            # A provider error's own count covers the runner's retries of the last call.
            attempts = calls - 1 + error.attempts if isinstance(error, JudgeAPIError) else calls
            return self._result(
                source=source,
                summary=summary,
                status="error",
                score=None,
                reason=f"The {step} step failed: {error}",
                usage=meter.frozen(),
                transcript=meter.transcript,
                preprocess=preprocess,
                analyze=analyze,
                questions_shared=shared,
                reference=reference,
                error=ErrorInfo(
                    type=type(error).__name__,
                    message=str(error),
                    step=step,
                    attempts=attempts,
                    raw_reply=error.raw_reply if isinstance(error, JudgeOutputError) else None,
                ),
            )
        return self._result(
            source=source,
            summary=summary,
            status="scored",
            score=score,
            reason=explanation.reason,
            usage=meter.frozen(),
            transcript=meter.transcript,
            preprocess=preprocess,
            analyze=analyze,
            questions_shared=shared,
            reference=reference,
        )

    async def _preprocess(
        self,
        summary: str,
        source: str,
        reference: CoverageReference | None,
        meter: _Meter,
        draw: _PanelDraw | None = None,
    ) -> tuple[PreprocessStepResult, bool]:
        """The preprocess step; as a panel's judge that does not draw, the claims alone (sent
        while the first judge draws), and the questions the first judge drew. Key facts or
        questions the data gives: the claims alone, every judge asking the given ones."""
        if reference is not None and reference.basis != "reference":
            claims = await self._ask(PreprocessInput(summary, source, 0), ClaimsReply, meter)
            given = PreprocessStepResult(alignment=claims.alignment, questions=reference.items)
            return given, False
        if draw is not None and not draw.draws:
            claims = await self._ask(PreprocessInput(summary, source, 0), ClaimsReply, meter)
            questions = await draw.questions
            if questions is None:
                raise JudgeError(
                    "the panel's first judge drew no questions (its preprocess step failed), so "
                    "there are none to answer"
                )
            return PreprocessStepResult(alignment=claims.alignment, questions=questions), True
        text = reference.text if reference is not None else None
        result, shared = await self._draw(summary, source, text, meter)
        if draw is not None:
            basis: CoverageBasis = "reference" if text is not None else "source_questions"
            draw.questions.set_result(
                asked_questions(result.questions, self.options.max_questions, basis)
            )
        return result, shared

    async def _draw(
        self, summary: str, source: str, reference: str | None, meter: _Meter
    ) -> tuple[PreprocessStepResult, bool]:
        """The preprocess step: the summary's claims, and the questions coverage is measured on
        (or, with a ``reference`` summary, its key facts); and whether those were shared (drawn
        by another evaluation of the same source, or of the same reference).

        ``per_item``: one call for claims and questions. ``per_source``: the bank's questions
        for this source (key facts for this reference) when it holds them (the call asks for
        claims only), else this evaluation draws them and publishes them for the others.
        """
        max_questions = self.options.max_questions
        drawn = PreprocessInput(summary, source, max_questions, reference)
        if self.options.questions == "per_item":
            return await self._draw_once(drawn, meter, insist=False), False
        bank = self.question_bank
        # A reference's key facts are shared by every item of that reference, apart from any
        # source's questions (the fingerprint of a text marked as a reference).
        shared_by = source if reference is None else f"reference\0{reference}"
        key = QuestionKey(source_fingerprint(shared_by), max_questions, PROMPT_VERSION)
        drawer = drawer_fingerprint(summary, self.trial)
        claim = await bank.claim(key, drawer)
        if not claim.draw and claim.questions is not None:
            claims = await self._ask(PreprocessInput(summary, source, 0), ClaimsReply, meter)
            return PreprocessStepResult(alignment=claims.alignment, questions=claim.questions), True
        try:
            result = await self._draw_once(drawn, meter, insist=True)
        except BaseException:
            bank.release(key)
            raise
        basis: CoverageBasis = "reference" if reference is not None else "source_questions"
        asked = asked_questions(result.questions, max_questions, basis)
        published = bank.publish(key, asked, drawer)
        if published != asked:
            # The set was drawn before, or by another process at the same moment: every item
            # of the source is asked that one, this one included.
            return PreprocessStepResult(alignment=result.alignment, questions=published), True
        return result, False

    async def _draw_once(
        self, drawn: PreprocessInput, meter: _Meter, *, insist: bool
    ) -> PreprocessStepResult:
        """One preprocess call that draws: claims and questions, or claims and a reference's
        key facts (``KeyFactsReply``, read as the step's result). ``insist``: re-ask a draw of
        none (a set shared by other items must hold one)."""
        if drawn.reference is None:
            return await self._ask(
                drawn, PreprocessStepResult, meter, insist=_DrawnQuestions if insist else None
            )
        facts = await self._ask(
            drawn, KeyFactsReply, meter, insist=_DrawnKeyFacts if insist else None
        )
        return PreprocessStepResult(alignment=facts.alignment, questions=facts.key_facts)

    def run_sync(self, *, input: Any, output: Any, ground_truth: Any = None) -> SummarizationResult:
        """``run`` for synchronous callers; not for use inside a running event loop.

        Each call runs its own event loop, so a judge's HTTP client is closed at the end of it;
        batches belong in ``await run(...)`` under one loop, where the client is reused.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(input=input, output=output, ground_truth=ground_truth))
        raise RuntimeError(
            "run_sync() was called from a running event loop; use await scorer.run(...)"
        )

    async def _ask(
        self,
        payload: StepInput,
        output_type: type[_Output],
        meter: _Meter,
        *,
        insist: type[_Output] | None = None,
        check: Callable[[_Output], str | None] | None = None,
    ) -> _Output:
        """One step: call the judge, validate the reply, re-ask a bounded number of times.

        ``insist``: a stricter shape the reply is re-asked for; the last reply is taken as
        ``output_type`` if it fits that (a draw of no question, kept under the spec's rule).
        ``check``: what is wrong with a reply that fits the schema (an analyze reply with
        another number of verdicts than questions), re-asked like one that does not fit while
        a re-ask is left; the last reply is returned as it is, for the caller to judge."""
        if check is None and isinstance(payload, PreprocessInput):
            check = _claims_found  # every preprocess shape holds claims
        # Fresh per request: no text can predict it, so none can close its fence.
        marker = new_marker()
        step, messages = _render(payload, marker)
        schema_name = f"summarization_{step}"
        if isinstance(payload, PreprocessInput) and payload.max_questions == 0:
            schema_name = "summarization_claims"
        elif isinstance(payload, PreprocessInput) and payload.reference is not None:
            schema_name = "summarization_key_facts"
        request = JudgeRequest(
            step=step,
            payload=payload,
            messages=messages,
            schema_name=schema_name,
            json_schema=_SCHEMAS[schema_name],
            prompt_version=PROMPT_VERSION,
            trial=self.trial,
            fence_marker=marker,
        )
        attempts = self.options.max_reasks + 1
        progress = EVALUATION_PROGRESS.get()
        for attempt in range(1, attempts + 1):
            if progress is not None:
                if progress.step != step:
                    progress.step, progress.calls = step, 0
                progress.calls += 1
            started = time.perf_counter()
            try:
                reply = await self._one.complete(request)
            except Exception as error:
                # A failed call still counts as an attempt, and its wait as latency; it cost
                # nothing at a known price, and what it cost is not known without one.
                latency_s = time.perf_counter() - started
                retries = max(0, getattr(error, "attempts", 1) - 1)
                meter.add(
                    step,
                    input_tokens=0,
                    output_tokens=0,
                    latency_s=latency_s,
                    retries=retries,
                    cost=0.0 if judge_price(self._one) is not None else None,
                )
                if meter.exchanges is not None:
                    meter.exchanges.append(
                        self._exchange(
                            request,
                            "failed",
                            error=f"{type(error).__name__}: {error}",
                            retries=retries,
                            latency_s=latency_s,
                        )
                    )
                raise
            latency_s = time.perf_counter() - started
            meter.add(
                step,
                input_tokens=reply.usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                reasoning_tokens=reply.usage.reasoning_tokens,
                latency_s=latency_s,
                retries=reply.retries,
                cost=reply.cost,
                paid=reply.paid_here,
            )
            raw = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
            # Insisted on while a re-ask is left; the last reply is read as the step's own shape.
            shape = insist if insist is not None and attempt < attempts else output_type
            parsed: _Output | None = None
            try:
                if isinstance(reply.content, str):
                    parsed = shape.model_validate_json(reply.content)
                else:
                    parsed = shape.model_validate(reply.content)
            except ValidationError as invalid:
                problem = _describe(invalid)
            if parsed is not None and check is not None and attempt < attempts:
                wrong = check(parsed)
                if wrong is not None:
                    parsed, problem = None, wrong
            if meter.exchanges is not None:
                meter.exchanges.append(
                    self._exchange(
                        request,
                        "invalid" if parsed is None else "ok",
                        reply,
                        raw,
                        verdict=None if parsed is None else parsed.model_dump(mode="json"),
                        error=problem if parsed is None else None,
                        latency_s=latency_s,
                    )
                )
            if parsed is not None:
                # An insisted shape is a subclass: the step's own type goes on, as without it.
                return parsed if shape is output_type else output_type(**dict(parsed))
            if attempt < attempts:
                request = replace(
                    request,
                    messages=reask_messages(request.messages, raw, problem),
                    attempt=attempt + 1,
                )
        raise JudgeOutputError(
            f"the judge's {step} reply did not match the step's schema after {attempts} "
            f"attempt{'s' if attempts > 1 else ''}: {problem}",
            step=step,
            # Scrubbed before it is cut: a key cut in two would escape the journal's scrub.
            raw_reply=scrub(raw)[:_RAW_REPLY_LIMIT],
            attempts=attempts,
        )

    def _exchange(
        self,
        request: JudgeRequest,
        status: ExchangeStatus,
        reply: JudgeReply | None = None,
        raw: str | None = None,
        *,
        verdict: dict[str, Any] | None = None,
        error: str | None = None,
        retries: int | None = None,
        latency_s: float = 0.0,
    ) -> JudgeExchange:
        """One request's line of the transcript: what the judge sends for it (the body the
        provider builds, when it has one), and what came back."""
        name = judge_name(self._one)
        body = request_body_of(self._one, request)
        if body is None:
            model, messages, settings = name, request.messages, None
        else:
            settings = {k: v for k, v in body.items() if k not in ("model", "messages")}
            model = str(body.get("model", name))
            messages = tuple(
                PromptMessage(role=m["role"], content=str(m["content"]))
                for m in body.get("messages", ())
            )
        usage = reply.usage if reply is not None else None
        return JudgeExchange(
            step=request.step,
            attempt=request.attempt,
            trial=request.trial,
            judge=name,
            model=model,
            messages=messages,
            settings=settings,
            reply=raw,
            status=status,
            verdict=verdict,
            error=error,
            cached=reply.cached if reply is not None else False,
            retries=reply.retries if reply is not None else retries or 0,
            input_tokens=usage.input_tokens if usage is not None else 0,
            output_tokens=usage.output_tokens if usage is not None else 0,
            latency_s=latency_s,
        )

    def _result(
        self,
        *,
        source: str,
        summary: str,
        status: Status,
        score: float | None,
        reason: str,
        usage: Usage,
        preprocess: PreprocessStepResult | None = None,
        analyze: AnalyzeStepResult | None = None,
        error: ErrorInfo | None = None,
        questions_shared: bool = False,
        transcript: tuple[JudgeExchange, ...] = (),
        reference: CoverageReference | None = None,
    ) -> SummarizationResult:
        # Data about the texts, whatever the judge made of them: never part of the score. The
        # data's key facts, questions or reference summary are its texts too.
        texts = {"summary": summary, "source": source}
        if reference is not None:
            texts[reference.basis] = reference.text or "\n".join(reference.items)
        spans = flag_spans(texts)
        return SummarizationResult(
            status=status,
            score=score,
            reason=reason,
            preprocess_step_result=preprocess,
            analyze_step_result=analyze,
            usage=usage,
            error=error,
            max_questions=self.options.max_questions,
            scale=float(self.options.scale),
            judge=self.judge.name if isinstance(self.judge, JudgePanel) else judge_name(self.judge),
            prompt_version=PROMPT_VERSION,
            source=source,
            summary=summary,
            questions_shared=questions_shared,
            transcript=transcript,
            flags=flag_names(spans),
            flag_spans=spans,
            coverage_basis=reference.basis if reference is not None else "source_questions",
        )


@dataclass(frozen=True)
class _PanelDraw:
    """A panel's questions for one evaluation: set by its first judge once drawn (``None``:
    it drew none, having failed), awaited by the others."""

    questions: asyncio.Future[tuple[str, ...] | None]
    draws: bool


def _render(payload: StepInput, marker: str) -> tuple[Step, tuple[PromptMessage, ...]]:
    if isinstance(payload, PreprocessInput):
        return "preprocess", preprocess_messages(payload, marker)
    if isinstance(payload, AnalyzeInput):
        return "analyze", analyze_messages(payload, marker)
    return "reason", reason_messages(payload, marker)


def _claims_found(reply: Any) -> str | None:
    """Why a preprocess reply is asked again: it lists no claim, though the summary is not
    blank (a lazy or cut reply would score the summary 0). A summary the judge still finds no
    claim in after the re-asks scores 0, by the spec's rule (SPEC §1.3)."""
    if reply.alignment:
        return None
    return (
        "alignment holds no claim, and the summary is not blank: list each claim the summary "
        "makes, with its verdict"
    )


def _verdicts_for(questions: int, reply: AnalyzeReply) -> str | None:
    """Why an analyze reply does not answer its questions one by one: it holds another number
    of verdicts (asked again; a reply still a few short counts them unanswered, SPEC §1.3)."""
    if len(reply.coverage) == questions:
        return None
    return (
        f"coverage holds {len(reply.coverage)} verdicts for {questions} questions: write one "
        "verdict per numbered question, in order"
    )


def _failed_step(
    preprocess: PreprocessStepResult | None, analyze: AnalyzeStepResult | None
) -> Step:
    if preprocess is None:
        return "preprocess"
    return "analyze" if analyze is None else "reason"


def _describe(error: ValidationError) -> str:
    """A validation error in one line: where, and what was wrong."""
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(map(str, item["loc"])) or "the reply"
        problems.append(f"{where}: {item['msg']}")
    return "; ".join(problems)


def create_summarization_scorer(
    model: str | Mapping[str, Any] | Judge | JudgePanel | Sequence[str | Mapping[str, Any] | Judge],
    options: SummarizationMetricOptions | Mapping[str, Any] | None = None,
) -> SummarizationScorer:
    """Build the summarization scorer; invalid options or judge settings fail here.

    ``model`` is ``"offline"``, ``"openai/<name>"``, a mapping with ``provider`` and its settings,
    or any object with an async ``complete(request)`` method; or a panel of judges: a list of
    those (``["openai/gpt-4.1-mini", "offline"]``), a ``JudgePanel`` (``aggregate="median"``),
    or a mapping ``{"provider": "panel", "judges": [...], "aggregate": "mean"}``.

    >>> scorer = create_summarization_scorer("offline", {"max_questions": 5})
    >>> source = "The bridge opened on Monday. It cost 40 million dollars. Traffic fell by half."
    >>> scorer.run_sync(input=source, output=source).score
    1.0
    >>> create_summarization_scorer("offline", {"max_questions": 0})
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: max_questions must be >= 1, got 0
    """
    if options is None:
        resolved = SummarizationMetricOptions()
    elif isinstance(options, SummarizationMetricOptions):
        resolved = options
    elif isinstance(options, Mapping):
        resolved = SummarizationMetricOptions.from_mapping(options)
    else:
        raise ConfigError(
            "options must be SummarizationMetricOptions, a mapping or None, "
            f"got {type(options).__name__}"
        )
    return SummarizationScorer(judge=resolve_model(model), options=resolved)
