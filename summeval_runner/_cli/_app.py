"""``summeval-run``: the Hydra app that runs a batch evaluation and writes its tables.

Exit codes: 0 the run completed; 1 the share of errored items exceeded
``runner.max_error_rate``, or the judge refused the credentials; 2 bad config or input, found
before any judge call.
"""

from __future__ import annotations

import asyncio
import platform
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import hydra
import pyarrow.parquet as pq
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate, to_absolute_path
from omegaconf import DictConfig, OmegaConf

from summeval_runner import __version__
from summeval_runner._cli._config import register_configs
from summeval_runner._errors import ConfigError, JudgeAuthError, SummevalError
from summeval_runner._io._datasets import FieldMap, Item, load_dataset
from summeval_runner._io._manifest import scrub, write_manifest
from summeval_runner._io._tables import JOURNAL, RunWriter, scorer_rows
from summeval_runner._judges._resolve import resolve_judge
from summeval_runner._messages import extract_source, extract_summary
from summeval_runner._runner._limits import LimitedJudge
from summeval_runner._runner._run import ItemResult, run_evals
from summeval_runner._scorers._prompts import PROMPT_VERSION
from summeval_runner._scorers._summarization import SummarizationScorer, create_summarization_scorer

# The checkout this package runs from: bundled data paths fall back to it.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


@dataclass(frozen=True)
class Plan:
    """Everything a run needs, built and checked before the first judge call."""

    items: list[Item]
    dataset_path: Path
    target: Callable[[Any], Any] | None
    judge: LimitedJudge
    scorer: SummarizationScorer
    variant: str


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _check_runner(runner: DictConfig) -> None:
    for name in (
        "max_items_in_flight",
        "max_target_calls_in_flight",
        "max_judge_requests_in_flight",
    ):
        _require(runner[name] >= 1, f"runner.{name} must be >= 1, got {runner[name]}")
    rpm = runner.judge_rpm
    _require(rpm is None or rpm > 0, f"runner.judge_rpm must be > 0 or null, got {rpm}")
    rate = runner.max_error_rate
    _require(0 <= rate <= 1, f"runner.max_error_rate must be between 0 and 1, got {rate}")


def _build_target(node: Any) -> Callable[[Any], Any] | None:
    if node is None or (isinstance(node, DictConfig) and len(node) == 0):
        return None
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError("target must be a config with _target_ (an import path), or empty")
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


def _dataset_path(configured: str) -> Path:
    path = Path(to_absolute_path(configured))
    bundled = PROJECT_ROOT / configured
    # A relative path names a file from where the command runs, else one bundled with the project.
    if not path.exists() and not Path(configured).is_absolute() and bundled.exists():
        return bundled
    return path


def _variant(cfg: DictConfig) -> str:
    if cfg.runner.variant:
        return str(cfg.runner.variant)
    overrides = [
        o
        for o in HydraConfig.get().overrides.task
        if not o.startswith(("runner.", "hydra.", "+hydra", "~hydra"))
    ]
    return ",".join(sorted(overrides)) or "default"


def plan(cfg: DictConfig) -> Plan:
    """Check the config and the data and build the run's parts; raise ``SummevalError`` if bad."""
    _check_runner(cfg.runner)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if not isinstance(model, Mapping):
        raise ConfigError(f"model must be a mapping with a provider, got {model!r}")
    try:
        judge = resolve_judge({str(k): v for k, v in model.items()})
    except ConfigError as error:
        raise ConfigError(f"model: {error}") from None
    limited = LimitedJudge(
        judge,
        max_in_flight=cfg.runner.max_judge_requests_in_flight,
        requests_per_minute=cfg.runner.judge_rpm,
    )
    try:
        scorer = create_summarization_scorer(
            limited, {"max_questions": cfg.scorer.max_questions, "scale": cfg.scorer.scale}
        )
    except ConfigError as error:
        raise ConfigError(f"scorer.{error}") from None
    target = _build_target(cfg.target)
    fields = cfg.dataset.fields
    if target is None and not fields.output:
        raise ConfigError(
            "there is no target (the agent under test) and no dataset.fields.output to score; "
            "pick one with target=<name>, or name the output field"
        )
    path = _dataset_path(cfg.dataset.path)
    items = load_dataset(
        path,
        FieldMap(
            input=fields.input,
            id=fields.id,
            output=fields.output,
            ground_truth=fields.ground_truth,
            metadata=tuple(fields.metadata),
        ),
        format=cfg.dataset.format,
        limit=cfg.dataset.limit,
    )
    return Plan(items, path, target, limited, scorer, _variant(cfg))


class _TableSink:
    """The run's on_item_complete hook: each finished item goes to the journal at once."""

    def __init__(
        self, writer: RunWriter, run_id: str, variant: str, scorer: SummarizationScorer
    ) -> None:
        self.writer = writer
        self.run_id = run_id
        self.variant = variant
        self.scorer = scorer
        self.input_tokens = 0
        self.output_tokens = 0

    def __call__(self, result: ItemResult) -> None:
        summary = extract_summary(result.output) if result.output is not None else None
        try:
            source = self.scorer.source_of(result.input, result.output)
        except SummevalError:
            source = extract_source(result.input)
        outcomes: Mapping[str, Any] = result.results or {self.scorer.id: result.error}
        merged: dict[str, list[dict[str, Any]]] = {"items": [], "alignment": [], "coverage": []}
        for scorer_id, outcome in outcomes.items():
            rows = scorer_rows(
                run_id=self.run_id,
                variant=self.variant,
                item_id=result.item_id,
                scorer_id=scorer_id,
                result=outcome,
                source=source,
                summary=summary,
                target_latency_s=result.target_latency_s,
                metadata=result.metadata,
            )
            for name, table_rows in rows.items():
                merged[name].extend(table_rows)
            for row in rows["items"]:
                self.input_tokens += row["input_tokens"] or 0
                self.output_tokens += row["output_tokens"] or 0
        self.writer.write(merged)


async def _execute(
    job: Plan, sink: _TableSink, progress: bool, max_items: int, max_target: int
) -> Any:
    try:
        return await run_evals(
            target=job.target,
            scorers=[job.scorer],
            data=job.items,
            on_item_complete=sink,
            max_items_in_flight=max_items,
            max_target_calls_in_flight=max_target,
            progress=progress,
            request_rate=job.judge.requests_per_second,
        )
    finally:
        # Clients belong to this event loop: close them inside it.
        await job.judge.aclose()
        close = getattr(job.target, "aclose", None)
        if close is not None:
            await close()


def run_job(cfg: DictConfig) -> int:
    """One run: plan, execute, write the tables and the manifest, print a summary."""
    started_at = datetime.now(timezone.utc)
    clock = time.perf_counter()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if (run_dir / JOURNAL).exists():
            # Appending would mix two runs in one set of tables; replacing would lose one.
            raise ConfigError(
                f"hydra.run.dir {run_dir} already holds a run; choose another directory"
            )
        job = plan(cfg)
    except SummevalError as error:
        print(f"summeval-run: error: {scrub(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_id = uuid.uuid4().hex[:12]
    writer = RunWriter(run_dir)
    sink = _TableSink(writer, run_id, job.variant, job.scorer)
    aborted: str | None = None
    outcome = None
    try:
        outcome = asyncio.run(
            _execute(
                job,
                sink,
                cfg.runner.progress,
                cfg.runner.max_items_in_flight,
                cfg.runner.max_target_calls_in_flight,
            )
        )
    except JudgeAuthError as error:
        aborted = scrub(str(error))
    finally:
        tables = writer.finish()
    duration = time.perf_counter() - clock
    counts = outcome.counts if outcome is not None else None
    error_rate = counts.errors / counts.total if counts and counts.total else 0.0
    if aborted is not None:
        exit_code = EXIT_FAILED
    else:
        exit_code = EXIT_FAILED if error_rate > cfg.runner.max_error_rate else EXIT_OK
    write_manifest(
        run_dir / "manifest.json",
        {
            "run_id": run_id,
            "variant": job.variant,
            "status": "aborted" if aborted else "completed",
            "aborted_because": aborted,
            "exit_code": exit_code,
            "started_at": started_at.isoformat(),
            "finished_at": datetime.now(timezone.utc).isoformat(),
            "duration_s": round(duration, 3),
            "package_version": __version__,
            "prompt_version": PROMPT_VERSION,
            "python_version": platform.python_version(),
            "config": OmegaConf.to_container(cfg, resolve=True),
            "overrides": list(HydraConfig.get().overrides.task),
            "dataset": {"path": str(job.dataset_path), "items": len(job.items)},
            "counts": counts.__dict__ if counts else None,
            "means": dict(outcome.means) if outcome else None,
            "judge": {"name": job.judge.name, "requests": job.judge.requests_sent},
            "tokens": {"input": sink.input_tokens, "output": sink.output_tokens},
            "tables": {name: path.name for name, path in tables.items()},
        },
    )
    _print_summary(run_dir, tables["aggregates"], duration, counts, aborted)
    if exit_code == EXIT_FAILED and aborted is None:
        print(
            f"summeval-run: {error_rate:.1%} of items errored, more than runner.max_error_rate "
            f"({cfg.runner.max_error_rate:.1%}); see error_type and error_message in items.parquet",
            file=sys.stderr,
        )
    return exit_code


def _print_summary(
    run_dir: Path, aggregates: Path, duration: float, counts: Any, aborted: str | None
) -> None:
    if aborted:
        print(f"summeval-run: stopped: {aborted}", file=sys.stderr)
    if counts is not None:
        print(
            f"{counts.total} items: {counts.scored} scored, {counts.unscorable} unscorable, "
            f"{counts.errors} errors, in {duration:.1f} s"
        )
    print(f"results: {run_dir}")
    rows = pq.read_table(aggregates).to_pylist()
    header = f"{'scorer':<22} {'metric':<10} {'n':>5} {'mean':>7}  {'95% CI':<17}"
    print(header)
    for row in rows:
        mean = f"{row['mean']:.3f}" if row["mean"] is not None else "n/a"
        ci = (
            f"[{row['ci95_low']:.3f}, {row['ci95_high']:.3f}]"
            if row["ci95_low"] is not None
            else ""
        )
        print(f"{row['scorer_id']:<22} {row['metric']:<10} {row['n']:>5} {mean:>7}  {ci:<17}")


def main() -> None:
    """The ``summeval-run`` entry point."""
    register_configs(ConfigStore.instance())
    exit_codes: list[int] = []

    # An absolute path: Hydra reads a relative one as a module path under an entry point.
    @hydra.main(version_base=None, config_path=str(PROJECT_ROOT / "configs"), config_name="config")
    def app(cfg: DictConfig) -> None:
        code = run_job(cfg)
        exit_codes.append(code)
        if code and HydraConfig.get().mode == RunMode.RUN:
            sys.exit(code)

    try:
        app()
    except SystemExit as stop:
        # Hydra exits 1 when the config cannot be composed (a wrong type, an unknown option):
        # that is bad config too, found before any work.
        if stop.code == 1 and not exit_codes:
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise
    if any(exit_codes):
        sys.exit(max(exit_codes))
