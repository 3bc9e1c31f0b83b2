"""summeval_runner: judge summaries with an LLM, and run that judgment as batch evaluations.

The public API is exactly ``__all__``; every other module is private (its name starts with ``_``)
and may change without notice.
"""

from importlib.metadata import version as _version

from summeval_runner._analysis._agreement import AgreementFigure
from summeval_runner._analysis._compare import compare_runs
from summeval_runner._analysis._gate import GateVerdict, gate_comparison
from summeval_runner._errors import (
    AgentAPIError,
    AgentAuthError,
    AgentConnectionError,
    AgentUnreachableError,
    BudgetExhaustedError,
    ConfigError,
    DatasetError,
    InputError,
    JudgeAPIError,
    JudgeAuthError,
    JudgeConnectionError,
    JudgeError,
    JudgeInputTooLargeError,
    JudgeOutputError,
    JudgeUnavailableError,
    JudgeUnreachableError,
    MissingAPIKeyError,
    RatingsError,
    RunRecordError,
    RunsDiffer,
    SummevalError,
)
from summeval_runner._inputs._datasets import DatasetFile, FieldMap, Item, load_dataset
from summeval_runner._inputs._ratings import HumanRatings, HumanTarget
from summeval_runner._judges._anthropic import AnthropicJudge, AnthropicJudgeConfig
from summeval_runner._judges._azure import AzureJudge, AzureJudgeConfig
from summeval_runner._judges._fake import FakeJudge
from summeval_runner._judges._google import GoogleJudge, GoogleJudgeConfig
from summeval_runner._judges._offline import OfflineJudge, OfflineSettings
from summeval_runner._judges._openai import OpenAIJudge, OpenAIJudgeConfig
from summeval_runner._judges._panel import JudgePanel
from summeval_runner._judges._protocol import (
    AnalyzeInput,
    AnalyzeStepResult,
    ClaimVerdict,
    Judge,
    JudgeBase,
    JudgeReply,
    JudgeRequest,
    PreprocessInput,
    PreprocessStepResult,
    Price,
    PromptMessage,
    QuestionVerdict,
    ReasonInput,
    ReasonStepResult,
    TokenUsage,
)
from summeval_runner._messages import ToolResult, extract_tool_results
from summeval_runner._report._page import write_report
from summeval_runner._rundir._manifest import JudgeNoise, Manifest, PanelDisagreement, RunCost
from summeval_runner._rundir._merge import MergedRun, merge_runs
from summeval_runner._rundir._runs_table import load_history
from summeval_runner._runner._agreement import (
    AgreementResult,
    judge_agreement,
    judge_agreement_sync,
)
from summeval_runner._runner._estimate import (
    JudgeEstimate,
    RunEstimate,
    estimate_evals,
    estimate_evals_sync,
)
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._retry import RetryPolicy
from summeval_runner._runner._run import EvalRunResult, Scorer, run_evals, run_evals_sync
from summeval_runner._scorers._outcome import ItemResult, RunCounts
from summeval_runner._scorers._prompts import PROMPT_VERSION
from summeval_runner._scorers._result import (
    ErrorInfo,
    JudgeExchange,
    StepUsage,
    SummarizationResult,
    Usage,
    report_target_usage,
)
from summeval_runner._scorers._summarization import (
    SummarizationMetricOptions,
    SummarizationScorer,
    create_summarization_scorer,
)

# The version is declared once, in pyproject.toml; the installed package's metadata carries it.
__version__ = _version("summeval_runner")

__all__ = [
    "PROMPT_VERSION",
    "AgentAPIError",
    "AgentAuthError",
    "AgentConnectionError",
    "AgentUnreachableError",
    "AgreementFigure",
    "AgreementResult",
    "AnalyzeInput",
    "AnalyzeStepResult",
    "AnthropicJudge",
    "AnthropicJudgeConfig",
    "AzureJudge",
    "AzureJudgeConfig",
    "BudgetExhaustedError",
    "ClaimVerdict",
    "ConfigError",
    "DatasetError",
    "DatasetFile",
    "ErrorInfo",
    "EvalRunResult",
    "FakeJudge",
    "FieldMap",
    "GateVerdict",
    "GoogleJudge",
    "GoogleJudgeConfig",
    "HumanRatings",
    "HumanTarget",
    "InputError",
    "Item",
    "ItemResult",
    "Judge",
    "JudgeAPIError",
    "JudgeAuthError",
    "JudgeBase",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeEstimate",
    "JudgeExchange",
    "JudgeInputTooLargeError",
    "JudgeNoise",
    "JudgeOutputError",
    "JudgePanel",
    "JudgeReply",
    "JudgeRequest",
    "JudgeUnavailableError",
    "JudgeUnreachableError",
    "Manifest",
    "MergedRun",
    "MissingAPIKeyError",
    "OfflineJudge",
    "OfflineSettings",
    "OpenAIJudge",
    "OpenAIJudgeConfig",
    "PanelDisagreement",
    "PreprocessInput",
    "PreprocessStepResult",
    "Price",
    "PromptMessage",
    "QuestionVerdict",
    "RatingsError",
    "ReasonInput",
    "ReasonStepResult",
    "RetryPolicy",
    "RunCost",
    "RunCounts",
    "RunEstimate",
    "RunOptions",
    "RunRecordError",
    "RunsDiffer",
    "Scorer",
    "StepUsage",
    "SummarizationMetricOptions",
    "SummarizationResult",
    "SummarizationScorer",
    "SummevalError",
    "TokenUsage",
    "ToolResult",
    "Usage",
    "__version__",
    "compare_runs",
    "create_summarization_scorer",
    "estimate_evals",
    "estimate_evals_sync",
    "extract_tool_results",
    "gate_comparison",
    "judge_agreement",
    "judge_agreement_sync",
    "load_dataset",
    "load_history",
    "merge_runs",
    "report_target_usage",
    "run_evals",
    "run_evals_sync",
    "write_report",
]
