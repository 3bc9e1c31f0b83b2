"""The judge protocol: one async method, and the values that cross it.

A judge receives a ``JudgeRequest`` for one step and returns a ``JudgeReply`` whose content must
validate against that step's schema. A request carries the step's rendered prompt (for model
judges) and the step's typed payload (for judges that work on the fields, like the offline
judge). Each payload holds only what its step may see: ``AnalyzeInput`` has no source field, so
no judge can answer coverage questions from the source.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from summeval_runner._judges._learned import Lesson

Step = Literal["preprocess", "analyze", "reason"]
STEPS: tuple[Step, ...] = ("preprocess", "analyze", "reason")

# What an item's coverage is measured on (SPEC §1.7): closed questions the judge draws from the
# source (the default), or what the data gives: key facts the summary must state, closed
# questions it must answer, or a reference summary whose key facts the judge draws.
CoverageBasis = Literal["source_questions", "key_facts", "questions", "reference"]
COVERAGE_BASES: tuple[CoverageBasis, ...] = (
    "source_questions",
    "key_facts",
    "questions",
    "reference",
)


class _Value(BaseModel):
    # Extra keys in a judge's JSON are ignored rather than re-asked: they cost nothing to drop.
    # Scalars are strict so that "yes" is never read as True.
    model_config = ConfigDict(frozen=True, extra="ignore")


# Every verdict object asks for its reason before its verdict (the schema's order is the order a
# model writes in): the evidence is written before the model commits. The claim or question
# judged comes first: it is what the reason is about.


class ClaimVerdict(_Value):
    """One atomic claim of the summary and whether the source supports it."""

    claim: StrictStr
    reason: StrictStr
    supported: StrictBool


class QuestionVerdict(_Value):
    """One coverage question and whether the summary alone answers it."""

    question: StrictStr
    reason: StrictStr
    answered: StrictBool


class PreprocessStepResult(_Value):
    """What the preprocess step returns: claims with verdicts, and coverage questions."""

    alignment: tuple[ClaimVerdict, ...]
    questions: tuple[StrictStr, ...]


class KeyFactsReply(_Value):
    """What a judge replies to the preprocess call of an item whose coverage is measured on a
    reference summary (SPEC §1.7): the summary's claims judged against the source, and the
    reference's key facts (drawn from the reference, never from the source)."""

    alignment: tuple[ClaimVerdict, ...]
    key_facts: tuple[StrictStr, ...]


class ClaimsReply(_Value):
    """What a judge replies to a preprocess call that asks for claims only: the questions of the
    source were drawn once already (``questions="per_source"``), by an earlier call."""

    alignment: tuple[ClaimVerdict, ...]


class AnalyzeStepResult(_Value):
    """What the analyze step returns: one verdict per question, in the questions' order."""

    coverage: tuple[QuestionVerdict, ...]


class AnswerVerdict(_Value):
    """The judge's verdict on one coverage question; the question itself is not repeated."""

    reason: StrictStr
    answered: StrictBool


class AnalyzeReply(_Value):
    """What a judge replies to the analyze step: one verdict per question, in the questions'
    order. The scorer pairs them with the questions it asked (an ``AnalyzeStepResult``); not
    echoing a question back saves a fifth of an evaluation's tokens."""

    coverage: tuple[AnswerVerdict, ...]


class ReasonStepResult(_Value):
    """What the reason step returns: an explanation for a person."""

    reason: StrictStr


# The reply each request asks the judge for, by the request's schema name (its JSON schema and
# its validation). A preprocess request asks for claims and questions, or for claims only when
# the source's questions were drawn already.
REPLY_MODELS: Mapping[str, type[_Value]] = {
    "summarization_preprocess": PreprocessStepResult,
    "summarization_claims": ClaimsReply,
    "summarization_key_facts": KeyFactsReply,
    "summarization_analyze": AnalyzeReply,
    "summarization_reason": ReasonStepResult,
}


def reply_model(request: JudgeRequest) -> type[_Value]:
    """The model a request's reply must validate against (its ``schema_name``'s)."""
    return REPLY_MODELS[request.schema_name]


@dataclass(frozen=True)
class PreprocessInput:
    """What the preprocess step sees: the summary, the source and the question budget.

    ``max_questions`` 0 asks for the summary's claims only: the source's questions were drawn
    already and are shared (``questions="per_source"``), or the data gives them. With a
    ``reference`` summary (SPEC §1.7), the call draws up to ``max_questions`` of its key facts
    in place of the source's questions."""

    summary: str
    source: str
    max_questions: int
    reference: str | None = None


@dataclass(frozen=True)
class AnalyzeInput:
    """What the analyze step sees: the summary and the questions. Never the source.

    ``basis`` says what the questions are: drawn from the source or given by the data as closed
    questions (``"source_questions"``, ``"questions"``: is each answered?), or key facts
    (``"key_facts"``, ``"reference"``: is each stated, possibly paraphrased?)."""

    summary: str
    questions: tuple[str, ...]
    basis: CoverageBasis = "source_questions"


@dataclass(frozen=True)
class ReasonInput:
    """What the reason step sees: the scores and the verdicts that set them. Never the source."""

    score: float
    scale: float
    alignment_score: float
    coverage_score: float
    claim_count: int
    question_count: int
    unsupported_claims: tuple[ClaimVerdict, ...]
    unanswered_questions: tuple[str, ...]
    basis: CoverageBasis = "source_questions"


StepInput = PreprocessInput | AnalyzeInput | ReasonInput


@dataclass(frozen=True)
class PromptMessage:
    """One chat message of a rendered prompt."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call: the step, its typed payload, its rendered prompt and its output schema.

    ``attempt`` counts from 1; a re-ask after a malformed reply carries the previous reply and
    the validation error at the end of ``messages``. ``trial`` numbers the repeated judgments of
    one item (``RunOptions.trials``, from 0): a judge that samples varies its seed by it, and
    the response cache keeps each trial's reply apart. ``fence_marker`` is the random marker of
    the fences the data's texts are in (``messages``): fresh per request, so no text can close
    its fence; the response cache keys a request with it replaced by a constant, so a rerun
    still finds its replies.
    """

    step: Step
    payload: StepInput
    messages: tuple[PromptMessage, ...]
    schema_name: str
    json_schema: Mapping[str, Any]
    prompt_version: str
    attempt: int = 1
    trial: int = 0
    fence_marker: str = ""


@dataclass(frozen=True)
class TokenUsage:
    """Tokens a judge call consumed, as the provider reported them (0 when it did not).

    ``reasoning_tokens`` are a reasoning model's, of its ``output_tokens`` (counted and billed
    among them, as the provider counts them), shown apart."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


# US dollars per million tokens: a dollar a token, far above any model's price.
MAX_PRICE = 1e6


class Price(BaseModel):
    """What a model's tokens cost: US dollars per million input and output tokens, and the share
    of that its provider's Batch API charges (``batch``; OpenAI's is half).

    >>> Price(input=2.5, output=10).cost(TokenUsage(1_000, 500))
    0.0075
    >>> Price(input=2.5, output=10).cost(TokenUsage(1_000, 500), batch=True)
    0.00375
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Finite and at most a dollar a token: a cost of inf (or one that overflows to it) would be
    # written into the manifest as JSON no strict parser reads, and a budget would mean nothing.
    input: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    output: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    batch: float = Field(default=0.5, gt=0, le=1)

    def cost(self, usage: TokenUsage, *, batch: bool = False) -> float:
        dollars = (usage.input_tokens * self.input + usage.output_tokens * self.output) / 1e6
        return dollars * self.batch if batch else dollars


# The offline judge's price: it reads text on this machine.
FREE = Price(input=0, output=0)


@dataclass(frozen=True)
class RateLimits:
    """What a server said of its rate limits beside a reply (OpenAI's ``x-ratelimit-*``
    headers): the limit per minute, what is left of it, and the seconds until it is whole
    again; for tokens and for requests. ``None`` where the server did not say."""

    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None
    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None


@dataclass(frozen=True)
class JudgeReply:
    """A judge's answer: JSON text, or an already-parsed mapping, to validate against the step.

    ``retries`` counts the requests a retrying wrapper (the runner's) sent again before this
    answer came back. ``cost`` is what the call cost in US dollars: its tokens at the judge's
    price, 0 for a reply the response cache held, ``None`` when the price is not known.
    ``rate_limits`` is what the server said of its limits, when it said. ``cached``: the
    response cache held this reply; no request was sent for it. ``shared``: another
    evaluation's request was answered by the same reply and paid for it (one batch line for two
    alike requests, a batch's reply read again): ``usage`` says what the reply was, and is
    counted where it was paid.
    """

    content: str | Mapping[str, Any]
    usage: TokenUsage = field(default_factory=TokenUsage)
    retries: int = 0
    cost: float | None = None
    rate_limits: RateLimits | None = None
    cached: bool = False
    shared: bool = False

    @property
    def paid_here(self) -> bool:
        """Whether this call paid for the reply: not the response cache's, nor shared."""
        return not (self.cached or self.shared)


@runtime_checkable
class Judge(Protocol):
    """Anything that answers judge requests: ``complete`` is all a judge must have. What else a
    judge may offer (a name, a price, caching, transcripts, closing its connections...) is
    ``JudgeBase``'s, each with the default a judge that does not offer it gets."""

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one step. Raise ``JudgeAPIError`` when the request itself fails."""
        ...


# A batch in one of these has its results (or its failure) in its files: nothing more comes.
BATCH_ENDED: frozenset[str] = frozenset({"failed", "completed", "expired", "cancelled"})
# The metadata key that tags a batch with the round of requests that made it.
ROUND_TAG = "summeval_round"
# The metadata key that tags a batch with the run and the judge that made it (``run_tag``).
RUN_TAG = "summeval_run"


def run_tag(run_id: str, judge: str) -> str:
    """What a run's batches for ``judge`` are tagged with (``RUN_TAG``): each judge of a panel
    finds its own batches only, and counts no other's.

    >>> run_tag("2026-12-07T01-00-00-ab12", "openai/gpt-4.1-mini")
    '2026-12-07T01-00-00-ab12.jebd5240e'
    """
    return f"{run_id}.j{hashlib.sha256(judge.encode()).hexdigest()[:8]}"


class ListingWindow:
    """Reads a provider's list of batches for those created since ``since`` (Unix seconds),
    in whatever order the provider lists them. ``see`` each batch's creation time (``None``:
    not known) as it comes: it says whether the batch is recent enough to be the run's, and
    ``done`` says when the rest can be left unread: only once the listing has shown itself
    newest first (no batch newer than the one before it) and has gone past ``since``. A
    listing in any other order is read to its end."""

    def __init__(self, since: float) -> None:
        self.since = since
        self.done = False
        self._last: float | None = None
        self._newest_first = True
        self._seen = 0

    def see(self, created: float | None) -> bool:
        if created is None:
            return True
        if self._last is not None and created > self._last:
            self._newest_first = False
        self._last = created
        self._seen += 1
        # Two in order at least: one batch alone says nothing of the order.
        self.done = self._newest_first and self._seen >= 2 and created < self.since
        return created >= self.since


@dataclass(frozen=True)
class BatchState:
    """A provider batch as last seen: its status, its files, its request counts, and the
    reasons a batch that failed validation gives."""

    id: str
    status: str
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: tuple[str, ...] = ()
    # Its metadata's ROUND_TAG: which round of a run made it (one whose creation's answer was
    # lost is found by it).
    round: str = ""

    @property
    def ended(self) -> bool:
        return self.status in BATCH_ENDED


@runtime_checkable
class BatchJudge(Protocol):
    """A judge whose provider has a Batch API (the OpenAI provider): requests as the lines of a
    file, sent as one batch and answered within the provider's window, at its batch price."""

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The body one request sends (a batch line's ``body``)."""
        ...

    async def submit_batch(self, lines: bytes, metadata: Mapping[str, str]) -> BatchState:
        """Upload ``lines`` (JSONL, one request each) and create a batch of them."""
        ...

    async def batch_state(self, batch_id: str) -> BatchState: ...

    async def tagged_batches(self, tag: str, since: float) -> list[BatchState]:
        """The batches created since ``since`` (Unix seconds) whose metadata carries ``tag``
        (``summeval_run``): a run killed between creating a batch and journaling it finds it."""
        ...

    async def batch_file(self, file_id: str) -> bytes:
        """A batch's output or error file, whole."""
        ...

    def batch_reply(self, body: Mapping[str, Any]) -> JudgeReply:
        """The reply one output line's response body holds, at the batch price."""
        ...


_Closing = TypeVar("_Closing", bound="AsyncClosing")


class AsyncClosing:
    """``async with thing:`` closes ``thing`` (``await thing.aclose()``) when the block ends;
    for what holds connections: a judge, a scorer that holds one."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: _Closing) -> _Closing:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class JudgeBase(AsyncClosing):
    """A judge's abilities beyond ``complete``, each with its default: subclass it and override
    what your judge offers. The runner reads them through the functions below
    (``judge_name``, ``judge_price``, ``cache_identity_of``, ...), which give a judge that only
    has ``complete`` (any object of the ``Judge`` protocol) the same defaults: one place says
    what a judge may do, and the runner asks instead of guessing.

    - ``name``: shown in results, manifests and comparisons (default: the class name).
    - ``price``: a ``Price`` per million tokens, to estimate and cap what the run's calls cost
      (default ``None``: not known; a budget in dollars is then refused).
    - ``local``: it answers on this machine and sends no request (the offline judge): no
      request rate, retries or throttling are shown for it (default ``False``).
    - ``cache_identity()``: what decides its replies besides the request (model, settings),
      for the response cache and the run's setup (default ``None``: not cached; the setup
      records its class).
    - ``request_body(request)``: what it sends for ``request``, kept in transcripts (default
      ``None``: nothing to show).
    - ``without_retries()``: a copy that does not retry on its own, so that the run's retry
      policy is the only one (default: the judge itself).
    - ``learned_parameters()`` and ``learn_refusal(body, error)``: parameters its model refused
      (a reasoning model's temperature) and what it sends instead (default: none learned).
    - ``aclose()``: closes its connections; ``async with judge:`` calls it (default: nothing to
      close).
    """

    name: str | None = None
    price: Price | None = None
    local: bool = False

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer one step. Raise ``JudgeAPIError`` when the request itself fails."""
        raise NotImplementedError(f"{type(self).__name__} must define complete(request)")

    def cache_identity(self) -> Mapping[str, Any] | None:
        return None

    def request_body(self, request: JudgeRequest) -> Mapping[str, Any] | None:
        return None

    def without_retries(self) -> Judge:
        return self

    def learned_parameters(self) -> tuple[Lesson, ...]:
        return ()

    def learn_refusal(self, sent: Mapping[str, Any], error: Mapping[str, Any]) -> bool:
        return False

    async def aclose(self) -> None:
        return None


def _ability(judge: object, name: str) -> Any:
    """``judge``'s own ``name`` ability, else ``JudgeBase``'s default bound to it."""
    found = getattr(judge, name, None)
    if found is None:
        found = getattr(JudgeBase, name)
        if callable(found):
            return found.__get__(judge)
    return found


def judge_name(judge: Judge) -> str:
    """A judge's display name: its ``name`` attribute, else its class name."""
    name = getattr(judge, "name", None)
    return name if isinstance(name, str) and name else type(judge).__name__


def answers_locally(judge: Judge) -> bool:
    """Whether ``judge`` answers on this machine, sending no request (``JudgeBase.local``)."""
    return getattr(judge, "local", False) is True


def cache_identity_of(judge: Judge) -> Mapping[str, Any] | None:
    """What decides ``judge``'s replies besides the request, or ``None`` for a judge whose
    replies are not cached (``JudgeBase.cache_identity``)."""
    identity = _ability(judge, "cache_identity")()
    return identity if isinstance(identity, Mapping) else None


def without_retries_of(judge: Judge) -> Judge:
    """``judge`` as the runner sends to it: a copy that does not retry on its own, where it
    offers one (``JudgeBase.without_retries``)."""
    sent: Judge = _ability(judge, "without_retries")()
    return sent


def learned_parameters_of(judge: Judge) -> tuple[Lesson, ...]:
    """The parameters ``judge``'s model refused this run (``JudgeBase.learned_parameters``)."""
    return tuple(_ability(judge, "learned_parameters")())


def learn_refusal_of(judge: Judge, sent: Mapping[str, Any], error: Mapping[str, Any]) -> bool:
    """Whether ``judge`` learned from a refusal of ``sent``, so that it is sent again without
    the refused parameter (``JudgeBase.learn_refusal``)."""
    return bool(_ability(judge, "learn_refusal")(sent, error))


async def close_judge(judge: Judge) -> None:
    """Close ``judge``'s connections, where it holds any (``JudgeBase.aclose``)."""
    await _ability(judge, "aclose")()


def request_body_of(judge: Judge, request: JudgeRequest) -> Mapping[str, Any] | None:
    """What ``judge`` sends over the wire for ``request`` (its ``request_body``: the OpenAI
    provider's Chat Completions body, the messages as sent included), or ``None`` for a judge
    that sends none it can show (the offline judge, a user's own). The runner's wrappers pass
    the question on to the judge they wrap."""
    sent = _ability(judge, "request_body")(request)
    return sent if isinstance(sent, Mapping) else None


def judge_price(judge: Judge) -> Price | None:
    """A judge's price per million tokens (its ``price`` attribute), or ``None``: not known."""
    price = getattr(judge, "price", None)
    return price if isinstance(price, Price) else None


def agent_pricing(target: object) -> Literal["priced", "unset", "none"]:
    """How an agent's calls are costed where it reports no cost of its own: ``priced`` (its
    ``price`` is a ``Price``: the lead-k baseline's is free), ``unset`` (a price setting left
    unset, the LLM summarizer's ``target.price``: not known), ``none`` (no price setting at all,
    a Python agent of one's own: $0, counted as unreported; a budget in dollars still stops)."""
    if not hasattr(target, "price"):
        return "none"
    return "priced" if isinstance(target.price, Price) else "unset"


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a step output in the form strict structured outputs require.

    Every object closes (``additionalProperties: false``) and lists all its properties as
    required; tuples become arrays of their item type. Titles and descriptions are left out:
    the prompt says what each field means, and every word of a schema is paid for in tokens on
    every request.
    """

    def close(node: Any) -> Any:
        if isinstance(node, dict):
            node = {
                key: close(value)
                for key, value in node.items()
                if key not in ("title", "description") or not isinstance(value, str)
            }
            if node.get("type") == "object" and "properties" in node:
                node["additionalProperties"] = False
                node["required"] = list(node["properties"])
            if node.get("type") == "array" and "prefixItems" not in node:
                node.pop("maxItems", None)
                node.pop("minItems", None)
            return node
        if isinstance(node, list):
            return [close(item) for item in node]
        return node

    raw = model.model_json_schema()
    definitions = raw.pop("$defs", {})

    def inline(node: Any) -> Any:
        # Nested models are written in place rather than as $defs and $refs: shorter, and the
        # step outputs are not recursive.
        if isinstance(node, dict):
            if set(node) == {"$ref"}:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    schema: dict[str, Any] = close(inline(raw))
    return schema
