"""What an HTTP provider says beside a reply of its rate limits, and how long it asks a client
to wait: OpenAI's ``x-ratelimit-*`` and ``retry-after`` headers, which OpenAI-compatible servers
and Azure OpenAI send alike."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from summeval_runner._judges._protocol import RateLimits


def rate_limits_of(headers: Mapping[str, str]) -> RateLimits | None:
    """The rate-limit state a server reports beside a reply (OpenAI's ``x-ratelimit-*``
    headers: ``limit``, ``remaining`` and ``reset`` of ``tokens`` and ``requests``), or ``None``
    when it reports none.

    >>> limits = rate_limits_of(
    ...     {"x-ratelimit-remaining-tokens": "900", "x-ratelimit-reset-tokens": "6ms"}
    ... )
    >>> limits.remaining_tokens, limits.reset_tokens_s, limits.limit_tokens
    (900, 0.006, None)
    >>> rate_limits_of({}) is None
    True
    """
    lower = {name.lower(): value for name, value in headers.items()}

    def count(name: str) -> int | None:
        try:
            return int(float(lower[name]))
        except (KeyError, ValueError):
            return None

    def seconds(name: str) -> float | None:
        return _duration_s(lower[name]) if name in lower else None

    found = RateLimits(
        limit_tokens=count("x-ratelimit-limit-tokens"),
        remaining_tokens=count("x-ratelimit-remaining-tokens"),
        reset_tokens_s=seconds("x-ratelimit-reset-tokens"),
        limit_requests=count("x-ratelimit-limit-requests"),
        remaining_requests=count("x-ratelimit-remaining-requests"),
        reset_requests_s=seconds("x-ratelimit-reset-requests"),
    )
    return None if found == RateLimits() else found


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _duration_s(text: str) -> float | None:
    """``"1s"``, ``"6m0s"``, ``"20ms"`` or plain seconds, as OpenAI's rate-limit headers give."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """How long the server asked the client to wait, from an error response's headers.

    ``retry-after-ms`` first, then ``retry-after`` (seconds or an HTTP date), then the longest
    ``x-ratelimit-reset-*``; ``None`` when the server did not say.

    >>> retry_after_s({"retry-after": "2"})
    2.0
    >>> retry_after_s({"x-ratelimit-reset-requests": "1m30s", "x-ratelimit-reset-tokens": "20ms"})
    90.0
    >>> retry_after_s({}) is None
    True
    """
    lower = {name.lower(): value for name, value in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    if "retry-after" in lower:
        seconds = _duration_s(lower["retry-after"])
        if seconds is not None:
            return seconds
        try:
            return max(0.0, parsedate_to_datetime(lower["retry-after"]).timestamp() - time.time())
        except (TypeError, ValueError):
            pass
    resets = [
        seconds
        for name, value in lower.items()
        if name.startswith("x-ratelimit-reset") and (seconds := _duration_s(value)) is not None
    ]
    return max(resets) if resets else None
