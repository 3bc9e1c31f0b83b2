"""The judge's own noise, from the repeated judgments of each item (``RunOptions.trials``).

Counted as the journal is compacted, item by item, so a resumed or merged run's figure covers
every item of it; a run without a directory counts its items as they finish.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from summeval_runner._io._manifest import JudgeNoise
from summeval_runner._io._rows import ItemRecord
from summeval_runner._scorers._result import SUMMARIZATION_SCORER_ID


class NoiseTally:
    """Adds up, item by item, how the summarization scorer's trials of an item disagreed."""

    def __init__(self) -> None:
        self._stds: list[float] = []
        self._claims = [0, 0]  # compared, changed
        self._questions = [0, 0]
        self.trials = 1

    def add(self, record: ItemRecord) -> None:
        results = [
            (outcome.trial, outcome.summarization)
            for outcome in record.outcomes
            if outcome.scorer_id == SUMMARIZATION_SCORER_ID and outcome.summarization is not None
        ]
        self.trials = max(self.trials, len(results))
        if len(results) < 2:
            return
        scores = [r.score for _, r in results if r.status == "scored" and r.score is not None]
        if len(scores) >= 2:
            self._stds.append(statistics.stdev(scores))
        claims: dict[str, dict[int, set[bool]]] = defaultdict(lambda: defaultdict(set))
        questions: dict[str, dict[int, set[bool]]] = defaultdict(lambda: defaultdict(set))
        for trial, result in results:
            if result.preprocess_step_result is not None:
                for claim in result.preprocess_step_result.alignment:
                    claims[claim.claim][trial].add(claim.supported)
            if result.analyze_step_result is not None:
                for verdict in result.analyze_step_result.coverage:
                    questions[verdict.question][trial].add(verdict.answered)
        for seen, tally in ((claims, self._claims), (questions, self._questions)):
            for by_trial in seen.values():
                if len(by_trial) < 2:
                    continue
                tally[0] += 1
                tally[1] += len(set().union(*by_trial.values())) > 1

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
