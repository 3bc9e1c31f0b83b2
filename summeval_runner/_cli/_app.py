"""``summeval-run``: the Hydra app that runs a batch evaluation and writes its tables.

The app turns its config into the library's arguments (``_plan``), calls ``run_evals``, and
prints (``_summary``); everything a run does is the library's.

Exit codes: 0 the run completed; 1 the share of errored items exceeded
``runner.max_error_rate``, no item was scored, the judge refused the credentials, or the judge
could not be reached for ``runner.outage_timeout_s`` (the library's ``EvalRunResult.passed``
decides), or an internal error (a bug); 2 bad config or input, found before any judge call; 3
a write in the run directory failed (a full disk: an item, a traffic line, the log file, the
tables, the manifest; ``RunRecordError``): the run's calls stopped at once, what was recorded
is kept; 4 the next call would have passed the budget (``runner.max_cost``,
``runner.max_tokens``); 130 (Ctrl-C) or 143 (SIGTERM) the run was interrupted, its finished
items written. An interrupted, failed or budget-stopped run continues with
``runner.resume=<run dir>`` (with a larger budget).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from summeval_runner import __version__
from summeval_runner._cli._allocator import use_system_allocator
from summeval_runner._cli._bundled import CONFIG_NAME, CONFIG_PATH
from summeval_runner._cli._callbacks import SweepFailed, record_exit_code
from summeval_runner._cli._config import AppConfig, register_configs
from summeval_runner._cli._exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_BUDGET,
    EXIT_FAILED,
    EXIT_NOT_RECORDED,
    EXIT_OK,
)
from summeval_runner._cli._help import config_groups as _config_groups  # noqa: F401 (its resolver)
from summeval_runner._cli._plan import HydraJob, Plan, plan
from summeval_runner._cli._resume import NEW_BUDGET, resume_command
from summeval_runner._cli._rundir import discard_refused, settle_hydra_files
from summeval_runner._cli._signals import Interrupts, tolerate_closed_stdout
from summeval_runner._cli._summary import counts_line, format_estimate, print_summary
from summeval_runner._cli._typos import misspelt
from summeval_runner._errors import (
    AgentAuthError,
    AgentUnreachableError,
    ConfigError,
    JudgeUnavailableError,
    RunRecordError,
    SummevalError,
)
from summeval_runner._rundir._journal import locked
from summeval_runner._rundir._manifest import Manifest, read_manifest, write_manifest
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._run import EvalRunResult
from summeval_runner._secrets import scrub

logger = logging.getLogger("summeval_runner")


class Job(Protocol):
    """One run the app was asked for, planned and checked: ``summeval-run``'s ``Plan`` or
    ``summeval-agree``'s ``AgreementPlan``."""

    @property
    def run_dir(self) -> Path: ...

    @property
    def options(self) -> RunOptions: ...

    def execute(self, stop: asyncio.Event) -> Awaitable[EvalRunResult]: ...

    def finish(self) -> None: ...


async def _execute(job: Job, interrupts: Interrupts) -> EvalRunResult:
    stop = asyncio.Event()
    interrupts.attach(stop)
    try:
        return await job.execute(stop)
    finally:
        interrupts.detach()


def run_job(
    cfg: DictConfig,
    hydra_job: HydraJob,
    interrupts: Interrupts,
    prepare: Callable[[DictConfig, HydraJob], Job] = plan,
) -> int:
    """One run: plan, run, print a summary; the exit code. ``prepare`` turns the config into
    the job (``summeval-run``'s ``plan`` by default); messages name ``hydra_job.name``."""
    program = hydra_job.name
    try:
        job = prepare(cfg, hydra_job)
    except SummevalError as error:
        print(f"{program}: error: {scrub(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if isinstance(job, Plan) and job.estimate_only:
        try:
            estimate = asyncio.run(job.estimate())
        except SummevalError as error:
            print(f"{program}: error: {scrub(str(error))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(format_estimate(estimate))
        return EXIT_OK
    budget_limit: str | None = None
    try:
        result = asyncio.run(_execute(job, interrupts))
    except RunRecordError as error:
        # Nothing more can be written here: say what is kept and how to go on, and stop. The
        # counts are those the library ended with (the journal's), also where the manifest
        # could not be written and still says running.
        with contextlib.suppress(SummevalError, OSError):
            ended = error.manifest
            if not isinstance(ended, Manifest):
                ended = read_manifest(job.run_dir)
            print(counts_line(ended), file=sys.stderr)
        unwritten = (
            " (the manifest could not be updated: it still says running, which the resume accepts)"
            if isinstance(error.manifest, Manifest) and not error.manifest_written
            else ""
        )
        print(
            f"{program}: failed: {scrub(str(error))}\n"
            f"The items recorded before are kept in {job.run_dir}{unwritten}. Once the cause "
            f"is fixed (free some space), finish the run with:\n"
            f"  {resume_command(job.run_dir, hydra_job.overrides, program)}",
            file=sys.stderr,
        )
        _record_exit_code(job.run_dir, EXIT_NOT_RECORDED)
        return EXIT_NOT_RECORDED
    except (JudgeUnavailableError, AgentAuthError, AgentUnreachableError):
        # No call can succeed: the run stopped and wrote what it had (aborted for a refused
        # key, the judge's or the agent's model's; interrupted and resumable for a judge or an
        # agent that cannot be reached).
        exit_code = EXIT_FAILED
    except SummevalError as error:
        # Found before any judge call: the data, the run directory, a resume of another run.
        print(f"{program}: error: {scrub(str(error))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    else:
        # The library's gate: every item finished, one scored at least, errors within budget.
        if result.budget_exhausted:
            exit_code = EXIT_BUDGET
            budget_limit = result.budget_limit
        elif result.passed:
            exit_code = EXIT_OK
        elif result.status == "interrupted" and interrupts.exit_code is not None:
            exit_code = interrupts.exit_code
        else:
            exit_code = EXIT_FAILED
    try:
        with locked(job.run_dir):
            manifest = read_manifest(job.run_dir).model_copy(update={"exit_code": exit_code})
            write_manifest(job.run_dir, manifest)
    except ConfigError as error:
        # Another process took the directory the moment this run let go of it (a resume):
        # its manifest is that run's now; this run's outcome is still printed and returned.
        print(f"{program}: the exit code was not recorded: {error}", file=sys.stderr)
        manifest = read_manifest(job.run_dir)
    shard = manifest.shard
    if shard is not None and manifest.dataset is not None:
        # Split by source, shards are as uneven as the sources' item counts: said, so that a
        # shard much larger or smaller than 1/N of the dataset is not taken for a fault.
        split = " (split by source)" if shard.by == "source" else ""
        print(
            f"shard {shard.index}/{shard.count}{split}: {shard.items} of the dataset's "
            f"{manifest.dataset.items} items"
        )
    print_summary(job.run_dir, manifest)
    job.finish()
    selected = manifest.selected_items
    counts = manifest.counts
    if manifest.status == "interrupted":
        budget = f"runner.{budget_limit}" if budget_limit else None
        command = resume_command(job.run_dir, hydra_job.overrides, program, raise_budget=budget)
        how = _raise_budget(budget_limit, job.options) if budget_limit else ":"
        print(
            f"{program}: interrupted: {manifest.unfinished} of {selected} items unfinished; "
            f"the finished ones are in {job.run_dir}. To resume{how}\n  {command}",
            file=sys.stderr,
        )
    elif exit_code == EXIT_FAILED and counts is not None and not manifest.stopped_because:
        if counts.counted == 0:
            print(
                f"{program}: no item was scored ({counts.unscorable} unscorable, "
                f"{counts.errors} errors): the run measured nothing",
                file=sys.stderr,
            )
        else:
            print(
                f"{program}: {counts.error_rate:.1%} of items errored, more than "
                f"runner.max_error_rate ({job.options.max_error_rate:.1%}); see error_type and "
                "error_message in items.parquet",
                file=sys.stderr,
            )
    return exit_code


def _raise_budget(limit: str, options: RunOptions) -> str:
    """What the resume command after a budget stop asks of the user: a larger budget in place
    of ``NEW_BUDGET``. The same budget would stop the run again at once, and none at all would
    leave a paid run unbounded: neither is printed as the command to paste."""
    unit = "US dollars" if limit == "max_cost" else "tokens"
    return (
        f", with a budget larger than runner.{limit}={getattr(options, limit):g} in place of "
        f"{NEW_BUDGET} ({unit} for the whole run: what it spent so far counts; as printed, the "
        "command is refused before any call):"
    )


def _record_exit_code(run_dir: Path, exit_code: int) -> None:
    """The exit code in the manifest, where it can still be written."""
    with contextlib.suppress(SummevalError, OSError), locked(run_dir):
        manifest = read_manifest(run_dir).model_copy(update={"exit_code": exit_code})
        write_manifest(run_dir, manifest)


def run(argv: Sequence[str] | None = None) -> int:
    """``summeval-run`` with these arguments (default: the command line's); the exit code.

    In-process, as the console script runs it: Hydra parses the arguments, composes the config,
    runs the job (or a sweep's jobs) and its callbacks.
    """
    return run_app(
        argv, program="summeval-run", config_name=CONFIG_NAME, prepare=plan, schema=AppConfig
    )


def run_app(
    argv: Sequence[str] | None,
    *,
    program: str,
    config_name: str,
    prepare: Callable[[DictConfig, HydraJob], Job],
    schema: type | None = None,
) -> int:
    """A Hydra app of this package (``summeval-run``, ``summeval-agree``): its primary config
    ``config_name``, each job planned by ``prepare`` and run by ``run_job``; the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--version" in arguments:
        print(f"{program} {__version__} (Hydra {hydra.__version__})")
        return EXIT_OK
    if schema is not None and (typo := misspelt(arguments, schema, program)):
        print(typo, file=sys.stderr)
        return EXIT_BAD_INPUT
    register_configs(ConfigStore.instance())
    exit_codes: list[int] = []
    interrupts = Interrupts()

    @hydra.main(version_base=None, config_path=CONFIG_PATH, config_name=config_name)
    def app(cfg: DictConfig) -> None:
        hydra_job = HydraJob.current()
        try:
            code = run_job(cfg, hydra_job, interrupts, prepare)
        except Exception:
            # A fault of ours, not of the input. Left to Hydra, it would print the job's
            # overrides as typed (a base_url with its token) before the traceback; logged here,
            # every record scrubbed, on the console and in the run's log.
            logger.exception(f"{program}: internal error, a bug of {program} (please report it)")
            code = EXIT_FAILED
        exit_codes.append(code)
        estimated = bool(OmegaConf.select(cfg, "runner.estimate", default=False))
        if code == EXIT_BAD_INPUT or estimated:
            # A refused run, or an estimate, leaves no directory behind (only one this run
            # made and nothing but Hydra wrote in: see _rundir).
            discard_refused(hydra_job.output_dir, hydra_job.name)
        if hydra_job.multirun:
            settle_hydra_files(hydra_job.output_dir, refused=code == EXIT_BAD_INPUT)
            record_exit_code(hydra_job.output_dir, code)
        # An interrupt stops a sweep too: the operator asked the whole command to stop.
        if code and (not hydra_job.multirun or interrupts.exit_code):
            raise SystemExit(code)

    saved_argv = sys.argv
    sys.argv = [saved_argv[0] if saved_argv else program, *arguments]
    interrupts.install()
    try:
        app()
    except SweepFailed as failed:
        return int(failed.code or EXIT_FAILED)  # the worst job's code, already reported
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else EXIT_FAILED
        # Hydra exits 1 when the config cannot be composed (a wrong type, an unknown option):
        # that is bad config too, found before any work.
        if code == 1 and not exit_codes:
            return EXIT_BAD_INPUT
        return code
    finally:
        interrupts.restore()
        sys.argv = saved_argv
    return max(exit_codes, default=EXIT_OK)


def main() -> None:
    """The ``summeval-run`` entry point."""
    use_system_allocator()
    tolerate_closed_stdout()
    sys.exit(run())
