"""What an item came to: one item's results across scorers, its status, and a run's counts.

These values sit below the run machinery so that everything which reads them (the runner, the
tables, merges, comparisons) shares one definition of an item's status and of a run's counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from summeval_runner._judges._protocol import TokenUsage
from summeval_runner._scorers._result import COUNTED, STATUSES, ErrorInfo, Status


def _field(result: Any, name: str) -> Any:
    # A result object's attribute, or a mapping's key (a scorer may return {"score": ...}).
    if isinstance(result, Mapping):
        return result.get(name)
    return getattr(result, name, None)


def unreadable(result: Any) -> bool:
    """A result ``status_of`` reads as an error only because it holds nothing to count (no
    number, no verdict), not because the scorer said so or raised."""
    return (
        not isinstance(result, ErrorInfo)
        and status_of(result) == "error"
        and _field(result, "status") != "error"
    )


def number_of(result: Any) -> float | None:
    """Any scorer's number: its ``score`` (attribute or key), or the result itself when it is a
    number (a bool is not); ``None`` otherwise.

    >>> number_of({"score": 0.5}), number_of(0.75), number_of(True)
    (0.5, 0.75, None)
    """
    score = result if isinstance(result, int | float) else _field(result, "score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        return None
    return float(score)


def status_of(result: Any) -> Status:
    """Any scorer's result read as a status.

    An ``ErrorInfo`` is an error; a result whose ``status`` (attribute or key) is
    ``blank_summary``, ``unscorable`` or ``error`` is that; a result with a number
    (``number_of``), or with a boolean verdict as its score, is scored; anything else
    (``None``, a string, a mapping without a score) is an error: a scorer that gave nothing to
    count must not pass as scored.

    >>> status_of({"score": 0.9}), status_of(None), status_of({"status": "unscorable"})
    ('scored', 'error', 'unscorable')
    """
    if isinstance(result, ErrorInfo):
        return "error"
    status = _field(result, "status")
    if status in STATUSES and status != "scored":  # said outright; a scored one needs a number
        return status  # type: ignore[no-any-return]
    verdict = result if isinstance(result, bool) else _field(result, "score")
    if number_of(result) is not None or isinstance(verdict, bool):
        return "scored"
    return "error"


def scored_number(result: Any) -> float | None:
    """The number a result counts as in the means: a scored result's, a blank summary's (0);
    ``None`` for an unscorable or failed one."""
    return number_of(result) if status_of(result) in COUNTED else None


def item_status(statuses: Iterable[Status]) -> Status:
    """An item's status from its scorers' (or trials') statuses, the worst of them: an error,
    else unscorable, else a blank summary, else scored.

    >>> item_status(["scored", "unscorable"]), item_status(["scored", "blank_summary"])
    ('unscorable', 'blank_summary')
    """
    found = set(statuses)
    worst_first: tuple[Status, ...] = ("error", "unscorable", "blank_summary")
    for status in worst_first:
        if status in found:
            return status
    return "scored"


@dataclass(frozen=True)
class ItemResult:
    """One item's outcome: what the target produced and what each scorer made of it.

    ``results`` maps each scorer's id to its result, or to an ``ErrorInfo`` when the scorer
    raised, or when the target failed or the item timed out (then every scorer has it).
    ``error`` is the item's first failure: the target's, else a scorer's. With several trials
    (``RunOptions.trials``), ``trial_results`` holds each trial's results, the first of them
    ``results``; a run of one trial leaves it empty. ``target_usage`` and ``target_cost`` are
    what the agent's call used, as it reported it (``None``: not known; no agent, none).
    """

    item_id: str
    input: Any
    output: Any
    metadata: Mapping[str, Any]
    results: Mapping[str, Any]
    error: ErrorInfo | None
    target_latency_s: float | None
    trial_results: tuple[Mapping[str, Any], ...] = ()
    target_usage: TokenUsage | None = None
    target_cost: float | None = None

    @property
    def trials(self) -> tuple[Mapping[str, Any], ...]:
        """Every trial's results, in trial order (one trial: ``(results,)``)."""
        return self.trial_results or (self.results,)

    @property
    def status(self) -> Status:
        """``error`` if anything failed, else ``unscorable`` if a scorer said so, else scored;
        over every trial."""
        if self.error is not None:
            return "error"
        return item_status(
            status_of(result) for results in self.trials for result in results.values()
        )

    def score(self, scorer_id: str) -> float | None:
        """The scorer's number for this item: the mean over its trials when every trial was
        scored, else ``None`` (an error or an unscorable trial)."""
        return trial_mean([results.get(scorer_id) for results in self.trials])


def trial_mean(results: Iterable[Any]) -> float | None:
    """The mean of one scorer's numbers over an item's trials; ``None`` unless every trial was
    scored (an item is an error, or unscorable, if any of its trials is).

    >>> trial_mean([{"score": 0.5}, {"score": 1.0}]), trial_mean([{"score": 0.5}, None])
    (0.75, None)
    """
    numbers = [scored_number(result) for result in results]
    if not numbers or any(number is None for number in numbers):
        return None
    return sum(numbers) / len(numbers)  # type: ignore[arg-type]


class RunCounts(BaseModel):
    """Items finished in a run: all of them, and how many were scored (judged), blank summaries
    (scored 0 by rule, counted in the means: ``counted`` is both), unscorable (a blank source,
    left out of the means) or errors; ``flagged``: how many tripped a manipulation check (any
    status; ``_flags.CHECKS``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int = 0
    scored: int = 0
    blank_summaries: int = 0
    unscorable: int = 0
    errors: int = 0
    flagged: int = 0

    @classmethod
    def of(cls, statuses: Iterable[Status], flagged: int = 0) -> RunCounts:
        """The counts of a list of item statuses.

        >>> RunCounts.of(["scored", "error", "scored", "blank_summary"])
        RunCounts(total=4, scored=2, blank_summaries=1, unscorable=0, errors=1, flagged=0)
        """
        # Counted as they come, not listed: a million statuses are 8 MB of list.
        return cls.tallied(Counter(statuses), flagged)

    @classmethod
    def tallied(cls, tally: Mapping[Status, int], flagged: int = 0) -> RunCounts:
        """The counts of a tally of item statuses (status -> items)."""
        return cls(
            total=sum(tally.values()),
            scored=tally.get("scored", 0),
            blank_summaries=tally.get("blank_summary", 0),
            unscorable=tally.get("unscorable", 0),
            errors=tally.get("error", 0),
            flagged=flagged,
        )

    def __add__(self, other: RunCounts) -> RunCounts:
        return RunCounts(
            total=self.total + other.total,
            scored=self.scored + other.scored,
            blank_summaries=self.blank_summaries + other.blank_summaries,
            unscorable=self.unscorable + other.unscorable,
            errors=self.errors + other.errors,
            flagged=self.flagged + other.flagged,
        )

    @property
    def counted(self) -> int:
        """Items whose score counts in the means: the scored and the blank summaries (0)."""
        return self.scored + self.blank_summaries

    @property
    def error_rate(self) -> float:
        """The share of finished items that ended in error (0 when none finished)."""
        return self.errors / self.total if self.total else 0.0


GateFailure = Literal["unfinished", "unscored", "errors"]


def gate_failure(
    status: str, unfinished: int, counts: RunCounts, max_error_rate: float
) -> GateFailure | None:
    """Why a CI gate must not pass a run, or ``None`` when it may: the one rule for a run's own
    gate (``EvalRunResult.passed``) and ``summeval-compare --fail-if-drop``.

    A run passes when it ``completed`` with no item unfinished (else ``unfinished``: its figures
    cover part of its items), scored at least one item (else ``unscored``: it measured nothing)
    and errored on no larger share of its finished items than ``max_error_rate`` (else
    ``errors``).

    >>> gate_failure("interrupted", 24, RunCounts(total=2, scored=2), 0.0)
    'unfinished'
    >>> gate_failure("completed", 0, RunCounts(total=4, scored=3, errors=1), 0.25) is None
    True
    """
    if status != "completed" or unfinished:
        return "unfinished"
    if counts.counted == 0:
        return "unscored"
    if counts.error_rate > max_error_rate:
        return "errors"
    return None
