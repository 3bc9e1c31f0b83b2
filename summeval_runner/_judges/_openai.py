"""The OpenAI provider: any server that speaks the Chat Completions API, through ``AsyncOpenAI``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from summeval_runner._errors import (
    ConfigError,
    JudgeAPIError,
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
from summeval_runner._judges._learned import Lesson, ParameterLessons
from summeval_runner._judges._loop_clients import LoopClients
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
    RateLimits,
    TokenUsage,
)
from summeval_runner._judges._rate_headers import rate_limits_of
from summeval_runner._judges._request import api_key_from, invalid_settings, refuse_too_large
from summeval_runner._secrets import (
    redact_url,
    register_url_secrets,
)

if TYPE_CHECKING:
    import openai

# The SDK is imported where a client is made or its errors are caught, not here: it costs a
# process about 33 MB, and most processes never call an OpenAI-compatible endpoint (a run on the
# offline judge, a merge, a comparison). Hence the SDK's own ReasoningEffort spelled out here:
# tests/test_providers.py checks that it still matches the installed SDK's.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None

_DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The request option the SDK's with_raw_response sends: the call returns the HTTP response (its
# headers: the server's rate-limit state) and parses the body on request.
_RAW_RESPONSE = {"X-Stainless-Raw-Response": "true"}


class OpenAIJudgeConfig(BaseModel):
    """Settings of an OpenAI-compatible judge.

    ``base_url`` falls back to ``OPENAI_BASE_URL``, then to OpenAI's API, as the SDK does.
    ``api_key_env`` names the variable that holds the key (``None``: the server needs no key).
    ``response_format="json_object"`` serves servers without ``json_schema`` support: the schema
    then travels in the prompt, and beside ``json_object`` as ``schema`` (which llama.cpp's
    servers enforce), and replies are still validated against it.
    ``max_input_tokens`` is the model's context for a request, when known: a longer request is
    an item error found before the call (its size is estimated at four bytes of text a token).
    ``max_retries`` is the SDK's own retries, for use outside ``summeval-run``; a run turns them
    off and retries with its own policy (``runner.retry``).
    ``max_output_tokens`` bounds each reply (sent as ``max_tokens``, which every
    OpenAI-compatible server takes, and as ``max_completion_tokens`` to a model that refuses it;
    ``None`` sends none): a small local model can loop inside a JSON array until its context is
    full, and a reply cut at the bound is malformed, so it is re-asked and then an error, in
    bounded time. A sampling setting the model refuses (a reasoning model's ``temperature``) is
    dropped once it refuses it (``_learned``). ``reasoning_effort`` (``None``: not sent) is a
    reasoning model's.
    ``price`` is the model's price per million tokens (``{input: 2.5, output: 10}`` US dollars;
    ``None``: the price table's for a model it knows (``_prices``), else unknown): with it a run
    counts what each item and the whole run cost, estimates a run before it starts, and can stop
    at a budget (``RunOptions.max_cost``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    response_format: Literal["json_schema", "json_object"] = "json_schema"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = 42
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    max_input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    reasoning_effort: ReasoningEffort = None
    price: Price | None = None


@dataclass(frozen=True)
class ChatReply:
    """One Chat Completions reply: its text, its token usage and the server's rate limits."""

    content: str
    # None: the server reported no usage (some local servers): the call's cost is not known.
    usage: TokenUsage | None
    rate_limits: RateLimits | None

    def cost(self, price: Price | None, *, batch: bool = False) -> float | None:
        """The call's cost at ``price``; ``None`` when the price or the usage is not known."""
        if price is None or self.usage is None:
            return None
        return price.cost(self.usage, batch=batch)


class OpenAIChat:
    """One OpenAI-compatible endpoint, shared by the judge and the bundled LLM summarizer.

    The key is read from the environment when this is built, so a missing key fails before any
    call. One ``AsyncOpenAI`` client serves every call made from an event loop (an HTTP
    connection pool belongs to the loop it was opened in, so each loop gets its own), and is
    closed by ``aclose()``, or when that loop shuts down its async generators, whichever comes
    first: ``asyncio.run`` does that at its end, so a script that never closes anything leaks no
    connection. A loop run by hand must call ``loop.shutdown_asyncgens()`` before
    ``loop.close()`` (as ``asyncio.run`` does), or the code must call ``aclose()``.
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
        # Whom its errors name: the judge, or the agent's model (the LLM summarizer's calls).
        self.who = who
        # Resolved here as the SDK would, so that the endpoint can be named (in cache keys, errors).
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE_URL
        register_url_secrets(self.base_url)
        check_base_url(self.base_url)
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._api_key = api_key_from(api_key_env, who)
        import openai

        self._clients = LoopClients(self._new_client, openai.AsyncOpenAI.close)
        # The parameters each model refused, learned from its refusals (_learned).
        self.lessons = ParameterLessons(redact_url(self.base_url))

    def __repr__(self) -> str:
        # The key is deliberately absent: reprs end up in logs.
        return f"OpenAIChat(base_url={redact_url(self.base_url)!r})"

    async def _client(self) -> openai.AsyncOpenAI:
        return await self._clients.get()

    def _new_client(self) -> openai.AsyncOpenAI:
        """The SDK's client for one event loop (Azure's provider makes Azure's)."""
        import openai

        return openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            timeout=self._timeout_s,
            max_retries=self._max_retries,
            # The SDK's aiohttp transport: httpx's connection pool probes every idle connection's
            # socket each time a request starts or ends, which at 100 requests in flight costs
            # more CPU than the rest of a request together.
            http_client=openai.DefaultAioHttpClient(),
        )

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop, if one was opened."""
        await self._clients.aclose()

    @contextlib.contextmanager
    def _translating(self) -> Iterator[None]:
        """The SDK's errors raised inside, raised as this package's (``_translate``): the one
        point where this client translates them."""
        import openai

        try:
            yield
        except openai.APIError as error:
            raise _translate(error, redact_url(self.base_url), self.who) from error

    async def complete(self, params: dict[str, Any]) -> ChatReply:
        """One Chat Completions call: the reply's text, its token usage and the rate limits the
        server reported beside it.

        SDK errors are translated into this package's exception tree here. A reply that is not
        JSON (a proxy's HTML page, an empty body) is a ``JudgeAPIError``, transient like a 5xx.
        """
        import openai

        client = await self._client()
        sent = self.lessons.applied(params)
        try:
            with self._translating():
                while True:
                    try:
                        # The SDK's generic POST (its documented way to send any request), not
                        # chat.completions.create: create() first walks every parameter through the
                        # SDK's type transforms (the JSON schema and the messages included) and then
                        # builds a ChatCompletion model from the reply, which together cost about as
                        # much CPU as the HTTP exchange itself. The request, retries, errors and
                        # headers are the SDK's.
                        response = await client.post(
                            "/chat/completions",
                            content=json.dumps(sent).encode(),
                            cast_to=object,
                            options={"headers": _RAW_RESPONSE},
                        )
                        break
                    except openai.BadRequestError as error:
                        # A parameter the model refuses (a reasoning model's temperature): learned
                        # once, and the request sent again without it (_learned).
                        body = error.body if isinstance(error.body, Mapping) else {}
                        if not self.lessons.learn(
                            sent,
                            status=error.status_code,
                            code=error.code,
                            param=error.param,
                            message=str(body.get("message") or error.message),
                        ):
                            raise
                        sent = self.lessons.applied(params)
                completion: Any = response.parse()  # type: ignore[attr-defined]
        except json.JSONDecodeError as error:
            # A body sent as JSON that does not parse: the SDK lets the decoder's error out.
            raise not_json(redact_url(self.base_url), error.doc, self.who) from error
        if isinstance(completion, str):
            # The SDK hands back the text of a body whose Content-Type is not JSON.
            try:
                completion = json.loads(completion)
            except ValueError:
                raise not_json(redact_url(self.base_url), completion, self.who) from None
        content, usage = _reply_of(completion, sent)
        return ChatReply(content, usage, rate_limits_of(response.headers))  # type: ignore[attr-defined]

    async def submit_batch(self, lines: bytes, metadata: Mapping[str, str]) -> BatchState:
        """Upload ``lines`` as a batch input file and create a Chat Completions batch of it."""
        client = await self._client()
        with self._translating():
            uploaded = await client.files.create(
                file=("summeval-batch.jsonl", lines, "application/jsonl"), purpose="batch"
            )
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata=dict(metadata),
            )
        return _batch_state(created)

    async def batch_state(self, batch_id: str) -> BatchState:
        client = await self._client()
        with self._translating():
            return _batch_state(await client.batches.retrieve(batch_id))

    async def tagged_batches(self, tag: str, since: float) -> list[BatchState]:
        """Batches created since ``since`` whose metadata's ``RUN_TAG`` is ``tag``, in whatever
        order the API lists them (read no further back than ``since`` once it shows itself
        newest first, as OpenAI's does)."""
        client = await self._client()
        found = []
        window = ListingWindow(since)
        with self._translating():
            async for batch in client.batches.list(limit=100):
                recent = window.see(batch.created_at)
                if recent and (batch.metadata or {}).get(RUN_TAG) == tag:
                    found.append(_batch_state(batch))
                if window.done:
                    break
        return found

    async def batch_file(self, file_id: str) -> bytes:
        client = await self._client()
        with self._translating():
            content = await client.files.content(file_id)
        return bytes(content.content)


def _batch_state(batch: Any) -> BatchState:
    counts = getattr(batch, "request_counts", None)
    errors = getattr(getattr(batch, "errors", None), "data", None) or ()
    return BatchState(
        id=str(batch.id),
        status=str(batch.status),
        input_file_id=batch.input_file_id,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        total=int(getattr(counts, "total", 0) or 0),
        completed=int(getattr(counts, "completed", 0) or 0),
        failed=int(getattr(counts, "failed", 0) or 0),
        errors=tuple(
            f"{getattr(e, 'code', None) or 'error'}: {getattr(e, 'message', None) or ''}"
            + (f" (line {e.line})" if getattr(e, "line", None) else "")
            for e in errors
        ),
        round=str((getattr(batch, "metadata", None) or {}).get(ROUND_TAG, "")),
    )


class OpenAIJudge(JudgeBase):
    """A judge backed by an OpenAI-compatible Chat Completions endpoint.

    An async context manager: ``async with OpenAIJudge(config) as judge:`` closes its HTTP client
    on exit. Left open, the client closes when its event loop ends.
    """

    # In the judge's name and cache key, and whose prices price it (Azure's judge is another).
    provider = "openai"

    def __init__(self, config: OpenAIJudgeConfig) -> None:
        self.config = config
        self.name = f"{self.provider}/{config.name}"
        self._chat = self._open_chat(config)
        # The price given, else the one the price table knows for the model (_prices).
        self.price_source = price_of(
            self._priced_as(), provider=self.provider, base_url=self._chat.base_url,
            given=config.price,
        )  # fmt: skip
        self.price = self.price_source.price if self.price_source is not None else None

    def _open_chat(self, config: OpenAIJudgeConfig) -> OpenAIChat:
        return OpenAIChat(
            base_url=config.base_url,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
            max_retries=config.max_retries,
        )

    def _priced_as(self) -> str:
        """The model's name in the price table."""
        return self.config.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    def cache_identity(self) -> dict[str, Any]:
        """What, besides the request, decides this judge's reply: the cache keys on it."""
        identity: dict[str, Any] = {
            "provider": self.provider,
            "model": self.config.name,
            "base_url": self._chat.base_url,
            "response_format": self.config.response_format,
            "temperature": self.config.temperature,
            "seed": self.config.seed,
        }
        if self.config.max_output_tokens is not None:
            # Only when set: the keys of judges without a bound stay what they were.
            identity["max_output_tokens"] = self.config.max_output_tokens
        if self.config.reasoning_effort is not None:
            identity["reasoning_effort"] = self.config.reasoning_effort
        return identity

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop, if one was opened."""
        await self._chat.aclose()

    def learned_parameters(self) -> tuple[Lesson, ...]:
        """The parameters its model refused so far, and what it sends instead (``_learned``)."""
        return self._chat.lessons.lessons()

    def without_retries(self) -> OpenAIJudge:
        """A new judge like this one whose SDK does not retry (its own clients, its own key).

        ``run_evals`` retries with its own policy, which must see every 429 to adapt its pace;
        SDK retries underneath would multiply the attempts and hide the 429s.
        """
        return type(self)(self.config.model_copy(update={"max_retries": 0}))

    def _response_format(self, request: JudgeRequest) -> dict[str, Any]:
        if self.config.response_format == "json_object":
            # The schema rides beside json_object too: llama-cpp-python's server and llama.cpp's
            # llama-server turn it into a grammar that constrains the reply (without it they
            # constrain to any JSON object at all), and servers that know no such field ignore it.
            return {"type": "json_object", "schema": dict(request.json_schema)}
        return {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "schema": dict(request.json_schema),
                "strict": True,
            },
        }

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        refuse_too_large(request, self.config.max_input_tokens)
        try:
            reply = await self._chat.complete(self.request_body(request))
        except JudgeAPIError as error:
            if self._json_schema_refused(error):
                # Every request would be refused alike: not retried, and the fix is named.
                raise JudgeError(
                    f"{' '.join(str(error).split())}; the server does not take response_format "
                    "json_schema: set the judge's response_format to json_object, which sends "
                    "the schema in the prompt and beside json_object"
                ) from error
            raise
        return JudgeReply(
            content=reply.content,
            usage=reply.usage or TokenUsage(),
            cost=reply.cost(self.price),
            rate_limits=reply.rate_limits,
        )

    async def submit_batch(self, lines: bytes, metadata: Mapping[str, str]) -> BatchState:
        """The Batch API (``RunOptions.mode="batch"``): ``lines`` uploaded and sent as a batch."""
        return await self._chat.submit_batch(lines, metadata)

    async def batch_state(self, batch_id: str) -> BatchState:
        return await self._chat.batch_state(batch_id)

    async def tagged_batches(self, tag: str, since: float) -> list[BatchState]:
        return await self._chat.tagged_batches(tag, since)

    async def batch_file(self, file_id: str) -> bytes:
        return await self._chat.batch_file(file_id)

    def learn_refusal(self, sent: Mapping[str, Any], error: Mapping[str, Any]) -> bool:
        """Whether a batch line sent as ``sent``, refused with ``error`` (its body's), taught a
        lesson (``_learned``): then it is sent again, without what was refused."""
        code, param = error.get("code"), error.get("param")
        return self._chat.lessons.learn(
            sent,
            status=400,
            code=code if isinstance(code, str) else None,
            param=param if isinstance(param, str) else None,
            message=str(error.get("message") or ""),
        )

    def batch_reply(self, body: Mapping[str, Any]) -> JudgeReply:
        """A batch output line's Chat Completions body as a reply, at the batch price."""
        # A batch line is a judge's structured request, sent with the judge's bound.
        bound = {"response_format": "json", "max_tokens": self.config.max_output_tokens}
        reply = ChatReply(*_reply_of(body, bound), rate_limits=None)
        return JudgeReply(
            content=reply.content,
            usage=reply.usage or TokenUsage(),
            cost=reply.cost(self.price, batch=True),
        )

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Chat Completions body this judge sends for ``request`` (in batch mode, the
        Batch API sends the same, one line per request)."""
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        if self.config.response_format == "json_object" and messages:
            # Only some servers read the schema beside json_object: the prompt carries the shape
            # for the others (a model shown no shape would guess one).
            schema = json.dumps(request.json_schema, separators=(",", ":"))
            messages[0]["content"] += (
                f"\n\nReply with one JSON object and nothing else, matching this JSON schema: "
                f"{schema}"
            )
        params: dict[str, Any] = {
            "model": self.config.name,
            "messages": messages,
            "temperature": self.config.temperature,
            "response_format": self._response_format(request),
        }
        if self.config.seed is not None:
            # Each trial of a repeated judgment samples with its own seed.
            params["seed"] = self.config.seed + request.trial
        if self.config.max_output_tokens is not None:
            params["max_tokens"] = self.config.max_output_tokens
        if self.config.reasoning_effort is not None:
            params["reasoning_effort"] = self.config.reasoning_effort
        # What the model was found to refuse this run (a batch line too).
        return self._chat.lessons.applied(params)

    def _json_schema_refused(self, error: JudgeAPIError) -> bool:
        """Whether the server refused the request for its ``response_format`` json_schema:
        llama-cpp-python's server answers HTTP 500 with the validation error, a FastAPI server
        that does not wrap it 422, others 400. Only a refusal that says which formats it takes
        (``'text' or 'json_object'``) or that json_schema is not supported counts: a 500 that
        merely mentions response_format (out of memory building its grammar) is retried, and a
        schema the server finds invalid is not blamed on json_schema itself."""
        message = str(error).lower()
        return (
            type(error) is JudgeAPIError
            and error.status_code in (400, 422, 500)
            and self.config.response_format == "json_schema"
            and "response_format" in message
            and (
                "json_object" in message
                or ("json_schema" in message and "not supported" in message)
            )
        )


def _reply_of(completion: Any, sent: Mapping[str, Any]) -> tuple[str, TokenUsage | None]:
    """The reply's text and token usage (``None`` when the body reports none) from a Chat
    Completions response body, for the request ``sent``.

    A body of another shape gives an empty reply, which validation then re-asks and finally
    reports with the raw reply; a refusal (not JSON) likewise. A structured reply cut at the
    output bound (``finish_reason`` ``length``) is never read as a verdict, even when what came
    parses: it stands as ``cut_off_content``, re-asked and then an item error naming
    ``max_output_tokens``. A plain reply (the LLM summarizer's) is kept as it came.
    """
    if not isinstance(completion, Mapping):
        return "", None
    usage = completion.get("usage")
    tokens: TokenUsage | None = None
    if isinstance(usage, Mapping):
        details = usage.get("completion_tokens_details")
        tokens = TokenUsage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            # A reasoning model's reasoning tokens are among its completion tokens, billed alike.
            output_tokens=int(usage.get("completion_tokens") or 0),
            reasoning_tokens=int(
                (details.get("reasoning_tokens") if isinstance(details, Mapping) else 0) or 0
            ),
        )
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return "", tokens
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        return "", tokens
    content = message.get("content") or message.get("refusal") or ""
    if choices[0].get("finish_reason") == "length" and "response_format" in sent:
        bound = sent.get("max_completion_tokens", sent.get("max_tokens"))
        return cut_off_content(
            bound if isinstance(bound, int) else None, "max_output_tokens"
        ), tokens
    return (content if isinstance(content, str) else str(content)), tokens


def _translate(
    error: openai.APIError, base_url: str, who: str = JUDGE
) -> JudgeAPIError | JudgeInputTooLargeError:
    """Map an SDK error onto this package's exception tree (``_http_errors``); the message
    names ``who`` was called (the judge, or the agent's model)."""
    import openai

    if isinstance(error, openai.APIConnectionError):
        return connection_error(
            error, base_url, who, timed_out=isinstance(error, openai.APITimeoutError)
        )
    if isinstance(error, openai.APIStatusError):
        return status_error(
            error.status_code,
            message=error.message,
            base_url=base_url,
            who=who,
            code=error.code,
            body=error.body,
            headers=error.response.headers,
        )
    return JudgeAPIError(f"{who} at {base_url} failed: {error}")


def openai_config_from(settings: dict[str, Any]) -> OpenAIJudgeConfig:
    """Build the config from a mapping, naming the offending key when it is invalid.

    A key passed in the settings is refused without echoing it: keys come from the environment.
    """
    if "api_key" in settings:
        raise ConfigError(
            "an openai judge takes no 'api_key' setting: put the key in an environment variable "
            "and name it with api_key_env (default OPENAI_API_KEY)"
        )
    try:
        return OpenAIJudgeConfig.model_validate(settings)
    except ValidationError as error:
        problems = invalid_settings(error, OpenAIJudgeConfig)
        raise ConfigError(f"invalid openai judge settings: {problems}") from None
