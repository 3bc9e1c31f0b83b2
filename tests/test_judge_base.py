"""A judge of one's own: ``complete`` is all it must have; what else it may offer is
``JudgeBase``'s, each ability with a default, and the runner reads every ability through one
set of functions that give a bare ``complete``-only object the same defaults."""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

from summeval_runner import (
    JudgeBase,
    JudgeReply,
    JudgeRequest,
    create_summarization_scorer,
    run_evals_sync,
)
from summeval_runner._judges._protocol import (
    answers_locally,
    cache_identity_of,
    judge_name,
    judge_price,
    learn_refusal_of,
    learned_parameters_of,
    request_body_of,
    without_retries_of,
)
from tests.docs_pages import block

REPLIES: dict[str, dict[str, Any]] = {
    "preprocess": {
        "alignment": [{"claim": "It is a summary.", "supported": True, "reason": "stated"}],
        "questions": ["Is it short?"],
    },
    "analyze": {"coverage": [{"answered": True, "reason": "yes"}]},
    "reason": {"reason": "echoed"},
}


class Counting(JudgeBase):
    """Counts its calls; offers a cache identity only when given one."""

    def __init__(self, identity: dict[str, Any] | None = None) -> None:
        self.calls = 0
        self.identity = identity

    def cache_identity(self) -> dict[str, Any] | None:
        return self.identity

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        await asyncio.sleep(0)  # its I/O: a judge's reply takes a turn of the event loop
        self.calls += 1
        return JudgeReply(content=REPLIES[request.step])


class Bare:
    """The ``Judge`` protocol and nothing else."""

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        return JudgeReply(content=REPLIES[request.step])


def test_the_docs_judge_of_ones_own_runs_and_prints_what_its_comment_says() -> None:
    code = block("python", "class EchoJudge(JudgeBase):")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/judges.md", "exec"), {})

    assert printed.getvalue().split() == ["echo-v1", "1"]


@pytest.mark.parametrize("judge", [Bare(), Counting()], ids=["protocol-only", "JudgeBase"])
def test_a_judge_that_offers_nothing_more_gets_the_same_defaults_either_way(judge: Any) -> None:
    request = JudgeRequest(
        step="reason",
        payload=None,  # type: ignore[arg-type]
        messages=(),
        schema_name="summarization_reason",
        json_schema={},
        prompt_version="p",
    )

    assert judge_name(judge) == type(judge).__name__
    assert judge_price(judge) is None
    assert answers_locally(judge) is False
    assert cache_identity_of(judge) is None
    assert request_body_of(judge, request) is None
    assert without_retries_of(judge) is judge
    assert learned_parameters_of(judge) == ()
    assert learn_refusal_of(judge, {}, {}) is False


def test_a_judge_that_offers_a_cache_identity_is_answered_from_the_cache_on_a_rerun(
    tmp_path: Path,
) -> None:
    data = [{"input": f"Source {i}.", "output": f"Summary {i}."} for i in range(2)]
    cached, uncached = Counting({"judge": "counting", "version": 1}), Counting()

    calls = []
    for judge in (cached, cached, uncached, uncached):
        before = judge.calls
        run_evals_sync(
            data=data, scorers=[create_summarization_scorer(judge)], cache_path=tmp_path / "c"
        )
        calls.append(judge.calls - before)

    assert calls == [6, 0, 6, 6]
