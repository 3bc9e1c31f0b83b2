"""What a new user meets on a first run with their own data (issue 32): outputs the data holds
beside an agent, the sample's field map kept for another file, the agent's model failing, a
resume after a budget stop, and a cost where no price is known. Each is loud, or right."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from summeval_runner import (
    AgentAPIError,
    ConfigError,
    DatasetError,
    DatasetFile,
    FieldMap,
    JudgeError,
    OfflineJudge,
    create_summarization_scorer,
    load_dataset,
    run_evals,
)
from summeval_runner._cli import _app
from tests.app import ENV, openai_run, run_app, run_command, table
from tests.chat_server import ChatServer, Fault
from tests.documents import write_dataset

ARTICLE = (
    "The city council approved a new budget on Monday. It raises school funding by 5 percent. "
    "Critics said the plan cuts parks. The mayor will sign it on Friday."
)
# A summary unlike the article's first sentences: scored, it cannot pass for lead-3's.
SUMMARY = "Penguins nest on the ice."


def write_news(path: Path, summaries: str = "summary") -> Path:
    """A CSV as a user has it: columns key, article and ``summaries`` (their system's outputs)."""
    path.write_text(
        f"key,article,{summaries}\n"
        f'a1,"{ARTICLE}","{SUMMARY}"\n'
        f'a2,"{ARTICLE} It was sunny.","{SUMMARY}"\n',
        encoding="utf-8",
    )
    return path


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return loaded


# Their own summaries are never silently replaced by an agent's.


@pytest.mark.parametrize("column", ["summary", "output"])
def test_a_dataset_with_outputs_and_an_agent_is_refused_before_any_call(
    tmp_path: Path, column: str
) -> None:
    news = write_news(tmp_path / "news.csv", summaries=column)
    fields = ("dataset.fields.input=article", "dataset.fields.id=key")

    # The command of issue 42: the summaries' column named nowhere, and no target=precomputed,
    # so the bundled lead-3 agent is the target. Its 1.000s would stand in for the file's.
    for named in ((), (f"dataset.fields.output={column}",)):
        refused = run_app(tmp_path / "run", f"dataset.path={news}", *fields, *named)

        assert refused.returncode == 2, refused.stdout
        message = refused.stderr
        assert message.startswith(
            f"summeval-run: error: {news} holds summaries in its field {column!r}"
        )
        for remedy in ("target=precomputed", "dataset.ignore_outputs=true"):
            assert remedy in message
        assert not (tmp_path / "run").exists()

    # The first remedy scores the summaries the file holds, found by their column's name.
    scored = run_app(
        tmp_path / "run", f"dataset.path={news}", *fields, "target=precomputed",
        "runner.progress=false",
    )  # fmt: skip
    assert scored.returncode == 0, scored.stderr
    items = table(tmp_path / "run", "items")
    assert items["summary"].tolist() == [SUMMARY, SUMMARY]
    assert (items["score"] == 0.0).all()  # penguins: nothing of the article
    assert manifest(tmp_path / "run")["setup"]["target"] is None
    assert manifest(tmp_path / "run")["setup"]["data"]["fields"]["output"] == column

    # The second lets the agent run, and scores its summaries, not the file's.
    agent = run_app(
        tmp_path / "agent", f"dataset.path={news}", *fields, "dataset.ignore_outputs=true",
        "runner.progress=false",
    )  # fmt: skip
    assert agent.returncode == 0, agent.stderr
    summaries = table(tmp_path / "agent", "items")["summary"].tolist()
    lead_3 = " ".join(ARTICLE.split(" Critics")[0:1]) + " Critics said the plan cuts parks."
    assert summaries == [lead_3, lead_3]


def test_the_seeds_jsonl_runs_with_its_path_and_target_precomputed_alone(tmp_path: Path) -> None:
    data = tmp_path / "seed.jsonl"
    data.write_text(
        json.dumps({"id": "a", "input": ARTICLE, "output": ARTICLE}) + "\n"
        + json.dumps({"id": "b", "input": ARTICLE, "output": "  "}) + "\n",
        encoding="utf-8",
    )  # fmt: skip

    completed = run_app(
        tmp_path / "run", f"dataset.path={data}", "target=precomputed", "runner.progress=false"
    )

    assert completed.returncode == 0, completed.stderr
    scores = table(tmp_path / "run", "items").set_index("item_id")
    assert scores.loc["a", "score"] == 1.0
    assert (scores.loc["b", "status"], scores.loc["b", "score"]) == ("blank_summary", 0.0)
    assert manifest(tmp_path / "run")["means"] == {"summarization-scorer": 0.5}


def test_run_evals_refuses_a_target_with_items_that_carry_outputs(tmp_path: Path) -> None:
    calls: list[Any] = []

    def agent(text: str) -> str:
        calls.append(text)
        return "A summary."

    scorers = [create_summarization_scorer(OfflineJudge())]
    news = write_news(tmp_path / "news.csv")
    file = DatasetFile(news, FieldMap(input="article", id="key", output="summary"))
    items = [{"id": "a1", "input": ARTICLE, "output": SUMMARY}]

    for data, named in ((file, "dataset.fields.output"), (items, "data item 0: 'output'")):
        with pytest.raises(ConfigError) as refused:
            asyncio.run(
                run_evals(target=agent, scorers=scorers, data=data, output_dir=tmp_path / "r")
            )
        assert named in str(refused.value)
        assert "target=None" in str(refused.value)

    assert calls == []
    assert not (tmp_path / "r").exists()
    # An item whose output is None carries none: the agent's is scored.
    result = asyncio.run(
        run_evals(target=agent, scorers=scorers, data=[{"input": ARTICLE, "output": None}])
    )
    assert (result.counts.total, len(calls)) == (1, 1)


# The sample's field map does not pass for the user's data.


def test_a_new_dataset_path_starts_from_the_seeds_field_names_not_the_samples(
    tmp_path: Path,
) -> None:
    news = write_news(tmp_path / "news.csv")

    # dataset.path alone changed: the first error is about the file's own input column (the
    # seed's name, input), never the sample's text, title or domain, and it lists the columns.
    refused = run_app(tmp_path / "run", f"dataset.path={news}", "target=precomputed")

    assert refused.returncode == 2, refused.stdout
    assert refused.stderr.strip() == (
        f"summeval-run: error: {news} row 2: no field 'input' (dataset.fields.input); the row "
        "has ['article', 'key', 'summary']"
    )
    assert not (tmp_path / "run").exists()

    # One setting more and it runs: no metadata is carried unless named.
    named = run_app(
        tmp_path / "run", f"dataset.path={news}", "dataset.fields.input=article",
        "dataset.fields.metadata=[key]", "target=precomputed", "runner.progress=false",
    )  # fmt: skip
    assert named.returncode == 0, named.stderr
    metadata = table(tmp_path / "run", "items")["metadata"].tolist()
    assert metadata == [{"key": "a1"}, {"key": "a2"}]
    # The manifest records the names the run read: the seed's, less what was set.
    fields = manifest(tmp_path / "run")["config"]["dataset"]["fields"]
    assert (fields["input"], fields["id"], fields["metadata"]) == ("article", "id", ["key"])


def test_a_named_field_no_jsonl_row_has_is_refused_and_one_some_rows_have_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "docs.jsonl"
    rows = [{"id": "a", "text": "One.", "topic": "city"}, {"id": "b", "text": "Two."}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")

    # A JSONL row may leave out a field others have: null there.
    items = load_dataset(path, FieldMap(input="text", metadata=("topic",)))
    assert [dict(item.metadata) for item in items] == [{"topic": "city"}, {"topic": None}]

    for fields, option in (
        (FieldMap(input="text", metadata=("topic", "title")), "dataset.fields.metadata"),
        (FieldMap(input="text", ground_truth="reference"), "dataset.fields.ground_truth"),
    ):
        with pytest.raises(DatasetError) as refused:
            load_dataset(path, fields)
        missing = "title" if option.endswith("metadata") else "reference"
        assert str(refused.value).startswith(
            f"{path}: no row has the field {missing!r} ({option}); the first row has "
            "['id', 'text', 'topic']"
        )

    # The rows read are the ones checked: within dataset.limit, the second row's field is not.
    with pytest.raises(DatasetError, match="no row has the field 'note'"):
        load_dataset(path, FieldMap(input="text", metadata=("note",)), limit=1)


# The agent's failure is named as the agent's.


def test_the_agents_model_failing_is_named_the_agents_not_the_judges(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    chat_server.fail_every_request(Fault(400, "unknown model"))

    completed = run_app(
        tmp_path / "run",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "runner.progress=false",
        env=ENV,
    )

    assert completed.returncode == 1, completed.stderr
    items = table(tmp_path / "run", "items")
    assert set(items["error_type"]) == {"AgentAPIError"}
    assert set(items["error_step"]) == {"target"}
    message = items["error_message"][0]
    assert message.startswith(f"the agent's model at {chat_server.base_url} answered HTTP 400")
    assert "judge" not in message
    assert "AgentAPIError in target: the agent's model at" in completed.stdout
    # Only the agent was asked (the offline judge makes no request).
    assert {request.step for request in chat_server.requests} == {"summarize"}


def test_the_agents_model_refusing_its_key_aborts_the_run_naming_the_agent(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    chat_server.fail_every_request(Fault(401, "invalid api key"))

    completed = run_app(
        tmp_path / "run",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "runner.progress=false",
        "runner.max_items_in_flight=1",
        env=ENV,
    )

    # As a judge's refused key does: every later call would fail the same way.
    assert completed.returncode == 1, completed.stderr
    run = manifest(tmp_path / "run")
    assert run["status"] == "aborted"
    assert run["stopped_because"].startswith(
        f"the agent's model at {chat_server.base_url} refused the credentials (HTTP 401)"
    )
    assert len(chat_server.requests) == 1


def test_the_agents_errors_are_not_judge_errors() -> None:
    # A handler of judge failures does not catch the agent's.
    assert not issubclass(AgentAPIError, JudgeError)


def test_a_missing_key_of_the_agents_model_names_the_agent(tmp_path: Path) -> None:
    refused = run_app(tmp_path / "run", "target=llm_summarizer", env={})

    assert refused.returncode == 2
    assert "the agent's model needs an API key in the environment variable OPENAI_API_KEY" in (
        refused.stderr
    )


# The resume command after a budget stop cannot stop again at once.


def test_the_resume_command_after_a_budget_stop_asks_for_a_larger_budget(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    priced = "model.price={input:2.5,output:10}"
    run_dir = tmp_path / "run"
    overrides = (
        *openai_run(chat_server.base_url, dataset),
        priced,
        "runner.max_items_in_flight=1",
    )

    stopped = run_app(run_dir, *overrides, "runner.max_cost=0.004", env=ENV)

    assert stopped.returncode == 4, stopped.stderr
    lines = stopped.stderr.splitlines()
    ask = next(i for i, line in enumerate(lines) if "interrupted:" in line)
    assert "with a budget larger than runner.max_cost=0.004" in lines[ask]
    assert "in place of NEW_BUDGET" in lines[ask]
    printed = lines[ask + 1].strip()
    assert "runner.max_cost=0.004" not in printed
    assert "runner.max_cost=NEW_BUDGET" in printed
    assert f"runner.resume={run_dir}" in printed
    before = (manifest(run_dir), len(chat_server.requests))

    # Pasted as printed: refused before any call, the run left as it was.
    command = shlex.split(printed)
    assert command[0] == "summeval-run"
    pasted = run_command(_app.run, command[1:], cwd=tmp_path, env=ENV)
    assert pasted.returncode == 2, pasted.stderr
    assert "runner.max_cost" in pasted.stderr
    assert (manifest(run_dir), len(chat_server.requests)) == before

    # With a budget filled in, it finishes the run.
    filled = [arg.replace("NEW_BUDGET", "1") for arg in command[1:]]
    resumed = run_command(_app.run, filled, cwd=tmp_path, env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert (manifest(run_dir)["status"], manifest(run_dir)["counts"]["total"]) == ("completed", 6)


# A cost where no price is known is unknown, even when nothing was billed. The models are ones
# the price table does not know (it prices gpt-4o-mini, the default, by itself).
UNPRICED = ("model.name=local-judge-unpriced", "target.name=local-summarizer-unpriced")


def test_a_run_without_a_price_whose_calls_all_failed_has_an_unknown_cost(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    chat_server.fail_every_request(Fault(400, "bad request"))

    completed = run_app(
        tmp_path / "run", *openai_run(chat_server.base_url, dataset, UNPRICED[0]), env=ENV
    )

    assert completed.returncode == 1, completed.stderr
    assert manifest(tmp_path / "run")["cost"]["judge"] is None
    assert manifest(tmp_path / "run")["cost"]["total"] is None
    assert "cost: unknown (judge unknown, agent $0.0000)" in completed.stdout
    assert table(tmp_path / "run", "items")["judge_cost"].isna().all()
    assert table(tmp_path / "run", "runs")["cost_usd"].isna().all()


@pytest.mark.parametrize("price", [None, "{input:2.5,output:10}"], ids=["no price", "priced"])
def test_a_rerun_the_cache_answers_costs_nothing_at_a_price_and_is_unknown_without(
    tmp_path: Path, chat_server: ChatServer, price: str | None
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    overrides = (
        *openai_run(chat_server.base_url, dataset),
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        *UNPRICED,
        *((f"model.price={price}", f"target.price={price}") if price else ()),
    )
    assert run_app(tmp_path / "first", *overrides, env=ENV).returncode == 0
    sent = len(chat_server.requests)

    again = run_app(tmp_path / "again", *overrides, env=ENV)

    assert again.returncode == 0, again.stderr
    assert len(chat_server.requests) == sent  # every call answered by the cache
    cost = manifest(tmp_path / "again")["cost"]
    items = table(tmp_path / "again", "items")
    if price is None:
        assert (cost["judge"], cost["target"], cost["total"]) == (None, None, None)
        assert "cost: unknown (judge unknown, agent unknown)" in again.stdout
        assert items["judge_cost"].isna().all()
        assert items["target_cost"].isna().all()
    else:
        assert (cost["judge"], cost["target"], cost["total"]) == (0.0, 0.0, 0.0)
        assert "cost: $0.0000 (judge $0.0000, agent $0.0000)" in again.stdout
        assert (items["judge_cost"] == 0).all()
        assert (items["target_cost"] == 0).all()
