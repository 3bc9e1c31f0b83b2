"""Recovery edges: a killed run's traffic counted, a damaged journal line, a damaged cache file.

A run killed with SIGKILL is resumed and its manifest compared with what the loopback server
itself received; a journal and a cache file are damaged on disk as a crash, a bad disk or a
person would leave them. Runs that must be stopped in the middle are held there by the server
(``hold_after``), never caught by timing.
"""

from __future__ import annotations

import json
import logging
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from summeval_runner._judges._protocol import JudgeReply, TokenUsage
from summeval_runner._rundir._journal import (
    PartTraffic,
    RunWriter,
    journal_records,
    journaled_statuses,
)
from summeval_runner._rundir._rows import ItemRecord
from summeval_runner._runner._cache import ResponseCache
from summeval_runner._scorers._outcome import ItemResult
from tests.app import ENV, openai_run, run_app, start_app, table
from tests.chat_server import ChatServer, Fault
from tests.documents import write_dataset
from tests.waiting import wait_until

ITEM_LINE = '{"position":'


def manifest_of(run_dir: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return loaded


def test_after_sigkill_and_resume_the_manifest_counts_what_the_server_received(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # The server's replies are the same for every item, so every item's reason request is the
    # same: once cached (by this warm-up run), each item makes exactly one cache hit there.
    warm = tmp_path / "warm.jsonl"
    warm.write_text(json.dumps({"id": "w", "input": "The council met. It voted."}) + "\n")
    assert (
        run_app(tmp_path / "warm", *openai_run(chat_server.base_url, warm), env=ENV).returncode == 0
    )
    base = chat_server.arrivals
    # A 429 and a 500 first (each retried), then 12 answers, then every request is held.
    chat_server.script(
        Fault(429, "Rate limit reached", headers={"retry-after-ms": "10"}), Fault(500, "oops")
    )
    answered = 12
    chat_server.hold_after(answered)
    dataset = write_dataset(tmp_path / "docs.jsonl", 20)
    overrides = openai_run(
        chat_server.base_url,
        dataset,
        "runner.max_items_in_flight=4",
        "runner.max_judge_requests_in_flight=8",
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
    # The held requests are answered, to a process that is gone.
    wait_until(lambda: len(chat_server.requests) == killed_sent, "all the killed run sent")
    held = chat_server.requests[base + answered : killed_sent]
    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    manifest = manifest_of(run_dir)
    judge, tokens = manifest["judge"], manifest["tokens"]
    assert isinstance(judge, dict)
    assert isinstance(tokens, dict)
    # Every request either process sent, the 4 the kill left in flight included.
    assert judge["requests"] == len(chat_server.requests) - base
    assert judge["retries"] == 2
    assert judge["throttled_429"] == 1
    # The tokens of every reply a live process received (none for the faults).
    received = [*range(base, base + answered), *range(killed_sent, len(chat_server.requests))]
    usage = [chat_server.usage[i] for i in received if i in chat_server.usage]
    assert tokens == {
        "input": sum(u[0] for u in usage),
        "output": sum(u[1] for u in usage),
        "reasoning": 0,  # not a reasoning model
    }
    # Each item's reason step was a hit, and so was the preprocess step of an item killed
    # while its analyze request was held (its preprocess reply had been stored).
    assert judge["cache"]["hits"] == 20 + sum(r.step == "analyze" for r in held)
    assert judge["cache"]["stored"] == len(usage)
    # The killed part's seconds of work count too: the manifest's duration is both parts'.
    lines = (run_dir / "journal.jsonl").read_text("utf-8").splitlines()
    last: dict[str, float] = {}
    for line in lines:
        if line.startswith('{"traffic":'):
            traffic = json.loads(line)["traffic"]
            last[traffic["part"]] = traffic["elapsed_s"]
    assert len(last) == 2
    assert all(seconds > 0 for seconds in last.values())
    assert manifest["duration_s"] == pytest.approx(sum(last.values()), abs=0.002)
    assert table(run_dir, "items")["item_id"].tolist() == [f"doc-{i:05d}" for i in range(20)]


def test_a_damaged_line_in_the_middle_of_the_journal_is_named_skipped_and_scored_again(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    overrides = ("runner.progress=false", "runner.cache=off")
    assert run_app(run_dir, *overrides).returncode == 0
    every_id = table(run_dir, "items")["item_id"].tolist()
    journal = run_dir / "journal.jsonl"
    lines = journal.read_text("utf-8").splitlines(keepends=True)
    items = [number for number, line in enumerate(lines) if line.startswith(ITEM_LINE)]
    # As a kill leaves it: the last five items never written ...
    lines = lines[: items[-5]]
    # ... and two lines in the middle damaged on disk: an item's line garbled after its head,
    # and a line of bytes that are not JSON at all.
    garbled = items[3]
    garbled_id = json.loads(lines[garbled])["item_id"]
    lines[garbled] = lines[garbled][:80] + "\x00\x00\x00\n"
    lines.insert(items[6], "\x00\x00 not a line of this journal\n")
    journal.write_text("".join(lines), encoding="utf-8")

    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}")

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    output = resumed.stdout + resumed.stderr
    assert "Traceback" not in output
    assert f"{journal} line {garbled + 1} is damaged and was skipped" in output
    assert f"{journal} line {items[6] + 1} is damaged and was skipped" in output
    items_table = table(run_dir, "items")
    assert items_table["item_id"].tolist() == every_id  # each item once, in dataset order
    assert set(items_table["status"]) == {"scored"}
    manifest = manifest_of(run_dir)
    assert manifest["status"] == "completed"
    (resumption,) = manifest["resumptions"]  # type: ignore[misc]
    # The garbled item was not kept: it was scored again, with the five never written.
    assert resumption["items_to_score"] == 6
    assert garbled_id in every_id


def _record(item_id: str, position: int) -> ItemRecord:
    class Scored:
        status = "scored"
        reason = "ok"
        score = 0.5

    result = ItemResult(
        item_id=item_id,
        input="src",
        output="sum",
        metadata={},
        results={"s": Scored()},
        error=None,
        target_latency_s=0.1,
    )
    return ItemRecord.of(result, position)


def test_every_reader_of_the_journal_skips_traffic_lines_and_names_damaged_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = RunWriter(tmp_path)
    writer.write_traffic(PartTraffic(part="p1", elapsed_s=0.5, requests=3))
    for position, item_id in enumerate("abc"):
        writer.write(_record(item_id, position))
    writer.close()
    journal = tmp_path / "journal.jsonl"
    lines = journal.read_text("utf-8").splitlines(keepends=True)
    lines[2] = "{garbage\n"  # item "b"'s line
    journal.write_text("".join(lines), encoding="utf-8")

    with caplog.at_level(logging.WARNING, logger="summeval_runner"):
        statuses = journaled_statuses(tmp_path)
        merged = [record.item_id for record in journal_records(journal)]
        resumed = RunWriter(tmp_path, resume=True)
        contents = resumed.contents()
        try:
            compacted = resumed.compact(run_id="r", variant="v")
        finally:
            resumed.close()

    assert statuses == {"a": "scored", "c": "scored"}
    assert merged == ["a", "c"]
    assert contents.parts["p1"].requests == 3
    assert contents.damaged_lines == (3,)
    assert pd.read_parquet(compacted.tables["items"])["item_id"].tolist() == ["a", "c"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all(f"{journal} line 3 is damaged and was skipped" in w for w in warnings)
    # Once for each reader, and once only for one writer's reads (resume, then compaction).
    assert len(warnings) == 3


DAMAGES = ("not a database", "truncated", "another table")


def _damage(cache: Path, damage: str, make: Callable[[], None]) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    if damage == "not a database":
        cache.write_bytes(b"\x13\x37 these bytes are no sqlite file \xff\xfe" * 200)
    elif damage == "truncated":
        make()  # a real cache, filled by a run, then cut short
        data = cache.read_bytes()
        assert len(data) > 4096
        cache.write_bytes(data[: len(data) // 2])
    else:
        with sqlite3.connect(cache) as db:
            db.execute("CREATE TABLE replies (key TEXT PRIMARY KEY, answer TEXT)")
        db.close()


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_cache_file_is_moved_aside_and_the_run_goes_on_with_a_fresh_cache(
    tmp_path: Path, chat_server: ChatServer, damage: str
) -> None:
    cache = tmp_path / "cache" / "judge-cache.sqlite"
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    overrides = openai_run(chat_server.base_url, dataset, f"runner.cache_path={cache}")
    _damage(cache, damage, lambda: run_app(tmp_path / "first", *overrides, env=ENV))
    damaged = cache.read_bytes()

    completed = run_app(tmp_path / "run", *overrides, env=ENV)

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert set(table(tmp_path / "run", "items")["status"]) == {"scored"}
    (aside,) = cache.parent.glob("judge-cache.sqlite.corrupt-*")
    assert aside.read_bytes() == damaged  # kept as it was, for whoever wants to look
    output = completed.stdout + completed.stderr
    assert f"judge cache {cache} is not a usable cache" in output
    assert f"it was moved to {aside} and a fresh cache is used" in output
    # The fresh cache took the replies: the same run again sends no request.
    sent = len(chat_server.requests)
    again = run_app(tmp_path / "again", *overrides, env=ENV)
    assert again.returncode == 0
    assert len(chat_server.requests) == sent
    assert "not a usable cache" not in again.stdout + again.stderr


def _reply() -> JudgeReply:
    return JudgeReply(content='{"reason": "ok"}', usage=TokenUsage(input_tokens=3))


def test_damage_found_in_the_middle_of_a_run_turns_the_cache_off_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "judge-cache.sqlite"
    cache = ResponseCache(path)
    for index in range(300):
        cache.put(f"key-{index}", _reply(), "judge")
    cache.close()
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    # The schema (the first page) is whole, so the file opens; every other page is garbage.
    data[page:] = b"\xa5" * (len(data) - page)
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING, logger="summeval_runner"):
        damaged = ResponseCache(path)
        first = damaged.get("key-7")
        second = damaged.get("key-8")
        stored = damaged.put("key-new", _reply(), "judge")
        damaged.close()

    assert (first, second, stored) == (None, None, False)
    assert not damaged.usable
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (warning,) = warnings
    (aside,) = tmp_path.glob("judge-cache.sqlite.corrupt-*")
    assert f"judge cache {path} could not be read" in warning
    assert str(aside) in warning
    assert not path.exists()  # the next run starts a fresh cache


def test_a_busy_cache_is_never_moved_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "judge-cache.sqlite"
    ResponseCache(path).close()
    # Another process is writing: it holds the database's write lock throughout.
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(
        "INSERT INTO replies (key, content, input_tokens, output_tokens, judge, created) "
        "VALUES ('theirs', 'c', 1, 1, 'judge', 0)"
    )
    try:
        with caplog.at_level(logging.WARNING, logger="summeval_runner"):
            cache = ResponseCache(path, busy_timeout_s=0.05)
            stored = [cache.put(f"mine-{i}", _reply(), "judge") for i in range(3)]
            cache.close()
        holder.execute("COMMIT")
    finally:
        holder.close()

    assert stored == [False, False, False]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not be written" in warning
    assert "moved" not in warning
    assert not list(tmp_path.glob("*.corrupt-*"))
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT key FROM replies").fetchall() == [("theirs",)]
    db.close()
