"""The LLM agent's calls are kept in the response cache like the judge's replies: a rerun that
changes only the judge or the scorer calls no agent again, and judges the same summaries."""

from __future__ import annotations

import json
from pathlib import Path

from tests.app import ENV, openai_run, run_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset

AGENT_PRICE = "target.price={input:1.0,output:2.0}"


def agent_calls(server: ChatServer) -> int:
    return sum(request.step == "summarize" for request in server.requests)


def traffic(run_dir: Path) -> dict[str, float]:
    """The run's last traffic line: its counts."""
    lines = (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    last: dict[str, float] = [json.loads(line) for line in lines if '"traffic"' in line][-1]
    return last["traffic"]  # type: ignore[return-value]


def test_a_rerun_with_another_judge_calls_no_agent(tmp_path: Path, chat_server: ChatServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    agent = (
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=small-model",
        AGENT_PRICE,
    )

    first = run_app(tmp_path / "first", *openai_run(chat_server.base_url, dataset), *agent, env=ENV)
    assert first.returncode == 0, first.stderr
    assert agent_calls(chat_server) == 2
    judged = len(chat_server.requests)

    # Another judge (the offline one) and another scorer setting: the agent's calls are kept.
    again = run_app(
        tmp_path / "again",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *agent,
        "scorer.max_questions=3",
        env=ENV,
    )

    assert again.returncode == 0, again.stderr
    assert len(chat_server.requests) == judged  # no agent call, and the offline judge sends none
    before, after = table(tmp_path / "first", "items"), table(tmp_path / "again", "items")
    assert after["summary"].tolist() == before["summary"].tolist()
    # A kept call was paid for by the run that stored it: no token or cost of it on the rows,
    # whose sums are each run's bill.
    assert (before["target_input_tokens"] > 0).all()
    assert (after["target_input_tokens"] == 0).all()
    assert (before["target_cost"] > 0).all()
    assert (after["target_cost"] == 0).all()
    assert traffic(tmp_path / "again")["target_cache_hits"] == 2
    # The manifest's cache counts are the judge's.
    manifest = json.loads((tmp_path / "again" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["judge"]["cache"]["hits"] == 0
    assert manifest["cost"]["target"] == 0
    # Its tokens are on the item's row (as a cached judge reply's are), not the run's: no model
    # spent them in this run, and a max_tokens budget does not count them.
    assert manifest["target_tokens"] == {"input": 0, "output": 0}
    assert traffic(tmp_path / "again").get("target_input_tokens", 0) == 0


def test_the_agents_calls_follow_runner_cache(tmp_path: Path, chat_server: ChatServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    run = (
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
    )
    assert run_app(tmp_path / "first", *run, env=ENV).returncode == 0
    calls = [agent_calls(chat_server)]

    # read: answered from the cache; write: called, and kept; off: called.
    for mode in ("read", "write", "off"):
        again = run_app(tmp_path / mode, *run, f"runner.cache={mode}", env=ENV)
        assert again.returncode == 0, again.stderr
        calls.append(agent_calls(chat_server))

    assert calls == [2, 2, 4, 6]
