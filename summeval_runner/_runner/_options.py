"""The run's options: every limit a run keeps, declared once, for Python callers and the CLI.

``summeval-run``'s ``runner`` config group has exactly these names (plus ``resume``, a run
directory to continue); the app builds a ``RunOptions`` from it and adds nothing of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

from summeval_runner._errors import ConfigError
from summeval_runner._inputs._shards import Shard
from summeval_runner._runner._cache import CACHE_MODES, CacheMode
from summeval_runner._runner._retry import RetryPolicy

# The name Mastra's runEvals (the seed's API) gives the bound on items in flight.
_ALIASES = {"concurrency": "max_items_in_flight"}
RunMode = Literal["interactive", "batch"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a run goes: bounds, pace, retries, timeouts, the response cache, and what it scores.

    Every rule is checked when the object is built, and the message names the option, the rule
    and the value (``max_items_in_flight must be >= 1, got 0``).

    - ``max_items_in_flight`` (alias ``concurrency``): items being processed at once.
    - ``max_target_calls_in_flight``: calls to the agent under test at once.
    - ``max_judge_requests_in_flight``: judge requests at once, per judge; halved on a burst of
      429s and raised again while requests succeed, up to it. ``None`` (the default): as many
      as the items in flight can send at once (``judge_requests_bound``), so that
      ``max_items_in_flight`` (``concurrency``) alone sets how much runs at once.
    - ``judge_rpm``: judge requests per minute, paced evenly (``None``: no limit); adapts to
      429s like the bound above.
    - ``judge_tpm``: judge tokens per minute, paced by each request's estimate (its prompt at
      four bytes a token, and its reply as the replies of its kind so far), corrected by the
      tokens the reply reports (``None``: no limit). The server's ``x-ratelimit-remaining-*``
      and ``x-ratelimit-reset-*`` headers hold requests back before a 429 would.
    - ``max_cost``: US dollars the run may spend, the judge's and the agent's calls together
      (``None``: no cap; needs the judge's price). ``max_tokens``: tokens it may use, likewise.
      A call that would pass either is not made: the run stops as interrupted (resumable, with
      a larger budget); what earlier parts of a resumed run spent counts.
    - ``mode``: ``interactive``, or ``batch``: each round of judge calls goes to the provider's
      Batch API (half price at OpenAI; results within ``batch_window``), polled every
      ``batch_poll_s`` seconds, at most ``batch_max_requests`` requests a batch.
    - ``request_timeout_s``: seconds for one judge request, then it is retried; ``item_timeout_s``:
      seconds of one item's own work (its agent and judge calls in progress, its scorers' runs
      outside them), then it is an error; the waits the run imposes (a judge request slot, the
      request and token pacers, a server's hold, a retry's backoff, an outage's probes, another
      item's draw of the questions) do not count. ``None``: no limit.
    - ``outage_timeout_s``: when the judge cannot be connected to (connection refused, DNS or
      TLS failure), requests are held while one probes it; once no request has reached the
      judge for this many seconds since that first failed connection, the run stops as
      interrupted (``JudgeUnreachableError``), resumable. Any reply ends the outage, an HTTP
      error (429, 503) included: the judge was reached. The agent under test is watched by the
      same rule (``AgentUnreachableError``).
    - ``retry``: the retry policy of judge requests (a ``RetryPolicy`` or a mapping of its fields).
    - ``cache``: the judge response cache, ``off``, ``read``, ``write`` or ``readwrite``, in
      ``cache_path`` (``None``: ``$SUMMEVAL_CACHE_DIR``, else ``~/.cache/summeval_runner/``).
    - ``shard``: ``"I/N"``, score only the items that hash to shard I of N: by their source's
      fingerprint when a summarization scorer shares questions per source (every item of a
      source in one shard), else by their id (``_items.shard_rule``).
    - ``shutdown_grace_s``: once ``stop`` is set, how long items in flight get to finish.
    - ``progress``: show a progress bar (a plain line every 10 s when not on a terminal).
    - ``max_error_rate``: the share of errored items a run may have and still pass
      (``EvalRunResult.passed``).
    - ``variant``: the run's label in every table (``None``: ``default``).
    - ``trials``: how many times each item is judged (its agent is called once); each trial's
      judge requests carry the trial number (a sampling judge varies its seed by it, and the
      cache keeps each trial's replies apart). Tables hold every trial; an item's score is its
      mean over its trials, and the run reports how much the trials disagreed.
    - ``transcripts``: keep every judge request of every item: the messages as sent, the
      model and settings, the reply and its verdict or error, re-asks included. Each item's
      summarization result holds them (``transcript``), and a run directory gets
      ``transcripts.parquet``, a row per request, scrubbed of secrets as every table is. Off:
      nothing of them is built. A run that keeps its results (``keep_results``, Python's
      default) holds every item's transcript in memory until it returns.

    >>> RunOptions.of(None, {"concurrency": 4, "retry": {"max_attempts": 3}}).max_items_in_flight
    4
    >>> RunOptions(max_items_in_flight=0)
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: max_items_in_flight must be an integer >= 1, got 0
    """

    max_items_in_flight: int = 16
    max_target_calls_in_flight: int = 4
    max_judge_requests_in_flight: int | None = None
    judge_rpm: float | None = None
    request_timeout_s: float | None = 120.0
    item_timeout_s: float | None = 900.0
    outage_timeout_s: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    cache: CacheMode = "readwrite"
    cache_path: Path | None = None
    shard: Shard | None = None
    shutdown_grace_s: float = 30.0
    progress: bool = False
    max_error_rate: float = 0.0
    variant: str | None = None
    trials: int = 1
    judge_tpm: float | None = None
    max_cost: float | None = None
    max_tokens: int | None = None
    mode: RunMode = "interactive"
    batch_poll_s: float = 30.0
    batch_max_requests: int = 10_000
    transcripts: bool = False

    def __post_init__(self) -> None:
        for name in (
            "max_items_in_flight",
            "max_target_calls_in_flight",
            "max_judge_requests_in_flight",
            "trials",
            "batch_max_requests",
        ):
            value = getattr(self, name)
            follows = name == "max_judge_requests_in_flight"
            if value is None and follows:
                continue  # follows the items in flight
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                rule = ", or None (null) to follow the items in flight;" if follows else ","
                raise ConfigError(f"{name} must be an integer >= 1{rule} got {value!r}")
        for name in ("judge_rpm", "judge_tpm", "request_timeout_s", "item_timeout_s", "max_cost"):
            value = getattr(self, name)
            if value is not None and not _positive(value):
                raise ConfigError(f"{name} must be > 0, or None (null) for no limit; got {value!r}")
        tokens = self.max_tokens
        if tokens is not None and (
            isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
        ):
            raise ConfigError(
                f"max_tokens must be an integer >= 1, or None (null) for no cap; got {tokens!r}"
            )
        if self.mode not in get_args(RunMode):
            raise ConfigError(f"mode must be interactive or batch, got {self.mode!r}")
        if not _positive(self.batch_poll_s):
            raise ConfigError(f"batch_poll_s must be > 0, got {self.batch_poll_s!r}")
        if not _positive(self.outage_timeout_s):
            raise ConfigError(f"outage_timeout_s must be > 0, got {self.outage_timeout_s!r}")
        if not _number(self.shutdown_grace_s) or self.shutdown_grace_s < 0:
            raise ConfigError(f"shutdown_grace_s must be >= 0, got {self.shutdown_grace_s!r}")
        rate = self.max_error_rate
        if not _number(rate) or not 0 <= rate <= 1:
            raise ConfigError(f"max_error_rate must be between 0 and 1, got {rate!r}")
        if self.cache not in CACHE_MODES:
            raise ConfigError(f"cache must be one of {', '.join(CACHE_MODES)}, got {self.cache!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")
        if self.shard is not None and not isinstance(self.shard, Shard):
            raise ConfigError(f"shard must be 'I/N' or a Shard, got {self.shard!r}")
        for name in ("progress", "transcripts"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be True or False, got {value!r}")
        if self.cache_path is not None and not isinstance(self.cache_path, Path):
            raise ConfigError(f"cache_path must be a path or None, got {self.cache_path!r}")
        if self.variant is not None and (not isinstance(self.variant, str) or not self.variant):
            raise ConfigError(f"variant must be a non-empty string or None, got {self.variant!r}")

    def judge_requests_bound(self, scorers: int = 1) -> int:
        """The bound on one judge's requests in flight, for a run whose ``scorers`` scorers
        share that judge: ``max_judge_requests_in_flight`` when given, else what the items in
        flight can send at once. An item sends one request at a time per scorer and trial (a
        summarization scorer's three calls go one after another), and its trials and scorers
        run at once, so that is ``max_items_in_flight x trials x scorers``: no item ever waits
        for a slot that the bound on items did not mean to hold back.

        >>> RunOptions(max_items_in_flight=50, trials=3).judge_requests_bound()
        150
        >>> RunOptions(max_items_in_flight=50, max_judge_requests_in_flight=8).judge_requests_bound(
        ...     scorers=2
        ... )
        8
        """
        if self.max_judge_requests_in_flight is not None:
            return self.max_judge_requests_in_flight
        return self.max_items_in_flight * self.trials * max(1, scorers)

    @classmethod
    def of(
        cls, options: RunOptions | Mapping[str, Any] | None, overrides: Mapping[str, Any]
    ) -> RunOptions:
        """Options from an object or a mapping, with ``overrides`` (keyword arguments of
        ``run_evals``) replacing its values. Names are those of the fields, or ``concurrency``;
        ``retry`` may be a mapping, ``shard`` a string ``"I/N"``, ``cache_path`` a string."""
        given: dict[str, Any] = {}
        if options is None:
            base = cls()
        elif isinstance(options, RunOptions):
            base = options
        elif isinstance(options, Mapping):
            base, given = cls(), _normalised(options)
        else:
            raise ConfigError(
                f"options must be RunOptions, a mapping or None, got {type(options).__name__}"
            )
        changes = {**given, **_normalised(overrides)}
        return replace(base, **changes) if changes else base


def _normalised(values: Mapping[str, Any]) -> dict[str, Any]:
    known = {f.name for f in fields(RunOptions)}
    changes: dict[str, Any] = {}
    for raw_name, value in values.items():
        name = _ALIASES.get(str(raw_name), str(raw_name))
        if name not in known:
            raise ConfigError(
                f"{raw_name} is not a run option; expected one of: "
                f"{', '.join(sorted(known | set(_ALIASES)))}"
            )
        if name in changes:
            raise ConfigError(
                f"{name} is given twice (as {name} and as its alias concurrency); give one"
            )
        changes[name] = _coerced(name, value)
    return changes


def _coerced(name: str, value: Any) -> Any:
    if name == "retry" and isinstance(value, Mapping):
        unknown = sorted(set(map(str, value)) - {f.name for f in fields(RetryPolicy)})
        if unknown:
            raise ConfigError(f"retry: unknown setting {unknown[0]!r}")
        try:
            return RetryPolicy(**value)
        except ConfigError as error:
            raise ConfigError(f"retry.{error}") from None
    if name == "shard" and isinstance(value, str):
        return Shard.parse(value)
    if name == "cache_path" and isinstance(value, str):
        return Path(value)
    return value


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> bool:
    return _number(value) and value > 0  # type: ignore[operator]
