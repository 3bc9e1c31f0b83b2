"""SPEC §1.3's scoring rules, table-driven through the public FakeJudge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from summeval_runner import (
    AnalyzeInput,
    ConfigError,
    FakeJudge,
    PreprocessInput,
    SummarizationMetricOptions,
    SummarizationResult,
    create_summarization_scorer,
)

SOURCE = "The museum reopened in May. Visitors doubled. The roof was repaired."
SUMMARY = "The museum reopened and visitor numbers doubled."


def claims(*supported: bool) -> list[dict[str, Any]]:
    return [{"claim": f"claim {i}", "supported": s, "reason": "r"} for i, s in enumerate(supported)]


def questions(count: int) -> list[str]:
    return [f"Does the text say fact {i}?" for i in range(count)]


def verdicts(*answered: bool) -> dict[str, Any]:
    return {
        "coverage": [
            {"question": f"q{i}", "answered": a, "reason": "r"} for i, a in enumerate(answered)
        ]
    }


@dataclass(frozen=True)
class Case:
    name: str
    claims: list[dict[str, Any]]
    questions: list[str]
    verdicts: dict[str, Any]
    score: float
    alignment: float
    coverage: float
    options: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("all supported, all answered", claims(True, True), questions(2), verdicts(True, True), 1.0, 1.0, 1.0),
    Case("alignment weaker", claims(True, False, False, False), questions(4), verdicts(True, True, True, False), 0.25, 0.25, 0.75),
    Case("coverage weaker", claims(True, True), questions(4), verdicts(True, False, False, False), 0.25, 1.0, 0.25),
    Case("2 of 3 supported, unrounded", claims(True, True, False), questions(1), verdicts(True), 2 / 3, 2 / 3, 1.0),
    Case("scale 10", claims(True, True), questions(2), verdicts(True, False), 5.0, 1.0, 0.5, {"scale": 10}),
    Case("no claims", [], questions(2), verdicts(True, True), 0.0, 0.0, 1.0),
    # per_item: per_source asks a draw of no question again first (test_questions.py).
    Case("no questions", claims(True), [], verdicts(), 0.0, 1.0, 0.0, {"questions": "per_item"}),
    Case("fewer verdicts than questions", claims(True), questions(4), verdicts(True, True), 0.5, 1.0, 0.5),
    Case("more verdicts than questions", claims(True), questions(2), verdicts(True, False, True, True), 0.5, 1.0, 0.5),
    Case("more questions than max_questions", claims(True), questions(5), verdicts(True, True, False), 1.0, 1.0, 1.0, {"max_questions": 2}),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_scoring_rules(case: Case) -> None:
    judge = FakeJudge(
        preprocess={"alignment": case.claims, "questions": case.questions}, analyze=case.verdicts
    )
    scorer = create_summarization_scorer(judge, case.options)

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert result.score == case.score  # exact: the score is never rounded
    assert result.alignment_score == case.alignment
    assert result.coverage_score == case.coverage
    # A reply of another count than the questions asked, or of no claim for a summary that is
    # not blank, is asked again (issue 44): the rules above hold for the reply still so after
    # the re-asks (no claims: score 0).
    asked = min(len(case.questions), case.options.get("max_questions", 10))
    analyze = 1 if len(case.verdicts["coverage"]) == asked else 3
    preprocess = 1 if case.claims else 3
    assert [r.step for r in judge.requests] == [
        *["preprocess"] * preprocess, *["analyze"] * analyze, "reason"
    ]


def test_only_the_first_max_questions_questions_are_asked() -> None:
    judge = FakeJudge(
        preprocess={"alignment": claims(True), "questions": questions(5)},
        analyze=verdicts(True, True),
    )
    scorer = create_summarization_scorer(judge, {"max_questions": 2})

    scorer.run_sync(input=SOURCE, output=SUMMARY)

    (preprocess,) = judge.requests_for("preprocess")
    (analyze,) = judge.requests_for("analyze")
    assert isinstance(preprocess.payload, PreprocessInput)
    assert preprocess.payload.max_questions == 2
    assert isinstance(analyze.payload, AnalyzeInput)
    assert analyze.payload.questions == tuple(questions(2))


def test_the_reason_step_gets_the_scores_and_the_failures_but_not_the_source() -> None:
    judge = FakeJudge(
        preprocess={"alignment": claims(True, False), "questions": questions(2)},
        analyze=verdicts(True, False),
        reason={"reason": "Alignment and coverage are both 0.5."},
    )
    scorer = create_summarization_scorer(judge)

    result = scorer.run_sync(input=SOURCE, output=SUMMARY)

    (reason,) = judge.requests_for("reason")
    prompt = "\n".join(m.content for m in reason.messages)
    assert "claim 1" in prompt
    assert "Does the text say fact 1?" in prompt
    assert "The roof was repaired" not in prompt
    assert result.reason == "Alignment and coverage are both 0.5."


@pytest.mark.parametrize(
    "output",
    [
        "   ",
        [{"role": "assistant", "content": ""}],
        [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}],
    ],
)
def test_a_blank_summary_scores_0_on_every_dimension_and_calls_no_judge(output: object) -> None:
    """The system under test's failure (SPEC §1.3): 0, counted; not unscorable."""
    judge = FakeJudge()

    result = create_summarization_scorer(judge, {"scale": 5}).run_sync(input=SOURCE, output=output)

    assert result.status == "blank_summary"
    assert (result.score, result.alignment_score, result.coverage_score) == (0.0, 0.0, 0.0)
    assert "The summary is empty" in result.reason
    assert judge.requests == []
    assert result.usage.calls == 0
    assert SummarizationResult.model_validate_json(result.model_dump_json()) == result


def test_a_blank_source_is_unscorable_and_says_so() -> None:
    judge = FakeJudge()

    result = create_summarization_scorer(judge, {"source": "\n"}).run_sync(
        input=SOURCE, output=SUMMARY
    )

    assert result.status == "unscorable"
    assert "The source is empty" in result.reason
    assert judge.requests == []


def test_a_blank_source_with_a_blank_summary_is_the_datas_failure() -> None:
    """Nothing to judge against: unscorable (left out of the means), whatever the summary."""
    result = create_summarization_scorer(FakeJudge(), {"source": " "}).run_sync(
        input=SOURCE, output=""
    )

    assert result.status == "unscorable"
    assert "The source is empty (and so is the summary)" in result.reason


def scripted() -> FakeJudge:
    return FakeJudge(
        preprocess={"alignment": claims(True), "questions": questions(1)}, analyze=verdicts(True)
    )


def judged_texts(judge: FakeJudge) -> tuple[str, str]:
    payload = judge.requests_for("preprocess")[0].payload
    assert isinstance(payload, PreprocessInput)
    return payload.summary, payload.source


def test_a_tool_call_only_turn_is_skipped_when_finding_the_summary() -> None:
    tool_turn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": {"name": "search"}}],
    }
    output = [
        {"role": "assistant", "content": "Let me look that up."},
        tool_turn,
        {"role": "tool", "tool_call_id": "c1", "content": "search results"},
        {"role": "assistant", "content": [{"type": "text", "text": "The museum reopened."}]},
        tool_turn,
    ]
    judge = scripted()

    create_summarization_scorer(judge).run_sync(input=SOURCE, output=output)

    assert judged_texts(judge)[0] == "The museum reopened."


def test_the_source_option_beats_the_input() -> None:
    judge = scripted()

    create_summarization_scorer(judge, {"source": "Given source."}).run_sync(
        input=SOURCE, output=SUMMARY
    )

    assert judged_texts(judge)[1] == "Given source."


def test_the_extractor_beats_the_source_option() -> None:
    judge = scripted()
    options = SummarizationMetricOptions(
        source="Given source.",
        source_extractor=lambda input, output: f"extracted from {input['doc']}",
    )

    create_summarization_scorer(judge, options).run_sync(
        input={"content": "x", "doc": "doc-7"}, output=SUMMARY
    )

    assert judged_texts(judge)[1] == "extracted from doc-7"


def test_the_first_user_message_is_the_default_source() -> None:
    judge = scripted()
    payload = {
        "inputMessages": [
            {"role": "system", "content": "Summarize."},
            {"role": "user", "content": SOURCE},
            {"role": "user", "content": "Make it short."},
        ]
    }

    create_summarization_scorer(judge).run_sync(
        input=payload, output={"outputMessages": [{"role": "assistant", "content": SUMMARY}]}
    )

    assert judged_texts(judge) == (SUMMARY, SOURCE)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_questions": 0}, "max_questions must be >= 1, got 0"),
        ({"max_questions": -3}, "max_questions must be >= 1, got -3"),
        ({"max_questions": 2.5}, "max_questions must be an integer >= 1, got 2.5"),
        ({"max_questions": True}, "max_questions must be an integer >= 1, got True"),
        ({"scale": 0}, "scale must be > 0 and finite, got 0"),
        ({"scale": -1.5}, "scale must be > 0 and finite, got -1.5"),
        ({"scale": float("nan")}, "scale must be > 0 and finite, got nan"),
        ({"scale": "10"}, "scale must be a number > 0, got '10'"),
        ({"max_reasks": -1}, "max_reasks must be >= 0, got -1"),
        ({"source": 42}, "source must be a string, got int"),
        ({"source_extractor": "not callable"}, "source_extractor must be a callable"),
        ({"max_question": 5}, "unknown option 'max_question'; expected one of: "),
    ],
)
def test_invalid_options_are_rejected_when_the_scorer_is_built(
    options: dict[str, Any], message: str
) -> None:
    judge = FakeJudge()

    with pytest.raises(ConfigError) as raised:
        create_summarization_scorer(judge, options)

    assert str(raised.value).startswith(message)
    assert judge.requests == []


def test_options_object_rejects_invalid_values_too() -> None:
    with pytest.raises(ConfigError, match="max_questions must be >= 1, got 0"):
        SummarizationMetricOptions(max_questions=0)


def test_fake_judge_scripts_run_in_order_and_errors_surface() -> None:
    judge = FakeJudge(
        preprocess=[
            "not json",
            {"alignment": claims(True), "questions": questions(1)},
        ],
        analyze=verdicts(False),
    )

    result = create_summarization_scorer(judge).run_sync(input=SOURCE, output=SUMMARY)

    assert result.status == "scored"
    assert result.score == 0.0
    assert result.usage.preprocess.calls == 2
    assert judge.requests_for("preprocess")[1].attempt == 2
