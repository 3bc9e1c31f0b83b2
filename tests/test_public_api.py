"""The public API is declared once, in ``summeval_runner.__all__``, and pinned here."""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

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
    "JudgeExchange",
    "PROMPT_VERSION",
    # what is scored
    "extract_tool_results",
    "gate_comparison",
    "ToolResult",
    # agreement with human ratings
    "judge_agreement",
    "judge_agreement_sync",
    "AgreementResult",
    "AgreementFigure",
    "HumanRatings",
    "HumanTarget",
    "RatingsError",
    # nightly economics: costs, estimates, budgets, trials
    "Price",
    "RunCost",
    "RunEstimate",
    "estimate_evals",
    "estimate_evals_sync",
    "report_target_usage",
    "BudgetExhaustedError",
    "JudgeNoise",
    "JudgeEstimate",
    "PanelDisagreement",
    # the runner, its options and datasets
    "run_evals",
    "run_evals_sync",
    "RunOptions",
    "RunRecordError",
    "RetryPolicy",
    "Scorer",
    "EvalRunResult",
    "ItemResult",
    "RunCounts",
    "Manifest",
    "load_dataset",
    "DatasetFile",
    "FieldMap",
    "GateVerdict",
    "Item",
    "DatasetError",
    # comparing runs
    "compare_runs",
    "RunsDiffer",
    "write_report",
    "load_history",
    # shards
    "merge_runs",
    "MergedRun",
    # judges
    "Judge",
    "JudgeBase",
    "JudgeRequest",
    "JudgeReply",
    "TokenUsage",
    "PromptMessage",
    "PreprocessInput",
    "AnalyzeInput",
    "ReasonInput",
    "OfflineJudge",
    "OfflineSettings",
    "OpenAIJudge",
    "OpenAIJudgeConfig",
    "AzureJudge",
    "AzureJudgeConfig",
    "AnthropicJudge",
    "AnthropicJudgeConfig",
    "GoogleJudge",
    "GoogleJudgeConfig",
    "FakeJudge",
    "JudgePanel",
    # errors
    "SummevalError",
    "ConfigError",
    "MissingAPIKeyError",
    "InputError",
    "JudgeError",
    "JudgeAPIError",
    "JudgeAuthError",
    "JudgeConnectionError",
    "JudgeUnavailableError",
    "JudgeUnreachableError",
    "JudgeInputTooLargeError",
    "JudgeOutputError",
    "AgentAPIError",
    "AgentAuthError",
    "AgentConnectionError",
    "AgentUnreachableError",
    "__version__",
}


def test_all_is_exactly_the_intended_names() -> None:
    assert set(summeval_runner.__all__) == PUBLIC
    assert len(summeval_runner.__all__) == len(PUBLIC)


def test_every_public_exception_is_drawn_in_the_one_tree_under_its_parent() -> None:
    # The tree in _errors.py (and the Python guide's copy) is what a user reads to know what to
    # catch: every public exception is in it, under the class it derives from.
    from summeval_runner import _errors

    public = {
        name: getattr(summeval_runner, name)
        for name in summeval_runner.__all__
        if isinstance(getattr(summeval_runner, name), type)
        and issubclass(getattr(summeval_runner, name), BaseException)
    }
    for tree in (
        _errors.__doc__ or "",
        (Path(__file__).parents[1] / "docs/guides/python.md").read_text(encoding="utf-8"),
    ):
        drawn = _drawn_tree(tree)
        assert set(drawn) == set(public)
        for name, parent in drawn.items():
            if parent is not None:
                assert public[name].__bases__[0] is public[parent], name
    assert all(issubclass(kind, summeval_runner.SummevalError) for kind in public.values())


def _drawn_tree(text: str) -> dict[str, str | None]:
    """Each class of a drawn tree (``SummevalError`` at its root, ``├──``/``└──`` below) and its
    parent, read from the indentation."""
    lines = text.split("SummevalError", 1)[1].split("\n")
    parents: dict[str, str | None] = {"SummevalError": None}
    stack = [(-1, "SummevalError")]
    for line in lines[1:]:
        found = re.match(r"^([\s│]*)[├└]── (\w+)", line.rstrip())
        if found is None:
            if line.strip() and not line[:1].isspace() and not line.startswith("│"):
                break  # the tree has ended
            continue
        depth = len(found[1])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[found[2]] = stack[-1][1]
        stack.append((depth, found[2]))
    return parents


def test_every_public_name_resolves() -> None:
    for name in summeval_runner.__all__:
        assert getattr(summeval_runner, name) is not None


def test_every_other_module_is_private() -> None:
    modules = [m.name for m in pkgutil.iter_modules(summeval_runner.__path__)]
    assert modules
    assert all(name.startswith("_") for name in modules), modules


# The layers, lowest first: a module imports only from its own layer or those before it.
LAYERS = [
    "_errors",
    "_secrets",
    "_stats",
    "_messages",
    "_judges",
    "_scorers",
    "_inputs",
    "_rundir",
    "_analysis",
    "_runner",
    "_agents",
    "_report",
    "_cli",
]
# Beside the runner, not inside it: the runner never imports the bundled agents. The secrets
# registry is at the bottom with the exceptions: every layer scrubs what it writes. Handing
# freed memory back sits with the statistics: the tables' readers and writers call it.
BESIDE = {"_agents": "_runner", "_secrets": "_errors", "_memory": "_stats"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "summeval_runner" or len(parts) < 2:
        return None
    name = BESIDE.get(parts[1], parts[1])
    return LAYERS.index(name) if name in LAYERS else None


def test_no_module_imports_a_layer_above_its_own_and_only_the_cli_imports_hydra() -> None:
    package = Path(summeval_runner.__file__).parent
    upward = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        own = _layer(module)
        if own is None:
            continue  # the package's front (__init__, __main__)
        for imported in _imports(path):
            layer = _layer(imported)
            if layer is not None and layer > own:
                upward.append(f"{module} imports {imported}")
            if imported.split(".")[0] in ("hydra", "omegaconf") and not module.startswith(
                "summeval_runner._cli"
            ):
                upward.append(f"{module} imports {imported}")
        if module.startswith("summeval_runner._runner"):
            assert not any(i.startswith("summeval_runner._agents") for i in _imports(path))
    assert upward == []


def test_the_options_type_and_the_context_managers_are_public() -> None:
    from dataclasses import FrozenInstanceError

    options = summeval_runner.RunOptions(max_items_in_flight=4)
    with pytest.raises(FrozenInstanceError):
        options.max_items_in_flight = 8  # type: ignore[misc]
    assert summeval_runner.RunOptions.of(None, {"concurrency": 4}) == options
    for holder in (summeval_runner.SummarizationScorer, summeval_runner.OpenAIJudge):
        for method in ("__aenter__", "__aexit__", "aclose"):
            assert callable(getattr(holder, method)), (holder, method)
