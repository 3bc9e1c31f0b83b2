"""From the composed config to the library's arguments: every option checked before any work.

``plan`` turns the ``dataset``, ``target``, ``model``, ``scorer`` and ``runner`` groups into a
``DatasetFile``, the agent, the scorer and ``RunOptions``; nothing here runs anything. A broken
rule is a ``ConfigError`` that names the option (``runner.max_items_in_flight must be ...``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import get_object, instantiate, to_absolute_path
from omegaconf import DictConfig, OmegaConf

from summeval_runner._cli._names import fixed_keys, label_name, override_key, readable_label
from summeval_runner._cli._sweep import MULTIRUN
from summeval_runner._errors import ConfigError, SummevalError
from summeval_runner._inputs._datasets import DatasetFile, FieldMap
from summeval_runner._judges._panel import resolve_model
from summeval_runner._judges._request import keys_not_needed
from summeval_runner._runner._estimate import RunEstimate, estimate_evals
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._run import EvalRunResult, run_evals
from summeval_runner._scorers._summarization import SummarizationScorer, create_summarization_scorer
from summeval_runner._secrets import scrub


@dataclass(frozen=True)
class HydraJob:
    """What Hydra's runtime knows about the job, read once and passed down.

    ``output_dir`` is the job's own directory (``hydra.run.dir``, or a sweep's subdirectory);
    ``overrides`` the command line's; ``multirun`` whether the job is one of a sweep; ``name``
    the job's (its log file is ``<name>.log``); ``fixed`` the keys the sweep's command line sets
    to one value for every job (from the sweep's ``multirun.yaml``; ``None`` outside a sweep, or
    when that file cannot be read).
    """

    output_dir: Path
    overrides: tuple[str, ...]
    multirun: bool
    name: str = "summeval-run"
    fixed: frozenset[str] | None = None

    @classmethod
    def current(cls) -> HydraJob:
        hydra = HydraConfig.get()
        multirun = hydra.mode == RunMode.MULTIRUN
        return cls(
            output_dir=Path(hydra.runtime.output_dir),
            overrides=tuple(hydra.overrides.task),
            multirun=multirun,
            name=str(hydra.job.name),
            fixed=_sweep_fixed_keys(Path(str(hydra.sweep.dir))) if multirun else None,
        )


def _sweep_fixed_keys(sweep_dir: Path) -> frozenset[str] | None:
    """``fixed_keys`` of the sweep's command line, as the sweeper saved it in ``multirun.yaml``
    before it launched any job (so a job on another machine of a shared folder reads it too)."""
    try:
        saved = OmegaConf.load(sweep_dir / MULTIRUN)
        lines = OmegaConf.select(saved, "hydra.overrides.task", default=None)
        return None if lines is None else fixed_keys([str(line) for line in lines])
    except Exception:  # a label falls back to every override: it never fails the run
        return None


@dataclass(frozen=True)
class Plan:
    """The library's arguments for one run, built and checked from the config."""

    run_dir: Path
    resume: bool
    dataset: DatasetFile
    target: Callable[[Any], Any] | None
    scorer: SummarizationScorer
    options: RunOptions
    # The resolved config, recorded in the manifest (secrets redacted there).
    config: dict[str, Any]
    overrides: tuple[str, ...]
    # runner.estimate: print what the run would send and spend, and run nothing.
    estimate_only: bool = False

    async def execute(self, stop: asyncio.Event) -> EvalRunResult:
        """The run, in the library; ``stop`` set by Ctrl-C or SIGTERM."""
        try:
            return await run_evals(
                target=self.target,
                scorers=[self.scorer],
                data=self.dataset,
                options=self.options,
                output_dir=self.run_dir,
                resume=self.resume,
                config=self.config,
                overrides=self.overrides,
                stop=stop,
                # Each item is in the journal as soon as it completes; keeping every result in
                # memory too would grow with the dataset.
                keep_results=False,
            )
        finally:
            # The agent was built by this app: its connections close inside this event loop.
            close = getattr(self.target, "aclose", None)
            if close is not None:
                await close()

    async def estimate(self) -> RunEstimate:
        """What the run would send and spend; no judge call, no agent call."""
        return await estimate_evals(
            scorers=[self.scorer], data=self.dataset, target=self.target, options=self.options
        )

    def finish(self) -> None:
        """What the app prints after the run's summary: nothing more for ``summeval-run``."""


def plan(cfg: DictConfig, job: HydraJob) -> Plan:
    """Check the config and build the run's parts; ``SummevalError`` naming what is wrong."""
    refuse_unknown_settings(cfg)
    options = run_options(cfg.runner, job)
    # An estimate sends no request, so it needs no key: the judge and agent are built without.
    with keys_not_needed() if cfg.runner.estimate else contextlib.nullcontext():
        scorer = build_scorer(cfg)
        target = _build_target(cfg.target)
    fields = cfg.dataset.fields
    # Whether the data's summaries or the agent's are scored is the library's rule (run_evals
    # checks it before any call), so Python and the CLI agree.
    dataset = DatasetFile(
        Path(to_absolute_path(cfg.dataset.path)),
        FieldMap(
            input=fields.input,
            id=fields.id,
            output=fields.output,
            ground_truth=fields.ground_truth,
            metadata=tuple(fields.metadata),
            key_facts=fields.key_facts,
            questions=fields.questions,
            reference=fields.reference,
        ),
        format=cfg.dataset.format,
        limit=cfg.dataset.limit,
        ignore_outputs=cfg.dataset.ignore_outputs,
    )
    resume = cfg.runner.resume
    return Plan(
        run_dir=Path(to_absolute_path(resume)) if resume else job.output_dir,
        resume=bool(resume),
        dataset=dataset,
        target=target,
        scorer=scorer,
        options=options,
        config=container(cfg),
        overrides=job.overrides,
        estimate_only=bool(cfg.runner.estimate),
    )


def build_scorer(cfg: DictConfig) -> SummarizationScorer:
    """The summarization scorer of the ``model`` (the judge) and ``scorer`` groups."""
    try:
        judge = resolve_model(_judge_settings(cfg.model))
    except ConfigError as error:
        raise ConfigError(f"model: {error}") from None
    try:
        return create_summarization_scorer(
            judge,
            {
                "max_questions": cfg.scorer.max_questions,
                "scale": cfg.scorer.scale,
                "questions": cfg.scorer.questions,
            },
        )
    except ConfigError as error:
        raise ConfigError(f"scorer.{error}") from None


def refuse_unknown_settings(node: DictConfig, prefix: str = "") -> None:
    """A key added with ``+`` where the schema has none (``+scorer.max_question=5``) would be
    silently ignored: refuse it, naming the settings there are. ``model`` and ``target`` have
    no fixed schema: the judge's provider and the target's signature check theirs."""
    schema = OmegaConf.get_type(node)
    if schema is None or not dataclasses.is_dataclass(schema):
        return
    known = [f.name for f in dataclasses.fields(schema)]
    for key in map(str, node):
        name = f"{prefix}{key}"
        if key not in known:
            where = f"{prefix[:-1]} takes" if prefix else "the config has"
            raise ConfigError(
                f"{name} is not a setting ({where}: {', '.join(known)}); check its spelling"
            )
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            refuse_unknown_settings(child, f"{name}.")


def run_options(runner: DictConfig, job: HydraJob) -> RunOptions:
    """``RunOptions`` of the ``runner`` group (less ``resume``, which is the app's)."""
    values = container(runner)
    values.pop("resume")
    values.pop("estimate", None)
    if values["cache_path"]:
        values["cache_path"] = to_absolute_path(values["cache_path"])
    values["variant"] = variant_label(runner, job)
    try:
        return RunOptions.of(None, values)
    except ConfigError as error:
        raise ConfigError(f"runner.{error}") from None


def variant_label(runner: DictConfig, job: HydraJob) -> str:
    """The run's label in every table (``runner.variant``'s rule, in the README).

    Unset, in a sweep: the job's overrides of the options the sweep varies (``target.k=1``; not
    the runner's settings, not those the command line fixes for every job); outside a sweep, or
    in one that varies only the runner's settings (shards): the job's overrides less the
    runner's settings and the prices (which change no verdict); else ``default``.
    ``runner.trials`` other than the default is named as the job's own override is. Named as
    ``variant_name`` names them (sorted, long values shortened to a prefix and a hash, no
    credential), and at most 64 characters (``label_name``). Set in a sweep to one name for
    every job: that name, then what the job varies (``prompts: target=prompt_a``); a job that
    varies nothing but the runner's settings (a shard) keeps the name alone. Set per job (an
    interpolation such as ``${hydra:runtime.choices.target}``), or outside a sweep: as it is.
    """
    varied = _varied(job) if job.multirun else None
    given = runner.variant
    if given is None:
        if job.multirun:
            return varied or _named([o for o in _own(job) if override_key(o) not in _NO_VERDICT])
        own = [o for o in _own(job) if override_key(o) not in _NO_VERDICT]
        return scrub(readable_label(own)) or _DEFAULT_VARIANT
    per_job = OmegaConf.is_interpolation(runner, "variant")
    if not job.multirun or per_job or not varied:
        return str(given)
    return f"{given}: {varied}"


_DEFAULT_VARIANT = "default"
# Options that change no verdict (a price: left out of config_hash too), named in a label only
# where a sweep varies them.
_NO_VERDICT = frozenset({"model.price", "target.price"})


def _own(job: HydraJob) -> list[str]:
    """The job's overrides, less the runner's own settings and Hydra's (its launcher too);
    ``runner.trials`` is kept where it is not the default: the trials change what a score is
    (a mean over them), so two runs that differ in them must not share a label."""
    return [
        o
        for o in job.overrides
        if not override_key(o).startswith(("runner.", "hydra.", "hydra/")) or _trials(o)
    ]


def _trials(override: str) -> bool:
    key, _, value = override.partition("=")
    return key.lstrip("+") == "runner.trials" and value.strip() != str(RunOptions.trials)


def _varied(job: HydraJob) -> str:
    """The label of what this job of a sweep varies: its overrides of keys the sweep's command
    line does not fix (every override but the runner's, when that is not known); empty when it
    varies nothing but the runner's settings."""
    own = _own(job)
    if job.fixed is not None:
        own = [o for o in own if override_key(o) not in job.fixed]
    return _named(own) if own else ""


def _named(overrides: list[str]) -> str:
    # The label is written into every table row: no credential of a base_url, no key.
    return scrub(label_name(overrides)) or _DEFAULT_VARIANT


def container(node: DictConfig) -> dict[str, Any]:
    values = OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    return {str(key): value for key, value in values.items()}


def _judge_settings(model: Any) -> Mapping[str, Any]:
    settings = OmegaConf.to_container(model, resolve=True)
    if not isinstance(settings, Mapping):
        raise ConfigError(f"model must be a mapping with a provider, got {settings!r}")
    return {str(key): value for key, value in settings.items()}


def _build_target(node: Any) -> Callable[[Any], Any] | None:
    if node is None or (isinstance(node, DictConfig) and len(node) == 0):
        return None
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError("target must be a config with _target_ (an import path), or empty")
    _refuse_unknown_arguments(node)
    try:
        target = instantiate(node)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, SummevalError):
            raise ConfigError(str(cause)) from None
        # Hydra's first line only says where to find more; the cause says what went wrong.
        if cause is not None:
            lines = str(cause).splitlines()
            detail = " ".join(line.strip() for line in lines[1:] or lines)
        else:
            detail = str(error).splitlines()[0]
        raise ConfigError(
            f"target._target_ {node._target_!r} could not be built: {detail}"
        ) from None
    if not callable(target):
        raise ConfigError(
            f"target._target_ {node._target_!r} built a {type(target).__name__}, not a callable"
        )
    result: Callable[[Any], Any] = target
    return result


# Hydra's own keys in a config it instantiates, never passed to the callable.
_INSTANTIATE_KEYS = frozenset({"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})


def _refuse_unknown_arguments(node: DictConfig) -> None:
    """A ``target`` key the callable does not take: refused by name before it is built. With
    ``_partial_: true`` the callable is only called on the first item, so the key would
    otherwise fail every item, or be swallowed by a default."""
    try:
        factory = get_object(str(node._target_))
        parameters = inspect.signature(factory).parameters.values()
    except Exception:
        return  # not importable, or no signature to read: instantiate says what is wrong
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return  # **kwargs: it takes any name
    takes = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    for key in map(str, node):
        if key not in _INSTANTIATE_KEYS and key not in takes:
            raise ConfigError(
                f"target.{key} is not an argument of {node._target_} "
                f"(it takes: {', '.join(takes) or 'none'}); check its spelling"
            )
