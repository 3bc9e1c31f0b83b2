"""The retry policy, declared once: what is retried, how long to wait, and when to give up."""

from __future__ import annotations

import random
from dataclasses import dataclass

from summeval_runner._errors import ConfigError, JudgeAPIError, JudgeUnavailableError

# Statuses worth another try: the request may succeed unchanged once the server has recovered.
# 400, 401, 403, 404 and 422 are the caller's fault and would fail the same way again.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped, and bounded in attempts.

    ``max_attempts`` counts the first try. The wait before retry ``n`` (1-based) is drawn
    uniformly from ``[0, min(max_delay_s, base_delay_s * 2 ** (n - 1))]``; when the server says
    how long to wait (``Retry-After``, ``x-ratelimit-reset-*``), that wait is kept instead, up to
    ``max_retry_after_s``.

    >>> policy = RetryPolicy(max_attempts=3)
    >>> policy.is_retryable(JudgeAPIError("busy", status_code=503))
    True
    >>> policy.is_retryable(JudgeAPIError("bad request", status_code=400))
    False
    >>> policy.delay_s(1, JudgeAPIError("slow down", status_code=429, retry_after_s=2.0))
    2.0
    """

    max_attempts: int = 6
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("base_delay_s", "max_delay_s", "max_retry_after_s"):
            value = getattr(self, name)
            if value < 0:
                raise ConfigError(f"{name} must be >= 0, got {value}")

    def is_retryable(self, error: BaseException) -> bool:
        """408, 409, 429, 5xx, connection errors and timeouts; never a refused key or quota."""
        if not isinstance(error, JudgeAPIError) or isinstance(error, JudgeUnavailableError):
            return False
        status = error.status_code
        return status is None or status in RETRYABLE_STATUSES or status >= 500

    def delay_s(self, retry: int, error: BaseException, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first retry)."""
        asked = getattr(error, "retry_after_s", None)
        if asked is not None:
            return min(float(asked), self.max_retry_after_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))
        return (rng or random).uniform(0.0, ceiling)
