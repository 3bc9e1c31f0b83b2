"""``summeval-agree``: how a judge agrees with people's ratings of summaries (SPEC §6).

The app turns its config (``human``, and ``summeval-run``'s ``model``, ``scorer`` and
``runner`` groups) into ``judge_agreement``'s arguments, runs it like ``summeval-run`` runs
``run_evals`` (the same exit codes, resume and summary), then prints the figures and writes
the run's report.

Exit codes: 0 every rated summary was judged (errors within ``runner.max_error_rate``); 1 more
errors than that, none judged, a refused key or an unreachable judge; 2 bad config or ratings,
found before any judge call; 3 the results could not be recorded; 130/143 interrupted.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from summeval_runner._analysis._agreement import AGREEMENT, agreement_rows, figure_note
from summeval_runner._cli._app import run_app
from summeval_runner._cli._plan import (
    HydraJob,
    build_scorer,
    container,
    refuse_unknown_settings,
    run_options,
)
from summeval_runner._cli._signals import tolerate_closed_stdout
from summeval_runner._errors import ConfigError
from summeval_runner._inputs._ratings import DIMENSIONS, HumanRatings, HumanTarget
from summeval_runner._report._page import write_report
from summeval_runner._runner._agreement import check_resamples, judge_agreement, judged_label
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._run import EvalRunResult
from summeval_runner._scorers._summarization import SummarizationScorer

PROGRAM = "summeval-agree"


@dataclass(frozen=True)
class AgreementPlan:
    """``judge_agreement``'s arguments for one run, built and checked from the config."""

    run_dir: Path
    resume: bool
    ratings: HumanRatings
    scorer: SummarizationScorer
    options: RunOptions
    baseline: Path | None
    resamples: int
    seed: int
    config: dict[str, Any]
    overrides: tuple[str, ...]

    async def execute(self, stop: asyncio.Event) -> EvalRunResult:
        """Judge every rated summary, then write ``agreement.parquet`` (the library's)."""
        result = await judge_agreement(
            self.ratings,
            scorer=self.scorer,
            baseline=self.baseline,
            resamples=self.resamples,
            seed=self.seed,
            options=self.options,
            output_dir=self.run_dir,
            resume=self.resume,
            config=self.config,
            overrides=self.overrides,
            stop=stop,
        )
        return result.run

    def finish(self) -> None:
        """The figures as a table, and the run's report with them."""
        if not (self.run_dir / AGREEMENT).is_file():
            return  # the run did not complete: no figure is computed on part of the rows
        table = agreement_rows(self.run_dir)
        print(format_agreement(table))
        report = write_report(
            [self.run_dir],
            self.run_dir / "report.html",
            title=f"Agreement of {table[0]['judge']} with human ratings" if table else None,
        )
        print(f"report: {report}")


def plan_agreement(cfg: DictConfig, job: HydraJob) -> AgreementPlan:
    """Check the config and build the run's parts; ``SummevalError`` naming what is wrong."""
    refuse_unknown_settings(cfg)
    if cfg.runner.estimate:
        raise ConfigError(
            "runner.estimate is summeval-run's: summeval-agree judges every rated summary, three "
            "calls each (its requests: 3 x the ratings' rows)"
        )
    # The variant labels what was judged: agreement.* changes the figures, not the judging.
    judged = tuple(o for o in job.overrides if not o.lstrip("+~").startswith("agreement."))
    options = run_options(cfg.runner, replace(job, overrides=judged))
    scorer = build_scorer(cfg)
    ratings = human_ratings(cfg.human)
    try:
        check_resamples(cfg.agreement.resamples)
    except ConfigError as error:
        raise ConfigError(f"agreement.{error}") from None
    baseline = cfg.agreement.baseline
    resume = cfg.runner.resume
    return AgreementPlan(
        run_dir=_absolute(resume) if resume else job.output_dir,
        resume=bool(resume),
        ratings=ratings,
        scorer=scorer,
        options=options,
        baseline=_absolute(baseline) if baseline else None,
        resamples=cfg.agreement.resamples,
        seed=cfg.agreement.seed,
        config=container(cfg),
        overrides=job.overrides,
    )


def human_ratings(human: DictConfig) -> HumanRatings:
    """The ``human`` group as a ``HumanRatings``: what to read, and each dimension's rating."""
    if OmegaConf.is_missing(human, "path"):
        raise ConfigError(
            "human.path is not set: name the ratings file (JSONL, CSV or Parquet), as in "
            "summeval-agree human.path=../shared/data/summeval_dev.jsonl"
        )
    unknown = [name for name in human.against if name not in DIMENSIONS]
    if unknown:
        raise ConfigError(
            f"human.against.{unknown[0]} is not a dimension of the judge (it has: "
            f"{', '.join(DIMENSIONS)})"
        )
    against = container(human.against)
    targets = tuple(
        _target(name, against[name]) for name in DIMENSIONS if against.get(name) is not None
    )
    if not targets:
        raise ConfigError(
            "human.against holds no dimension: hold alignment, coverage or score against a "
            "rating (human.against.alignment.ratings=[consistency])"
        )
    fields = human.fields
    return HumanRatings(
        _absolute(human.path),
        source=fields.source,
        summary=fields.summary,
        group=fields.group,
        system=fields.system,
        id=fields.id,
        targets=targets,
        format=human.format,
        limit=human.limit,
        key_facts=fields.key_facts,
        questions=fields.questions,
        reference=fields.reference,
        basis=human.basis,
    )


def _absolute(path: str) -> Path:
    """A path given on the command line, from where the command ran, as tables and messages
    show it: ``../shared/data/x.jsonl`` without the ``..`` (a link is kept, not resolved)."""
    return Path(os.path.normpath(to_absolute_path(path)))


def _target(dimension: str, setting: Any) -> HumanTarget:
    where = f"human.against.{dimension}"
    if not isinstance(setting, dict) or "ratings" not in setting:
        raise ConfigError(
            f"{where} must be {{ratings: [column, ...], binary: false}}, got {setting!r}"
        )
    unknown = sorted(set(setting) - {"ratings", "binary"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not a setting (it takes: ratings, binary)")
    ratings = setting["ratings"]
    names = [ratings] if isinstance(ratings, str) else ratings
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{where}.ratings must name rating columns, got {ratings!r}")
    binary = setting.get("binary", False)
    if not isinstance(binary, bool):
        raise ConfigError(f"{where}.binary must be true or false, got {binary!r}")
    return HumanTarget(dimension, tuple(names), binary)  # type: ignore[arg-type]


def _number(value: float | None, sign: bool = False) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def _interval(low: float | None, high: float | None, sign: bool = False) -> str:
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return ""
    return f"[{_number(low, sign)}, {_number(high, sign)}]"


def format_agreement(rows: Sequence[dict[str, Any]]) -> str:
    """The figures as the app prints them: what was held against what, one line per figure (with
    the difference from a baseline), how the intervals were drawn, then the notes."""
    if not rows:
        return "no agreement figure could be computed"
    first = rows[0]
    compared = first.get("baseline")
    judged = judged_label(
        str(first["judge"]), str(first.get("coverage_basis") or "source_questions")
    )
    title = f"agreement of {judged} with the human ratings in {first['ratings_path']}"
    if compared:
        title += f", against the baseline judge {compared} (paired: the same draws for both)"
    width = max(len("human rating"), *(len(str(r["rating"])) for r in rows))
    head = (
        f"{'dimension':<10} {'human rating':<{width}} {'level':<8} {'statistic':<17} "
        f"{'value':>6}  {'95% interval':<16} {'sources':>7} {'rows':>5}"
    )
    if compared:
        head += f"  {'vs ' + str(compared):>12}  {'paired 95%':<16}"
    lines = [title, head.rstrip()]
    notes: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        line = (
            f"{row['dimension']:<10} {row['rating']:<{width}} {row['level']:<8} "
            f"{row['statistic']:<17} {_number(row['value']):>6}  "
            f"{_interval(row['ci_low'], row['ci_high']):<16} {row['groups']:>7} {row['rows']:>5}"
        )
        if compared:
            line += (
                f"  {_number(row['difference'], sign=True):>12}  "
                f"{_interval(row['difference_ci_low'], row['difference_ci_high'], sign=True):<16}"
            )
        lines.append(line.rstrip())
        note = figure_note(row)
        if note:
            notes.setdefault((row["dimension"], row["level"], note), []).append(row["statistic"])
    if first.get("resamples") is not None:
        lines.append(
            f"95% intervals: percentiles of {first['resamples']} bootstrap draws of the sources "
            f"(seed {first['seed']})"
        )
    lines.extend(
        f"note: {dimension} {level} {', '.join(statistics)}: {note}"
        for (dimension, level, note), statistics in notes.items()
    )
    return "\n".join(lines)


def run(argv: Sequence[str] | None = None) -> int:
    """``summeval-agree`` with these arguments (default: the command line's); the exit code."""
    return run_app(argv, program=PROGRAM, config_name="agree", prepare=plan_agreement)


def main() -> None:
    """The ``summeval-agree`` entry point."""
    tolerate_closed_stdout()
    sys.exit(run())
