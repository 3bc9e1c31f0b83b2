"""Hydra callbacks: secrets kept out of Hydra's files and log; after a sweep, its shards merged,
its variants listed (``variants.json``) and compared, the report written."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from summeval_runner._analysis._compare import (
    compare_loaded,
    content_pairings,
    load_runs,
    mismatches,
    write_comparison,
)
from summeval_runner._cli._sweep import merge_shards, variants, write_variants
from summeval_runner._errors import SummevalError
from summeval_runner._report._page import render_report
from summeval_runner._secrets import (
    redact,
    register_secret,
    register_url_secrets,
    scrub,
    scrub_record,
)

logger = logging.getLogger("summeval_runner")
# Each sweep job's exit code, in its directory: a launcher's workers (joblib, Ray, Submitit) run
# jobs in other processes, so the command that launched them learns their outcome from here.
JOB_EXIT_CODE = ".exit_code"


class SweepFailed(SystemExit):
    """A sweep's job failed: the command exits with the worst job's exit code."""


def record_exit_code(job_dir: Path, code: int) -> None:
    (job_dir / JOB_EXIT_CODE).write_text(f"{code}\n", encoding="utf-8")


def _failed_jobs(sweep_dir: Path) -> list[tuple[int, Path]]:
    failed = []
    for path in sorted(sweep_dir.rglob(JOB_EXIT_CODE)):
        try:
            code = int(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if code:
            failed.append((code, path.parent))
    return failed


class _ScrubbingRecords:
    """A log record factory that scrubs each record of secrets as it is made.

    Handler filters would not do: Hydra builds its handlers anew from its logging config for
    the launcher and for each job, and the launcher logs each job's overrides (a ``base_url``
    with a password in it) before any callback of ours runs.
    """

    scrubs_secrets = True

    def __init__(self, make: Any) -> None:
        self.make = make

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = self.make(*args, **kwargs)
        return scrub_record(record)


def scrub_log_records() -> None:
    """Scrub every log record of this process (the console and ``summeval-run.log``) of
    secrets; once, however often it is called."""
    if not getattr(logging.getLogRecordFactory(), "scrubs_secrets", False):
        logging.setLogRecordFactory(_ScrubbingRecords(logging.getLogRecordFactory()))


# On import, not in main(): a launcher's worker process (joblib, Ray, Submitit) builds this
# module's callbacks without running main(), and logs there too.
scrub_log_records()


def register_config_secrets(config: DictConfig) -> None:
    """Register the credentials a job's config points to: the keys in the variables that
    ``model.api_key_env`` and ``target.api_key_env`` name, and those inside their base URLs."""
    register_url_secrets(os.environ.get("OPENAI_BASE_URL"))
    for section in ("model", "target"):
        for name in ("api_key_env", "base_url"):
            value = OmegaConf.select(
                config, f"{section}.{name}", default=None, throw_on_resolution_failure=False
            )
            if not isinstance(value, str):
                continue
            if name == "base_url":
                register_url_secrets(value)
            else:
                register_secret(os.environ.get(value))


def _scrubbed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item) for item in value]
    return scrub(redact(value)) if isinstance(value, str) else value


class _QuickLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's safe loader, less the timestamp resolver, as OmegaConf's loader: a value such
    as 2026-12-07 is a string, and checked, where a safe loader would read a date."""


_QuickLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def scrub_config_file(path: Path) -> None:
    """Rewrite one of Hydra's YAML files with its secrets removed, if it holds any.

    Value by value, so the file stays YAML Hydra and OmegaConf read back (a value that is
    all secret becomes the string ``"***"``, not an alias).
    """
    if not path.is_file():
        return
    # Most files hold no secret: read first with libyaml's safe loader, ten times faster than
    # OmegaConf's. _QuickLoader's scalars are strings wherever OmegaConf's are (OmegaConf only
    # reads more of them as floats), so every string a secret could be in is checked. The
    # file is read again the OmegaConf way, and rewritten, only where something is to be
    # scrubbed.
    text = path.read_text(encoding="utf-8")
    quick = yaml.load(text, Loader=_QuickLoader)
    if _scrubbed(quick) == quick:
        return
    values = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    cleaned = _scrubbed(values)
    if cleaned == values:
        return
    partial = path.with_name(f".{path.name}.partial")
    OmegaConf.save(OmegaConf.create(cleaned), partial)
    os.replace(partial, path)


class ScrubHydraFiles(Callback):
    """Secrets out of the files Hydra writes before a job starts: ``.hydra/config.yaml``,
    ``hydra.yaml`` and ``overrides.yaml`` (which hold the command line, a ``base_url`` with a
    password or a ``key=`` parameter included), and a sweep's ``multirun.yaml``."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        register_config_secrets(config)
        hydra = config.hydra
        if hydra.output_subdir is not None:
            files = Path(str(hydra.runtime.output_dir)) / str(hydra.output_subdir)
            for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
                scrub_config_file(files / name)
        if hydra.mode == RunMode.MULTIRUN:
            scrub_config_file(Path(str(hydra.sweep.dir)) / "multirun.yaml")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # A sweep whose jobs all failed before starting still leaves its multirun.yaml.
        register_config_secrets(config)
        scrub_config_file(Path(str(config.hydra.sweep.dir)) / "multirun.yaml")


class CompareSweep(Callback):
    """After a multirun: shards merged, ``variants.json``, ``comparison.parquet`` and
    ``report.html`` written (``_sweep``).

    The sweep's first job is the baseline the other variants are compared with. Shards
    (``runner.shard=0/N,...,N-1/N``) of each variant are first merged into one run under
    ``<sweep>/merged/`` (named as the jobs' directories are, less the shard), and the merged
    runs are compared.

    A sweep's variants may differ in what decides their scores (a sweep over ``model=`` or
    ``scorer.scale=``): that is what the sweep is for, and its comparison gates nothing, so
    they are compared anyway, and a note says what differs (``summeval-compare`` refuses such
    runs unless ``--allow-mismatch``).
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        self._compare(sweep_dir)
        failed = _failed_jobs(sweep_dir)
        if failed:
            worst = max(code for code, _ in failed)
            where = ", ".join(f"{job.name} (exit {code})" for code, job in failed[:5])
            print(f"summeval-run: {len(failed)} sweep job(s) failed: {where}", file=sys.stderr)
            raise SweepFailed(worst)

    def _compare(self, sweep_dir: Path) -> None:
        try:
            merge_shards(sweep_dir)
            found = variants(sweep_dir)
            if found:
                print(f"sweep variants: {write_variants(sweep_dir, found)}")
        except (SummevalError, OSError, ValueError) as error:
            logger.error("the sweep's shards could not be merged: %s", error)
            return
        finished = [
            variant.run_dir
            for variant in found
            if variant.run_dir is not None and (variant.run_dir / "items.parquet").exists()
        ]
        if not finished:
            return
        baseline = finished[0] if len(finished) > 1 else None
        try:
            runs, base = load_runs(finished, baseline)
            comparison = compare_loaded(runs, base, allow_mismatch=True)
            table = write_comparison(comparison, sweep_dir / "comparison.parquet")
            report = render_report(runs, base, comparison, sweep_dir / "report.html")
        except (SummevalError, OSError) as error:
            logger.error("the sweep's comparison could not be written: %s", error)
            return
        print(f"sweep comparison: {table}\nsweep report: {report}")
        differ = mismatches(runs, base)
        if differ:
            print(
                "summeval-run: note: the sweep's variants differ in what decides their scores, "
                "so its comparison measures that too: "
                + "; ".join(mismatch.describe() for mismatch in differ),
                file=sys.stderr,
            )
        for pairing in content_pairings(runs, base):
            print(f"summeval-run: note: {pairing.describe()}", file=sys.stderr)
