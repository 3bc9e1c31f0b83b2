"""A judge for users' tests: scripted replies per step, and a record of what each call was sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from summeval_runner._errors import JudgeError
from summeval_runner._judges._protocol import (
    STEPS,
    JudgeBase,
    JudgeReply,
    JudgeRequest,
    Price,
    Step,
    TokenUsage,
)

Reply: TypeAlias = "Mapping[str, Any] | str | BaseException"
Script: TypeAlias = "Reply | Sequence[Reply] | Callable[[JudgeRequest], Reply]"


class FakeJudge(JudgeBase):
    """Answers each step from a script and records every request it receives.

    A step's script is one reply used for every call, a list of replies used in turn, or a
    function of the request. A reply is a mapping (valid JSON content), a string (sent as raw
    text, so a test can script malformed output) or an exception to raise. The reason step has
    a default reply; the other steps must be scripted. Each reply reports ``usage``; with a
    ``price`` its cost too (else the cost is unknown).

    >>> judge = FakeJudge(
    ...     preprocess={"alignment": [{"claim": "c", "supported": True, "reason": "r"}],
    ...                 "questions": ["q"]},
    ...     analyze={"coverage": [{"question": "q", "answered": True, "reason": "r"}]},
    ... )
    >>> from summeval_runner import create_summarization_scorer
    >>> scorer = create_summarization_scorer(judge)
    >>> scorer.run_sync(input="The source.", output="The summary.").score
    1.0
    >>> [request.step for request in judge.requests]
    ['preprocess', 'analyze', 'reason']
    """

    name = "fake"

    def __init__(
        self,
        *,
        preprocess: Script | None = None,
        analyze: Script | None = None,
        reason: Script | None = None,
        usage: TokenUsage | None = None,
        price: Price | None = None,
    ) -> None:
        default_reason: Reply = {"reason": "scripted by FakeJudge"}
        self._scripts: dict[Step, Script | None] = {
            "preprocess": preprocess,
            "analyze": analyze,
            "reason": default_reason if reason is None else reason,
        }
        self._usage = usage or TokenUsage()
        self.price = price
        self.requests: list[JudgeRequest] = []

    def requests_for(self, step: Step) -> list[JudgeRequest]:
        """The requests received for one step, in order."""
        return [request for request in self.requests if request.step == step]

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        # A turn of the event loop, as a real judge's reply takes: the items in flight make
        # their calls side by side, not each one to its end before the next starts.
        await asyncio.sleep(0)
        if request.step not in STEPS:
            raise JudgeError(f"FakeJudge got an unknown step {request.step!r}")
        position = len(self.requests_for(request.step))
        self.requests.append(request)
        reply = self._reply(request, position)
        if isinstance(reply, BaseException):
            raise reply
        cost = self.price.cost(self._usage) if self.price is not None else None
        return JudgeReply(content=reply, usage=self._usage, cost=cost)

    def _reply(self, request: JudgeRequest, position: int) -> Reply:
        script = self._scripts[request.step]
        if script is None:
            raise JudgeError(f"FakeJudge has no scripted reply for step {request.step!r}")
        if callable(script) and not isinstance(script, BaseException):
            return script(request)
        if isinstance(script, Mapping | str | BaseException):
            return script
        if position >= len(script):
            raise JudgeError(
                f"FakeJudge ran out of scripted replies for step {request.step!r}: "
                f"{len(script)} given, call {position + 1} made"
            )
        return script[position]
