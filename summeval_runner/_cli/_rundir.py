"""The directory Hydra makes for a run: its default name, a check before Hydra makes it, and its
removal when the run is refused.

- **A unique default name.** ``hydra.run.dir`` defaults to ``outputs/${summeval.run_name:}``:
  the date, the time to the millisecond and a random suffix (``2026-11-30/15-02-11.374-5f3a9c``),
  so runs started at once in one directory each get their own. The resolver is cached in the
  config (``use_cache``), so every reading of ``hydra.run.dir`` in a run (Hydra reads it more
  than once) gives the same name; Hydra copies that cache into each job of a sweep.
- **Made first.** ``RunDirectoryCheck`` (a Hydra callback) makes the ``hydra.run.dir`` or
  ``hydra.sweep.dir`` before Hydra does, and refuses one under a file, or one that cannot be
  made, with one message and exit 2; it notes whether the run's directory was there already.
  An empty ``hydra.run.dir`` (the current directory) is refused, and so is a directory that
  holds a run, unless this is ``runner.resume`` of it and no other process is writing it:
  Hydra would otherwise rewrite that run's ``.hydra/`` files before the job could refuse.
- **Nothing left by a refused run.** ``discard_refused`` removes the directory Hydra made for a
  run refused as bad config or input, only if this run made it and it holds Hydra's own files
  and nothing else: never a directory a user or an earlier run wrote in (a ``runner.resume``
  target included).
"""

from __future__ import annotations

import logging
import secrets
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from summeval_runner._cli._exit_codes import EXIT_BAD_INPUT
from summeval_runner._errors import ConfigError
from summeval_runner._rundir._journal import JOURNAL, locked
from summeval_runner._rundir._paths import directory_problem

logger = logging.getLogger("summeval_runner")

_HYDRA_FILES = frozenset({"config.yaml", "hydra.yaml", "overrides.yaml"})

# Run directories that did not exist when their run started, each with the highest of its
# folders that did not either (outputs/<date> on a day's first run): those are the run's own.
# Set by the callback before Hydra makes the directory, read by the job in the same process.
_made_by_run: dict[Path, Path] = {}


def run_dir_name(now: datetime | None = None, suffix: str | None = None) -> str:
    """``<date>/<time>.<milliseconds>-<random suffix>``, unique however many runs start at once.

    >>> run_dir_name(datetime(2026, 11, 30, 15, 2, 11, 374_512), "5f3a9c")
    '2026-11-30/15-02-11.374-5f3a9c'
    """
    now = now or datetime.now()
    suffix = suffix if suffix is not None else secrets.token_hex(3)
    return f"{now:%Y-%m-%d}/{now:%H-%M-%S}.{now.microsecond // 1000:03d}-{suffix}"


def _run_name() -> str:
    return run_dir_name()


def _program(config: DictConfig) -> str:
    """The app's name in its messages: ``summeval-run`` or ``summeval-agree``."""
    return str(OmegaConf.select(config, "hydra.job.name", default="summeval-run"))


def _make(program: str, option: str, path: Path) -> None:
    """Make ``path``, or refuse it with one line and exit 2. Made here rather than checked:
    only the file system knows (a read-only mount, /proc, permissions that do not bind root)."""
    problem = directory_problem(path)
    if problem is None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            problem = f"{path} cannot be made: {error.strerror or error}"
    if problem is not None:
        print(f"{program}: error: {option}: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _refuse(program: str, message: str) -> None:
    print(f"{program}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def _check_holds_run(path: Path, config: DictConfig) -> None:
    """Refuse ``path`` if it holds a run that this one may not write in: the messages the
    library gives (``RunRecorder.open``, ``RunWriter``), but before Hydra rewrites that run's
    ``.hydra/`` files, which it does before the job (and the library) could refuse."""
    if not (path / JOURNAL).is_file():
        return
    program = _program(config)
    resume = config.get("runner", {}).get("resume")
    if not resume or Path(str(resume)).absolute() != path:
        _refuse(
            program,
            f"{path} already holds a run; choose another directory, or continue that "
            f"run ({program} runner.resume={path}; in Python, resume=True)",
        )
    try:
        # Taken and let go at once: the run takes it again when it opens its journal.
        with locked(path):
            pass
    except ConfigError as error:
        _refuse(program, str(error))


def _given(program: str, option: str, value: Any) -> Path:
    given = "" if value is None else str(value)
    if not given.strip():
        # Path("") is the current directory: the run's files would land among the user's.
        _refuse(
            program,
            f"{option} is empty; give it a directory of its own ({option}=outputs/my-run), "
            "or leave it out for a new one under outputs/",
        )
    return Path(given).absolute()


class RunDirectoryCheck(Callback):
    """Makes the run's (or sweep's) directory before Hydra does, refusing one that cannot be,
    or one that holds another run; notes whether it is new."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        program = _program(config)
        path = _given(program, "hydra.run.dir", config.hydra.run.dir)
        _check_holds_run(path, config)
        _made_by_run.pop(path, None)
        if not path.exists():
            top = path
            while not top.parent.exists():
                top = top.parent
            _made_by_run[path] = top
        _make(program, "hydra.run.dir", path)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        program = _program(config)
        _make(
            program, "hydra.sweep.dir", _given(program, "hydra.sweep.dir", config.hydra.sweep.dir)
        )


# A sweep job's directory that holds a run already: that run's .hydra/ files as they were
# before Hydra rewrote them for this job (it does so before any check of ours can run in a
# sweep), put back if the job is refused.
_kept_hydra_files: dict[Path, dict[str, bytes]] = {}


def keep_hydra_files(path: Path) -> None:
    """Keep the ``.hydra/`` files of the run in ``path``, if it holds one (once a job)."""
    path = path.absolute()
    if path in _kept_hydra_files or not (path / JOURNAL).is_file():
        return
    folder = path / ".hydra"
    _kept_hydra_files[path] = {
        name: (folder / name).read_bytes() for name in _HYDRA_FILES if (folder / name).is_file()
    }


def settle_hydra_files(path: Path, *, refused: bool) -> None:
    """After a sweep job: if it was refused, put back the ``.hydra/`` files of the run that was
    in its directory before (another run's record must not describe this job); else forget
    them (a resume of that run rewrites them as a single run does)."""
    kept = _kept_hydra_files.pop(path.absolute(), None)
    if kept is None or not refused:
        return
    for name, content in kept.items():
        try:
            (path / ".hydra" / name).write_bytes(content)
        except OSError as error:
            logger.warning(
                "%s/.hydra/%s describes the refused job, not the run there: it could not be "
                "put back (%s)",
                path,
                name,
                error.strerror or error,
            )


def _only_hydra_files(path: Path, log_name: str) -> bool:
    for entry in path.iterdir():
        if entry.name == ".hydra" and entry.is_dir() and not entry.is_symlink():
            if not all(f.name in _HYDRA_FILES and f.is_file() for f in entry.iterdir()):
                return False
        elif not (entry.name == log_name and entry.is_file()):
            return False
    return True


def discard_refused(run_dir: Path, job_name: str) -> None:
    """Remove ``run_dir`` if this run made it and it holds only Hydra's files (``.hydra/`` and
    ``<job_name>.log``), and the folders above it that this run made and that are empty now."""
    path = run_dir.absolute()
    top = _made_by_run.pop(path, None)
    if top is None or not path.is_dir() or not _only_hydra_files(path, f"{job_name}.log"):
        return
    try:
        # One known file at a time, and rmdir: whatever appeared meanwhile stays, and so does
        # the directory that holds it.
        for name in _HYDRA_FILES:
            (path / ".hydra" / name).unlink(missing_ok=True)
        (path / f"{job_name}.log").unlink(missing_ok=True)
        if (path / ".hydra").exists():
            (path / ".hydra").rmdir()
        folder = path
        while True:
            folder.rmdir()
            if folder == top:
                break
            folder = folder.parent
    except OSError:
        pass


# Registered on import, as the other resolvers: a launcher's worker resolves the config without
# running main(). Cached in each config, so one run's name is read the same every time.
OmegaConf.register_new_resolver("summeval.run_name", _run_name, use_cache=True, replace=True)
