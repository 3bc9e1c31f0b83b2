"""The judge's own noise, from the repeated judgments of each item (``RunOptions.trials``), and
how the judges of a panel disagreed (``JudgePanel``).

Counted as the journal is compacted, item by item, so a resumed or merged run's figure covers
every item of it; a run without a directory counts its items as they finish.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from summeval_runner._rundir._manifest import JudgeNoise, PanelDisagreement
from summeval_runner._rundir._rows import ItemRecord
from summeval_runner._scorers._result import SUMMARIZATION_SCORER_ID, SummarizationResult


class NoiseTally:
    """Adds up, item by item, how the summarization scorer's trials of an item disagreed."""

    def __init__(self) -> None:
        self._stds: list[float] = []
        self._claims = [0, 0]  # compared, changed
        self._questions = [0, 0]
        self.trials = 1
        # A panel's: its judges and aggregate (as first seen), each item's score spread, each
        # judge's scores, and its questions compared and split.
        self._panel: tuple[tuple[str, ...], str] | None = None
        self._spreads: list[float] = []
        self._judge_scores: dict[str, list[float]] = defaultdict(list)
        self._split = [0, 0]

    def add(self, record: ItemRecord) -> None:
        results = [
            (outcome.trial, outcome.summarization)
            for outcome in record.outcomes
            if outcome.scorer_id == SUMMARIZATION_SCORER_ID and outcome.summarization is not None
        ]
        for _, result in results:
            if result.panel:
                self._add_panel(result)
        self.trials = max(self.trials, len(results))
        if len(results) < 2:
            return
        scores = [r.score for _, r in results if r.status == "scored" and r.score is not None]
        if len(scores) >= 2:
            self._stds.append(statistics.stdev(scores))
        # Each judge's verdicts against its own in the other trials: a panel's result holds
        # its judges' verdicts (``panel``), none of its own.
        claims: dict[tuple[str, str], dict[int, set[bool]]] = defaultdict(lambda: defaultdict(set))
        questions: dict[tuple[str, str], dict[int, set[bool]]] = defaultdict(
            lambda: defaultdict(set)
        )
        for trial, result in results:
            for member in result.panel or (result,):
                if member.preprocess_step_result is not None:
                    for claim in member.preprocess_step_result.alignment:
                        claims[member.judge, claim.claim][trial].add(claim.supported)
                if member.analyze_step_result is not None:
                    for verdict in member.analyze_step_result.coverage:
                        questions[member.judge, verdict.question][trial].add(verdict.answered)
        for seen, tally in ((claims, self._claims), (questions, self._questions)):
            for by_trial in seen.values():
                if len(by_trial) < 2:
                    continue
                tally[0] += 1
                tally[1] += len(set().union(*by_trial.values())) > 1

    def _add_panel(self, result: SummarizationResult) -> None:
        members = result.panel
        if self._panel is None:
            self._panel = (tuple(m.judge for m in members), result.aggregate)
        if any(m.status != "scored" or m.score is None for m in members):
            return
        scores = [m.score for m in members if m.score is not None]
        self._spreads.append(max(scores) - min(scores))
        for member, score in zip(members, scores, strict=True):
            self._judge_scores[member.judge].append(score)
        for position in range(len(members[0].asked_questions)):
            answers = set()
            for member in members:
                verdicts = member.analyze_step_result.coverage if member.analyze_step_result else ()
                answers.add(position < len(verdicts) and verdicts[position].answered)
            self._split[0] += 1
            self._split[1] += len(answers) > 1

    def panel(self) -> PanelDisagreement | None:
        """How the panel's judges disagreed; ``None`` for a run without a panel."""
        if self._panel is None:
            return None
        judges, aggregate = self._panel
        return PanelDisagreement(
            judges=judges,
            aggregate=aggregate,
            items=len(self._spreads),
            score_spread_mean=statistics.fmean(self._spreads) if self._spreads else None,
            score_spread_max=max(self._spreads) if self._spreads else None,
            judge_means={
                judge: statistics.fmean(self._judge_scores[judge])
                if self._judge_scores[judge]
                else None
                for judge in judges
            },
            questions_compared=self._split[0],
            questions_split=self._split[1],
        )

    def result(self, trials: int) -> JudgeNoise | None:
        """The figures, for a run of ``trials`` trials; ``None`` for a run of one."""
        if trials < 2:
            return None
        return JudgeNoise(
            trials=trials,
            items=len(self._stds),
            score_std_mean=statistics.fmean(self._stds) if self._stds else None,
            score_std_max=max(self._stds) if self._stds else None,
            claims_compared=self._claims[0],
            claims_changed=self._claims[1],
            questions_compared=self._questions[0],
            questions_changed=self._questions[1],
        )
