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


# What a resume command printed after a budget stop has in place of the budget that stopped it:
# not a number, so that the command, pasted as printed, is refused before any call (exit 2)
# rather than stopped again at once by the same budget, or run with none.
NEW_BUDGET = "NEW_BUDGET"


def resume_command(
    run_dir: Path,
    overrides: Sequence[str],
    program: str = "summeval-run",
    *,
    raise_budget: str | None = None,
) -> str:
    """``program`` (``summeval-run``, ``summeval-agree``) with the run's overrides and
    ``runner.resume=<run_dir>``.

    >>> resume_command(Path("outputs/run"), ["target.k=2", "runner.resume=old"])
    'summeval-run target.k=2 runner.resume=outputs/run'

    A credential in an override is printed as ``***``, to be typed again:

    >>> resume_command(Path("outputs/run"), ["model.base_url=http://h/v1?key=abc"])
    "summeval-run 'model.base_url=http://h/v1?key=***' runner.resume=outputs/run"

    ``raise_budget`` names the budget that stopped the run (``runner.max_cost``): its value is
    ``NEW_BUDGET``, for the user to fill in:

    >>> resume_command(Path("r"), ["runner.max_cost=0.01"], raise_budget="runner.max_cost")
    'summeval-run runner.max_cost=NEW_BUDGET runner.resume=r'
    """
    dropped = ["runner.resume="] + ([f"{raise_budget}="] if raise_budget else [])
    # Printed: a credential in an override (a base_url's key=) shows as *** to be typed again.
    kept = [scrub(redact(o)) for o in overrides if not o.lstrip("+").startswith(tuple(dropped))]
    budget = [f"{raise_budget}={NEW_BUDGET}"] if raise_budget else []
    return shlex.join([program, *kept, *budget, f"runner.resume={hydra_value(str(run_dir))}"])
