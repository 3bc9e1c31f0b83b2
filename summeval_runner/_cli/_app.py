"""``summeval-run``: the Hydra app that runs a batch evaluation and writes its tables.

Exit codes: 0 the run completed; 1 the share of errored items exceeded
``runner.max_error_rate``, or the judge refused the credentials; 2 bad config or input, found
before any judge call; 130 (Ctrl-C) or 143 (SIGTERM) the run was interrupted, its finished items
written; it continues with ``runner.resume=<run dir>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import platform
import re
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
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
from summeval_runner._cli._callbacks import SweepFailed, record_exit_code
from summeval_runner._cli._config import register_configs
from summeval_runner._errors import ConfigError, InputError, JudgeAuthError, SummevalError
from summeval_runner._io._datasets import DatasetError, FieldMap, Item, iter_dataset
from summeval_runner._io._manifest import (
    MANIFEST,
    config_differences,
    read_manifest,
    redact,
    scrub,
    write_manifest,
)
from summeval_runner._io._shards import Shard
from summeval_runner._io._tables import (
    JOURNAL,
    RunWriter,
    journaled_statuses,
    score_totals,
    scorer_rows,
    token_totals,
)
from summeval_runner._judges._protocol import Judge
from summeval_runner._judges._resolve import resolve_judge
from summeval_runner._messages import extract_source, extract_summary
from summeval_runner._runner._cache import (
    CACHE_MODES,
    CachedJudge,
    ResponseCache,
    cache_identity,
    default_cache_path,
)
from summeval_runner._runner._limits import LimitedJudge
from summeval_runner._runner._retry import RetryPolicy
from summeval_runner._runner._run import EvalRunResult, ItemResult, RunCounts, run_evals
from summeval_runner._scorers._prompts import PROMPT_VERSION
from summeval_runner._scorers._summarization import SummarizationScorer, create_summarization_scorer

# The checkout this package runs from: bundled data paths fall back to it.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


@dataclass(frozen=True)
class Plan:
    """Everything a run needs, built and checked before the first judge call."""

    read_items: Callable[[], Iterator[Item]]
    dataset_items: int
    dataset_path: Path
    dataset_sha256: str
    target: Callable[[Any], Any] | None
    judge: LimitedJudge
    cache: ResponseCache | None
    scorer: SummarizationScorer
    variant: str
    shard: Shard | None
    # The items this run scores: all of the dataset's, or its shard's.
    selected_items: int

    def holds(self, item: Item) -> bool:
        return self.shard is None or self.shard.holds(item.id)


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
    for name in ("judge_rpm", "request_timeout_s", "item_timeout_s"):
        value = runner[name]
        _require(value is None or value > 0, f"runner.{name} must be > 0 or null, got {value}")
    grace = runner.shutdown_grace_s
    _require(grace >= 0, f"runner.shutdown_grace_s must be >= 0, got {grace}")
    rate = runner.max_error_rate
    _require(0 <= rate <= 1, f"runner.max_error_rate must be between 0 and 1, got {rate}")
    _require(
        runner.cache in CACHE_MODES,
        f"runner.cache must be one of {', '.join(CACHE_MODES)}, got {runner.cache!r}",
    )


def _retry_policy(retry: DictConfig) -> RetryPolicy:
    try:
        return RetryPolicy(
            max_attempts=retry.max_attempts,
            base_delay_s=retry.base_delay_s,
            max_delay_s=retry.max_delay_s,
            max_retry_after_s=retry.max_retry_after_s,
        )
    except ConfigError as error:
        raise ConfigError(f"runner.{error}") from None


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _variant(cfg: DictConfig) -> str:
    if cfg.runner.variant:
        return str(cfg.runner.variant)
    overrides = [
        o
        for o in HydraConfig.get().overrides.task
        if not o.startswith(("runner.", "hydra.", "+hydra", "~hydra"))
    ]
    return ",".join(sorted(overrides)) or "default"


def _judge_settings(cfg: DictConfig) -> dict[str, Any]:
    model = OmegaConf.to_container(cfg.model, resolve=True)
    if not isinstance(model, Mapping):
        raise ConfigError(f"model must be a mapping with a provider, got {model!r}")
    settings = {str(k): v for k, v in model.items()}
    if settings.get("provider") == "openai":
        # The run retries with its own policy (runner.retry), which sees every 429 and adapts;
        # SDK retries underneath would multiply the attempts and hide the 429s.
        settings["max_retries"] = 0
    return settings


def plan(cfg: DictConfig) -> Plan:
    """Check the config and the data and build the run's parts; raise ``SummevalError`` if bad."""
    _check_runner(cfg.runner)
    shard = Shard.parse(cfg.runner.shard) if cfg.runner.shard is not None else None
    try:
        judge = resolve_judge(_judge_settings(cfg))
    except ConfigError as error:
        raise ConfigError(f"model: {error}") from None
    limited = LimitedJudge(
        judge,
        max_in_flight=cfg.runner.max_judge_requests_in_flight,
        requests_per_minute=cfg.runner.judge_rpm,
        retry=_retry_policy(cfg.runner.retry),
        request_timeout_s=cfg.runner.request_timeout_s,
    )
    identity = cache_identity(judge)
    cache = None
    scored_judge: Judge = limited
    if cfg.runner.cache != "off" and identity is not None:
        path = Path(to_absolute_path(cfg.runner.cache_path)) if cfg.runner.cache_path else None
        cache = ResponseCache(path or default_cache_path(), cfg.runner.cache)
        scored_judge = CachedJudge(limited, cache, identity)
    try:
        scorer = create_summarization_scorer(
            scored_judge, {"max_questions": cfg.scorer.max_questions, "scale": cfg.scorer.scale}
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
    read_items = functools.partial(
        iter_dataset,
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
    # Every row is read and checked here, before any judge call, but none is kept: the run
    # reads the file again as it goes, so a dataset of any size runs in flat memory.
    total = selected = 0
    for item in read_items():
        total += 1
        selected += shard is None or shard.holds(item.id)
    if not total:
        raise DatasetError(f"{path}: the dataset has no rows")
    return Plan(
        read_items,
        total,
        path,
        _sha256(path),
        target,
        limited,
        cache,
        scorer,
        _variant(cfg),
        shard,
        selected,
    )


class _TableSink:
    """The run's on_item_complete hook: each finished item goes to the journal at once."""

    def __init__(
        self,
        writer: RunWriter,
        run_id: str,
        variant: str,
        scorer: SummarizationScorer,
        positions: dict[str, int],
    ) -> None:
        self.writer = writer
        self.run_id = run_id
        self.variant = variant
        self.scorer = scorer
        self.positions = positions

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
        self.writer.write(self.positions.pop(result.item_id), result.item_id, merged)


class _Interrupts:
    """Ctrl-C and SIGTERM: the first stops the run gracefully, a second exits at once.

    A graceful stop starts no new item, lets those in flight finish (up to
    ``runner.shutdown_grace_s``) and writes everything. Exiting at once is safe too: finished
    items are already in the journal line by line, and tables only ever appear by an atomic
    rename, so nothing on disk is half-written; a resume picks up from the journal.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            # Outside the main thread (a launcher's worker) the launcher handles signals.
            with contextlib.suppress(ValueError):
                self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def attach(self, stop: asyncio.Event) -> None:
        """Route the next signal to ``stop``, from inside the event loop that watches it."""
        self._loop, self._stop = asyncio.get_running_loop(), stop
        if self.received is not None:
            stop.set()

    def detach(self) -> None:
        self._loop = self._stop = None

    @property
    def exit_code(self) -> int | None:
        return None if self.received is None else 128 + self.received

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            os._exit(128 + signum)
        self.received = signum
        print(
            f"\nsummeval-run: {signal.Signals(signum).name} received: finishing the items in "
            "flight and writing the results (again to exit at once)",
            file=sys.stderr,
            flush=True,
        )
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)


async def _execute(
    job: Plan,
    items: Iterator[Item],
    total: int,
    sink: _TableSink,
    runner: DictConfig,
    interrupts: _Interrupts,
) -> EvalRunResult:
    stop = asyncio.Event()
    interrupts.attach(stop)
    try:
        return await run_evals(
            target=job.target,
            scorers=[job.scorer],
            data=items,
            total=total,
            # Each item's rows are in the journal as soon as it completes; keeping every result
            # in memory too would grow with the dataset.
            keep_results=False,
            on_item_complete=sink,
            max_items_in_flight=runner.max_items_in_flight,
            max_target_calls_in_flight=runner.max_target_calls_in_flight,
            progress=runner.progress,
            progress_details=job.judge.describe,
            item_timeout_s=runner.item_timeout_s,
            stop=stop,
            shutdown_grace_s=runner.shutdown_grace_s,
        )
    finally:
        interrupts.detach()
        # Clients belong to this event loop: close them inside it.
        await job.judge.aclose()
        close = getattr(job.target, "aclose", None)
        if close is not None:
            await close()


def _previous_run(cfg: DictConfig) -> tuple[Path, dict[str, Any] | None]:
    """The run directory, and the manifest of the run to resume (``None`` for a new run)."""
    if not cfg.runner.resume:
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        if (run_dir / JOURNAL).exists():
            # Appending would mix two runs in one set of tables; replacing would lose one.
            raise ConfigError(
                f"hydra.run.dir {run_dir} already holds a run; choose another directory, or "
                f"continue it with runner.resume={run_dir}"
            )
        return run_dir, None
    run_dir = Path(to_absolute_path(cfg.runner.resume))
    try:
        return run_dir, read_manifest(run_dir)
    except InputError as error:
        raise ConfigError(f"runner.resume: {error}") from None


def _check_resumable(cfg: DictConfig, job: Plan, previous: Mapping[str, Any]) -> None:
    now = redact(OmegaConf.to_container(cfg, resolve=True))
    differences = config_differences(previous.get("config") or {}, now)
    if differences:
        raise ConfigError(
            "runner.resume: the config differs from the run being resumed, so its items would "
            "not be comparable: " + "; ".join(differences[:5])
        )
    shard_before = Shard.from_manifest(previous.get("shard"))
    if shard_before != job.shard:
        raise ConfigError(
            f"runner.resume: the run being resumed is shard {shard_before or 'none (all items)'}, "
            f"now runner.shard={job.shard or 'null'}; resume it with the same shard"
        )
    dataset = previous.get("dataset") or {}
    if dataset.get("sha256") != job.dataset_sha256:
        raise ConfigError(
            f"runner.resume: the dataset {job.dataset_path} changed since the run began "
            f"(sha256 {str(dataset.get('sha256'))[:12]}..., now {job.dataset_sha256[:12]}...)"
        )


def hydra_value(text: str) -> str:
    """``text`` as a Hydra override value: quoted when it holds what the override grammar reads
    as syntax (a sweep directory is named ``runner.shard=0_2,target.k=1``).

    >>> hydra_value("outputs/run")
    'outputs/run'
    >>> hydra_value("multirun/runner.shard=0_2,target.k=1")
    "'multirun/runner.shard=0_2,target.k=1'"
    """
    if re.fullmatch(r"[\w./:+@-]*", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _resume_command(run_dir: Path) -> str:
    overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("runner.resume=")]
    return shlex.join(["summeval-run", *overrides, f"runner.resume={hydra_value(str(run_dir))}"])


def run_job(cfg: DictConfig, interrupts: _Interrupts) -> int:
    """One run: plan, execute, write the tables and the manifest, print a summary."""
    started_at = datetime.now(timezone.utc)
    clock = time.perf_counter()
    cpu_clock = time.process_time()
    try:
        run_dir, previous = _previous_run(cfg)
        job = plan(cfg)
        if previous is not None:
            _check_resumable(cfg, job, previous)
        # Locks the run directory's journal before anything in it is written.
        writer = RunWriter(run_dir, resume=previous is not None)
    except SummevalError as error:
        print(f"summeval-run: error: {scrub(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finished = journaled_statuses(run_dir) if previous is not None else {}
    kept = {item_id for item_id, status in finished.items() if status != "error"}
    # Items that ended in error are tried again on resume: most errors are transient.
    # Dataset positions of the items drawn and not yet finished (the journal records them).
    positions: dict[str, int] = {}

    def todo() -> Iterator[Item]:
        for position, item in enumerate(job.read_items()):
            if job.holds(item) and item.id not in kept:
                positions[item.id] = position
                yield item

    todo_count = job.selected_items - len(kept)
    run_id = str(previous["run_id"]) if previous else uuid.uuid4().hex[:12]
    variant = str(previous["variant"]) if previous else job.variant
    resumptions = list(previous.get("resumptions", [])) if previous else []
    if previous is not None:
        resumptions.append(
            {
                "at": started_at.isoformat(),
                "items_kept": len(kept),
                "items_to_score": todo_count,
                "overrides": list(HydraConfig.get().overrides.task),
            }
        )
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "variant": variant,
        "status": "running",
        "started_at": previous["started_at"] if previous else started_at.isoformat(),
        "package_version": __version__,
        "prompt_version": PROMPT_VERSION,
        "python_version": platform.python_version(),
        # Where it ran: a sharded run's parts run on several machines or worker processes.
        "host": platform.node(),
        "pid": os.getpid(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "overrides": previous["overrides"] if previous else list(HydraConfig.get().overrides.task),
        "dataset": {
            "path": str(job.dataset_path),
            "items": job.dataset_items,
            "sha256": job.dataset_sha256,
        },
        "shard": (
            {"index": job.shard.index, "count": job.shard.count, "items": job.selected_items}
            if job.shard
            else None
        ),
        "resumptions": resumptions,
    }
    # Written first, so that a run killed at any moment can be resumed: it holds the config.
    write_manifest(run_dir / MANIFEST, manifest)
    sink = _TableSink(writer, run_id, variant, job.scorer, positions)
    aborted: str | None = None
    try:
        asyncio.run(_execute(job, todo(), todo_count, sink, cfg.runner, interrupts))
    except JudgeAuthError as error:
        aborted = scrub(str(error))
    finally:
        tables = writer.finish()
        if job.cache is not None:
            job.cache.close()
    duration = time.perf_counter() - clock
    totals, mean = score_totals(tables["aggregates"], job.scorer.id)
    counts = RunCounts(**totals)
    unfinished = job.selected_items - counts.total
    error_rate = counts.errors / counts.total if counts.total else 0.0
    if aborted is not None:
        status, exit_code = "aborted", EXIT_FAILED
    elif interrupts.exit_code is not None and unfinished:
        status, exit_code = "interrupted", interrupts.exit_code
    else:
        status = "completed"
        exit_code = EXIT_FAILED if error_rate > cfg.runner.max_error_rate else EXIT_OK
    before = (previous or {}).get("judge") or {}
    manifest |= {
        "status": status,
        "aborted_because": aborted,
        "exit_code": exit_code,
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "duration_s": round(duration, 3) + float((previous or {}).get("duration_s") or 0.0),
        "counts": counts.__dict__,
        "unfinished": unfinished,
        "means": {job.scorer.id: mean},
        "judge": {
            "name": job.judge.name,
            "requests": job.judge.requests_sent + int(before.get("requests", 0)),
            "retries": job.judge.retries + int(before.get("retries", 0)),
            "throttled_429": job.judge.throttled + int(before.get("throttled_429", 0)),
            "cache": {
                "mode": cfg.runner.cache,
                "path": str(job.cache.path) if job.cache else None,
                "hits": job.cache.hits if job.cache else 0,
                "stored": job.cache.stored if job.cache else 0,
            },
        },
        "tokens": token_totals(tables["items"]),
        "resources": {
            # This part of the run only, not a resumed run's earlier parts.
            "cpu_s": round(time.process_time() - cpu_clock, 3),
            "peak_rss_mb": _peak_rss_mb(),
        },
        "tables": {name: path.name for name, path in tables.items()},
    }
    write_manifest(run_dir / MANIFEST, manifest)
    if job.shard is not None:
        print(f"shard {job.shard}: {job.selected_items} of the dataset's {job.dataset_items} items")
    print_summary(run_dir, tables["aggregates"], duration, counts, aborted)
    if status == "interrupted":
        print(
            f"summeval-run: interrupted: {unfinished} of {job.selected_items} items unfinished; "
            f"the finished ones are in {run_dir}. To resume:\n  {_resume_command(run_dir)}",
            file=sys.stderr,
        )
    elif exit_code == EXIT_FAILED and aborted is None:
        print(
            f"summeval-run: {error_rate:.1%} of items errored, more than runner.max_error_rate "
            f"({cfg.runner.max_error_rate:.1%}); see error_type and error_message in items.parquet",
            file=sys.stderr,
        )
    return exit_code


def _peak_rss_mb() -> float | None:
    """The process's peak resident memory so far, in MB (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux counts kilobytes, macOS bytes.
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def print_summary(
    run_dir: Path, aggregates: Path, duration: float | None, counts: RunCounts, aborted: str | None
) -> None:
    if aborted:
        print(f"summeval-run: stopped: {aborted}", file=sys.stderr)
    took = f", in {duration:.1f} s" if duration is not None else ""
    print(
        f"{counts.total} items: {counts.scored} scored, {counts.unscorable} unscorable, "
        f"{counts.errors} errors{took}"
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
    interrupts = _Interrupts()

    # An absolute path: Hydra reads a relative one as a module path under an entry point.
    @hydra.main(version_base=None, config_path=str(PROJECT_ROOT / "configs"), config_name="config")
    def app(cfg: DictConfig) -> None:
        code = run_job(cfg, interrupts)
        exit_codes.append(code)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            record_exit_code(Path(HydraConfig.get().runtime.output_dir), code)
        # An interrupt stops a sweep too: the operator asked the whole command to stop.
        if code and (HydraConfig.get().mode == RunMode.RUN or interrupts.exit_code):
            sys.exit(code)

    interrupts.install()
    try:
        app()
    except SweepFailed:
        raise  # the worst job's code, already reported
    except SystemExit as stop:
        # Hydra exits 1 when the config cannot be composed (a wrong type, an unknown option):
        # that is bad config too, found before any work.
        if stop.code == 1 and not exit_codes:
            raise SystemExit(EXIT_BAD_INPUT) from None
        raise
    finally:
        interrupts.restore()
    if any(exit_codes):
        sys.exit(max(exit_codes))
