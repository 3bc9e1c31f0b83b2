"""The command that resumes an interrupted run, as the user would type it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from summeval_runner._secrets import redact, scrub


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


def resume_command(run_dir: Path, overrides: Sequence[str], program: str = "summeval-run") -> str:
    """``program`` (``summeval-run``, ``summeval-agree``) with the run's overrides and
    ``runner.resume=<run_dir>``.

    >>> resume_command(Path("outputs/run"), ["target.k=2", "runner.resume=old"])
    'summeval-run target.k=2 runner.resume=outputs/run'

    A credential in an override is printed as ``***``, to be typed again:

    >>> resume_command(Path("outputs/run"), ["model.base_url=http://h/v1?key=abc"])
    "summeval-run 'model.base_url=http://h/v1?key=***' runner.resume=outputs/run"
    """
    # Printed: a credential in an override (a base_url's key=) shows as *** to be typed again.
    kept = [scrub(redact(o)) for o in overrides if not o.startswith("runner.resume=")]
    return shlex.join([program, *kept, f"runner.resume={hydra_value(str(run_dir))}"])
