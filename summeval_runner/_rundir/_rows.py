"""From an item's results to its table rows: the one place a row is built.

A finished item is kept in the journal as an ``ItemRecord``: its dataset position, its id, its
status, and each scorer's outcome as a value (a ``SummarizationResult``, an ``ErrorInfo``, or
the status, score and reason of any other scorer's result). ``rows_of`` turns a record into the
rows it adds to ``items``, ``alignment`` and ``coverage``. Runs and merges both compact their
journals through it, so a row of a merged run is built exactly as a row of a one-process run.
The texts in a row are those the result says it judged; nothing is parsed a second time.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from summeval_runner._inputs._metadata import MetadataReader, MetadataTypes
from summeval_runner._rundir._tables import ITEMS_SCHEMA
from summeval_runner._scorers._outcome import ItemResult, number_of, status_of
from summeval_runner._scorers._result import (
    ErrorInfo,
    JudgeExchange,
    Status,
    SummarizationResult,
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OtherResult(_Frozen):
    """Another scorer's result, as far as the tables keep it."""

    status: Status
    score: float | None
    reason: str | None


class ScorerOutcome(_Frozen):
    """One scorer's outcome for one item (in one trial): exactly one of the three fields is
    set."""

    scorer_id: str
    trial: int = 0
    summarization: SummarizationResult | None = None
    error: ErrorInfo | None = None
    other: OtherResult | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScorerOutcome:
        kinds = [self.summarization, self.error, self.other]
        if sum(kind is not None for kind in kinds) != 1:
            raise ValueError(
                f"scorer {self.scorer_id!r}: an outcome is a summarization result, an error or "
                "another result, exactly one of them"
            )
        return self

    @classmethod
    def of(cls, scorer_id: str, result: Any, trial: int = 0) -> ScorerOutcome:
        if isinstance(result, SummarizationResult):
            return cls(scorer_id=scorer_id, trial=trial, summarization=result)
        if isinstance(result, ErrorInfo):
            return cls(scorer_id=scorer_id, trial=trial, error=result)
        status = status_of(result)
        reason = getattr(result, "reason", None)
        return cls(
            scorer_id=scorer_id,
            trial=trial,
            other=OtherResult(
                status=status,
                score=number_of(result) if status != "error" else None,
                reason=reason if isinstance(reason, str) else None,
            ),
        )


class ItemRecord(_Frozen):
    """A finished item as the journal keeps it. ``position`` is its place in the dataset."""

    position: int
    item_id: str
    status: Status
    # The dataset's metadata fields, as JSON text (values of any type; what JSON cannot hold,
    # as text). The items table types them by the run's MetadataTypes.
    metadata: str
    target_latency_s: float | None
    outcomes: tuple[ScorerOutcome, ...]
    # What the agent's call used, as it reported it (None: not known, or no agent).
    target_input_tokens: int | None = None
    target_output_tokens: int | None = None
    target_cost: float | None = None

    @property
    def flagged(self) -> bool:
        """A manipulation check tripped on the item's texts, in any scorer's result."""
        return any(o.summarization is not None and o.summarization.flags for o in self.outcomes)

    @classmethod
    def of(cls, result: ItemResult, position: int) -> ItemRecord:
        usage = result.target_usage
        return cls(
            position=position,
            item_id=result.item_id,
            status=result.status,
            metadata=json.dumps(dict(result.metadata), ensure_ascii=False, default=str),
            target_latency_s=result.target_latency_s,
            target_input_tokens=usage.input_tokens if usage is not None else None,
            target_output_tokens=usage.output_tokens if usage is not None else None,
            target_cost=result.target_cost,
            outcomes=tuple(
                ScorerOutcome.of(scorer_id, outcome, trial)
                for trial, results in enumerate(result.trials)
                for scorer_id, outcome in results.items()
            ),
        )


def rows_of(
    record: ItemRecord,
    *,
    run_id: str,
    variant: str,
    metadata: MetadataTypes | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The rows one item adds to each table: a row per scorer and trial in ``items``, a row per
    claim verdict in ``alignment``, a row per question asked in ``coverage``, and a row per
    judge request in ``transcripts`` (none unless the run kept transcripts).

    ``metadata`` is the run's metadata fields and their kinds (``items.parquet``'s struct);
    without it, those of this item's own values."""
    rows: dict[str, list[dict[str, Any]]] = {
        "items": [],
        "alignment": [],
        "coverage": [],
        "transcripts": [],
    }
    fields = json.loads(record.metadata)
    if metadata is None:
        reader = MetadataReader()
        reader.add(fields)
        metadata = reader.types()
    typed = metadata.value(fields)
    for outcome in record.outcomes:
        keys = {
            "run_id": run_id,
            "variant": variant,
            "item_id": record.item_id,
            "scorer_id": outcome.scorer_id,
            "trial": outcome.trial,
        }
        row: dict[str, Any] = dict.fromkeys(ITEMS_SCHEMA.names) | keys
        row |= {"metadata": typed, "flags": [], "flag_spans": []}
        if outcome.trial == 0:
            # The agent was called once for the item, whatever its trials: its use is on the
            # first trial's row, so a sum over a scorer's rows counts each call once.
            row |= {
                "target_latency_s": record.target_latency_s,
                "target_input_tokens": record.target_input_tokens,
                "target_output_tokens": record.target_output_tokens,
                "target_cost": record.target_cost,
            }
        if outcome.error is not None:
            row |= {"status": "error", **_error_columns(outcome.error)}
        elif outcome.other is not None:
            row |= outcome.other.model_dump()
        elif outcome.summarization is not None:
            result = outcome.summarization
            row |= _summarization_columns(result)
            # A panel's verdicts are each judge's, every row naming its judge.
            for judged in result.panel or (result,):
                rows["alignment"] += _alignment_rows(judged, keys)
                rows["coverage"] += _coverage_rows(judged, keys)
                rows["transcripts"] += _transcript_rows(judged.transcript, keys)
        rows["items"].append(row)
    return rows


def _error_columns(error: ErrorInfo) -> dict[str, Any]:
    return {
        "error_type": error.type,
        "error_message": error.message,
        "error_step": error.step,
        "error_attempts": error.attempts,
        "error_raw_reply": error.raw_reply,
    }


def _summarization_columns(result: SummarizationResult) -> dict[str, Any]:
    pre, ana = result.preprocess_step_result, result.analyze_step_result
    asked = len(result.asked_questions)
    usage = result.usage
    # A panel's row: its figures the aggregate of its judges'; the claims and answers are each
    # judge's (alignment.parquet, coverage.parquet), so it counts only the questions they share.
    panel = bool(result.panel)
    columns = {
        "status": result.status,
        "score": result.score,
        "alignment_score": result.alignment_score,
        "coverage_score": result.coverage_score,
        "claims": len(pre.alignment) if pre else None,
        "supported_claims": sum(v.supported for v in pre.alignment) if pre else None,
        "questions": asked if pre or (panel and result.panel[0].preprocess_step_result) else None,
        "answered_questions": sum(v.answered for v in ana.coverage[:asked]) if ana else None,
        "reason": result.reason,
        "source": result.source,
        "summary": result.summary,
        "flags": list(result.flags),
        "flag_spans": [span.model_dump() for span in result.flag_spans],
        "judge": result.judge,
        "prompt_version": result.prompt_version,
        "max_questions": result.max_questions,
        "coverage_basis": result.coverage_basis,
        "scale": result.scale,
        "judge_calls": usage.calls,
        "judge_retries": usage.retries,
        "judge_calls_reused": usage.reused,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "judge_cost": usage.cost,
        "judge_latency_s": (
            usage.preprocess.latency_s + usage.analyze.latency_s + usage.reason.latency_s
        ),
    }
    if result.error is not None:
        columns |= _error_columns(result.error)
    return columns


def _alignment_rows(result: SummarizationResult, keys: dict[str, Any]) -> list[dict[str, Any]]:
    if result.preprocess_step_result is None:
        return []
    return [
        keys
        | {
            "judge": result.judge,
            "position": i,
            "claim": v.claim,
            "supported": v.supported,
            "reason": v.reason,
        }
        for i, v in enumerate(result.preprocess_step_result.alignment)
    ]


def _coverage_rows(result: SummarizationResult, keys: dict[str, Any]) -> list[dict[str, Any]]:
    if result.analyze_step_result is None:
        return []
    verdicts = result.analyze_step_result.coverage
    rows: list[dict[str, Any]] = []
    for i, question in enumerate(result.asked_questions):
        verdict = verdicts[i] if i < len(verdicts) else None
        rows.append(
            keys
            | {
                "judge": result.judge,
                "position": i,
                "question": question,
                "answered": bool(verdict and verdict.answered),
                "reason": verdict.reason if verdict else None,
                "verdict_missing": verdict is None,
            }
        )
    return rows


def _transcript_rows(
    transcript: tuple[JudgeExchange, ...], keys: dict[str, Any]
) -> list[dict[str, Any]]:
    return [
        keys
        | {
            "request": position,
            "step": exchange.step,
            "attempt": exchange.attempt,
            "judge": exchange.judge,
            "model": exchange.model,
            "messages": [{"role": m.role, "content": m.content} for m in exchange.messages],
            "settings": _json_text(exchange.settings),
            "reply": exchange.reply,
            "status": exchange.status,
            "verdict": _json_text(exchange.verdict),
            "error": exchange.error,
            "cached": exchange.cached,
            "retries": exchange.retries,
            "input_tokens": exchange.input_tokens,
            "output_tokens": exchange.output_tokens,
            "latency_s": exchange.latency_s,
        }
        for position, exchange in enumerate(transcript)
    ]


def _json_text(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
