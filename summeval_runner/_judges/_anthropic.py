"""The Anthropic provider: Claude models through the Messages API, with the ``anthropic`` SDK.

The SDK is an optional extra (``pip install 'summeval_runner[anthropic]'``): this module is
imported only when an Anthropic judge or summarizer is built (``_resolve``, ``_agents``), and
``anthropic_sdk()`` names the install command when it is absent.

The Messages API's wire format: the system prompt travels top-level (``system``), not among the
messages; ``max_tokens`` is required, so it is always sent (``max_output_tokens``). A step's
structured output is asked for with a forced tool (``tool_choice`` of the one tool whose
``input_schema`` is the step's schema), whose ``input`` is the reply: every Claude model and
every Anthropic-compatible gateway takes tools, while the JSON-schema output format is known to
newer models only. The SDK's errors are translated by ``_http_errors``, as OpenAI's are.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from summeval_runner._errors import (
    ConfigError,
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
from summeval_runner._judges._prices import price_of
from summeval_runner._judges._protocol import (
    BatchState,
    JudgeBase,
    JudgeReply,
    JudgeRequest,
    Price,
    RateLimits,
    TokenUsage,
)
from summeval_runner._judges._request import api_key_from, invalid_settings, refuse_too_large
from summeval_runner._secrets import redact_url, register_url_secrets

INSTALL = "pip install 'summeval_runner[anthropic]'"
_DEFAULT_BASE_URL = "https://api.anthropic.com"
# What a cache read and a cache write cost, as a share of the input price (Anthropic's prompt
# caching: reads at a tenth, five-minute writes at 1.25 times).
_CACHE_READ, _CACHE_WRITE = 0.1, 1.25


def anthropic_sdk(who: str = JUDGE) -> ModuleType:
    """The ``anthropic`` SDK, or a ``ConfigError`` naming the command that installs it."""
    try:
        return importlib.import_module("anthropic")
    except ImportError:
        raise ConfigError(
            f"{who} on Anthropic needs the anthropic SDK, which is not installed: {INSTALL}"
        ) from None


class AnthropicJudgeConfig(BaseModel):
    """Settings of an Anthropic judge.

    ``base_url`` falls back to ``ANTHROPIC_BASE_URL``, then to Anthropic's API, as the SDK does
    (without ``/v1``: the SDK adds it). ``api_key_env`` names the variable that holds the key
    (``None``: a gateway that needs none). ``max_output_tokens`` bounds each reply and is always
    sent (the Messages API requires ``max_tokens``); a reply cut there (``stop_reason``
    ``max_tokens``) is never read as a verdict: it is re-asked, then an item error naming the
    setting. ``effort`` (``None``: not sent) is the Messages API's ``output_config.effort``. No
    sampling setting is sent: the Messages API of the SDK this is built on takes none (no
    ``temperature``), so replies are sampled at the model's defaults. ``max_input_tokens``,
    ``max_retries``, ``timeout_s`` and ``price`` mean what they mean for an OpenAI judge
    (``price`` ``None``: the genai-prices table's).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    max_input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int = Field(default=4096, gt=0)
    price: Price | None = None


@dataclass(frozen=True)
class MessagesReply:
    """One Messages API reply: the forced tool's input (or the text, when no tool was asked
    for), its token usage and the server's rate limits."""

    content: str | Mapping[str, Any]
    usage: TokenUsage
    # Of usage.input_tokens: the prompt tokens read from and written to Anthropic's prompt cache.
    cache_read_tokens: int
    cache_write_tokens: int
    rate_limits: RateLimits | None

    def cost(self, price: Price | None, *, batch: bool = False) -> float | None:
        """The call's cost at ``price`` (cache reads and writes at their rates); ``None``
        without a price."""
        if price is None:
            return None
        plain = self.usage.input_tokens - self.cache_read_tokens - self.cache_write_tokens
        dollars = (
            plain * price.input
            + self.cache_read_tokens * price.input * _CACHE_READ
            + self.cache_write_tokens * price.input * _CACHE_WRITE
            + self.usage.output_tokens * price.output
        ) / 1e6
        return dollars * price.batch if batch else dollars


def _aiohttp_transport(sdk: ModuleType) -> Any:
    """The SDK's aiohttp transport, as for OpenAI (less CPU a request at high concurrency, and
    connection errors read as the OpenAI provider's, ``_http_errors``); ``None``, the SDK's
    default httpx one, where the SDK was installed without its aiohttp extra."""
    try:
        return sdk.DefaultAioHttpClient()
    except RuntimeError:
        return None


class AnthropicMessages:
    """One Anthropic Messages endpoint, shared by the judge and the bundled LLM summarizer.

    The key is read from the environment when this is built, so a missing key fails before any
    call; one ``AsyncAnthropic`` client serves each event loop (``_loop_clients``).
    """

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key_env: str | None,
        timeout_s: float,
        max_retries: int,
        who: str = JUDGE,
    ) -> None:
        self._sdk = anthropic_sdk(who)
        self.who = who
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or _DEFAULT_BASE_URL
        register_url_secrets(self.base_url)
        check_base_url(self.base_url)
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._api_key = api_key_from(api_key_env, who)
        self._clients = LoopClients(self._new_client, self._sdk.AsyncAnthropic.close)

    def __repr__(self) -> str:
        # The key is deliberately absent: reprs end up in logs.
        return f"AnthropicMessages(base_url={redact_url(self.base_url)!r})"

    def _new_client(self) -> Any:
        sdk = self._sdk
        return sdk.AsyncAnthropic(
            # Given here, so the SDK reads no credential of its own (ANTHROPIC_AUTH_TOKEN, a
            # profile on disk) that this package would not know to scrub.
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self._timeout_s,
            max_retries=self._max_retries,
            http_client=_aiohttp_transport(sdk),
        )

    async def aclose(self) -> None:
        await self._clients.aclose()

    async def create(self, params: Mapping[str, Any], *, tool: str | None) -> MessagesReply:
        """One ``messages.create`` call; ``tool``: the forced tool whose input is the reply.

        SDK errors are translated into this package's exception tree here (``_http_errors``).
        """
        client = await self._clients.get()
        with self._translating():
            response = await client.messages.with_raw_response.create(**params)
            message = await response.parse()
        if isinstance(message, str):
            # The SDK hands back the text of a body whose Content-Type is not JSON (a proxy's
            # error page): transient, like a 5xx, not a malformed verdict to re-ask.
            raise not_json(redact_url(self.base_url), message, self.who)
        return reply_of(
            message,
            tool=tool,
            max_tokens=int(params.get("max_tokens") or 0),
            limits=rate_limits_of(response.headers),
        )

    @contextlib.contextmanager
    def _translating(self) -> Iterator[None]:
        """SDK errors raised inside, raised as this package's (``_http_errors``)."""
        try:
            yield
        except Exception as error:
            translated = self._translated(error)
            if translated is None:
                raise
            raise translated from error

    def _translated(self, error: Exception) -> Exception | None:
        """The SDK's ``error`` as this package's (``_http_errors``); ``None`` for another."""
        sdk = self._sdk
        where = redact_url(self.base_url)
        if isinstance(error, sdk.APIConnectionError):
            return connection_error(
                error, where, self.who, timed_out=isinstance(error, sdk.APITimeoutError)
            )
        if isinstance(error, sdk.APIStatusError):
            body = error.body if isinstance(error.body, Mapping) else {}
            detail = body.get("error")
            if not isinstance(detail, Mapping):
                detail = {}
            code = detail.get("type")
            return status_error(
                error.status_code,
                message=str(detail.get("message") or error.message),
                base_url=where,
                who=self.who,
                code=code if isinstance(code, str) else None,
                body=error.body,
                headers=error.response.headers,
            )
        if isinstance(error, sdk.APIError):
            # A 200 whose body is not a message (a proxy's page): transient, like a 5xx.
            return not_json(where, str(getattr(error, "body", "") or ""), self.who)
        if isinstance(error, json.JSONDecodeError):
            return not_json(where, error.doc, self.who)
        return None

    # --- the Message Batches API ---------------------------------------------------------------

    async def submit_batch(self, requests: list[dict[str, Any]]) -> BatchState:
        """Create a Message Batch of ``requests`` (``{"custom_id", "params"}`` each)."""
        client = await self._clients.get()
        with self._translating():
            return _batch_state(await client.messages.batches.create(requests=requests))

    async def batch_state(self, batch_id: str) -> BatchState:
        client = await self._clients.get()
        with self._translating():
            return _batch_state(await client.messages.batches.retrieve(batch_id))

    async def batch_results(self, batch_id: str) -> bytes:
        """An ended batch's results, as the lines of an OpenAI batch's output file
        (``{"custom_id", "response": {"status_code", "body"}}``, or ``"error"`` for a request
        the batch never ran), which the runner's batch mode reads."""
        client = await self._clients.get()
        lines = []
        with self._translating():
            async for result in await client.messages.batches.results(batch_id):
                lines.append(_output_line(result))
        return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


# The HTTP status each of Anthropic's error types is sent with, for a batch's errored requests
# (their results carry the type alone).
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _output_line(result: Any) -> dict[str, Any]:
    """One result of a Message Batch as a line of an OpenAI batch's output file."""
    outcome = result.result
    kind = getattr(outcome, "type", None)
    if kind == "succeeded":
        body = outcome.message.model_dump(mode="json")
        return {"custom_id": result.custom_id, "response": {"status_code": 200, "body": body}}
    if kind == "errored":
        error = getattr(getattr(outcome, "error", None), "error", None)
        code = str(getattr(error, "type", None) or "api_error")
        message = str(getattr(error, "message", None) or "")
        return {
            "custom_id": result.custom_id,
            "response": {
                "status_code": _ERROR_STATUS.get(code, 500),
                "body": {"error": {"type": code, "message": message}},
            },
        }
    # Expired or canceled: the batch never ran it (no status: sent again, as a timeout is).
    return {
        "custom_id": result.custom_id,
        "error": {"code": str(kind), "message": f"the request was {kind} before it ran"},
    }


# What a Message Batch's processing_status is in the runner's batch states.
_BATCH_STATUS = {"in_progress": "in_progress", "canceling": "cancelling", "ended": "completed"}


def _batch_state(batch: Any) -> BatchState:
    counts = batch.request_counts
    ended = batch.processing_status == "ended"
    return BatchState(
        id=str(batch.id),
        status=_BATCH_STATUS.get(str(batch.processing_status), str(batch.processing_status)),
        # The results are read by the batch's id once it has ended.
        output_file_id=str(batch.id) if ended else None,
        total=sum(
            int(getattr(counts, name, 0) or 0)
            for name in ("processing", "succeeded", "errored", "canceled", "expired")
        ),
        completed=int(counts.succeeded or 0),
        failed=sum(
            int(getattr(counts, name, 0) or 0) for name in ("errored", "canceled", "expired")
        ),
    )


def _field(value: Any, name: str) -> Any:
    """``value[name]`` of a mapping (a batch's reply), else its attribute (the SDK's models)."""
    return value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)


def reply_of(
    message: Any, *, tool: str | None, max_tokens: int, limits: RateLimits | None = None
) -> MessagesReply:
    """A Messages API reply (the SDK's ``Message``, or a batch result's body): the input of the
    forced ``tool`` (``"*"``: of whichever tool it called), else its text."""
    usage = _field(message, "usage")
    read = int(_field(usage, "cache_read_input_tokens") or 0)
    written = int(_field(usage, "cache_creation_input_tokens") or 0)
    details = _field(usage, "output_tokens_details")
    tokens = TokenUsage(
        # Anthropic counts cached prompt tokens apart from input_tokens: all are the prompt's.
        input_tokens=int(_field(usage, "input_tokens") or 0) + read + written,
        output_tokens=int(_field(usage, "output_tokens") or 0),
        # Extended thinking's tokens, among the output tokens and billed alike.
        reasoning_tokens=int(_field(details, "thinking_tokens") or 0),
    )
    blocks = list(_field(message, "content") or ())
    used = [
        _field(b, "input")
        for b in blocks
        if _field(b, "type") == "tool_use" and tool in ("*", _field(b, "name"))
    ]
    content: str | Mapping[str, Any]
    if tool is not None and used and isinstance(used[0], Mapping):
        content = dict(used[0])
    else:
        content = "".join(
            str(_field(b, "text") or "") for b in blocks if _field(b, "type") == "text"
        )
    if _field(message, "stop_reason") == "max_tokens" and tool is not None:
        # A tool input cut at max_tokens can still parse (a list of claims closed early): it is
        # never read as a verdict.
        content = cut_off_content(max_tokens, "max_output_tokens")
    return MessagesReply(content, tokens, read, written, limits)


def rate_limits_of(headers: Mapping[str, str]) -> RateLimits | None:
    """Anthropic's ``anthropic-ratelimit-*`` headers (limits, what is left, and the RFC 3339
    time each is whole again), or ``None`` when the server sent none.

    >>> rate_limits_of({"anthropic-ratelimit-tokens-remaining": "900"}).remaining_tokens
    900
    >>> rate_limits_of({}) is None
    True
    """
    lower = {name.lower(): value for name, value in headers.items()}

    def count(name: str) -> int | None:
        try:
            return int(float(lower[f"anthropic-ratelimit-{name}"]))
        except (KeyError, ValueError):
            return None

    def reset_s(name: str) -> float | None:
        text = lower.get(f"anthropic-ratelimit-{name}-reset")
        try:
            at = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
        except ValueError:
            return None
        return None if at is None else max(0.0, at.timestamp() - time.time())

    found = RateLimits(
        limit_tokens=count("tokens-limit"),
        remaining_tokens=count("tokens-remaining"),
        reset_tokens_s=reset_s("tokens"),
        limit_requests=count("requests-limit"),
        remaining_requests=count("requests-remaining"),
        reset_requests_s=reset_s("requests"),
    )
    return None if found == RateLimits() else found


class AnthropicJudge(JudgeBase):
    """A judge backed by a Claude model through Anthropic's Messages API.

    An async context manager, like ``OpenAIJudge``. A ``BatchJudge``: in ``runner.mode=batch``
    its requests go to the Message Batches API, at the batch price.
    """

    provider = "anthropic"

    def __init__(self, config: AnthropicJudgeConfig) -> None:
        self.config = config
        self.name = f"{self.provider}/{config.name}"
        self._messages = AnthropicMessages(
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )
        self.price_source = price_of(
            config.name, provider=self.provider, base_url=self._messages.base_url,
            given=config.price,
        )  # fmt: skip
        self.price = self.price_source.price if self.price_source is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    def cache_identity(self) -> dict[str, Any]:
        """What, besides the request, decides this judge's reply: the cache keys on it."""
        return {
            "provider": self.provider,
            "model": self.config.name,
            "base_url": self._messages.base_url,
            "structured_output": "tool",
            "max_output_tokens": self.config.max_output_tokens,
            "effort": self.config.effort,
        }

    async def aclose(self) -> None:
        await self._messages.aclose()

    def without_retries(self) -> AnthropicJudge:
        """A new judge like this one whose SDK does not retry: a run retries with its own
        policy, which must see every 429 and 529 to adapt its pace."""
        return type(self)(self.config.model_copy(update={"max_retries": 0}))

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Messages API body this judge sends for ``request``: the system prompt
        top-level, the step's schema as the input schema of the one tool it must call."""
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        body: dict[str, Any] = {
            "model": self.config.name,
            "max_tokens": self.config.max_output_tokens,
            "messages": [
                {"role": m.role, "content": m.content}
                for m in request.messages
                if m.role != "system"
            ],
            "tools": [
                {
                    "name": request.schema_name,
                    "description": f"Record the {request.step} step's answer.",
                    "input_schema": dict(request.json_schema),
                }
            ],
            "tool_choice": {"type": "tool", "name": request.schema_name},
        }
        if system:
            body["system"] = system
        if self.config.effort is not None:
            body["output_config"] = {"effort": self.config.effort}
        return body

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        refuse_too_large(request, self.config.max_input_tokens)
        reply = await self._messages.create(self.request_body(request), tool=request.schema_name)
        return JudgeReply(
            content=reply.content,
            usage=reply.usage,
            cost=reply.cost(self.price),
            rate_limits=reply.rate_limits,
        )

    # --- the Message Batches API (runner.mode=batch) -------------------------------------------

    async def submit_batch(self, lines: bytes, metadata: Mapping[str, str]) -> BatchState:
        """The runner's batch file (one ``{"custom_id", "body"}`` line a request) as a Message
        Batch. Anthropic's batches carry no metadata: the run's tag is not sent."""
        requests = []
        for raw in lines.splitlines():
            if raw.strip():
                line = json.loads(raw)
                requests.append({"custom_id": line["custom_id"], "params": line["body"]})
        return await self._messages.submit_batch(requests)

    async def batch_state(self, batch_id: str) -> BatchState:
        return await self._messages.batch_state(batch_id)

    async def tagged_batches(self, tag: str, since: float) -> list[BatchState]:
        """None can be found: a Message Batch carries no metadata to tag it with. A batch is
        known to the run by its journal, written as it is created."""
        return []

    async def batch_file(self, file_id: str) -> bytes:
        """An ended batch's results (``file_id`` is the batch's id), as output file lines."""
        return await self._messages.batch_results(file_id)

    def batch_reply(self, body: Mapping[str, Any]) -> JudgeReply:
        """A batch result's message as a reply, at the batch price (half, as OpenAI's)."""
        reply = reply_of(body, tool="*", max_tokens=self.config.max_output_tokens)
        return JudgeReply(
            content=reply.content, usage=reply.usage, cost=reply.cost(self.price, batch=True)
        )


def anthropic_config_from(settings: dict[str, Any]) -> AnthropicJudgeConfig:
    """Build the config from a mapping, naming the offending key when it is invalid; a key in
    the settings is refused without echoing it."""
    if "api_key" in settings:
        raise ConfigError(
            "an anthropic judge takes no 'api_key' setting: put the key in an environment "
            "variable and name it with api_key_env (default ANTHROPIC_API_KEY)"
        )
    try:
        return AnthropicJudgeConfig.model_validate(settings)
    except ValidationError as error:
        raise ConfigError(
            f"invalid anthropic judge settings: {invalid_settings(error, AnthropicJudgeConfig)}"
        ) from None
