"""The result (SPEC §1.4): an immutable value, derived dimension scores, a JSON round-trip."""

from __future__ import annotations

import json

import pydantic
import pytest

from summeval_runner import (
    FakeJudge,
    JudgeAPIError,
    SummarizationResult,
    create_summarization_scorer,
)

SOURCE = "The library opened a new wing. It holds 5,000 books. Entry is free."


def results() -> list[SummarizationResult]:
    scored = create_summarization_scorer("offline").run_sync(
        input=SOURCE, output="The library opened a wing with 5,000 books."
    )
    unscorable = create_summarization_scorer("offline").run_sync(input=SOURCE, output="")
    failing = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q"],
        },
        analyze=JudgeAPIError("the judge answered HTTP 502", status_code=502),
    )
    error = create_summarization_scorer(failing).run_sync(input=SOURCE, output="A summary.")
    return [scored, unscorable, error]


@pytest.mark.parametrize("result", results(), ids=lambda r: r.status)
def test_results_round_trip_through_json_unchanged(result: SummarizationResult) -> None:
    loaded = SummarizationResult.model_validate_json(result.model_dump_json())

    assert loaded == result
    assert loaded.alignment_score == result.alignment_score
    assert loaded.coverage_score == result.coverage_score


def test_results_are_immutable() -> None:
    result = results()[0]

    with pytest.raises(pydantic.ValidationError):
        result.score = 0.0  # type: ignore[misc]
    assert isinstance(result.preprocess_step_result.alignment, tuple)  # type: ignore[union-attr]


def test_dimension_scores_are_derived_not_stored() -> None:
    dumped = json.loads(results()[0].model_dump_json())

    assert "alignment_score" not in dumped
    assert "coverage_score" not in dumped


def test_an_error_result_has_no_score_and_keeps_the_cause() -> None:
    error = results()[2]

    assert error.status == "error"
    assert error.score is None
    assert error.error is not None
    assert error.error.type == "JudgeAPIError"
    assert error.error.step == "analyze"
    assert error.error.attempts == 1
    assert "502" in error.reason
    assert error.preprocess_step_result is not None
    assert error.coverage_score is None


def test_usage_is_recorded_per_step() -> None:
    scored = results()[0]

    assert (
        scored.usage.preprocess.calls,
        scored.usage.analyze.calls,
        scored.usage.reason.calls,
    ) == (1, 1, 1)
    assert scored.usage.calls == 3
    assert scored.usage.preprocess.latency_s > 0
