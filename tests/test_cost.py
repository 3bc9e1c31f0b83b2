"""What a run costs: prices given and unknown, an estimate made before any call, and budgets
(runner.max_cost, runner.max_tokens) that stop a run before it is passed, and resume."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from summeval_runner import OfflineJudge, create_summarization_scorer, run_evals_sync
from tests.app import ENV, openai_run, run_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset

JUDGE_PRICE = (2.5, 10.0)  # US dollars per million tokens, in and out
AGENT_PRICE = (0.5, 1.5)
PRICED = f"model.price={{input:{JUDGE_PRICE[0]},output:{JUDGE_PRICE[1]}}}"


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def priced(server: ChatServer, steps: set[str], price: tuple[float, float]) -> float:
    """What the server's answers to requests of ``steps`` cost at ``price``, by its own token
    counts."""
    return sum(
        (server.usage[i][0] * price[0] + server.usage[i][1] * price[1]) / 1e6
        for i, request in enumerate(server.requests)
        if request.step in steps and i in server.usage
    )


JUDGE_STEPS = {"preprocess", "claims", "analyze", "reason"}


def test_prices_give_each_item_and_the_run_their_cost_judge_and_agent_apart(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        PRICED,
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=small-model",
        f"target.price={{input:{AGENT_PRICE[0]},output:{AGENT_PRICE[1]}}}",
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    judge = priced(chat_server, JUDGE_STEPS, JUDGE_PRICE)
    agent = priced(chat_server, {"summarize"}, AGENT_PRICE)
    assert judge > 0
    assert agent > 0
    cost = manifest(tmp_path / "run")["cost"]
    assert cost["judge"] == pytest.approx(judge)
    assert cost["target"] == pytest.approx(agent)
    assert cost["total"] == pytest.approx(judge + agent)
    assert cost["currency"] == "USD"
    items = table(tmp_path / "run", "items")
    # Each item's judge calls at the judge's price (a reply two items share is paid once: the
    # second is answered by the cache, at no cost); the agent's call at its own.
    assert items["judge_cost"].sum() == pytest.approx(judge)
    assert items["target_cost"].sum() == pytest.approx(agent)
    agent_calls = [i for i, r in enumerate(chat_server.requests) if r.step == "summarize"]
    agent_tokens = sorted(
        chat_server.usage[i][0] * 1_000_000 + chat_server.usage[i][1] for i in agent_calls
    )
    assert sorted(items["target_input_tokens"] * 1_000_000 + items["target_output_tokens"]) == (
        agent_tokens
    )
    assert f"cost: ${judge + agent:,.4f} (judge ${judge:,.4f}, agent ${agent:,.4f})" in (
        completed.stdout
    )


def test_an_unknown_price_is_unknown_never_zero(tmp_path: Path, chat_server: ChatServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    # A model the price table does not know (the default, gpt-4o-mini, it prices).
    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset, "model.name=a-model-of-my-own"),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    assert table(tmp_path / "run", "items")["judge_cost"].isna().all()
    cost = manifest(tmp_path / "run")["cost"]
    assert (cost["judge"], cost["target"], cost["total"]) == (None, 0.0, None)
    assert "cost: unknown (judge unknown, agent $0.0000)" in completed.stdout
    assert "set model.price" in completed.stdout
    # The offline judge and the lead-k baseline cost nothing, and say so.
    offline = run_app(tmp_path / "offline", "dataset.limit=2", "runner.progress=false")
    assert "cost: $0.0000 (judge $0.0000, agent $0.0000)" in offline.stdout


def test_a_reply_without_token_usage_has_an_unknown_cost_and_the_budget_counts_its_estimate(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    chat_server.reports_usage = False  # a server that says nothing of its tokens

    stopped = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        PRICED,
        "runner.max_items_in_flight=1",
        "runner.max_cost=0.01",
        env=ENV,
    )

    # Unknown, never 0: the price is known, the tokens it would multiply are not.
    items = table(tmp_path / "run", "items")
    assert items["judge_cost"].isna().all()
    run = manifest(tmp_path / "run")
    assert run["cost"]["judge"] is None
    assert "cost: unknown" in stopped.stdout
    assert "the server reported no token usage" in stopped.stdout + stopped.stderr
    # The budget still stops the run: each reply counted at its estimate (0.001 to 0.005 USD
    # a request here; the 6 items take 13 requests without a budget), so it stops early.
    assert stopped.returncode == 4, stopped.stderr
    assert "max_cost" in run["stopped_because"]
    assert 0 < len(chat_server.requests) < 13

    # Resumed under the same budget, the earlier part's estimates still count: the run stops
    # before sending anything more (a budget that forgot them would pay for another part).
    sent = len(chat_server.requests)
    again = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        PRICED,
        "runner.max_items_in_flight=1",
        "runner.max_cost=0.01",
        f"runner.resume={tmp_path / 'run'}",
        env=ENV,
    )
    assert again.returncode == 4, again.stderr
    assert len(chat_server.requests) == sent
    assert "max_cost" in manifest(tmp_path / "run")["stopped_because"]


def estimated(output: str) -> dict[str, int]:
    found = re.search(r"judge requests\s+([\d,]+) to send, ([\d,]+) answered by the cache", output)
    tokens = re.search(r"judge tokens\s+([\d,]+) in, ([\d,]+) out", output)
    assert found, output
    assert tokens, output
    numbers = [int(n.replace(",", "")) for n in (*found.groups(), *tokens.groups())]
    return dict(zip(("to_send", "cached", "in", "out"), numbers, strict=True))


@pytest.mark.parametrize("model", ["openai", "anthropic", "google"])
def test_an_estimate_needs_no_key_for_the_judge_or_the_agent(tmp_path: Path, model: str) -> None:
    """runner.estimate makes no call, so no key is asked for (issue 42); the run itself still
    refuses to start without one."""
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    keyless = {name: "" for name in ENV if name.endswith("_API_KEY")} | {
        "ANTHROPIC_API_KEY": "",
        "GOOGLE_API_KEY": "",
        "GEMINI_API_KEY": "",
    }
    overrides = (
        f"model={model}", f"dataset.path={dataset}", "target=llm_summarizer",
        f"target.provider={model}", "runner.progress=false",
    )  # fmt: skip

    estimate = run_app(tmp_path / "e", *overrides, "runner.estimate=true", env=keyless)
    run = run_app(tmp_path / "r", *overrides, env=keyless)

    assert estimate.returncode == 0, estimate.stderr
    assert "judge tokens" in estimate.stdout
    assert run.returncode == 2
    assert "needs an API key" in run.stderr


def test_an_estimate_sends_nothing_and_counts_what_the_cache_holds(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    overrides = (*openai_run(chat_server.base_url, dataset), PRICED)

    before = run_app(tmp_path / "estimate", *overrides, "runner.estimate=true", env=ENV)

    assert before.returncode == 0, before.stderr
    assert chat_server.requests == []  # no judge call, no agent call
    assert not (tmp_path / "estimate").exists()  # and nothing written
    first = estimated(before.stdout)
    assert (first["to_send"], first["cached"]) == (12, 0)  # 4 items x 3 calls
    dollars = (first["in"] * JUDGE_PRICE[0] + first["out"] * JUDGE_PRICE[1]) / 1e6
    assert f"judge cost      ${dollars:,.4f}" in before.stdout
    assert "preprocess    4 to send" in before.stdout

    # Once a run has filled the cache, the same run would send nothing.
    assert run_app(tmp_path / "run", *overrides, env=ENV).returncode == 0
    sent = len(chat_server.requests)
    after = run_app(tmp_path / "again", *overrides, "runner.estimate=true", env=ENV)
    assert after.returncode == 0, after.stderr
    assert len(chat_server.requests) == sent
    assert estimated(after.stdout) == {"to_send": 0, "cached": 12, "in": 0, "out": 0}
    assert "total cost      $0.0000" in after.stdout


def unique_bodies(server: ChatServer) -> bool:
    bodies = [json.dumps(request.body, sort_keys=True) for request in server.requests]
    return len(set(bodies)) == len(bodies)


@pytest.mark.parametrize("limit", ["max_cost", "max_tokens"])
def test_a_budget_stops_the_run_before_it_is_passed_and_a_larger_one_resumes_it(
    tmp_path: Path, chat_server: ChatServer, limit: str
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    overrides = (*openai_run(chat_server.base_url, dataset), PRICED, "runner.max_items_in_flight=1")
    # What the whole run costs, measured on a run of its own (its own cache, then dropped).
    whole = run_app(
        tmp_path / "whole", *overrides, f"runner.cache_path={tmp_path / 'c.sqlite'}", env=ENV
    )
    assert whole.returncode == 0, whole.stderr
    full = manifest(tmp_path / "whole")
    spent = {"max_cost": full["cost"]["total"], "max_tokens": sum(full["tokens"].values())}
    budget = spent[limit] / 2
    budget_value = f"{budget:.6f}" if limit == "max_cost" else str(int(budget))
    chat_server.requests.clear()

    stopped = run_app(tmp_path / "run", *overrides, f"runner.{limit}={budget_value}", env=ENV)

    assert stopped.returncode == 4, stopped.stderr
    run = manifest(tmp_path / "run")
    assert run["status"] == "interrupted"
    assert run["exit_code"] == 4
    assert f"the budget {limit}" in run["stopped_because"]
    assert 0 < run["counts"]["total"] < 6
    assert run["unfinished"] == 6 - run["counts"]["total"]
    used = {"max_cost": run["cost"]["total"], "max_tokens": sum(run["tokens"].values())}
    assert used[limit] <= float(budget_value)
    assert f"with a budget larger than runner.{limit}=" in stopped.stderr
    assert f"runner.resume={tmp_path / 'run'}" in stopped.stderr

    resumed = run_app(
        tmp_path / "run",
        *overrides,
        f"runner.resume={tmp_path / 'run'}",
        f"runner.{limit}={10 * int(spent[limit]) + 100}",
        env=ENV,
    )

    assert resumed.returncode == 0, resumed.stderr
    done = manifest(tmp_path / "run")
    assert (done["status"], done["counts"]["total"]) == ("completed", 6)
    # Nothing paid for twice: the call of the item the budget stopped halfway was cached.
    assert unique_bodies(chat_server)
    assert done["cost"]["total"] == pytest.approx(full["cost"]["total"])
    assert table(tmp_path / "run", "items")["score"].tolist() == (
        table(tmp_path / "whole", "items")["score"].tolist()
    )


def test_the_agents_calls_count_against_the_budget(tmp_path: Path, chat_server: ChatServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)

    stopped = run_app(
        tmp_path / "run",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        "runner.max_items_in_flight=1",
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=small-model",
        "target.price={input:1000,output:1000}",
        "runner.max_cost=0.5",
        env=ENV,
    )

    # The judge (offline) is free: the agent's calls alone reach the budget.
    assert stopped.returncode == 4, stopped.stderr
    run = manifest(tmp_path / "run")
    assert "the next agent call" in run["stopped_because"]
    assert run["cost"]["target"] <= 0.5
    assert run["cost"]["judge"] == 0.0
    assert len(chat_server.requests) == run["counts"]["total"] < 6


def test_the_offline_judge_and_a_python_agent_of_ones_own_cost_0_not_unknown(
    tmp_path: Path,
) -> None:
    """Issue 42: the own-data page's agent, judged offline, printed "cost: unknown (judge
    $0.0000, agent unknown) ... set model.price"; nothing it ran was billed."""
    (tmp_path / "my_agents.py").write_text(
        "class Summarizer:\n"
        "    def __call__(self, article: str) -> str:\n"
        "        return article.split('. ')[0]\n",
        encoding="utf-8",
    )
    (tmp_path / "my_configs" / "target").mkdir(parents=True)
    (tmp_path / "my_configs" / "target" / "my_agent.yaml").write_text(
        "_target_: my_agents.Summarizer\n", encoding="utf-8"
    )
    ran = run_app(
        tmp_path / "run", f"--config-dir={tmp_path / 'my_configs'}", "target=my_agent",
        "runner.progress=false", env={"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip

    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("cost:")]
    assert line.startswith("cost: $0.0000 (judge $0.0000, agent $0.0000)"), line
    assert "unknown" not in line
    assert "model.price" not in line
    assert "the agent's 26 calls counted $0: it reported no usage and has no price" in line
    run = manifest(tmp_path / "run")
    assert run["cost"] == {
        "judge": 0.0, "target": 0.0, "total": 0.0, "currency": "USD", "target_unreported": 26
    }  # fmt: skip
    items = table(tmp_path / "run", "items")
    assert (items.target_cost == 0).all()


def test_an_llm_agent_whose_price_is_unset_stays_unknown_and_names_its_setting(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    """Only the part whose price is missing is named: an offline judge needs no model.price."""
    ran = run_app(
        tmp_path / "run", "runner.progress=false", "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}", "target.name=house-model", "dataset.limit=2",
        env=ENV,
    )  # fmt: skip

    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("cost:")]
    assert line.startswith("cost: unknown (judge $0.0000, agent unknown)"), line
    assert line.endswith("(a price is not known: set target.price)"), line


@pytest.mark.parametrize("raises", [False, True], ids=["returned", "raised"])
def test_a_cost_budget_stops_at_an_agent_call_whose_cost_is_not_known(raises: bool) -> None:
    calls = 0

    async def agent(text: str) -> str:  # reports no cost, and has no price
        nonlocal calls
        calls += 1
        if raises:  # its call may have been paid for all the same
            raise RuntimeError("the agent's parser choked on the model's reply")
        return text.split(".")[0] + "."

    result = run_evals_sync(
        scorers=[create_summarization_scorer(OfflineJudge())],
        data=[{"id": f"doc{i}", "input": f"Fact {i}. More {i}."} for i in range(5)],
        target=agent,
        max_items_in_flight=1,
        max_cost=1.0,
    )

    # A budget blind to the agent's cost could be passed by any amount: the first such call
    # stops the run (returned or raised), and the message says how to report it.
    assert result.budget_exhausted
    assert calls == 1
    assert result.counts.scored == 0
    assert result.stopped_because is not None
    assert "report_target_usage" in result.stopped_because
    assert "Price(input=0, output=0)" in result.stopped_because


def test_a_cost_budget_without_a_price_is_refused_before_any_call(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    refused = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset, "model.name=a-model-of-my-own"),
        "runner.max_cost=1",
        env=ENV,
    )

    assert refused.returncode == 2
    assert "needs the judge's price" in refused.stderr
    assert "model.price" in refused.stderr
    assert chat_server.requests == []
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("price", ["{input:inf,output:1}", "{input:1,output:1e308}"])
def test_a_price_that_is_not_finite_or_overflows_is_refused_before_any_call(
    tmp_path: Path, chat_server: ChatServer, price: str
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    refused = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        f"model.price={price}",
        env=ENV,
    )

    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("summeval-run: error: ")
    assert "price" in refused.stderr
    assert chat_server.requests == []
    assert not (tmp_path / "run").exists()


def test_the_progress_display_shows_the_cost_against_the_budget(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        PRICED,
        "runner.progress=true",
        "runner.max_cost=5",
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    total = manifest(tmp_path / "run")["cost"]["total"]
    last = [line for line in completed.stderr.splitlines() if line.startswith("progress:")][-1]
    assert f"cost ${total:,.4f} of max_cost $5.00" in last


def test_an_estimate_after_a_run_finds_the_agents_calls_and_the_judges_in_the_cache(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    overrides = (
        *openai_run(chat_server.base_url, dataset),
        PRICED,
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=small-model",
        f"target.price={{input:{AGENT_PRICE[0]},output:{AGENT_PRICE[1]}}}",
    )
    assert run_app(tmp_path / "run", *overrides, env=ENV).returncode == 0
    sent = len(chat_server.requests)

    estimate = run_app(tmp_path / "estimate", *overrides, "runner.estimate=true", env=ENV)

    assert estimate.returncode == 0, estimate.stderr
    assert len(chat_server.requests) == sent
    # The agent's calls were answered by the cache: the judge's requests are then the ones the
    # run made, and the cache holds those too.
    assert "agent           0 calls, 0 tokens in, 0 out, $0.0000; 3 answered by the cache" in (
        estimate.stdout
    )
    assert estimated(estimate.stdout)["to_send"] == 0
