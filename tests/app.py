"""Running the commands as a user does: in this process where nothing else is needed, in a
subprocess where only a process shows it (signals, exit codes of the console script, launchers).

In-process runs go through the same entry points the console scripts call (Hydra parses the
command line, composes the config, runs the job and its callbacks), with the environment, the
working directory and ``sys.path`` set as a subprocess would have them, and restored after.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from summeval_runner._cli import _agree, _app, _cache_command, _compare_command, _merge_command
from tests.prestarted import PrestartedApp
from tests.prestarted import start as start_prestarted

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample_articles.jsonl"
SAMPLE_ITEMS = len(SAMPLE.read_text(encoding="utf-8").splitlines())
SECRET = "sk-test-SECRET-0123456789"
ENV = {"OPENAI_API_KEY": SECRET}


@dataclass(frozen=True)
class Completed:
    """What a command did: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _as_a_process(cwd: Path, env: dict[str, str] | None) -> Iterator[None]:
    """The environment (no OPENAI_* but ``env``'s), working directory and import path a fresh
    process would have; restored afterwards, with any module imported from ``PYTHONPATH``."""
    saved_env = dict(os.environ)
    saved_cwd = Path.cwd()
    saved_path = list(sys.path)
    extra = [p for p in (env or {}).get("PYTHONPATH", "").split(os.pathsep) if p]
    root = logging.getLogger()
    saved_handlers = list(root.handlers)
    try:
        for name in [n for n in os.environ if n.startswith("OPENAI_")]:
            del os.environ[name]
        os.environ.update(env or {})
        sys.path[:0] = extra
        os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None) or ""
            if extra and any(file.startswith(path) for path in extra):
                del sys.modules[name]
        # Hydra configured logging for the job (a console handler and the run's log file):
        # close what it left, and give the test its handlers back.
        for handler in list(root.handlers):
            if handler not in saved_handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in saved_handlers:
            if handler not in root.handlers:
                root.addHandler(handler)


def run_command(
    main: Callable[[Sequence[str]], int],
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> Completed:
    """One of the package's commands, in this process: its exit code and output."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        _as_a_process(cwd, env),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            code = main(list(argv))
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
    return Completed(code, stdout.getvalue(), stderr.getvalue())


def _argv(run_dir: Path, overrides: Sequence[str], key: str = "hydra.run.dir") -> list[str]:
    # Options (--config-dir) go before Hydra's positional overrides, as argparse wants.
    return [
        *(o for o in overrides if o.startswith("--")),
        f"{key}={run_dir}",
        *(o for o in overrides if not o.startswith("--")),
    ]


def run_app(run_dir: Path, *overrides: str, env: dict[str, str] | None = None) -> Completed:
    """``summeval-run hydra.run.dir=<run_dir> <overrides>``, in this process, from
    ``run_dir``'s parent."""
    return run_command(_app.run, _argv(run_dir, overrides), cwd=run_dir.parent, env=env)


def run_agree(run_dir: Path, *overrides: str, env: dict[str, str] | None = None) -> Completed:
    """``summeval-agree hydra.run.dir=<run_dir> <overrides>``, in this process, from
    ``run_dir``'s parent."""
    return run_command(_agree.run, _argv(run_dir, overrides), cwd=run_dir.parent, env=env)


def run_sweep(sweep_dir: Path, *overrides: str, env: dict[str, str] | None = None) -> Completed:
    """``summeval-run -m hydra.sweep.dir=<sweep_dir> <overrides>`` (Hydra's basic launcher runs
    the jobs one after the other, in this process)."""
    argv = ["-m", *_argv(sweep_dir, overrides, key="hydra.sweep.dir")]
    return run_command(_app.run, argv, cwd=sweep_dir.parent, env=env)


def summeval_compare(*args: str, cwd: Path) -> Completed:
    return run_command(_compare_command.run, args, cwd=cwd)


def summeval_merge(*args: str, cwd: Path) -> Completed:
    return run_command(_merge_command.main, args, cwd=cwd)


def summeval_cache(*args: str, cwd: Path) -> Completed:
    return run_command(_cache_command.main, args, cwd=cwd)


def _process_env(env: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")} | (env or {})


def run_process(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """A command in a subprocess, for what only a process shows."""
    return subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_process_env(env),
        cwd=cwd,
        check=False,
    )


def start_app(run_dir: Path, *overrides: str, env: dict[str, str] | None = None) -> PrestartedApp:
    """``python -m summeval_runner`` in a process of its own (for signals and kills), not waited
    for: forked from a process that has the package imported (``tests/prestarted.py``)."""
    return start_prestarted(
        _argv(run_dir, overrides), cwd=run_dir.parent, env=_process_env(ENV | (env or {}))
    )


# Fast retries: the tests check what is retried, not how long the waits are.
FAST_RETRIES = ("runner.retry.base_delay_s=0.01", "runner.retry.max_delay_s=0.05")


def openai_run(base_url: str, dataset: Path, *overrides: str) -> tuple[str, ...]:
    """The overrides of a run of ``dataset`` judged by the OpenAI provider at ``base_url`` (the
    loopback server), quietly and with fast retries; ``overrides`` go last and win."""
    return (
        "model=openai",
        f"model.base_url={base_url}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *FAST_RETRIES,
        *overrides,
    )


def table(run_dir: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run_dir / f"{name}.parquet")
