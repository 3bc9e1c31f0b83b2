"""What a run has spent, and the budget it may not pass (``max_cost``, ``max_tokens``).

Every judge reply's tokens and cost, and every agent call's, reach ``Spend`` as the same counts
the journal's traffic lines hold (``observe``), so the budget sees what the manifest will say,
the earlier parts of a resumed run included. Before a judge request goes out, and before the
agent is called, its cost and tokens are estimated and held back (``admit``): the request goes
only if what was spent, what the requests in flight hold and its own estimate stay within the
budget; its reply then replaces the estimate with what it cost (``release`` and ``observe``).
Once the run must stop at once (``stop``: a write that failed in its directory, a judge that
refused the key), no call is admitted: each is cancelled before it is sent.

A judge request's estimate is its prompt as rendered (four bytes of text a token, the schema
included) and a reply as long as the longest of its kind so far (before the first, a careful
model's reply: ``model_reply``), at the judge's price: erring long, since a call let out on too
short an estimate can pass the budget (or a token limit) where one held on too long a one only
waits for its reply to give the difference back. An agent call's is the mean of its calls so far
(nothing before the first).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from summeval_runner._errors import BudgetExhaustedError
from summeval_runner._judges._protocol import JudgeReply, JudgeRequest, Price, TokenUsage
from summeval_runner._rundir._journal import PartTraffic
from summeval_runner._runner._estimate import expected_output_tokens, request_tokens

logger = logging.getLogger("summeval_runner")


@dataclass(frozen=True)
class Hold:
    """What an admitted call holds back of the budget until its reply is counted."""

    cost: float
    tokens: int


_NOTHING = Hold(0.0, 0)


def reply_counts(reply: JudgeReply) -> dict[str, float]:
    """A judge reply's traffic counts: its tokens and cost, or that its cost is not known."""
    usage = reply.usage
    counts: dict[str, float] = {}
    if reply.cost is None:
        counts["judge_cost_unknown"] = 1
    elif reply.cost:
        counts["judge_cost"] = reply.cost
    if usage.input_tokens or usage.output_tokens:
        counts |= {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    if usage.reasoning_tokens:
        counts["reasoning_tokens"] = usage.reasoning_tokens
    return counts


class Spend:
    """A run's spend so far and its budget (``None``: no cap)."""

    def __init__(self, *, max_cost: float | None, max_tokens: int | None, batch: bool) -> None:
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self._batch = batch
        self._earlier = PartTraffic()
        # This part's counters, added to as calls come (a plain dict: every judge request is
        # counted here, and a model copy a request cost more than the count itself).
        self._now: dict[str, float] = {}
        self._held = Hold(0.0, 0)
        self._warned_unknown = False
        # The longest reply so far (output tokens), per kind of request.
        self._outputs: dict[str, int] = {}
        self.exhausted: BudgetExhaustedError | None = None
        # What stopped the run at once: no call is admitted after it.
        self.stopped: BaseException | None = None

    @property
    def capped(self) -> bool:
        return self.max_cost is not None or self.max_tokens is not None

    def add_earlier(self, earlier: PartTraffic) -> None:
        """What the earlier parts of a resumed run spent: it counts against the budget."""
        self._earlier = earlier

    def observe(self, counts: Mapping[str, float]) -> None:
        """Add traffic counts (``input_tokens``, ``judge_cost``, ``target_cost``, ...)."""
        now = self._now
        for name, amount in counts.items():
            now[name] = now.get(name, 0) + amount

    def traffic(self) -> PartTraffic:
        """Every part's traffic so far, this one's included."""
        return self._earlier.plus(self._now)

    def learn(self, request: JudgeRequest, output_tokens: int) -> None:
        """A reply's output tokens, for the estimates of later requests of its kind."""
        longest = self._outputs.get(request.schema_name, 0)
        self._outputs[request.schema_name] = max(longest, output_tokens)

    def expected(self, request: JudgeRequest) -> TokenUsage:
        """A judge request's tokens, estimated before it is sent."""
        output = self._outputs.get(request.schema_name)
        if output is None:
            output = expected_output_tokens(request)
        return TokenUsage(request_tokens(request), output)

    def stop(self, cause: BaseException) -> None:
        """Admit no call from now on: the run stops at once for ``cause``."""
        if self.stopped is None:
            self.stopped = cause

    def _refuse_if_stopped(self) -> None:
        # The item's task is being cancelled by the run (Batch.stop_at_once): its call is
        # cancelled with it, here rather than at its first wait inside the client, which may
        # come after the request is on the wire.
        if self.stopped is not None:
            raise asyncio.CancelledError(f"the run stopped: {self.stopped}")

    def admit_judge(self, request: JudgeRequest, price: Price | None) -> Hold:
        """Hold back a judge request's estimate, or raise ``BudgetExhaustedError``: it would
        take the run past its budget. ``CancelledError`` once the run is stopped (``stop``)."""
        self._refuse_if_stopped()
        if not self.capped:
            return _NOTHING
        usage = self.expected(request)
        cost = price.cost(usage, batch=self._batch) if price is not None else 0.0
        kind = "claims" if request.schema_name == "summarization_claims" else request.step
        return self._admit(Hold(cost, usage.input_tokens + usage.output_tokens), f"{kind} request")

    def admit_target(self) -> Hold:
        """Hold back an agent call's estimate (its calls' mean so far), or raise."""
        self._refuse_if_stopped()
        if not self.capped:
            return _NOTHING
        spent = self.traffic()
        # The calls that went out: one the response cache answered cost nothing and would
        # make the mean too small to hold a real call back.
        calls = spent.target_calls - spent.target_cache_hits
        if calls <= 0:
            return self._admit(_NOTHING, "agent call")
        tokens = (spent.target_input_tokens + spent.target_output_tokens) / calls
        return self._admit(Hold(spent.target_cost / calls, round(tokens)), "agent call")

    def _admit(self, hold: Hold, what: str) -> Hold:
        spent = self.traffic()
        if self.max_cost is not None:
            cost = spent.judge_cost + spent.target_cost + spent.judge_cost_assumed
            if cost + self._held.cost + hold.cost > self.max_cost:
                self._exhaust(
                    "max_cost",
                    f"the budget max_cost ({self.max_cost:g} USD) would be passed by the next "
                    f"{what} (about {hold.cost:.4f} USD): {cost:.4f} USD spent, "
                    f"{self._held.cost:.4f} held by calls in flight",
                )
        if self.max_tokens is not None:
            tokens = spent.tokens + spent.judge_tokens_assumed
            if tokens + self._held.tokens + hold.tokens > self.max_tokens:
                self._exhaust(
                    "max_tokens",
                    f"the budget max_tokens ({self.max_tokens:,}) would be passed by the next "
                    f"{what} (about {hold.tokens:,} tokens): {tokens:,} tokens used, "
                    f"{self._held.tokens:,} held by calls in flight",
                )
        self._held = Hold(self._held.cost + hold.cost, self._held.tokens + hold.tokens)
        return hold

    def check_agent_cost(self, cost: float | None) -> None:
        """Under ``max_cost``, an agent call whose cost is not known stops the run: a budget
        blind to it could be passed by any amount."""
        if cost is None and self.max_cost is not None:
            self._exhaust(
                "max_cost",
                f"the budget max_cost ({self.max_cost:g} USD) needs each agent call's cost, and "
                "the agent reported none: have it call report_target_usage(input_tokens=..., "
                "output_tokens=..., cost=...), or give it a price attribute (a Price; "
                "Price(input=0, output=0) for an agent that calls no model)",
            )

    def _exhaust(self, limit: str, message: str) -> None:
        error = BudgetExhaustedError(
            f"{message}; the run stops, resumable with a larger budget", limit=limit
        )
        if self.exhausted is None:
            self.exhausted = error
        raise error

    def release(self, hold: Hold) -> None:
        """An admitted call is done: what it cost is counted by ``observe`` instead."""
        self._held = Hold(self._held.cost - hold.cost, self._held.tokens - hold.tokens)

    def settle(self, hold: Hold, reply: JudgeReply) -> dict[str, float]:
        """An admitted judge request's reply came: its estimate is released. Where the reply
        leaves its cost unknown (a server that reports no token usage), the estimate stands in
        for it: returned as traffic counts (``judge_cost_assumed``, ``judge_tokens_assumed``)
        for the caller to count, so that the budget, this part's and a resume's, holds them.
        A budget that let every such reply through free would never stop."""
        self.release(hold)
        unreported = not (reply.usage.input_tokens or reply.usage.output_tokens)
        if reply.cost is not None or not unreported or not self.capped:
            return {}
        if not self._warned_unknown:
            self._warned_unknown = True
            logger.warning(
                "a judge reply's cost is not known (the server reported no token usage): the "
                "budget counts such replies at their estimate (about %.4f USD, %d tokens each)",
                hold.cost,
                hold.tokens,
            )
        return {"judge_cost_assumed": hold.cost, "judge_tokens_assumed": hold.tokens}

    def describe(self) -> str:
        """The spend for the progress display: the cost so far against ``max_cost``, the tokens
        against ``max_tokens``; nothing while a run without a budget has cost nothing (the
        offline judge and the lead-k baseline).

        >>> Spend(max_cost=5, max_tokens=None, batch=False).describe()
        'cost $0.0000 of max_cost $5.00'
        >>> Spend(max_cost=None, max_tokens=None, batch=False).describe()
        ''
        """
        spent = self.traffic()
        cost = spent.cost().total
        shown = []
        if cost is None:
            shown.append("cost unknown")
        elif cost or self.max_cost is not None:
            budget = f" of max_cost ${self.max_cost:,.2f}" if self.max_cost is not None else ""
            shown.append(f"cost ${cost:,.4f}{budget}")
        if self.max_tokens is not None:
            shown.append(f"tokens {spent.tokens:,} of max_tokens {self.max_tokens:,}")
        return ", ".join(shown)
