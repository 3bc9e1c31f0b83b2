"""The Google provider: Gemini models through the official ``google-genai`` SDK.

A request goes to the Gemini API's ``models/{model}:generateContent``: the system prompt as the
``systemInstruction``, the other turns as ``contents`` (the judge's re-asks answered as the
``model`` role), and the step's JSON schema as ``responseJsonSchema`` beside
``responseMimeType: application/json``, which the API enforces on the reply. The schema is the
step's strict one (``strict_json_schema``: closed objects, every property required), which
``responseJsonSchema`` takes as it is (``responseSchema``, the OpenAPI subset, has no
``additionalProperties``).

The judge builds the same request shape as the other providers (``request_body``: the model,
the messages, the sampling settings, the response format; what a transcript shows), and this
module turns it into the SDK's arguments (``gemini_arguments``). A thinking model's thought
tokens (``thoughtsTokenCount``) are billed as output: they are counted among the output tokens
and shown apart, as OpenAI's reasoning tokens are. The SDK's errors are translated by the
shared translation (``_http_errors``), with what only Gemini says: the wait a 429's
``RetryInfo`` asks for, and a key it does not know, which it answers HTTP 400
``API_KEY_INVALID`` rather than 401. A reply the API blocked (``finishReason`` SAFETY and its
kin, a prompt blocked whole) is the item's error, never retried; one cut at
``max_output_tokens`` (``MAX_TOKENS``) is returned as it is, so that its tokens are counted, and
stands as a cut reply does with every provider (``cut_off_content``: never read as a verdict,
even when the part received parses), re-asked, with a warning naming the setting once per judge.

The SDK is an optional extra (``pip install 'summeval_runner[google]'``), imported when a
Google judge or summarizer is built; without it, that is a ``ConfigError`` naming the command.
``runner.mode=batch`` sends each round of calls through Gemini's Batch API (the SDK's
``batches``): the same requests as interactive calls, inlined in one batch (several, followed as
one, for a round past ``INLINE_BATCH_BYTES``), each with its line's id in its ``metadata``, the
run's and the round's tags in the batch's display name; answered at the batch price (half).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from summeval_runner._errors import (
    ConfigError,
    JudgeAPIError,
    JudgeAuthError,
    JudgeError,
    JudgeInputTooLargeError,
)
from summeval_runner._judges._http_errors import (
    JUDGE,
    check_base_url,
    connection_error,
    cut_off_content,
    not_json,
    status_error,
)
from summeval_runner._judges._loop_clients import LoopClients
from summeval_runner._judges._openai import ChatReply
from summeval_runner._judges._prices import price_of
from summeval_runner._judges._protocol import (
    ROUND_TAG,
    RUN_TAG,
    BatchState,
    JudgeBase,
    JudgeReply,
    JudgeRequest,
    ListingWindow,
    Price,
    TokenUsage,
)
from summeval_runner._judges._rate_headers import _duration_s
from summeval_runner._judges._request import invalid_settings, missing_key, refuse_too_large
from summeval_runner._secrets import redact_url, register_secret, register_url_secrets

if TYPE_CHECKING:
    import aiohttp
    import google.genai as genai

logger = logging.getLogger("summeval_runner")
_Answer = TypeVar("_Answer")

INSTALL = "pip install 'summeval_runner[google]'"
_DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
# The variables the SDK reads a key from, in its order: GOOGLE_API_KEY wins when both are set.
KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
# Why a candidate ends with no usable reply, besides MAX_TOKENS: the API's filters.
_FINISHED_WELL = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED", ""})
# Gemini's words for a request longer than the model's context (HTTP 400 INVALID_ARGUMENT).
_TOO_MANY_TOKENS = "exceeds the maximum number of tokens"
# What the errors of a key Gemini does not know, or may not use, carry (ErrorInfo.reason).
_KEY_REFUSED = frozenset(
    {"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_HTTP_REFERRER_BLOCKED"}
)


class GoogleJudgeConfig(BaseModel):
    """Settings of a Gemini judge.

    ``api_key_env`` names the variable that holds the key; ``None`` reads ``GOOGLE_API_KEY``,
    else ``GEMINI_API_KEY``, as the SDK does. ``base_url`` falls back to
    ``GOOGLE_GEMINI_BASE_URL``, then to Google's API, as the SDK does; ``api_version`` is the
    API version in its paths (``v1beta``, where ``responseJsonSchema`` and thinking are).
    ``max_output_tokens`` bounds each reply (``maxOutputTokens``; ``None`` sends none: the
    model's own bound); a thinking model's thoughts count against it. ``thinking_budget`` is a
    thinking model's budget of thought tokens (``0`` turns thinking off where the model allows
    it; ``None`` sends none: the model's default). ``schema_format`` is how the step's schema
    travels: ``json_schema`` as ``responseJsonSchema``, as it is; ``openapi`` as
    ``responseSchema``, the OpenAPI subset every Gemini model and gateway takes, which has no
    ``additionalProperties`` (left out; the reply is validated against the step's schema
    either way). ``max_retries`` is the SDK's own retries, for
    use outside ``summeval-run``; a run turns them off and retries with its own policy.
    ``price`` (US dollars per million tokens; ``None``: the price table's for a model it knows)
    prices each call, as for every judge.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = None
    api_version: str = Field(default="v1beta", min_length=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = 42
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    max_input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    thinking_budget: int | None = Field(default=None, ge=-1)
    schema_format: Literal["json_schema", "openapi"] = "json_schema"
    price: Price | None = None


def _sdk(who: str) -> Any:
    """The SDK, imported when first needed; a ``ConfigError`` naming the extra without it."""
    try:
        genai = importlib.import_module("google.genai")
    except ImportError:
        raise ConfigError(
            f"{who} on Google needs the google-genai SDK, which is not installed: {INSTALL}"
        ) from None
    return genai


def _api_key(variable: str | None, who: str) -> str:
    """The key from ``variable``, else from the SDK's variables; registered as a secret."""
    names = (variable,) if variable is not None else KEY_VARIABLES
    for name in names:
        key = os.environ.get(name, "")
        if key.strip():
            # Both are scrubbed when both are set: the one not sent is a secret too.
            for other in KEY_VARIABLES:
                register_secret(os.environ.get(other) or None)
            register_secret(key)
            return key.strip()
    return missing_key(" or ".join(names), who)


@dataclass(frozen=True)
class GeminiReply(ChatReply):
    """A ``generateContent`` reply: its text, tokens and why it ended (``finish``), and what
    blocked it when the API did (``blocked``: a filter's finish reason or the prompt's block
    reason)."""

    finish: str = ""
    blocked: str | None = None


class GeminiChat:
    """One Gemini API endpoint, shared by the judge and the bundled LLM summarizer; its
    ``complete`` takes the request shape every provider's judge builds (Chat Completions'
    model, messages, sampling settings and response format)."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key_env: str | None,
        api_version: str = "v1beta",
        timeout_s: float,
        max_retries: int,
        who: str = JUDGE,
    ) -> None:
        self._genai = _sdk(who)
        self.who = who
        self.base_url = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or _DEFAULT_BASE_URL
        register_url_secrets(self.base_url)
        check_base_url(self.base_url)
        self.api_version = api_version
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._api_key = _api_key(api_key_env, who)
        self._clients: LoopClients[_Client] = LoopClients(self._new_client, _close)

    def __repr__(self) -> str:
        # The key is deliberately absent: reprs end up in logs.
        return f"GeminiChat(base_url={redact_url(self.base_url)!r})"

    def _new_client(self) -> _Client:
        types = self._genai.types
        # Always given, attempts=1 included: with none, the SDK retries a refused or dropped
        # connection itself, once, after sleeping 1 to 10 random seconds, unseen by the run's
        # retries and its outage watch.
        retry = types.HttpRetryOptions(attempts=self._max_retries + 1)
        import aiohttp  # here, not at the top: only a process that calls Gemini needs it

        # The session is this module's, not the SDK's own (a subclass of aiohttp's that aiohttp
        # warns against, defined anew for each): the same settings, no connection limit (the
        # runner bounds what is in flight), proxies from the environment as the SDK reads them.
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), trust_env=True)
        client: genai.Client = self._genai.Client(
            api_key=self._api_key,
            # Never Vertex AI, whatever GOOGLE_GENAI_USE_VERTEXAI says: the key is a Gemini
            # API key.
            vertexai=False,
            http_options=types.HttpOptions(
                base_url=self.base_url,
                api_version=self.api_version,
                timeout=max(1, round(self._timeout_s * 1000)),
                retry_options=retry,
                aiohttp_client=session,
            ),
        )
        return _Client(client, session)

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop, if one was opened."""
        await self._clients.aclose()

    async def complete(self, params: Mapping[str, Any]) -> GeminiReply:
        """One ``generateContent`` call for a request in the shared shape; SDK errors are
        translated into this package's exception tree here."""
        client = (await self._clients.get()).sdk
        return _reply_of(await self._sent(client.aio.models.generate_content(
            **gemini_arguments(params)
        )))  # fmt: skip

    async def _sent(self, call: Awaitable[_Answer]) -> _Answer:
        """What the SDK's ``call`` answers; its errors in this package's tree."""
        import aiohttp

        where = redact_url(self.base_url)
        try:
            return await call
        except self._genai.errors.APIError as error:
            raise _translate(error, where, self.who) from error
        except (TimeoutError, aiohttp.ClientError) as error:
            # The SDK lets its transport's errors out as they are (aiohttp's timeouts are
            # asyncio's, the builtin TimeoutError since Python 3.11).
            raise connection_error(
                error, where, self.who, timed_out=isinstance(error, TimeoutError)
            ) from error
        except json.JSONDecodeError as error:
            raise not_json(where, error.doc, self.who) from error

    def response(self, body: Mapping[str, Any]) -> Any:
        """A ``GenerateContentResponse`` from its JSON (a batch's output line)."""
        return self._genai.types.GenerateContentResponse.model_validate(dict(body))

    # --- the Batch API (runner.mode=batch) ---------------------------------------------------

    async def submit_batch(
        self, model: str, requests: list[dict[str, Any]], display_name: str
    ) -> BatchState:
        """A batch of inlined ``requests`` (``generate_content`` arguments with a ``metadata``
        key each) to ``model``."""
        client = (await self._clients.get()).sdk
        # Plain mappings of the request's fields, as the SDK takes them (typed as its dicts).
        inlined = cast(Any, requests)
        job = await self._sent(client.aio.batches.create(
            model=model, src=inlined, config={"display_name": display_name}
        ))  # fmt: skip
        return _batch_state(job)

    async def batch_job(self, name: str) -> Any:
        client = (await self._clients.get()).sdk
        return await self._sent(client.aio.batches.get(name=name))

    async def batch_jobs(self, since: float) -> list[Any]:
        """The key's batches created since ``since``, in whatever order the API lists them (read
        no further back than ``since`` once it shows itself newest first)."""
        client = (await self._clients.get()).sdk
        pager = await self._sent(client.aio.batches.list(config={"page_size": 100}))
        jobs: list[Any] = []
        window = ListingWindow(since)

        async def read() -> None:
            async for job in pager:
                created = getattr(job, "create_time", None)
                if window.see(created.timestamp() if isinstance(created, datetime) else None):
                    jobs.append(job)
                if window.done:
                    break

        await self._sent(read())
        return jobs


@dataclass(frozen=True)
class _Client:
    """The SDK's client of one event loop, and the HTTP session it sends through."""

    sdk: genai.Client
    session: aiohttp.ClientSession


async def _close(client: _Client) -> None:
    await client.sdk.aio.aclose()
    await client.session.close()


def gemini_arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's ``generate_content`` arguments for a request in the shared shape.

    >>> args = gemini_arguments({"model": "m", "temperature": 0, "max_tokens": 9, "messages": [
    ...     {"role": "system", "content": "Judge."}, {"role": "user", "content": "Text"},
    ...     {"role": "assistant", "content": "{"}, {"role": "user", "content": "Again"}]})
    >>> [(turn["role"], turn["parts"][0]["text"]) for turn in args["contents"]]
    [('user', 'Text'), ('model', '{'), ('user', 'Again')]
    >>> args["config"]
    {'system_instruction': 'Judge.', 'temperature': 0, 'max_output_tokens': 9}
    >>> reask = [{"role": "user", "content": "Text"}, {"role": "assistant", "content": ""},
    ...     {"role": "user", "content": "Again"}]
    >>> len(gemini_arguments({"model": "m", "messages": reask})["contents"])
    2
    """
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    for message in params.get("messages", ()):
        text = str(message.get("content", ""))
        if message.get("role") == "system":
            system.append(text)
        elif text:
            # A turn with no text is left out: the API refuses an empty part, and a re-ask of a
            # reply whose bound its thoughts took whole would carry one.
            role = "model" if message.get("role") == "assistant" else "user"
            contents.append({"role": role, "parts": [{"text": text}]})
    config: dict[str, Any] = {}
    if system:
        config["system_instruction"] = "\n\n".join(system)
    for ours, theirs in (("temperature", "temperature"), ("seed", "seed")):
        if params.get(ours) is not None:
            config[theirs] = params[ours]
    bound = params.get("max_tokens", params.get("max_completion_tokens"))
    if bound is not None:
        config["max_output_tokens"] = bound
    response_format = params.get("response_format")
    if isinstance(response_format, Mapping):
        config["response_mime_type"] = "application/json"
        schema = response_format.get("json_schema", {}).get("schema")
        if schema is not None and params.get("schema_format") == "openapi":
            config["response_schema"] = _openapi(schema)
        elif schema is not None:
            config["response_json_schema"] = dict(schema)
    if params.get("thinking_budget") is not None:
        config["thinking_config"] = {"thinking_budget": params["thinking_budget"]}
    return {"model": str(params["model"]), "contents": contents, "config": config}


def _openapi(node: Any) -> Any:
    """A strict JSON schema as ``responseSchema`` takes it: without ``additionalProperties``,
    which the OpenAPI subset has not (the SDK turns the rest into its ``Schema``).

    >>> _openapi({"type": "object", "properties": {"a": {"type": "string"}},
    ...     "required": ["a"], "additionalProperties": False})
    {'type': 'object', 'properties': {'a': {'type': 'string'}}, 'required': ['a']}
    """
    if isinstance(node, Mapping):
        return {k: _openapi(v) for k, v in node.items() if k != "additionalProperties"}
    if isinstance(node, list):
        return [_openapi(item) for item in node]
    return node


def _name(value: Any) -> str:
    """An SDK enum's name (``FinishReason.STOP`` -> ``STOP``), or ``""``."""
    if value is None:
        return ""
    return str(getattr(value, "value", value))


def _reply_of(response: Any) -> GeminiReply:
    """The text (thought summaries left out), the tokens and the finish of a response."""
    usage = getattr(response, "usage_metadata", None)
    tokens: TokenUsage | None = None
    if usage is not None:
        thoughts = int(getattr(usage, "thoughts_token_count", None) or 0)
        tokens = TokenUsage(
            input_tokens=int(getattr(usage, "prompt_token_count", None) or 0),
            # Thought tokens are billed as output: counted among them, and shown apart.
            output_tokens=int(getattr(usage, "candidates_token_count", None) or 0) + thoughts,
            reasoning_tokens=thoughts,
        )
    candidates = getattr(response, "candidates", None) or []
    if not candidates:
        feedback = getattr(response, "prompt_feedback", None)
        reason = _name(getattr(feedback, "block_reason", None)) or "no candidate"
        return GeminiReply("", tokens, None, finish="", blocked=f"prompt blocked: {reason}")
    candidate = candidates[0]
    finish = _name(getattr(candidate, "finish_reason", None))
    content = getattr(candidate, "content", None)
    parts = getattr(content, "parts", None) or []
    text = "".join(
        part.text
        for part in parts
        if isinstance(part.text, str) and not getattr(part, "thought", False)
    )
    blocked = None
    if finish not in _FINISHED_WELL and finish != "MAX_TOKENS":
        blocked = f"finishReason {finish}"
    return GeminiReply(text, tokens, None, finish=finish, blocked=blocked)


def _details(error: Any) -> list[Mapping[str, Any]]:
    body = error.details if isinstance(error.details, Mapping) else {}
    inner = body.get("error", body)
    details = inner.get("details") if isinstance(inner, Mapping) else None
    return [d for d in details or () if isinstance(d, Mapping)]


def retry_delay_s(details: Sequence[Mapping[str, Any]]) -> float | None:
    """The wait a Gemini error's ``RetryInfo`` asks for (``retryDelay: "27s"``), if it does.

    >>> retry_delay_s([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}])
    1.5
    >>> retry_delay_s([]) is None
    True
    """
    for detail in details:
        if str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str):
                return _duration_s(delay)
    return None


def _translate(error: Any, base_url: str, who: str) -> JudgeAPIError | JudgeInputTooLargeError:
    """A Gemini API error in this package's tree, through the shared translation."""
    status = int(error.code or 0)
    message = " ".join(str(error.message or error.status or "").split()) or "no message"
    if error.status:
        message = f"{error.status}: {message}"
    details = _details(error)
    reasons = {str(d.get("reason")) for d in details if d.get("reason")}
    if reasons & _KEY_REFUSED:
        # Gemini answers a key it does not know with 400, not 401: no call can succeed either.
        return JudgeAuthError(
            f"{who} at {base_url} refused the credentials (HTTP {status} "
            f"{', '.join(sorted(reasons & _KEY_REFUSED))}): {message}",
            status_code=status,
        )
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    translated = status_error(
        status,
        message=message,
        base_url=base_url,
        who=who,
        code="context_length_exceeded" if _TOO_MANY_TOKENS in message else None,
        body=error.details,
        headers=dict(headers) if headers is not None else None,
    )
    asked = retry_delay_s(details)
    if asked is not None and type(translated) is JudgeAPIError and translated.retry_after_s is None:
        translated.retry_after_s = asked
    return translated


# A batch's states in the runner's words (OpenAI's batch statuses).
_BATCH_STATUS = {
    "JOB_STATE_PENDING": "validating",
    "JOB_STATE_QUEUED": "validating",
    "JOB_STATE_RUNNING": "in_progress",
    "JOB_STATE_SUCCEEDED": "completed",
    "JOB_STATE_PARTIALLY_SUCCEEDED": "completed",
    "JOB_STATE_FAILED": "failed",
    "JOB_STATE_CANCELLING": "cancelling",
    "JOB_STATE_CANCELLED": "cancelled",
    "JOB_STATE_EXPIRED": "expired",
}
# The HTTP status of each google.rpc code an inlined response's error carries.
_RPC_STATUS = {3: 400, 4: 504, 5: 404, 7: 403, 8: 429, 9: 400, 13: 500, 14: 503, 16: 401}
# A batch's display name: the run's tag and the round's, for a lost creation to be found.
_BATCH_NAME = "summeval {run} {round}"


# The most bytes of inlined requests one Gemini batch is sent (the API takes a request of up to
# 20 MB): a round with more is sent as several batches, followed as one (their names joined by
# _AND), so that runner.batch_max_requests need not know the size of the prompts.
INLINE_BATCH_BYTES = 15_000_000
_AND = "+"


def _parts(requests: list[dict[str, Any]], limit: int) -> list[list[dict[str, Any]]]:
    """``requests`` in runs of at most ``limit`` bytes of JSON (one request a run at least).

    >>> [len(part) for part in _parts([{"a": "x" * 10}] * 5, limit=40)]
    [2, 2, 1]
    """
    parts: list[list[dict[str, Any]]] = [[]]
    size = 0
    for request in requests:
        length = len(json.dumps(request))
        if parts[-1] and size + length > limit:
            parts.append([])
            size = 0
        parts[-1].append(request)
        size += length
    return parts


def _merged(states: list[BatchState]) -> BatchState:
    """The parts of one round's batch as one state: ended when every part has, failed when
    every part failed (a failed part's requests have no line: they are sent again)."""
    if len(states) == 1:
        return states[0]
    statuses = {state.status for state in states}
    if not all(state.ended for state in states):
        status = "in_progress"
    elif statuses == {"failed"}:
        status = "failed"
    else:
        status = "completed"
    outputs = [state.output_file_id for state in states if state.output_file_id]
    return BatchState(
        id=_AND.join(state.id for state in states),
        status=status,
        output_file_id=_AND.join(outputs) if outputs and status != "in_progress" else None,
        total=sum(state.total for state in states),
        completed=sum(state.completed for state in states),
        failed=sum(state.failed for state in states),
        errors=tuple(error for state in states for error in state.errors),
        round=states[0].round,
    )


def _batch_state(job: Any) -> BatchState:
    """A Gemini batch job as the runner's ``BatchState``: its name is its id and, once it
    ended, its output "file" too (``batch_file`` reads its inlined responses)."""
    status = _BATCH_STATUS.get(_name(job.state), "in_progress")
    dest = getattr(job, "dest", None)
    responses = list(getattr(dest, "inlined_responses", None) or ())
    failed = sum(1 for r in responses if getattr(r, "error", None) is not None)
    error = getattr(job, "error", None)
    parts = str(job.display_name or "").split(" ")
    return BatchState(
        id=str(job.name),
        status=status,
        output_file_id=str(job.name) if responses else None,
        total=len(responses),
        completed=len(responses) - failed,
        failed=failed,
        errors=(str(getattr(error, "message", None) or error),) if error else (),
        round=parts[2] if len(parts) == 3 and parts[0] == "summeval" else "",
    )


def _output_line(response: Any) -> dict[str, Any]:
    """One inlined response as a line of an OpenAI batch's output file (``{"custom_id",
    "response": {"status_code", "body"}}``), which the runner's batch mode reads: a reply the
    API blocked is a 400 (the item's error, as interactively), an error its HTTP status."""
    key = (getattr(response, "metadata", None) or {}).get("key")
    error = getattr(response, "error", None)
    if error is not None:
        code = int(getattr(error, "code", None) or 13)
        message = str(getattr(error, "message", None) or "")
        return {
            "custom_id": key,
            "response": {
                "status_code": _RPC_STATUS.get(code, 500),
                "body": {"error": {"code": code, "message": message}},
            },
        }
    answer = response.response
    blocked = _reply_of(answer).blocked
    if blocked is not None:
        message = f"Gemini blocked it ({blocked})"
        return {
            "custom_id": key,
            "response": {"status_code": 400, "body": {"error": {"message": message}}},
        }
    body = answer.model_dump(mode="json", exclude_none=True)
    return {"custom_id": key, "response": {"status_code": 200, "body": body}}


class GoogleJudge(JudgeBase):
    """A judge backed by a Gemini model through the ``google-genai`` SDK.

    An async context manager, as every judge that holds connections; left open, its HTTP
    client closes when its event loop ends.
    """

    provider = "google"

    def __init__(self, config: GoogleJudgeConfig) -> None:
        self.config = config
        self.name = f"{self.provider}/{config.name}"
        self._chat = GeminiChat(
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            api_version=config.api_version,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )
        self.price_source = price_of(
            config.name, provider=self.provider, base_url=self._chat.base_url, given=config.price
        )
        self.price = self.price_source.price if self.price_source is not None else None
        self._warned_cut = False

    def __repr__(self) -> str:
        return f"GoogleJudge({self.config!r})"

    def cache_identity(self) -> dict[str, Any]:
        """What, besides the request, decides this judge's reply: the cache keys on it."""
        identity: dict[str, Any] = {
            "provider": self.provider,
            "model": self.config.name,
            "base_url": self._chat.base_url,
            "api_version": self.config.api_version,
            "temperature": self.config.temperature,
            "seed": self.config.seed,
        }
        if self.config.max_output_tokens is not None:
            identity["max_output_tokens"] = self.config.max_output_tokens
        if self.config.thinking_budget is not None:
            identity["thinking_budget"] = self.config.thinking_budget
        if self.config.schema_format != "json_schema":
            identity["schema_format"] = self.config.schema_format
        return identity

    async def aclose(self) -> None:
        await self._chat.aclose()

    def without_retries(self) -> GoogleJudge:
        """A new judge like this one whose SDK does not retry: ``run_evals`` retries with its
        own policy, which must see every 429."""
        return type(self)(self.config.model_copy(update={"max_retries": 0}))

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The request in the shape every provider's judge builds (what a transcript shows);
        ``gemini_arguments`` turns it into what the SDK sends."""
        params: dict[str, Any] = {
            "model": self.config.name,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "temperature": self.config.temperature,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": dict(request.json_schema)},
            },
        }
        if self.config.seed is not None:
            params["seed"] = self.config.seed + request.trial
        if self.config.max_output_tokens is not None:
            params["max_tokens"] = self.config.max_output_tokens
        if self.config.thinking_budget is not None:
            params["thinking_budget"] = self.config.thinking_budget
        if self.config.schema_format != "json_schema":
            params["schema_format"] = self.config.schema_format
        return params

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        refuse_too_large(request, self.config.max_input_tokens)
        reply = await self._chat.complete(self.request_body(request))
        if reply.blocked is not None:
            # The API's filters answer the same request alike: the item's error, not retried.
            raise JudgeError(
                f"{self.name} gave no {request.step} reply: Gemini blocked it ({reply.blocked})"
            )
        if reply.finish == "MAX_TOKENS" and not self._warned_cut:
            self._warned_cut = True
            logger.warning(
                "%s cut a %s reply at its output bound (finishReason MAX_TOKENS%s); a cut reply "
                "is malformed and re-asked: raise model.max_output_tokens%s",
                self.name,
                request.step,
                f", {reply.usage.reasoning_tokens} of its tokens thoughts"
                if reply.usage and reply.usage.reasoning_tokens
                else "",
                " or lower model.thinking_budget"
                if reply.usage and reply.usage.reasoning_tokens
                else "",
            )
        return JudgeReply(
            content=self._verdict_text(reply),
            usage=reply.usage or TokenUsage(),
            cost=reply.cost(self.price),
        )

    def _verdict_text(self, reply: GeminiReply) -> str:
        """The reply's text, or, for one cut at its bound, what stands for a cut reply with
        every provider: never read as a verdict, even when the part received parses."""
        if reply.finish != "MAX_TOKENS":
            return reply.content
        return cut_off_content(self.config.max_output_tokens, "max_output_tokens", reply.content)

    # --- the Batch API (runner.mode=batch) ---------------------------------------------------

    async def submit_batch(self, lines: bytes, metadata: Mapping[str, str]) -> BatchState:
        """The runner's batch file (one ``{"custom_id", "body"}`` line a request) as one
        Gemini batch of inlined requests, each carrying its line's id as its metadata's
        ``key``; the run's and the round's tags in its display name."""
        requests = []
        for raw in lines.splitlines():
            if raw.strip():
                line = json.loads(raw)
                arguments = gemini_arguments(line["body"])
                requests.append(
                    {
                        "contents": arguments["contents"],
                        "config": arguments["config"],
                        "metadata": {"key": line["custom_id"]},
                    }
                )
        name = _BATCH_NAME.format(
            run=metadata.get(RUN_TAG, "-"), round=metadata.get(ROUND_TAG, "-")
        )
        made = [
            await self._chat.submit_batch(self.config.name, part, name)
            for part in _parts(requests, INLINE_BATCH_BYTES)
        ]
        return _merged(made)

    async def batch_state(self, batch_id: str) -> BatchState:
        return _merged(
            [_batch_state(await self._chat.batch_job(name)) for name in batch_id.split(_AND)]
        )

    async def tagged_batches(self, tag: str, since: float) -> list[BatchState]:
        """The batches whose display name carries the run's ``tag``, created since ``since``;
        the parts of one round's batch as one."""
        rounds: dict[str, list[BatchState]] = {}
        for job in await self._chat.batch_jobs(since):
            if str(job.display_name or "").split(" ")[1:2] == [tag]:
                state = _batch_state(job)
                rounds.setdefault(state.round, []).append(state)
        return [_merged(parts[::-1]) for parts in rounds.values()]

    async def batch_file(self, file_id: str) -> bytes:
        """An ended batch's inlined responses (``file_id`` is the batch's name, or its parts'
        names), as output file lines."""
        lines: list[bytes] = []
        for name in file_id.split(_AND):
            job = await self._chat.batch_job(name)
            responses = getattr(getattr(job, "dest", None), "inlined_responses", None) or ()
            lines.extend(json.dumps(_output_line(r)).encode() + b"\n" for r in responses)
        return b"".join(lines)

    def batch_reply(self, body: Mapping[str, Any]) -> JudgeReply:
        """A batch's response (the SDK's ``GenerateContentResponse``, as JSON) as a reply, at
        the batch price (half, as the Batch API charges)."""
        response = self._chat.response(body)
        reply = _reply_of(response)
        return JudgeReply(
            content=self._verdict_text(reply),
            usage=reply.usage or TokenUsage(),
            cost=reply.cost(self.price, batch=True),
        )


def google_config_from(settings: dict[str, Any]) -> GoogleJudgeConfig:
    """Build the config from a mapping, naming the offending key when it is invalid; a key in
    the settings is refused without echoing it."""
    if "api_key" in settings:
        raise ConfigError(
            "a google judge takes no 'api_key' setting: put the key in GEMINI_API_KEY or "
            "GOOGLE_API_KEY, or in a variable api_key_env names"
        )
    try:
        return GoogleJudgeConfig.model_validate(settings)
    except ValidationError as error:
        raise ConfigError(
            f"invalid google judge settings: {invalid_settings(error, GoogleJudgeConfig)}"
        ) from None
