"""run_evals (SPEC §2): means and counts, hooks, failure isolation, targets, bounds."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from summeval_runner import (
    ConfigError,
    ErrorInfo,
    FakeJudge,
    InputError,
    ItemResult,
    JudgeAuthError,
    SummarizationResult,
    create_summarization_scorer,
    run_evals,
)

DOCS = {
    f"d{i}": f"Document {i} says the harbour opened in spring. It cost {i} million."
    for i in range(6)
}
DATA = [{"id": key, "input": text} for key, text in DOCS.items()]


def first_sentence(text: str) -> str:
    return text.split(". ")[0] + "."


def scorer_answering(answered: bool) -> Any:
    judge = FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q1", "q2"],
        },
        analyze={
            "coverage": [
                {"question": "q1", "answered": True, "reason": "r"},
                {"question": "q2", "answered": answered, "reason": "r"},
            ]
        },
    )
    return create_summarization_scorer(judge)


class ConstantScorer:
    """A user's own scorer: an id and an async run()."""

    def __init__(self, id: str, score: float) -> None:
        self.id = id
        self.score = score

    async def run(self, *, input: Any, output: Any) -> float:
        return self.score


def test_means_and_counts_per_scorer() -> None:
    result = asyncio.run(
        run_evals(
            target=first_sentence,
            scorers=[scorer_answering(False), ConstantScorer("length", 0.25)],
            data=DATA,
        )
    )

    assert result.means == {"summarization-scorer": 0.5, "length": 0.25}
    assert (
        result.counts.total,
        result.counts.scored,
        result.counts.unscorable,
        result.counts.errors,
    ) == (6, 6, 0, 0)
    assert [item.item_id for item in result.items] == list(DOCS)  # dataset order
    assert result.items[0].output == "Document 0 says the harbour opened in spring."


def test_unscorable_items_are_counted_and_left_out_of_the_mean() -> None:
    data = [*DATA[:2], {"id": "blank", "input": "   "}]

    result = asyncio.run(
        run_evals(target=first_sentence, scorers=[scorer_answering(True)], data=data)
    )

    assert result.counts.unscorable == 1
    assert result.counts.scored == 2
    assert result.means["summarization-scorer"] == 1.0


def test_the_hook_is_called_once_per_item_with_its_outcome() -> None:
    seen: list[ItemResult] = []

    asyncio.run(
        run_evals(
            target=first_sentence,
            scorers=[scorer_answering(True)],
            data=DATA,
            on_item_complete=seen.append,
        )
    )

    assert sorted(event.item_id for event in seen) == sorted(DOCS)
    event = next(e for e in seen if e.item_id == "d3")
    assert event.input == DOCS["d3"]
    assert event.output == "Document 3 says the harbour opened in spring."
    result = event.results["summarization-scorer"]
    assert isinstance(result, SummarizationResult)
    assert result.score == 1.0
    assert event.error is None


def test_an_async_hook_is_awaited() -> None:
    seen: list[str] = []

    async def hook(event: ItemResult) -> None:
        await asyncio.sleep(0)
        seen.append(event.item_id)

    asyncio.run(
        run_evals(
            target=first_sentence,
            scorers=[ConstantScorer("c", 1)],
            data=DATA,
            on_item_complete=hook,
        )
    )

    assert sorted(seen) == sorted(DOCS)


def test_one_failing_item_does_not_stop_the_others_and_its_hook_gets_the_error() -> None:
    def flaky(text: str) -> str:
        if "Document 2" in text:
            raise TimeoutError("the agent timed out")
        return first_sentence(text)

    seen: dict[str, ItemResult] = {}
    result = asyncio.run(
        run_evals(
            target=flaky,
            scorers=[scorer_answering(True)],
            data=DATA,
            on_item_complete=lambda e: seen.__setitem__(e.item_id, e),
        )
    )

    assert result.counts.errors == 1
    assert result.counts.scored == 5
    failed = seen["d2"]
    assert failed.status == "error"
    assert failed.error == ErrorInfo(
        type="TimeoutError", message="the agent timed out", step="target", attempts=1
    )
    # Every scorer has the item, failed: the tables hold a row for it, never a gap.
    assert failed.results == {"summarization-scorer": failed.error}
    assert result.means["summarization-scorer"] == 1.0


def test_a_scorer_that_raises_is_an_item_error() -> None:
    class Broken:
        id = "broken"

        async def run(self, *, input: Any, output: Any) -> float:
            raise ValueError("cannot score this")

    result = asyncio.run(
        run_evals(target=first_sentence, scorers=[Broken(), ConstantScorer("ok", 1)], data=DATA[:2])
    )

    assert result.counts.errors == 2
    item = result.items[0]
    # Every error says where and how often: never a null step or 0 attempts.
    assert item.results["broken"] == ErrorInfo(
        type="ValueError", message="cannot score this", step="scorer", attempts=1
    )
    assert item.results["ok"] == 1
    assert result.means == {"broken": None, "ok": 1.0}


def test_a_raising_hook_is_reported_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def hook(event: ItemResult) -> None:
        calls.append(event.item_id)
        raise RuntimeError("hook bug")

    with caplog.at_level(logging.ERROR, logger="summeval_runner"):
        result = asyncio.run(
            run_evals(
                target=first_sentence,
                scorers=[ConstantScorer("c", 1)],
                data=DATA,
                on_item_complete=hook,
            )
        )

    assert len(calls) == 6
    assert result.hook_errors == 6
    assert result.counts.scored == 6
    assert "hook bug" in caplog.text


def test_sync_and_async_targets() -> None:
    class AsyncAgent:
        async def __call__(self, text: str) -> str:
            await asyncio.sleep(0)
            return first_sentence(text)

    async def async_function(text: str) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": first_sentence(text)}]

    scorer = create_summarization_scorer("offline")
    for target in (first_sentence, AsyncAgent(), async_function):
        result = asyncio.run(run_evals(target=target, scorers=[scorer], data=DATA[:2]))
        assert result.counts.scored == 2, target
        assert result.means["summarization-scorer"] is not None


def test_precomputed_outputs_need_no_target() -> None:
    data = [
        {"id": "a", "input": DOCS["d1"], "output": DOCS["d1"]},
        {"id": "b", "input": DOCS["d2"], "output": "Unrelated words about penguins."},
    ]

    result = asyncio.run(run_evals(scorers=[create_summarization_scorer("offline")], data=data))

    scores = {item.item_id: item.results["summarization-scorer"].score for item in result.items}
    assert scores["a"] == 1.0
    assert scores["b"] == 0.0


def test_an_item_holds_its_slot_until_its_hooks_are_done() -> None:
    busy = {"now": 0, "most": 0}

    async def agent(text: str) -> str:
        busy["now"] += 1
        busy["most"] = max(busy["most"], busy["now"])
        return first_sentence(text)

    async def slow_hook(item: ItemResult) -> None:
        await asyncio.sleep(0.01)
        busy["now"] -= 1

    asyncio.run(
        run_evals(
            target=agent,
            scorers=[ConstantScorer("c", 1.0)],
            data=DATA,
            on_item_complete=slow_hook,
            max_items_in_flight=2,
        )
    )

    # Slow hooks slow the run down; finished items never pile up behind them.
    assert busy["most"] == 2


def test_items_and_target_calls_in_flight_are_bounded() -> None:
    # No clock: target calls stay in flight for some turns of the event loop, and scorers hold
    # their items until five are in flight, so the bounds are reached (and would be exceeded,
    # were they not kept) however busy the machine is.
    counters = {"items": 0, "items_most": 0, "target": 0, "target_most": 0}
    full = asyncio.Event()

    def enter(name: str) -> None:
        counters[name] += 1
        counters[f"{name}_most"] = max(counters[f"{name}_most"], counters[name])

    async def turns(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    async def agent(text: str) -> str:
        enter("items")  # an item is in flight from its target call to the end of its scoring
        enter("target")
        await turns(5)  # a third call, were it let in, would start meanwhile
        counters["target"] -= 1
        return first_sentence(text)

    class HoldingScorer:
        id = "holding"

        async def run(self, *, input: Any, output: Any) -> float:
            if counters["items"] >= 5 and not full.is_set():
                await turns(20)  # a sixth item, were it let in, would start meanwhile
                full.set()
            # The bound only turns a run that never fills up into a failure.
            await asyncio.wait_for(full.wait(), 60)
            counters["items"] -= 1
            return 1.0

    data = [{"id": str(i), "input": f"Text {i}. More."} for i in range(30)]
    result = asyncio.run(
        run_evals(
            target=agent,
            scorers=[HoldingScorer()],
            data=data,
            max_items_in_flight=5,
            max_target_calls_in_flight=2,
        )
    )

    assert result.counts.scored == 30

    assert counters["target_most"] == 2
    assert counters["items_most"] == 5


def test_a_refused_key_stops_the_run() -> None:
    judge = FakeJudge(
        preprocess=JudgeAuthError("the judge refused the credentials (HTTP 401)", status_code=401)
    )
    data = [{"id": str(i), "input": f"Text {i}. More."} for i in range(50)]

    with pytest.raises(JudgeAuthError):
        asyncio.run(
            run_evals(
                target=first_sentence,
                scorers=[create_summarization_scorer(judge)],
                data=data,
                max_items_in_flight=2,
            )
        )

    assert len(judge.requests) < 50


def test_items_without_ids_get_stable_unique_ids() -> None:
    data = [{"input": "Same text."}, {"input": "Other text."}, {"input": "Same text."}]

    result = asyncio.run(
        run_evals(target=first_sentence, scorers=[ConstantScorer("c", 1)], data=data)
    )

    first, other, repeated = (item.item_id for item in result.items)
    assert repeated == f"{first}-2"
    assert len({first, other, repeated}) == 3


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"data": [{"id": "a"}]}, InputError, "data item 0: no 'input'"),
        (
            {"data": [{"id": "a", "input": "x"}, {"id": "a", "input": "y"}]},
            InputError,
            "data item 1: duplicate id 'a'; first seen at data item 0",
        ),
        (
            {"data": [{"input": "x"}], "target": None},
            InputError,
            "data item 0: no 'output', and no target",
        ),
        ({"data": DATA, "scorers": []}, ConfigError, "scorers must hold at least one scorer"),
        (
            {"data": DATA, "scorers": [ConstantScorer("a", 1), ConstantScorer("a", 2)]},
            ConfigError,
            "scorer ids must be unique",
        ),
        (
            {"data": DATA, "max_items_in_flight": 0},
            ConfigError,
            "max_items_in_flight must be an integer >= 1, got 0",
        ),
    ],
)
def test_bad_arguments_fail_before_any_call(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    calls: list[str] = []

    def target(text: str) -> str:
        calls.append(text)
        return text

    arguments = {"target": target, "scorers": [ConstantScorer("c", 1)]} | kwargs
    with pytest.raises(error, match=message):
        asyncio.run(run_evals(**arguments))
    assert calls == []


def test_an_item_past_its_timeout_is_an_error_and_the_others_go_on() -> None:
    started: list[str] = []

    async def target(text: str) -> str:
        started.append(text)
        if text == DOCS["d2"]:
            await asyncio.Event().wait()  # never set: only the timeout ends it
        return first_sentence(text)

    # One item at a time, the stuck one last: the others never share the clock with it, and
    # the timeout is generous, so only the stuck item can run past it, whatever the load.
    data = [row for row in DATA if row["id"] != "d2"] + [row for row in DATA if row["id"] == "d2"]
    result = asyncio.run(
        run_evals(
            target=target,
            scorers=[scorer_answering(True)],
            data=data,
            max_items_in_flight=1,
            item_timeout_s=2.0,
        )
    )

    assert started[-1] == DOCS["d2"]
    by_id = {item.item_id: item for item in result.items}
    assert by_id["d2"].status == "error"
    assert by_id["d2"].error is not None
    assert by_id["d2"].error.type == "ItemTimeoutError"
    assert "item_timeout_s (2 s)" in by_id["d2"].error.message
    assert (by_id["d2"].error.step, by_id["d2"].error.attempts) == ("target", 1)
    assert result.counts.scored == 5


def test_stop_starts_no_new_item_and_lets_those_in_flight_finish() -> None:
    started: list[str] = []

    async def main() -> Any:
        stop = asyncio.Event()

        async def target(text: str) -> str:
            started.append(text)
            stop.set()  # as a signal handler would, while two items are in flight
            await asyncio.sleep(0.05)
            return first_sentence(text)

        return await run_evals(
            target=target,
            scorers=[scorer_answering(True)],
            data=DATA,
            max_items_in_flight=2,
            stop=stop,
        )

    result = asyncio.run(main())

    assert len(started) == 2
    assert [item.status for item in result.items] == ["scored", "scored"]
    assert (result.counts.total, result.unfinished) == (2, 4)


def test_items_in_flight_past_the_grace_period_are_cancelled_unfinished() -> None:
    async def main() -> Any:
        stop = asyncio.Event()

        async def target(text: str) -> str:
            stop.set()
            await asyncio.sleep(30)
            return text

        return await run_evals(
            target=target,
            scorers=[scorer_answering(True)],
            data=DATA,
            max_items_in_flight=3,
            stop=stop,
            shutdown_grace_s=0.05,
        )

    result = asyncio.run(main())

    assert (result.counts.total, result.unfinished) == (0, 6)


def test_a_generator_is_drawn_only_as_items_start_and_results_need_not_be_kept() -> None:
    """A dataset of any size streams through: items are read as slots free up, never ahead."""
    drawn = 0
    most_ahead = 0
    finished = 0

    def items() -> Any:
        nonlocal drawn
        for index in range(200):
            drawn += 1
            yield {"id": f"doc-{index}", "input": f"Document {index} says the harbour opened."}

    def on_item_complete(result: ItemResult) -> None:
        nonlocal finished, most_ahead
        finished += 1
        most_ahead = max(most_ahead, drawn - finished)

    result = asyncio.run(
        run_evals(
            target=first_sentence,
            scorers=[scorer_answering(False), ConstantScorer("length", 0.25)],
            data=items(),
            on_item_complete=on_item_complete,
            max_items_in_flight=4,
            keep_results=False,
        )
    )

    assert finished == 200
    assert most_ahead <= 4  # never more drawn than in flight
    assert result.items == ()
    assert result.counts.total == 200
    assert result.counts.scored == 200
    assert result.means == {"summarization-scorer": 0.5, "length": 0.25}
    assert result.unfinished == 0


def test_a_bad_item_in_a_generator_is_named_when_reached() -> None:
    def items() -> Any:
        yield {"id": "fine", "input": "Document one says the harbour opened."}
        yield {"id": "broken", "text": "no input field"}

    with pytest.raises(InputError, match=r"data item 1: no 'input'"):
        asyncio.run(
            run_evals(target=first_sentence, scorers=[scorer_answering(True)], data=items())
        )
