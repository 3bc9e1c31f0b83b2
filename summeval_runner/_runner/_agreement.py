"""``judge_agreement`` (SPEC §6): judge every rated summary, then hold the judge against people.

The judging is a ``run_evals`` run (limits, retries, cache, journal and resume included); the
figures are computed from its per-item scores, so a rerun with the cache on costs no call and a
killed run resumes like any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from summeval_runner._analysis._agreement import (
    AgreementFigure,
    Scores,
    agreement_figures,
    dimension_scores,
    read_agreement,
    read_scores,
    write_agreement,
)
from summeval_runner._errors import ConfigError, InputError
from summeval_runner._inputs._ratings import HumanRatings, RatedSummary
from summeval_runner._judges._panel import JudgePanel
from summeval_runner._judges._protocol import judge_name
from summeval_runner._runner._options import RunOptions
from summeval_runner._runner._run import EvalRunResult, run_evals
from summeval_runner._runner._sync import sync_twin
from summeval_runner._scorers._prompts import PROMPT_VERSION
from summeval_runner._scorers._result import SUMMARIZATION_SCORER_ID, SummarizationResult
from summeval_runner._scorers._summarization import (
    SummarizationScorer,
    create_summarization_scorer,
)


@dataclass(frozen=True)
class AgreementResult:
    """What ``judge_agreement`` found: every figure, the judged scores, and the run.

    ``figures``: one per target, level and statistic (``AgreementFigure``), with the paired
    difference from the baseline when one was given. ``scores``: each rated summary's judged
    value per dimension (``None``: the evaluation ended in error, left out of the figures).
    ``run``: the judging run's result (counts, errors, judge traffic, its directory).
    """

    judge: str
    prompt_version: str
    figures: tuple[AgreementFigure, ...]
    scores: Mapping[str, Mapping[str, float | None]]
    ratings_sha256: str
    run: EvalRunResult
    # What coverage was measured on (HumanRatings.basis).
    coverage_basis: str = "source_questions"

    def figure(
        self, dimension: str, statistic: str = "spearman", level: str = "summary"
    ) -> AgreementFigure:
        """The one figure of ``dimension`` at ``level`` by ``statistic``; ``KeyError`` if the
        run computed none (a binary label has no summary-level Spearman)."""
        for figure in self.figures:
            if (figure.dimension, figure.statistic, figure.level) == (dimension, statistic, level):
                return figure
        raise KeyError(f"no {level}-level {statistic} figure for {dimension}")

    def to_frame(self) -> pd.DataFrame:
        """The figures as a DataFrame, one row each (the columns of ``agreement.parquet``)."""
        frame: pd.DataFrame = pd.DataFrame([asdict(figure) for figure in self.figures])
        return frame


Baseline = AgreementResult | str | Path


async def judge_agreement(
    ratings: HumanRatings | str | Path,
    *,
    scorer: SummarizationScorer | None = None,
    baseline: Baseline | None = None,
    resamples: int = 1000,
    seed: int = 0,
    options: RunOptions | Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    resume: bool = False,
    config: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    stop: asyncio.Event | None = None,
    **option_values: Any,
) -> AgreementResult:
    """Judge every rated summary with ``scorer`` (the offline judge by default) and measure how
    its alignment, coverage and score agree with the people's ratings.

    ``ratings``: a ``HumanRatings`` (the file, its fields, what each dimension is held against),
    or the path of a SummEval-style file (``doc_id``, ``source``, ``summary``, ``consistency``,
    ``relevance``). Every row is checked before any judge call (``RatingsError``, an
    ``InputError``, naming the file, row and field). The judging is ``run_evals`` with
    ``options`` (limits, retries, cache) and, with ``output_dir``, a run directory that also
    gets ``agreement.parquet``. ``baseline``: another judge's ``AgreementResult`` or
    ``summeval-agree`` run directory on the same ratings file; each figure then carries the
    difference and its paired interval. Intervals: ``resamples`` bootstrap draws of the
    sources, seeded by ``seed``.

    Figures are of every rated summary or of none: a shard is refused, a baseline must have
    judged every rated summary, and a run that did not complete (interrupted, failed) returns
    no figure (``figures`` is empty; resume it with ``resume=True``).
    """
    check_resamples(resamples)
    _refuse_shard(options, option_values)
    human = ratings if isinstance(ratings, HumanRatings) else HumanRatings(Path(ratings))
    rated = human.read()
    sha256 = human.sha256()
    chosen = scorer if scorer is not None else create_summarization_scorer("offline")
    base = _baseline(baseline, sha256, [row.id for row in rated])
    label = chosen.judge.name if isinstance(chosen.judge, JudgePanel) else judge_name(chosen.judge)
    basis = human.basis
    run = await run_evals(
        scorers=[chosen],
        data=[_item(row) for row in rated],
        options=options,
        output_dir=output_dir,
        resume=resume,
        config=config,
        overrides=overrides,
        stop=stop,
        **option_values,
    )
    # A resumed run's earlier items are only in its tables: read them all back from there.
    scores = read_scores(Path(output_dir)) if output_dir is not None else _scores(run)
    # A figure of the rows an unfinished run reached would pass for one of all the rows.
    figures = (
        agreement_figures(
            rated,
            human.targets,
            scores,
            judge=label,
            prompt_version=PROMPT_VERSION,
            baseline=base[0] if base is not None else None,
            baseline_label=base[1] if base is not None else None,
            resamples=resamples,
            seed=seed,
            coverage_basis=basis,
        )
        if run.status == "completed"
        else ()
    )
    if output_dir is not None and run.status == "completed":
        write_agreement(
            Path(output_dir),
            figures,
            ratings_path=human.path,
            ratings_sha256=sha256,
            resamples=resamples,
            seed=seed,
        )
    return AgreementResult(
        judge=label,
        prompt_version=PROMPT_VERSION,
        figures=figures,
        scores=scores,
        ratings_sha256=sha256,
        run=run,
        coverage_basis=basis,
    )


# Fewer draws make the interval's ends (the 2.5th and 97.5th percentiles) mostly noise.
MIN_RESAMPLES = 100


def check_resamples(resamples: int) -> None:
    """``ConfigError`` unless ``resamples`` is enough for a 95% percentile interval."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < MIN_RESAMPLES:
        raise ConfigError(f"resamples must be >= {MIN_RESAMPLES}, got {resamples!r}")


judge_agreement_sync = sync_twin(judge_agreement)


def _item(row: RatedSummary) -> dict[str, Any]:
    metadata: dict[str, Any] = dict(row.ratings)
    if row.group is not None:
        metadata["group"] = row.group
    if row.system is not None:
        metadata["system"] = row.system
    item = {"id": row.id, "input": row.source, "output": row.summary, "metadata": metadata}
    if row.ground_truth is not None:
        item["ground_truth"] = row.ground_truth
    return item


def judged_label(judge: str, basis: str) -> str:
    """A judge as an agreement names it: with what its coverage was measured on, unless that
    was the source's questions (``offline``, ``offline on key_facts``)."""
    return judge if basis == "source_questions" else f"{judge} on {basis}"


def _scores(run: EvalRunResult) -> Scores:
    scores: dict[str, dict[str, float | None]] = {}
    for item in run.items:
        result = item.results.get(SUMMARIZATION_SCORER_ID)
        if isinstance(result, SummarizationResult) and item.error is None:
            values = {
                "alignment": result.alignment_score,
                "coverage": result.coverage_score,
                "score": result.score,
            }
            scores[item.item_id] = dimension_scores(result.status, values)
        else:
            scores[item.item_id] = dimension_scores(
                "error", dict.fromkeys(("alignment", "coverage", "score"))
            )
    return scores


def _refuse_shard(
    options: RunOptions | Mapping[str, Any] | None, option_values: Mapping[str, Any]
) -> None:
    """``ConfigError`` for a shard: agreement is a figure of every rated summary, and a shard
    also cuts sources apart."""
    given = options.shard if isinstance(options, RunOptions) else (options or {}).get("shard")
    shard = option_values.get("shard", given)
    if shard is not None:
        raise ConfigError(
            f"shard must be None for agreement, got {str(shard)!r}: the figures are of every "
            "rated summary (use human.limit for a quicker look at the first rows)"
        )


def _baseline(
    baseline: Baseline | None, sha256: str, rated_ids: Sequence[str]
) -> tuple[Scores, str] | None:
    """The baseline's scores and label, refused unless judged on the same ratings file, every
    rated summary of it."""
    if baseline is None:
        return None
    if isinstance(baseline, AgreementResult):
        scores, base_sha = baseline.scores, baseline.ratings_sha256
        label = judged_label(baseline.judge, baseline.coverage_basis)
        where = "the baseline"
    else:
        run_dir = Path(baseline)
        table = read_agreement(run_dir)
        if table.empty:
            raise InputError(f"{run_dir}/agreement.parquet holds no figure to compare with")
        scores = read_scores(run_dir)
        # Files written before the basis was recorded measured on the source's questions.
        basis = table["coverage_basis"].iloc[0] if "coverage_basis" in table else None
        label = judged_label(str(table["judge"].iloc[0]), str(basis or "source_questions"))
        base_sha = str(table["ratings_sha256"].iloc[0])
        where = str(run_dir)
    if base_sha != sha256:
        raise ConfigError(
            f"{where} was judged on another ratings file (SHA-256 {base_sha[:12]}…, this one "
            f"{sha256[:12]}…): a paired difference needs the same rated summaries"
        )
    missing = [item_id for item_id in rated_ids if item_id not in scores]
    if missing:
        raise ConfigError(
            f"{where} judged {len(rated_ids) - len(missing)} of the {len(rated_ids)} rated "
            f"summaries (not {missing[0]!r}, for one): a paired difference needs every one, "
            "judged by both (judge the baseline on all the rows, without human.limit)"
        )
    return scores, label
