"""Transcripts (``runner.transcripts``): every judge request of every item, as it was sent.

What a row says is held against what the loopback server itself received (the official
``openai`` SDK over real HTTP on 127.0.0.1), re-asks and cache hits included; a run killed with
SIGKILL and resumed has each item's requests once; secrets are scrubbed from the table as from
every other; and a run that does not ask writes no table and builds nothing.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from summeval_runner import (
    ConfigError,
    ItemResult,
    RunOptions,
    SummarizationResult,
    create_summarization_scorer,
    run_evals,
)
from summeval_runner._rundir._tables import TRANSCRIPTS_SCHEMA
from tests.app import ENV, SECRET, openai_run, run_app, start_app, summeval_merge, table
from tests.chat_server import ChatServer, Fault, Recorded, Reply, unfenced, valid_content
from tests.documents import write_dataset
from tests.test_secrets import assert_nowhere
from tests.waiting import wait_until

SOURCE = "The bridge opened on Monday. It cost 40 million dollars. Traffic fell by half."
NOT_JSON = "Sure! Here are the claims: none"


def _items(count: int) -> list[dict[str, str]]:
    return [
        {"id": f"item-{i}", "input": f"{SOURCE} Copy {i}.", "output": "The bridge opened."}
        for i in range(count)
    ]


def _openai_scorer(server: ChatServer, **settings: object) -> Any:
    return create_summarization_scorer(
        {"provider": "openai", "name": "judge-model", "base_url": server.base_url, **settings},
        {"max_questions": 3},
    )


def _sent(messages: Any) -> str:
    """A request's messages as one comparable text, but for its fences' random markers: a
    request answered by the cache, or by a batch line an alike request made, was fenced with
    another marker than the one that reached the server."""
    return unfenced(_exact(messages))


def _exact(messages: Any) -> str:
    return json.dumps([{"role": m["role"], "content": m["content"]} for m in messages])


def _received(server: ChatServer, start: int = 0) -> Counter[str]:
    return Counter(_sent(r.body["messages"]) for r in server.requests[start:])


def _by_messages(server: ChatServer) -> dict[str, Recorded]:
    return {_sent(r.body["messages"]): r for r in server.requests}


@pytest.fixture
def key(no_openai_env: None, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return SECRET


def test_off_by_default_no_table_and_no_transcript_in_the_results(tmp_path: Path) -> None:
    seen: list[ItemResult] = []

    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=_items(2),
            output_dir=tmp_path / "run",
            on_item_complete=seen.append,
        )
    )

    assert RunOptions().transcripts is False
    assert "transcripts" not in result.tables
    assert not (tmp_path / "run" / "transcripts.parquet").exists()
    assert (
        "transcripts" not in json.loads((tmp_path / "run" / "manifest.json").read_text())["tables"]
    )
    outcomes = [item.results["summarization-scorer"] for item in [*seen, *result.items]]
    assert len(outcomes) == 4
    assert all(o.status == "scored" and o.transcript == () for o in outcomes)


def test_the_app_writes_no_transcripts_unless_asked(tmp_path: Path) -> None:
    assert run_app(tmp_path / "off", "runner.progress=false", "dataset.limit=2").returncode == 0
    on = run_app(
        tmp_path / "on", "runner.progress=false", "dataset.limit=2", "runner.transcripts=true"
    )

    assert on.returncode == 0, on.stderr
    assert not (tmp_path / "off" / "transcripts.parquet").exists()
    rows = table(tmp_path / "on", "transcripts")
    items = table(tmp_path / "on", "items")
    # The offline judge: three requests an item, each named by the judge, with no body to show.
    assert len(rows) == 3 * len(items) == 6
    assert set(rows["model"]) == {"offline"}
    assert rows["settings"].isna().all()


def test_offline_transcripts_are_the_results_requests_per_trial_in_python_and_the_table(
    tmp_path: Path,
) -> None:
    seen: list[ItemResult] = []

    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline", {"max_questions": 3})],
            data=_items(3),
            output_dir=tmp_path / "run",
            on_item_complete=seen.append,
            transcripts=True,
            trials=2,
        )
    )

    rows = pd.read_parquet(result.tables["transcripts"])
    assert len(rows) == 3 * 2 * 3  # items x trials x steps
    for item in seen:
        for trial, results in enumerate(item.trials):
            outcome = results["summarization-scorer"]
            assert isinstance(outcome, SummarizationResult)
            mine = rows[(rows["item_id"] == item.item_id) & (rows["trial"] == trial)]
            assert list(mine["request"]) == [0, 1, 2]
            assert list(mine["step"]) == ["preprocess", "analyze", "reason"]
            assert [e.step for e in outcome.transcript] == list(mine["step"])
            # The row is the result's exchange, as written.
            for exchange, (_, row) in zip(outcome.transcript, mine.iterrows(), strict=True):
                assert [dict(m) for m in row["messages"]] == [
                    {"role": m.role, "content": m.content} for m in exchange.messages
                ]
                assert row["reply"] == exchange.reply
                assert json.loads(row["verdict"]) == exchange.verdict
            # The preprocess verdict is what the result scored on.
            preprocess = json.loads(mine["verdict"].iloc[0])
            assert outcome.preprocess_step_result is not None
            assert [c["claim"] for c in preprocess["alignment"]] == [
                c.claim for c in outcome.preprocess_step_result.alignment
            ]
    assert set(rows["status"]) == {"ok"}
    assert not rows["cached"].any()


@pytest.mark.usefixtures("key")
def test_each_row_is_a_request_the_server_received_as_it_received_it_a_reask_included(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.script(Reply(NOT_JSON))
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        *openai_run(chat_server.base_url, dataset, "runner.transcripts=true", "runner.cache=off"),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    rows = table(run_dir, "transcripts")
    # One row per request the server received: 3 items x 3 steps, and the one re-ask.
    assert len(rows) == len(chat_server.requests) == 10
    assert Counter(_sent(m) for m in rows["messages"]) == _received(chat_server)
    received = _by_messages(chat_server)
    for _, row in rows.iterrows():
        body = received[_sent(row["messages"])].body
        assert row["model"] == body["model"] == "gpt-4o-mini"
        assert json.loads(row["settings"]) == {
            k: v for k, v in body.items() if k not in ("model", "messages")
        }
        assert row["judge"] == "openai/gpt-4o-mini"
    invalid = rows[rows["status"] == "invalid"]
    assert len(invalid) == 1
    bad = invalid.iloc[0]
    assert (bad["step"], bad["attempt"], bad["reply"]) == ("preprocess", 1, NOT_JSON)
    assert pd.isna(bad["verdict"])
    reask = rows[(rows["item_id"] == bad["item_id"]) & (rows["request"] == bad["request"] + 1)]
    ((_, again),) = reask.iterrows()
    assert (again["step"], again["attempt"], again["status"]) == ("preprocess", 2, "ok")
    # The re-ask carries the reply it could not use, and the problem the row names.
    assert dict(again["messages"][-2]) == {"role": "assistant", "content": NOT_JSON}
    assert bad["error"]
    assert again["messages"][-1]["content"].endswith(bad["error"])
    ok = rows[rows["status"] == "ok"]
    for _, row in ok.iterrows():
        body = received[_sent(row["messages"])].body
        # The reply as the server sent it, and the verdict as the scorer read it.
        assert json.loads(row["reply"]) == valid_content(body)
        assert json.loads(row["verdict"]) is not None
    assert ok["input_tokens"].gt(0).all()
    assert not rows["cached"].any()
    # Every item's requests, in the order made, once each: the re-asked item's four.
    requests = rows.groupby("item_id")["request"].apply(list)
    assert sorted(requests.tolist()) == [[0, 1, 2], [0, 1, 2], [0, 1, 2, 3]]


@pytest.mark.usefixtures("key")
def test_json_object_mode_the_transcript_shows_the_prompt_as_sent_not_as_rendered(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    scorer = _openai_scorer(chat_server, response_format="json_object")

    result = asyncio.run(
        run_evals(
            scorers=[scorer],
            data=_items(1),
            output_dir=tmp_path / "run",
            transcripts=True,
        )
    )

    (item,) = result.items
    outcome = item.results["summarization-scorer"]
    assert isinstance(outcome, SummarizationResult)
    sent = [r.body["messages"] for r in chat_server.requests]
    shown = [
        [{"role": m.role, "content": m.content} for m in e.messages] for e in outcome.transcript
    ]
    assert shown == sent
    # The provider adds the schema to the system prompt in json_object mode: the transcript
    # has what the server got.
    assert "matching this JSON schema" in outcome.transcript[0].messages[0].content
    assert outcome.transcript[0].settings is not None
    assert outcome.transcript[0].settings["response_format"]["type"] == "json_object"


@pytest.mark.usefixtures("key")
def test_a_failed_request_is_a_row_with_its_error(tmp_path: Path, chat_server: ChatServer) -> None:
    chat_server.script(Fault(400, "the judge refused this request"))

    result = asyncio.run(
        run_evals(
            scorers=[_openai_scorer(chat_server)],
            data=_items(1),
            output_dir=tmp_path / "run",
            transcripts=True,
            max_items_in_flight=1,
        )
    )

    rows = pd.read_parquet(result.tables["transcripts"])
    assert result.counts.errors == 1
    assert len(rows) == len(chat_server.requests) == 1
    ((_, row),) = rows.iterrows()
    assert (row["step"], row["status"]) == ("preprocess", "failed")
    assert pd.isna(row["reply"])
    assert pd.isna(row["verdict"])
    assert "the judge refused this request" in row["error"]
    assert _sent(row["messages"]) == _sent(chat_server.requests[0].body["messages"])


@pytest.mark.usefixtures("key")
def test_a_cache_hit_is_the_cached_reply_marked_cached(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    def run(name: str) -> pd.DataFrame:
        result = asyncio.run(
            run_evals(
                scorers=[_openai_scorer(chat_server)],
                # One item: two would share their reason request (the server judges alike),
                # a hit in the first run or not as their order fell.
                data=_items(1),
                output_dir=tmp_path / name,
                transcripts=True,
                cache_path=tmp_path / "cache.sqlite",
            )
        )
        frame: pd.DataFrame = pd.read_parquet(result.tables["transcripts"])
        return frame.sort_values(["item_id", "request"]).reset_index(drop=True)

    first = run("first")
    sent = len(chat_server.requests)
    second = run("second")

    assert len(chat_server.requests) == sent  # every reply came from the cache
    assert not first["cached"].any()
    assert second["cached"].all()
    assert len(second) == len(first) == sent == 3
    for column in ("step", "attempt", "reply", "verdict", "settings"):
        assert second[column].tolist() == first[column].tolist()
    # The same messages, but for the fences' markers: each request is fenced afresh, and its
    # key in the cache is the same whatever its marker.
    assert [_sent(m) for m in second["messages"]] == [_sent(m) for m in first["messages"]]
    assert [_exact(m) for m in second["messages"]] != [_exact(m) for m in first["messages"]]


def test_the_table_is_typed_described_and_reads_in_pandas_and_duckdb(tmp_path: Path) -> None:
    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=_items(2),
            output_dir=tmp_path / "run",
            transcripts=True,
        )
    )
    path = result.tables["transcripts"]

    schema = pq.read_schema(path)
    assert schema.names == TRANSCRIPTS_SCHEMA.names
    for field in schema:
        assert (field.metadata or {}).get(b"description"), field.name
    frame = pd.read_parquet(path)
    assert str(frame["attempt"].dtype) == "Int32"
    assert str(frame["cached"].dtype) == "boolean"
    rows = duckdb.sql(
        f"SELECT item_id, step, messages[1].role AS first_role, len(messages) AS n, "
        f"json_extract_string(verdict, '$.reason') AS reason FROM '{path}' "
        "ORDER BY item_id, request"
    ).fetchall()
    assert [(r[1], r[2], r[3]) for r in rows[:3]] == [
        ("preprocess", "system", 2),
        ("analyze", "system", 2),
        ("reason", "system", 2),
    ]
    items = pd.read_parquet(result.tables["items"]).set_index("item_id")
    for item_id, step, _, _, reason in rows:
        if step == "reason":
            assert reason == items.loc[item_id, "reason"]


def test_a_setting_that_is_not_a_bool_is_refused() -> None:
    with pytest.raises(ConfigError, match="transcripts must be True or False, got 'yes'"):
        RunOptions.of(None, {"transcripts": "yes"})


def test_a_key_in_the_environment_or_the_data_never_reaches_the_transcripts(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # The server echoes the request's Authorization header into its scripted reply, and one
    # item's text quotes the key itself: both are scrubbed, as in every other table.
    chat_server.echo_credentials = True
    chat_server.script(Reply(NOT_JSON + "{echo}"))
    dataset = tmp_path / "docs.jsonl"
    dataset.write_text(
        json.dumps({"id": "leaky", "input": f"The council met. Its key is {SECRET}. It voted."})
        + "\n"
        + json.dumps({"id": "plain", "input": "The bridge opened. It cost 40 million."})
        + "\n"
    )
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        *openai_run(
            chat_server.base_url,
            dataset,
            "runner.transcripts=true",
            "runner.max_items_in_flight=1",
            f"runner.cache_path={tmp_path / 'cache.sqlite'}",
        ),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    # The key was there to leak: sent to the server in the prompt, and echoed back.
    assert any(SECRET in r.text for r in chat_server.requests)
    rows = table(run_dir, "transcripts")
    assert "Bearer ***" in rows[rows["status"] == "invalid"]["reply"].iloc[0]
    leaky = rows[(rows["item_id"] == "leaky") & (rows["step"] == "preprocess")]
    assert any("Its key is ***." in m["content"] for m in leaky["messages"].iloc[0])
    # Scrubbed as the items table scrubs its source.
    assert "Its key is ***." in table(run_dir, "items").set_index("item_id").loc["leaky", "source"]
    assert_nowhere([SECRET], run_dir, completed.stdout, completed.stderr)


def test_after_sigkill_and_resume_each_items_requests_are_in_the_table_once(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # Every item's reason request is the same (the server answers alike): once cached by this
    # warm-up run, each item's reason step is a cache hit, in both parts of the run.
    warm = tmp_path / "warm.jsonl"
    warm.write_text(json.dumps({"id": "w", "input": "The council met. It voted."}) + "\n")
    assert (
        run_app(tmp_path / "warm", *openai_run(chat_server.base_url, warm), env=ENV).returncode == 0
    )
    base = chat_server.arrivals
    # The first request is refused (its item ends in error, journaled, and is tried again on
    # resume: journaled twice); 10 answers in all, then every request is held.
    chat_server.script(Fault(400, "refused once"))
    answered = 10
    chat_server.hold_after(answered)
    dataset = write_dataset(tmp_path / "docs.jsonl", 12)
    overrides = openai_run(
        chat_server.base_url,
        dataset,
        "runner.max_items_in_flight=4",
        "runner.transcripts=true",
    )
    run_dir = tmp_path / "run"
    process = start_app(run_dir, *overrides)
    # Each of the 4 items in flight has its request held at the server: nothing else can move.
    wait_until(
        lambda: chat_server.arrivals == base + answered + 4,
        "four requests held after the answered ones",
        process=process,
    )
    process.send_signal(signal.SIGKILL)
    process.communicate()
    killed_sent = chat_server.arrivals
    chat_server.release()
    wait_until(lambda: len(chat_server.requests) == killed_sent, "all the killed run sent")
    journal = run_dir / "journal.jsonl"
    before = [
        json.loads(line)
        for line in journal.read_text("utf-8").splitlines()
        if line.startswith('{"position":')
    ]
    (errored,) = [record["item_id"] for record in before if record["status"] == "error"]

    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert 1 < len(before) < 12
    rows = table(run_dir, "transcripts")
    # The item that ended in error was journaled twice, its failed request with it: the table
    # has its last entry only.
    again = [line for line in journal.read_text("utf-8").splitlines() if f'"{errored}"' in line]
    assert len(again) == 2
    assert "failed" not in set(rows["status"])
    assert len(rows[rows["item_id"] == errored]) == 3
    # Every item once, each of its three requests once, whichever part made them.
    assert sorted(set(rows["item_id"])) == [f"doc-{i:05d}" for i in range(12)]
    assert not rows.duplicated(["item_id", "trial", "request"]).any()
    assert rows.groupby("item_id")["step"].apply(list).map(tuple).unique().tolist() == [
        ("preprocess", "analyze", "reason")
    ]
    # A row not from the cache is a request the server answered a live process (the killed
    # part's finished items, or the resumed part's); a cached one, a reply one of them stored.
    live = [*range(base, base + answered), *range(killed_sent, len(chat_server.requests))]
    sent = Counter(_sent(chat_server.requests[i].body["messages"]) for i in live)
    fresh = Counter(_sent(m) for m in rows[~rows["cached"]]["messages"])
    assert fresh <= sent
    assert rows[rows["step"] == "reason"]["cached"].all()
    everything = _received(chat_server)
    assert all(everything[_sent(m)] for m in rows[rows["cached"]]["messages"])
    assert len(rows) == 3 * 12


def test_a_merge_of_shards_keeps_each_shards_transcripts_once(tmp_path: Path) -> None:
    quiet = ("runner.progress=false", "dataset.limit=6", "runner.transcripts=true")
    shards = [tmp_path / "shard0", tmp_path / "shard1"]
    for index, shard in enumerate(shards):
        completed = run_app(shard, *quiet, f"runner.shard={index}/2")
        assert completed.returncode == 0, completed.stderr

    merged = summeval_merge(*map(str, shards), "--out", str(tmp_path / "merged"), cwd=tmp_path)

    assert merged.returncode == 0, merged.stderr
    rows = table(tmp_path / "merged", "transcripts")
    parts = pd.concat([table(shard, "transcripts") for shard in shards])
    assert len(rows) == len(parts) == 3 * 6
    assert rows["run_id"].nunique() == 1
    key = ["item_id", "trial", "request"]
    assert not rows.duplicated(key).any()
    mine = rows.set_index(key).sort_index()
    theirs = parts.set_index(key).sort_index()
    assert [_sent(m) for m in mine["messages"]] == [_sent(m) for m in theirs["messages"]]
    assert mine["reply"].tolist() == theirs["reply"].tolist()


def test_in_batch_mode_each_row_is_a_batch_line_as_the_server_received_it(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        *openai_run(
            chat_server.base_url,
            dataset,
            "runner.mode=batch",
            "runner.batch_poll_s=0.02",
            "runner.cache=off",
            "runner.transcripts=true",
        ),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    lines = [r for r in chat_server.requests if r.batch is not None]
    assert lines
    assert len(lines) == len(chat_server.requests)
    rows = table(run_dir, "transcripts")
    assert len(rows) == 3 * 3
    # Requests alike in a round (the reason calls of items judged alike) are one line.
    assert {_sent(m) for m in rows["messages"]} == {_sent(r.body["messages"]) for r in lines}
    by_line = {_sent(r.body["messages"]): r.body for r in lines}
    for _, row in rows.iterrows():
        body = by_line[_sent(row["messages"])]
        assert json.loads(row["settings"]) == {
            k: v for k, v in body.items() if k not in ("model", "messages")
        }
        assert json.loads(row["reply"]) == valid_content(body)
