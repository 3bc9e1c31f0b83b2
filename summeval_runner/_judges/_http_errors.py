"""What every provider's HTTP failures mean, in this package's exception tree.

Each provider's SDK raises its own classes, but all say the same things of a failed request:
an HTTP status with its headers, a message, an error code and the body; or no usable reply at
all (a refused connection, a name that does not resolve, a failed TLS handshake, a dropped
link, a timeout), with the transport's exceptions among its causes. A provider's module reads
those from its SDK's error and asks ``status_error`` or ``connection_error`` here, so that
retries, the outage watch and the fatal-auth stop behave the same whichever provider is called.
``who`` is whom the message names: the judge, or the agent's model (the LLM summarizer, whose
errors ``_agents`` renames ``AgentAPIError``).
"""

from __future__ import annotations

import json
import re
import socket
import ssl
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from summeval_runner._errors import (
    ConfigError,
    JudgeAPIError,
    JudgeAuthError,
    JudgeConnectionError,
    JudgeInputTooLargeError,
)
from summeval_runner._judges._rate_headers import retry_after_s
from summeval_runner._secrets import REDACTED, redact_url, scrub

if TYPE_CHECKING:
    # aiohttp is imported where a transport's error is read (below), as the providers import
    # their SDKs: a process that calls no endpoint (a merge, a comparison) never loads it.
    import aiohttp  # noqa: F401

JUDGE = "the judge"

_CONTEXT_EXCEEDED = re.compile(r"context length|context_length|too many tokens|too long", re.I)
# Error codes that say the account can make no call at all, whatever the request: OpenAI's
# exhausted quota (HTTP 429), Anthropic's billing error.
_NO_CREDIT = frozenset({"insufficient_quota", "billing_error"})


def status_error(
    status: int,
    *,
    message: str,
    base_url: str,
    who: str = JUDGE,
    code: str | None = None,
    body: object = None,
    headers: Mapping[str, str] | None = None,
) -> JudgeAPIError | JudgeInputTooLargeError:
    """An HTTP error reply as this package's exception, keeping the status code.

    401 and 403, and an exhausted quota or credit (``code``), are ``JudgeAuthError``: no call
    can succeed, so a run stops. A 400 or 413 that says the request is longer than the model's
    context is ``JudgeInputTooLargeError``, never retried. Anything else is a ``JudgeAPIError``
    with the wait the server asked for (``retry-after``, ``x-ratelimit-reset-*``), which the
    runner's retry policy reads (429, 5xx and Anthropic's 529 are retried).
    """
    if status in (401, 403):
        return JudgeAuthError(
            f"{who} at {base_url} refused the credentials (HTTP {status}): {message}",
            status_code=status,
        )
    if code in _NO_CREDIT:
        return JudgeAuthError(
            f"{who}'s quota is exhausted (HTTP {status} {code}): {message}", status_code=status
        )
    if status in (400, 413) and (
        code == "context_length_exceeded" or _CONTEXT_EXCEEDED.search(message)
    ):
        return JudgeInputTooLargeError(
            f"{who} at {base_url} refused the request as too long for its context "
            f"(HTTP {status}): {message}"
        )
    refusal = validation_detail(body)
    return JudgeAPIError(
        f"{who} at {base_url} answered HTTP {status}: {message}"
        + (f" ({refusal})" if refusal else ""),
        status_code=status,
        retry_after_s=retry_after_s(headers or {}),
    )


def causes(error: BaseException) -> list[BaseException]:
    """The error and what caused it, outermost first (``__cause__``, else ``__context__``)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


_SSL_NOISE = re.compile(r"^\[SSL: [A-Z0-9_]+\] | \(_ssl\.c:\d+\)$")


def _tls_reason(error: ssl.SSLError) -> str:
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return f"certificate verify failed: {error.verify_message}"
    text = error.args[1] if len(error.args) > 1 and isinstance(error.args[1], str) else str(error)
    return _SSL_NOISE.sub("", text) or type(error).__name__


def _why_no_connection(chain: list[BaseException]) -> str | None:
    """Why no connection could be made, from an SDK error's causes; ``None`` when one was (the
    failure came after the server accepted it: a dropped link, a slow reply, a cut body).

    The SDKs' aiohttp transport reports a refused connection as a timeout (``APITimeoutError``
    over ``ConnectTimeout``): only the causes underneath tell what happened.
    """
    import aiohttp

    # The innermost of each kind is the one that names the cause (aiohttp's connector errors
    # wrap the operating system's and the ssl module's).
    inner_first = chain[::-1]
    for cause in inner_first:
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed: {_tls_reason(cause)}"
    for cause in inner_first:
        if isinstance(cause, socket.gaierror | aiohttp.ClientConnectorDNSError):
            return "name not resolved"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
    for cause in inner_first:
        if isinstance(cause, aiohttp.ClientConnectorError):
            reason = cause.os_error.strerror or str(cause.os_error) or type(cause.os_error).__name__
            return reason[:1].lower() + reason[1:]
        if isinstance(cause, aiohttp.ConnectionTimeoutError):
            return "no connection within the timeout"
    return None


def _every_cause(error: BaseException) -> list[BaseException]:
    """``causes``, and those of each member of an exception group met on the way (anyio reports
    the failed attempts at each of a host's addresses as one group)."""
    found: list[BaseException] = []
    waiting = [error]
    while waiting and len(found) < 100:
        for cause in causes(waiting.pop()):
            if any(cause is seen for seen in found):
                continue
            found.append(cause)
            # An exception group's members (BaseExceptionGroup: Python 3.11 and later).
            members = getattr(cause, "exceptions", ())
            if isinstance(members, tuple):
                waiting.extend(m for m in members if isinstance(m, BaseException))
    return found


def no_connection(error: BaseException) -> str | None:
    """Why ``error``, raised by any code (an agent of the user's own, over whatever HTTP
    client), means that no connection could be made: ``"connection refused"``, ``"name not
    resolved"``, ``"TLS handshake failed: ..."``; ``None`` when its causes hold no such failure
    (the other side was reached, or the error is not about a connection).

    >>> try:
    ...     raise RuntimeError("the summary service failed") from ConnectionRefusedError(111, "x")
    ... except RuntimeError as error:
    ...     no_connection(error)
    'connection refused'
    >>> no_connection(ValueError("a bad row")) is None
    True
    """
    return _why_no_connection(_every_cause(error))


def _detail(chain: list[BaseException]) -> str:
    """The innermost cause's own words, for a message."""
    inner = chain[-1]
    text = getattr(inner, "message", None) or str(inner)
    return str(text).strip() or type(inner).__name__


def connection_error(
    error: BaseException, base_url: str, who: str = JUDGE, *, timed_out: bool = False
) -> JudgeAPIError:
    """A request that got no usable HTTP reply (the SDK's connection error, ``timed_out`` when
    the SDK says it timed out), named for what happened to it: ``JudgeConnectionError`` when no
    connection could be made (the run's outage watch holds and probes), else a ``JudgeAPIError``
    that is retried."""
    import aiohttp

    chain = causes(error)
    why = _why_no_connection(chain)
    if why is not None:
        # The judge's is named by its URL alone (the outage messages quote it); another's by whom.
        whom = "" if who == JUDGE else f"{who} at "
        return JudgeConnectionError(f"could not connect to {whom}{base_url} ({why})")
    if any(isinstance(cause, aiohttp.ClientPayloadError) for cause in chain):
        return JudgeAPIError(
            f"{who}'s reply from {base_url} was cut off before its end: {_detail(chain)}"
        )
    if any(isinstance(cause, aiohttp.ServerDisconnectedError) for cause in chain):
        return JudgeAPIError(f"{who} at {base_url} closed the connection without a reply")
    if timed_out:
        return JudgeAPIError(f"{who} at {base_url} did not answer in time")
    return JudgeAPIError(f"the connection to {who} at {base_url} failed: {_detail(chain)}")


def not_json(base_url: str, body: str, who: str = JUDGE) -> JudgeAPIError:
    """An HTTP 200 whose body is not JSON; retried, since a proxy or a restarting server sends
    such pages for a moment."""
    if not body.strip():
        return JudgeAPIError(f"{who}'s reply from {base_url} was not JSON: the body was empty")
    # Scrubbed before it is cut: a key cut in two would no longer be found.
    start = scrub(body.strip())[:80]
    return JudgeAPIError(f"{who}'s reply from {base_url} was not JSON: it began {start!r}")


def cut_off_content(limit: int | None, setting: str, received: str | None = None) -> str:
    """What stands for a reply the provider cut at its output bound (Anthropic's
    ``stop_reason`` ``max_tokens``, OpenAI's ``finish_reason`` ``length``, Gemini's
    ``finishReason`` ``MAX_TOKENS``; ``limit`` ``None``: the model's own bound, none sent): a
    JSON object no step's schema accepts, so the scorer re-asks and finally reports it as an item
    error, with the tokens the call spent counted; a cut reply that happens to parse (a list
    closed early) is never read as a verdict. ``received``: the cut text, kept for diagnosis.

    >>> import json; sorted(json.loads(cut_off_content(50, "max_output_tokens")))
    ['cut_off']
    """
    where = (
        f"at {limit} tokens (the judge's {setting})"
        if limit is not None
        else f"at the model's own output bound ({setting} not set)"
    )
    content = {
        "cut_off": f"the reply was cut off {where} before its end; raise {setting} if this recurs"
    }
    if received:
        content["received"] = received
    return json.dumps(content)


def validation_detail(body: object) -> str | None:
    """What a FastAPI server says is wrong with a request it refuses (HTTP 422), which the SDK's
    message leaves out (it keeps an error's ``message`` field only): ``{"detail": [{"loc": [...],
    "msg": ...}]}`` as llama-cpp-python's server sends, or ``{"detail": "..."}``. The values the
    server echoes (``input``) are left out: they are the request's own text.

    >>> validation_detail({"detail": [{"loc": ["body", "response_format", "type"],
    ...     "msg": "Input should be 'text' or 'json_object'", "input": "json_schema"}]})
    "response_format.type: Input should be 'text' or 'json_object'"
    >>> validation_detail({"error": {"message": "bad"}}) is None
    True
    """
    detail = body.get("detail") if isinstance(body, Mapping) else None
    if isinstance(detail, str):
        return detail.strip()[:200] or None
    if not isinstance(detail, list):
        return None
    problems = []
    for item in detail[:3]:
        if isinstance(item, Mapping) and isinstance(item.get("msg"), str):
            where = ".".join(str(part) for part in item.get("loc") or () if part != "body")
            problems.append(f"{where}: {item['msg']}" if where else item["msg"])
    return "; ".join(problems)[:300] or None


def check_base_url(base_url: str) -> None:
    """Refuse, before any call, a ``base_url`` no request could go to (``ConfigError``; what it
    shows of the URL is redacted): not http(s) (``localhost:8000``, ``ftp://...``), not a URL
    (``http://[::1``), a credential the client cannot send (``user:password@``: the SDKs send
    the key in a header of their own), or ``***`` where a printed or written URL had a
    credential redacted (sent as it is, the judge would refuse it as a key)."""
    shown = redact_url(base_url).split("?")[0]
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - parsed here so that a bad port is refused now
    except ValueError as error:
        raise ConfigError(f"base_url is not a URL ({error}): got {shown!r}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"base_url must be an http:// or https:// URL (http://localhost:8000/v1), got {shown!r}"
        )
    if "@" in parts.netloc:
        raise ConfigError(
            f"base_url {redact_url(base_url)} carries a user name or password, which cannot be "
            "sent beside the API key; put the key in the variable api_key_env names"
        )
    if REDACTED in unquote(base_url):
        raise ConfigError(
            f"base_url {shown!r} holds {REDACTED} where a credential was redacted when the URL "
            "was printed or written; give the credential itself"
        )
