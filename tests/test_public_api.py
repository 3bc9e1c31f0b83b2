"""The public API is declared once, in ``summeval_runner.__all__``, and pinned here."""

from __future__ import annotations

import pkgutil

import summeval_runner

PUBLIC = {
    # the scorer
    "create_summarization_scorer",
    "SummarizationMetricOptions",
    "SummarizationScorer",
    "SummarizationResult",
    "PreprocessStepResult",
    "AnalyzeStepResult",
    "ReasonStepResult",
    "ClaimVerdict",
    "QuestionVerdict",
    "StepUsage",
    "Usage",
    "ErrorInfo",
    "PROMPT_VERSION",
    # what is scored
    "extract_tool_results",
    "ToolResult",
    # the runner and datasets
    "run_evals",
    "run_evals_sync",
    "Scorer",
    "EvalRunResult",
    "ItemResult",
    "RunCounts",
    "load_dataset",
    "FieldMap",
    "Item",
    "DatasetError",
    # comparing runs
    "compare_runs",
    "write_report",
    # shards
    "merge_runs",
    "MergedRun",
    # judges
    "Judge",
    "JudgeRequest",
    "JudgeReply",
    "TokenUsage",
    "PromptMessage",
    "PreprocessInput",
    "AnalyzeInput",
    "ReasonInput",
    "OfflineJudge",
    "OpenAIJudge",
    "OpenAIJudgeConfig",
    "FakeJudge",
    # errors
    "SummevalError",
    "ConfigError",
    "MissingAPIKeyError",
    "InputError",
    "JudgeError",
    "JudgeAPIError",
    "JudgeAuthError",
    "JudgeOutputError",
    "__version__",
}


def test_all_is_exactly_the_intended_names() -> None:
    assert set(summeval_runner.__all__) == PUBLIC
    assert len(summeval_runner.__all__) == len(PUBLIC)


def test_every_public_name_resolves() -> None:
    for name in summeval_runner.__all__:
        assert getattr(summeval_runner, name) is not None


def test_every_other_module_is_private() -> None:
    modules = [m.name for m in pkgutil.iter_modules(summeval_runner.__path__)]
    assert modules
    assert all(name.startswith("_") for name in modules), modules
