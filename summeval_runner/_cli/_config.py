"""The app's structured configs, registered in Hydra's ConfigStore.

The YAML files in ``summeval_runner/_configs/`` fill these in; OmegaConf checks every value's
type as the config is composed, and ``_plan`` checks the rules (ranges, providers, import paths)
before any work. The ``runner`` group is ``RunOptions`` field for field (its defaults are
``RunOptions``'s), plus ``resume``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._retry import RetryPolicy
from summeval_runner._secrets import redact

_RUN = RunOptions()
_RETRY = RetryPolicy()


@dataclass
class FieldsConfig:
    input: str = "input"
    id: str | None = "id"
    output: str | None = None
    ground_truth: str | None = None
    metadata: list[str] = field(default_factory=list)


@dataclass
class DatasetConfig:
    path: str = MISSING
    format: str = "auto"
    fields: FieldsConfig = field(default_factory=FieldsConfig)
    limit: int | None = None


@dataclass
class ScorerConfig:
    max_questions: int = 10
    scale: float = 1.0
    # per_source: a source's coverage questions are drawn once and every item of it (other
    # variants, later runs through the cache) is asked the same; per_item: each item draws its own.
    questions: str = "per_source"


@dataclass
class RetryConfig:
    max_attempts: int = _RETRY.max_attempts
    base_delay_s: float = _RETRY.base_delay_s
    max_delay_s: float = _RETRY.max_delay_s
    max_retry_after_s: float = _RETRY.max_retry_after_s


@dataclass
class RunnerConfig:
    max_items_in_flight: int = _RUN.max_items_in_flight
    max_target_calls_in_flight: int = _RUN.max_target_calls_in_flight
    max_judge_requests_in_flight: int = _RUN.max_judge_requests_in_flight
    judge_rpm: float | None = _RUN.judge_rpm
    request_timeout_s: float | None = _RUN.request_timeout_s
    item_timeout_s: float | None = _RUN.item_timeout_s
    outage_timeout_s: float = _RUN.outage_timeout_s
    retry: RetryConfig = field(default_factory=RetryConfig)
    cache: str = _RUN.cache
    cache_path: str | None = None
    # A run directory to continue; the one setting of this group that RunOptions has not.
    resume: str | None = None
    shard: str | None = None
    shutdown_grace_s: float = _RUN.shutdown_grace_s
    # The app shows progress; run_evals in Python does not unless asked.
    progress: bool = True
    max_error_rate: float = _RUN.max_error_rate
    variant: str | None = _RUN.variant
    trials: int = _RUN.trials


@dataclass
class AppConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    # The agent under test, built with hydra.utils.instantiate; null when the dataset carries
    # precomputed outputs (dataset.fields.output).
    target: Any = None
    # The judge: {provider: offline} or {provider: openai, name: ..., ...}; its settings depend on
    # the provider, so resolve_judge checks them.
    model: Any = MISSING
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)


@dataclass
class HumanFieldsConfig:
    source: str = "source"
    summary: str = "summary"
    # The field shared by the summaries of one source; null when each source has one summary.
    group: str | None = "doc_id"
    system: str | None = None
    id: str | None = None


@dataclass
class HumanConfig:
    path: str = MISSING
    format: str = "auto"
    limit: int | None = None
    fields: HumanFieldsConfig = field(default_factory=HumanFieldsConfig)
    # alignment, coverage and score, each {ratings: [column, ...], binary: false}: held against
    # one rating, or the mean of several; a binary label (0/1) when binary is true. Checked by
    # _agree.human_ratings (a typed node would refuse +human.against.coverage={...}).
    against: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgreementConfig:
    # A summeval-agree run directory on the same ratings file: each figure gets the paired
    # difference from it.
    baseline: str | None = None
    resamples: int = 1000
    seed: int = 0


@dataclass
class AgreeConfig:
    human: HumanConfig = field(default_factory=HumanConfig)
    model: Any = MISSING
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    agreement: AgreementConfig = field(default_factory=AgreementConfig)


def register_configs(store: ConfigStore) -> None:
    """Register the schemas that ``_configs/config.yaml`` (``summeval-run``) and
    ``_configs/agree.yaml`` (``summeval-agree``) build on."""
    store.store(name="base_config", node=AppConfig)
    store.store(name="agree_base_config", node=AgreeConfig)


def path_safe(name: str) -> str:
    """A directory name with no path separator: ``runner.shard=0/2`` becomes ``runner.shard=0_2``.

    Sweep directories are named after their overrides, and a value with "/" in it (a shard, a
    dataset path) would otherwise nest one run inside folders named after half of it.
    """
    # A base_url's credentials (user:password@, key=...) stay out of the directory's name.
    name = ",".join(redact(name.split(",")))
    return name.replace("/", "_").replace("\\", "_")


# Registered on import, not in main(): a launcher's worker process (joblib, Ray, Submitit) names
# the job's directory itself, without running main(). A pure function, replaced idempotently.
OmegaConf.register_new_resolver("summeval.path_safe", path_safe, replace=True)
