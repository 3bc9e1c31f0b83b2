"""Judge traffic limits and the progress display."""

from __future__ import annotations

import asyncio
import io

import pytest

from summeval_runner import (
    FakeJudge,
    JudgeReply,
    JudgeRequest,
    create_summarization_scorer,
    run_evals,
)
from summeval_runner._runner._limits import LimitedJudge, pacing
from summeval_runner._runner._progress import ProgressReporter


class SlowJudge(FakeJudge):
    def __init__(self) -> None:
        super().__init__(
            preprocess={"alignment": [], "questions": ["q"]},
            analyze={"coverage": [{"question": "q", "answered": True, "reason": "r"}]},
        )
        self.now = 0
        self.most = 0

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.005)
        self.now -= 1
        return await super().complete(request)


def test_judge_requests_in_flight_are_bounded() -> None:
    judge = SlowJudge()
    limited = LimitedJudge(judge, max_in_flight=3)
    data = [{"id": str(i), "input": f"Source {i}.", "output": f"Summary {i}."} for i in range(20)]

    asyncio.run(
        run_evals(scorers=[create_summarization_scorer(limited)], data=data, max_items_in_flight=10)
    )

    assert judge.most == 3
    assert limited.requests_sent == 60


def test_a_rate_limit_paces_requests_evenly() -> None:
    judge = FakeJudge(preprocess={"alignment": [], "questions": []}, analyze={"coverage": []})
    limited = LimitedJudge(judge, max_in_flight=50, requests_per_minute=1200)  # two per 100 ms
    data = [{"id": str(i), "input": "Source.", "output": "Summary."} for i in range(4)]
    sent: list[float] = []
    loop_time: list[float] = []

    class Clock(FakeJudge):
        async def complete(self, request: JudgeRequest) -> JudgeReply:
            sent.append(asyncio.get_running_loop().time())
            return await judge.complete(request)

    limited.judge = Clock()

    async def run() -> None:
        loop_time.append(asyncio.get_running_loop().time())
        await run_evals(
            scorers=[create_summarization_scorer(limited)], data=data, max_items_in_flight=4
        )

    asyncio.run(run())

    assert len(sent) == 12
    # Never more than 2 in a 100 ms window, and 12 requests take at least 5 windows.
    assert all(later - earlier >= 0.095 for earlier, later in zip(sent, sent[2:], strict=False))
    assert sent[-1] - loop_time[0] >= 5 * 0.1 * 0.95


@pytest.mark.parametrize(("rpm", "expected"), [(600, (1, 0.1)), (60, (1, 1.0)), (12000, (20, 0.1))])
def test_pacing_never_lets_more_than_a_tenth_of_a_second_out_at_once(
    rpm: float, expected: tuple[int, float]
) -> None:
    burst, period = pacing(rpm)

    assert (burst, period) == pytest.approx(expected)
    assert burst / period == pytest.approx(rpm / 60)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_tqdm_bar_on_a_terminal() -> None:
    stream = Terminal()
    reporter = ProgressReporter(4, stream=stream, details=lambda: "2.5 req/s")
    for score, error in ((1.0, False), (0.5, False), (None, True), (0.0, False)):
        reporter.update(score=score, error=error)
    reporter.close()

    shown = stream.getvalue()
    assert "4/4" in shown
    assert "\r" in shown  # redrawn in place
    assert "mean 0.500, errors 1, 2.5 req/s" in shown


def test_progress_is_plain_lines_elsewhere() -> None:
    stream = io.StringIO()
    reporter = ProgressReporter(3, stream=stream, interval_s=3600)
    for _ in range(3):
        reporter.update(score=1.0, error=False)

    assert stream.getvalue() == "progress: 3/3 items, mean 1.000, errors 0\n"
