"""The Batch API mode (runner.mode=batch): each round of judge calls as one OpenAI batch,
against the loopback server's /v1/files and /v1/batches, expiry and failed lines included; a run
killed while a batch is out resumes by reading that batch, paying nothing twice."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.app import ENV, openai_run, run_app, start_app, table
from tests.chat_server import ChatServer, Fault
from tests.documents import write_dataset

PRICED = "model.price={input:2.5,output:10}"
BATCH = ("runner.mode=batch", "runner.batch_poll_s=0.02")


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def journal_batches(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["batch"] for line in lines if line.startswith('{"batch":')]


def twice(server: ChatServer) -> int:
    """Lines sent in more than one batch (a request paid for more than once)."""
    return sum(count - 1 for count in Counter(server.batch_lines).values())


def test_each_round_of_calls_is_one_batch_at_the_batch_price(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    overrides = (*openai_run(chat_server.base_url, dataset), PRICED, "runner.cache=off")

    interactive = run_app(tmp_path / "interactive", *overrides, env=ENV)
    direct = len(chat_server.requests)
    batched = run_app(tmp_path / "batched", *overrides, *BATCH, env=ENV)

    assert interactive.returncode == 0, interactive.stderr
    assert batched.returncode == 0, batched.stderr
    # Nothing went to chat/completions directly: three rounds (claims and questions, answers,
    # reasons), one batch each.
    assert all(request.batch is not None for request in chat_server.requests[direct:])
    assert len(chat_server.batches) == 3
    assert twice(chat_server) == 0
    steps = [[r.step for r in chat_server.requests if r.batch == b] for b in chat_server.batches]
    assert [set(round_) for round_ in steps] == [{"preprocess"}, {"analyze"}, {"reason"}]
    # The same replies, the same scores; at half the price.
    assert table(tmp_path / "batched", "items")["score"].tolist() == (
        table(tmp_path / "interactive", "items")["score"].tolist()
    )
    # Each line at half the price of its tokens (requests alike in a round, the reason calls of
    # items judged alike, are one line).
    lines = [i for i, r in enumerate(chat_server.requests) if r.batch is not None]
    assert len(lines) <= direct
    full = sum((chat_server.usage[i][0] * 2.5 + chat_server.usage[i][1] * 10) / 1e6 for i in lines)
    assert manifest(tmp_path / "batched")["cost"]["judge"] == pytest.approx(full / 2)
    assert manifest(tmp_path / "batched")["judge"]["requests"] == len(chat_server.batch_lines)
    recorded = journal_batches(tmp_path / "batched")
    assert [b["state"] for b in recorded] == ["submitted", "ended"] * 3
    assert {b["id"] for b in recorded} == set(chat_server.batches)


def test_a_run_killed_while_a_batch_is_out_resumes_by_reading_it_paying_nothing_twice(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 5)
    overrides = (*openai_run(chat_server.base_url, dataset), *BATCH)
    run_dir = tmp_path / "run"
    chat_server.hold_batches()

    process = start_app(run_dir, *overrides)
    try:
        # Killed once its first batch is out and journaled (a condition, not a delay).
        deadline = time.monotonic() + 120
        while not (run_dir / "journal.jsonl").exists() or not journal_batches(run_dir):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no batch was journaled"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    (first,) = chat_server.batches
    reads_before = chat_server.batch_reads[first]
    chat_server.release_batches()

    # An interactive resume would send the batch's requests again, paying twice: refused
    # before anything is sent or written.
    written = (run_dir / "manifest.json").read_bytes()
    sent = len(chat_server.requests)
    interactive = run_app(
        run_dir,
        *overrides,
        "runner.mode=interactive",
        f"runner.resume={run_dir}",
        env=ENV,
    )
    assert interactive.returncode == 2, interactive.stderr
    assert f"batch(es) out at its judge's Batch API ({first})" in interactive.stderr
    assert "runner.mode=batch" in interactive.stderr
    assert len(chat_server.requests) == sent
    assert (run_dir / "manifest.json").read_bytes() == written

    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)

    assert resumed.returncode == 0, resumed.stderr
    assert manifest(run_dir)["counts"]["scored"] == 5
    # The resumed run read the batch the killed one had sent, and sent its requests no more.
    assert chat_server.batch_reads[first] > reads_before
    assert twice(chat_server) == 0
    assert chat_server.batches[first]["request_counts"]["completed"] == 5
    assert all(request.batch is not None for request in chat_server.requests)


def test_a_failed_line_is_retried_in_a_later_batch_and_a_refused_one_is_an_item_error(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    # The first batch's first line fails (HTTP 500), its second is refused (HTTP 400).
    chat_server.script(Fault(500, "The server had an error"), Fault(400, "Invalid request"))

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset),
        *BATCH,
        "runner.max_error_rate=0.5",
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    items = table(tmp_path / "run", "items")
    assert (items["status"] == "scored").sum() == 3
    (error,) = items[items["status"] == "error"].to_dict("records")
    assert error["error_step"] == "preprocess"
    assert "HTTP 400" in error["error_message"]
    assert "Invalid request" in error["error_message"]
    assert twice(chat_server) == 1  # the 500 was sent again; the 400 was not
    assert manifest(tmp_path / "run")["judge"]["retries"] == 1


def test_an_expired_batchs_unanswered_lines_go_in_the_next_batch(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    chat_server.expire_next_batch(after=1)

    completed = run_app(
        tmp_path / "run", *openai_run(chat_server.base_url, dataset), *BATCH, env=ENV
    )

    assert completed.returncode == 0, completed.stderr
    assert manifest(tmp_path / "run")["counts"]["scored"] == 4
    first = next(iter(chat_server.batches.values()))
    assert first["status"] == "expired"
    assert first["request_counts"] == {"total": 4, "completed": 1, "failed": 3}
    assert twice(chat_server) == 3  # exactly the three it did not reach


def test_a_results_file_that_cannot_be_read_for_a_while_is_read_again_not_sent_again(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    overrides = (*openai_run(chat_server.base_url, dataset), PRICED, *BATCH)
    # The first batch's results file answers 503 three times before it is served.
    chat_server.fail_next_batch_reads(3, status=503, under="/v1/files/")

    completed = run_app(tmp_path / "run", *overrides, env=ENV)

    assert completed.returncode == 0, completed.stderr
    assert "a batch could not be read" in completed.stdout + completed.stderr
    assert manifest(tmp_path / "run")["counts"]["scored"] == 3
    # Each line sent once and paid once: the cost is the batch price of what was sent.
    assert twice(chat_server) == 0
    assert len(chat_server.batches) == 3
    lines = [i for i, r in enumerate(chat_server.requests) if r.batch is not None]
    paid = sum((chat_server.usage[i][0] * 2.5 + chat_server.usage[i][1] * 10) / 1e6 for i in lines)
    assert manifest(tmp_path / "run")["cost"]["judge"] == pytest.approx(paid / 2)


def test_a_batch_made_though_its_creation_failed_is_followed_not_sent_again(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    # The first batch is made, and the answer to its creation lost (a 502).
    chat_server.lose_next_batch_creations(1)

    completed = run_app(
        tmp_path / "run", *openai_run(chat_server.base_url, dataset), PRICED, *BATCH, env=ENV
    )

    assert completed.returncode == 0, completed.stderr
    assert "was made though its creation failed" in completed.stdout + completed.stderr
    assert manifest(tmp_path / "run")["counts"]["scored"] == 3
    # The lost batch was found by its round's tag and read: no line of it was sent again.
    assert twice(chat_server) == 0
    assert len(chat_server.batches) == 3
    assert {b["id"] for b in journal_batches(tmp_path / "run")} == set(chat_server.batches)


def test_a_server_without_a_batch_api_stops_the_run_before_any_judge_call(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    chat_server.batch_api = False  # a local server: 404 on /v1/files

    stopped = run_app(tmp_path / "run", *openai_run(chat_server.base_url, dataset), *BATCH, env=ENV)

    assert stopped.returncode == 1, stopped.stderr
    assert "has no Batch API (HTTP 404" in stopped.stderr
    assert "runner.mode=interactive" in stopped.stderr
    assert chat_server.requests == []
    assert manifest(tmp_path / "run")["counts"]["scored"] == 0


def test_batch_mode_needs_a_judge_with_a_batch_api(tmp_path: Path) -> None:
    refused = run_app(tmp_path / "run", "runner.mode=batch", "runner.progress=false")

    assert refused.returncode == 2
    assert "judge offline has none" in refused.stderr
    assert "(model=openai, anthropic or google)" in refused.stderr
    assert not (tmp_path / "run").exists()
