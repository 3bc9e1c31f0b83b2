"""The exceptions summeval_runner raises, in one tree.

    SummevalError                 base of everything raised on purpose
    ├── ConfigError               an option or setting breaks a rule (also a ValueError)
    │   └── MissingAPIKeyError    the judge's key variable is unset; raised before any call
    ├── InputError                an input or output payload has a shape that cannot be read
    │   ├── DatasetError          a dataset cannot be read or breaks a rule (file, row, field)
    │   │   └── RatingsError      a file of human ratings, alike
    │   └── RunsDiffer            runs given to compare differ in what decides their scores
    ├── RunRecordError            a write in the run directory failed (journal, log, tables)
    ├── BudgetExhaustedError      the next call would pass runner.max_cost or runner.max_tokens:
    │                             the run stops, interrupted and resumable
    ├── AgentAPIError             the agent under test's own model call failed (the bundled LLM
    │   │                         summarizer: status code, connection, timeout): the item's error
    │   ├── AgentAuthError        its model refused the credentials or its quota is exhausted:
    │   │                         no item can get an output, the run is aborted
    │   ├── AgentConnectionError  no connection to its model could be made (refused, DNS, TLS):
    │   │                         the run holds its agent calls and probes until it is back
    │   └── AgentUnreachableError no agent call connected for outage_timeout_s (the run is
    │                             interrupted, and can be resumed)
    └── JudgeError                a judge could not give a usable verdict
        ├── JudgeAPIError         the provider's request failed (status code, connection, timeout)
        │   ├── JudgeConnectionError  no connection could be made (refused, DNS, TLS): a run
        │   │                         pauses its requests and probes until the judge is back
        │   └── JudgeUnavailableError  no call can succeed now: the whole run stops
        │       ├── JudgeAuthError        401/403 or an exhausted quota (the run is aborted)
        │       └── JudgeUnreachableError  no request reached the judge for outage_timeout_s
        │                                  (the run is interrupted, and can be resumed)
        ├── JudgeInputTooLargeError  the request is longer than the judge's context; never retried
        └── JudgeOutputError      the reply did not match the step's schema after every re-ask

Errors from each provider's SDK (``openai``, ``anthropic``) are translated into this tree at the
provider's edge, by one translation they share (``_judges/_http_errors.py``), so callers never
need to import an SDK to handle a failure. Every message states the rule and the value
received (``max_questions must be >= 1, got 0``).

A scorer turns any other ``JudgeError`` into a result whose status is
``"error"`` (a failure is data, never a score of 0); a ``JudgeUnavailableError`` propagates,
since no other evaluation can succeed either.

``RunRecordError`` is the runner's: a write in the run directory failed (a full disk, an I/O
error: an item, a traffic line, the log file, ...); the run stops its calls at once, keeping what
it had recorded, and ``summeval-run`` exits 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class SummevalError(Exception):
    """Base class of every exception summeval_runner raises on purpose."""


class ConfigError(SummevalError, ValueError):
    """An option or setting breaks a rule; raised when the object is built, before any call."""


class MissingAPIKeyError(ConfigError):
    """The environment variable that should hold the judge's API key (or the agent's model's:
    ``who``) is unset or blank."""

    def __init__(self, variable: str, *, who: str = "the judge") -> None:
        self.variable = variable
        super().__init__(
            f"{who} needs an API key in the environment variable {variable}, "
            "but it is unset or blank; export it, or set api_key_env to the variable that holds it"
        )


class InputError(SummevalError, ValueError):
    """An input or output payload has a shape that cannot be read as messages."""


class DatasetError(InputError):
    """A dataset cannot be read or breaks a rule; the message names the file, row and field."""


class RatingsError(DatasetError):
    """A ratings file cannot be read or breaks a rule; the message names the file, row and
    field."""


class Mismatch(Protocol):
    """One way two runs differ in what decides their scores (the comparison's ``Mismatch``)."""

    def describe(self) -> str: ...


class RunsDiffer(InputError):
    """Runs that do not measure alike were given to compare, and the caller did not allow it.
    ``mismatches`` says how they differ (judge, scale, prompts, dataset, coverage basis...)."""

    def __init__(self, found: Sequence[Mismatch]) -> None:
        self.mismatches = tuple(found)
        super().__init__(
            "these runs differ in what decides their scores, so their scores do not compare: "
            + "; ".join(m.describe() for m in found)
            + "; pass allow_mismatch=True to compare them anyway"
        )


class JudgeError(SummevalError):
    """A judge could not give a usable verdict."""


class JudgeAPIError(JudgeError):
    """The judge provider's request failed.

    ``status_code`` is the HTTP status, or ``None`` for a connection error or a timeout.
    ``retry_after_s`` is how long the provider asked the client to wait (``Retry-After`` or
    ``x-ratelimit-reset-*``), when it said. ``attempts`` is how many times the request was sent
    before this error was final.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        attempts: int = 1,
    ) -> None:
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.attempts = attempts
        super().__init__(message)


class JudgeConnectionError(JudgeAPIError):
    """No connection to the judge could be made (connection refused, a name that does not
    resolve, a failed TLS handshake): the request never reached it.

    Transient like any connection error, but a run treats it as a sign of an outage: it holds
    its other requests and probes until the judge answers again, for up to
    ``outage_timeout_s``, and then stops with ``JudgeUnreachableError``.
    """


class JudgeUnavailableError(JudgeAPIError):
    """No call to the judge can succeed now, so the whole run stops rather than fail item by
    item."""


class JudgeAuthError(JudgeUnavailableError):
    """The provider refused the credentials or the quota is exhausted: no call can succeed."""


class JudgeUnreachableError(JudgeUnavailableError):
    """No request reached the judge for ``outage_timeout_s``, counted from the first failed
    connection (connection refused, DNS or TLS failure) after the judge last answered, and a
    probe failed too: the run stops as interrupted, and can be resumed once the judge is back."""


class RunRecordError(SummevalError):
    """A write in the run directory failed (a full disk, an I/O error: an item, a traffic line,
    a question set, a batch record, the log file, the tables, the manifest), or a row could not
    be built. The run stops its judge and agent calls at once (only those already on their way
    are paid for after it); what was recorded before stays, and the run can be resumed once
    the cause is fixed.

    ``manifest`` is the ``Manifest`` the run ended with (status ``failed``, the cause, the
    counts the journal holds), and ``manifest_written`` whether it could be written in the run
    directory (where it could not, the one on disk still says ``running``, which a resume
    accepts all the same). (Typed ``object`` here: the manifest is a layer above the errors.)
    """

    manifest: object | None = None
    manifest_written: bool = False


class BudgetExhaustedError(SummevalError):
    """The next judge request or agent call would take the run past its budget
    (``RunOptions.max_cost`` in US dollars, ``max_tokens``): it is not sent. The run starts no
    further item, lets those in flight finish what they can within the budget, and stops as
    interrupted; it can be resumed with a larger budget. Never an item's error: the items it
    stops are left unfinished. ``limit`` names the option (``max_cost`` or ``max_tokens``)."""

    def __init__(self, message: str, *, limit: str) -> None:
        self.limit = limit
        super().__init__(message)


class AgentAPIError(SummevalError):
    """The agent under test's own model call failed: the bundled LLM summarizer's request to its
    endpoint (an HTTP error, a connection error, a timeout, a reply that is not JSON), after the
    SDK's retries. The item ends in error at its ``target`` step; the judge was never asked.

    ``status_code`` is the HTTP status, or ``None`` for a connection error or a timeout.
    """

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(message)


class AgentAuthError(AgentAPIError):
    """The agent's model refused the credentials or its quota is exhausted: no item can get an
    output, so the run stops (aborted) as it does for a judge's ``JudgeAuthError``."""


class AgentConnectionError(AgentAPIError):
    """No connection to the agent's model could be made (connection refused, a name that does
    not resolve, a failed TLS handshake): the bundled LLM summarizer's request never reached it.

    A run treats it, and any exception an agent of your own raises whose causes hold such a
    failure (a ``ConnectionRefusedError`` under an HTTP client's error), as a sign of an outage:
    it holds its other agent calls and probes until the agent answers again, for up to
    ``outage_timeout_s``, and then stops with ``AgentUnreachableError``. No item is errored by it.
    """


class AgentUnreachableError(AgentAPIError):
    """No call to the agent under test connected for ``outage_timeout_s``, counted from the
    first that could not connect after the agent last answered, and a probe failed too: the run
    stops as interrupted (its items unfinished, never errored), and can be resumed once the
    agent is back. The message names the agent and the cause."""


class JudgeInputTooLargeError(JudgeError):
    """The request is longer than the judge's context window; sending it again cannot help.

    ``size`` and ``limit`` are in tokens (``size`` is an estimate when found before the call).
    """

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None) -> None:
        self.size = size
        self.limit = limit
        super().__init__(message)


class JudgeOutputError(JudgeError):
    """The judge's reply did not match the step's schema, after every allowed re-ask.

    ``raw_reply`` keeps the last reply, truncated, for diagnosis.
    """

    def __init__(self, message: str, *, step: str, raw_reply: str | None, attempts: int) -> None:
        self.step = step
        self.raw_reply = raw_reply
        self.attempts = attempts
        super().__init__(message)
