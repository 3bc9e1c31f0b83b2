"""The app's structured configs, registered in Hydra's ConfigStore.

The YAML files in ``configs/`` (the package ``summeval_runner._configs``) fill these in;
OmegaConf checks every value's type as the config is composed, and ``_plan`` checks the rules
(ranges, providers, import paths) before any work. The ``runner`` group is ``RunOptions`` field
for field (its defaults are ``RunOptions``'s), plus ``resume``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from summeval_runner._cli import _names  # noqa: F401 (its ${summeval.job_dir:...} resolver, for the configs)
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._retry import RetryPolicy

_RUN = RunOptions()
_RETRY = RetryPolicy()


@dataclass
class FieldsConfig:
    # The field holding each item's source text (or a list of chat messages).
    input: str = "input"
    # The field holding each item's id; null, or absent from the data: ids from each input's
    # content.
    id: str | None = "id"
    # The field of precomputed summaries, scored as they are (with target=precomputed); null:
    # the data's `output` or `summary` field, where it has one. Data that holds summaries is
    # refused with an agent, unless dataset.ignore_outputs=true.
    output: str | None = None
    # What coverage is measured against, one of the next four at most (null: questions drawn
    # from the source). A field of key facts the summary must state: a list of strings, or one
    # string of lines (a CSV cell).
    key_facts: str | None = None
    # A field of closed questions the summary must answer, in the same shapes as key_facts.
    questions: str | None = None
    # A field of reference summaries: the judge draws each one's key facts (max_questions).
    reference: str | None = None
    # A field of ground truths in the seed's shapes: a string is a reference summary, a list of
    # strings key facts, a mapping names its kind ({key_facts: [...]}, {questions: [...]}).
    ground_truth: str | None = None
    # Fields carried into the items table as they are (a struct column, metadata.<field> in
    # DuckDB).
    metadata: list[str] = field(default_factory=list)


@dataclass
class DatasetConfig:
    # The data file; a relative path is read from where the command runs.
    path: str = MISSING
    # auto (from the file's suffix), jsonl, csv or parquet.
    format: str = "auto"
    fields: FieldsConfig = field(default_factory=FieldsConfig)
    # Score only the first N items; null: all of them.
    limit: int | None = None
    # Let the agent (target) run over data that holds summaries, and leave the data's unread.
    ignore_outputs: bool = False


@dataclass
class ScorerConfig:
    # The most closed coverage questions drawn from a source (at least 1).
    max_questions: int = 10
    # The score's scale: score = min(alignment, coverage) x scale (above 0).
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
    max_judge_requests_in_flight: int | None = _RUN.max_judge_requests_in_flight
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
    judge_tpm: float | None = _RUN.judge_tpm
    max_cost: float | None = _RUN.max_cost
    max_tokens: int | None = _RUN.max_tokens
    mode: str = _RUN.mode
    batch_poll_s: float = _RUN.batch_poll_s
    batch_max_requests: int = _RUN.batch_max_requests
    transcripts: bool = _RUN.transcripts
    # Print the run's requests, tokens and cost, estimated, and run nothing (the app's own).
    estimate: bool = False


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
    # The field holding the text that was summarized.
    source: str = "source"
    # The field holding the rated summary.
    summary: str = "summary"
    # The field shared by the summaries of one source; null when each source has one summary.
    group: str | None = "doc_id"
    # The field naming the system that wrote each summary, for system-level figures; null: none.
    system: str | None = None
    # The field holding each rating's id; null: ids from the texts.
    id: str | None = None
    # The field of each row's key facts (a list of strings, or one string of lines), read when
    # human.basis=key_facts.
    key_facts: str | None = None
    # The field of each row's closed questions, read when human.basis=questions.
    questions: str | None = None
    # The field of each row's reference summary, read when human.basis=reference.
    reference: str | None = None


@dataclass
class HumanConfig:
    # The ratings file (human.path=...); a relative path is read from where the command runs.
    path: str = MISSING
    # auto (from the file's suffix), jsonl, csv or parquet.
    format: str = "auto"
    # Hold the judge against only the first N ratings; null: all of them.
    limit: int | None = None
    fields: HumanFieldsConfig = field(default_factory=HumanFieldsConfig)
    # What coverage is measured on: source_questions (drawn by the judge from the source), or
    # each row's key_facts, questions or reference (from human.fields.<basis>).
    basis: str = "source_questions"
    # alignment, coverage and score, each {ratings: [column, ...], binary: false}: held against
    # one rating, or the mean of several; a binary label (0/1) when binary is true. Checked by
    # _agree.human_ratings (a typed node would refuse +human.against.coverage={...}).
    against: dict[str, Any] = field(default_factory=dict)


@dataclass
class AgreementConfig:
    # A summeval-agree run directory on the same ratings file: each figure gets the paired
    # difference from it.
    baseline: str | None = None
    # Bootstrap resamples for each figure's interval.
    resamples: int = 1000
    # The bootstrap's seed: the same ratings and seed give the same intervals.
    seed: int = 0


@dataclass
class AgreeConfig:
    human: HumanConfig = field(default_factory=HumanConfig)
    model: Any = MISSING
    scorer: ScorerConfig = field(default_factory=ScorerConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    agreement: AgreementConfig = field(default_factory=AgreementConfig)


def register_configs(store: ConfigStore) -> None:
    """Register the schemas that ``configs/config.yaml`` (``summeval-run``) and
    ``configs/agree.yaml`` (``summeval-agree``) build on, where ``store`` does not hold them
    yet: turning the dataclasses into OmegaConf's structured configs takes tens of
    milliseconds, and a process that runs the app again (a test, a sweep launched in-process)
    finds them there already."""
    for name, node in (("base_config", AppConfig), ("agree_base_config", AgreeConfig)):
        if f"{name}.yaml" not in store.repo:
            store.store(name=name, node=node)
