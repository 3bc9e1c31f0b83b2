"""Batch mode's numbers under every kill (issue 44 point 1): a run killed the moment a batch was
made (before its journal knew it), while a batch was out, and after a batch ended but before its
results were read, then resumed to its end, says what the server billed: every request and
token counted once, by the judge that made the batch, whatever order the provider lists its
batches in; and its items' token columns add up to that bill.

The judges are the real ``openai`` SDK against the loopback server's Files and Batch APIs
(tests/chat_server.py), which holds each moment until the test has killed the run: nothing waits
on the clock. The server lists its batches oldest first and holds another run's old batch, as a
provider with a long history does.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.app import ENV, openai_run, run_app, start_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset
from tests.test_batch_mode import BATCH, manifest, twice
from tests.test_panel import openai_entry, panel_run
from tests.waiting import wait_until

ITEMS = 6
PRICED = "model.price={input:2.5,output:10}"


def billed(server: ChatServer) -> tuple[int, int]:
    """The input and output tokens of every batch line the server answered."""
    served = [i for i, r in enumerate(server.requests) if r.batch is not None]
    return sum(server.usage[i][0] for i in served), sum(server.usage[i][1] for i in served)


def killed(process: Any, server: ChatServer, reached: Any, what: str) -> None:
    """Kill the run once ``reached`` holds (the server holding it at that moment)."""
    try:
        wait_until(reached, what, process=process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
        server.release_all()


def run_overrides(server: ChatServer, dataset: Path, judges: str) -> tuple[str, ...]:
    if judges == "one":
        return (*openai_run(server.base_url, dataset), PRICED, *BATCH, "runner.cache=off")
    entries = (openai_entry(server), openai_entry(server, "gpt-4.1"))
    return (*panel_run(dataset, *entries), *BATCH, "runner.cache=off")


@pytest.mark.parametrize("judges", ["one", "panel"])
def test_a_run_killed_at_each_moment_of_a_batch_counts_what_the_server_billed(
    tmp_path: Path, chat_server: ChatServer, judges: str
) -> None:
    chat_server.list_oldest_first = True
    chat_server.add_foreign_batch(created_at=int(time.time()) - 30 * 86400)
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    overrides = run_overrides(chat_server, dataset, judges)
    run_dir = tmp_path / "run"
    resume = (f"runner.resume={run_dir}",)

    # 1. Killed once a batch is made and before its creation is answered: not journaled.
    chat_server.hold_batch_creations()
    process = start_app(run_dir, *overrides)
    killed(process, chat_server, lambda: chat_server.creations_held >= 1, "a batch made")
    made = set(chat_server.batches)
    # 2. Resumed (the batch found by its tag, read, counted), and killed with its next batch out.
    chat_server.hold_new_batches()
    process = start_app(run_dir, *overrides, *resume)
    killed(
        process,
        chat_server,
        lambda: any(chat_server.batch_reads[b] for b in set(chat_server.batches) - made),
        "a new batch out and polled",
    )
    made = set(chat_server.batches)
    # 3. Resumed, and killed once its next batch has ended at the server, results unread.
    chat_server.hold_new_results()
    process = start_app(run_dir, *overrides, *resume)
    killed(process, chat_server, lambda: chat_server.results_held >= 1, "a batch's results asked")

    finished = run_app(run_dir, *overrides, *resume, env=ENV)

    assert finished.returncode == 0, finished.stderr
    ended = manifest(run_dir)
    assert ended["counts"]["scored"] == ITEMS
    # Nothing paid twice, and every request and token the server billed counted once.
    assert twice(chat_server) == 0
    tokens_in, tokens_out = billed(chat_server)
    assert (ended["tokens"]["input"], ended["tokens"]["output"]) == (tokens_in, tokens_out)
    assert ended["judge"]["requests"] == len(chat_server.batch_lines)
    # The items' columns add up to that bill: a line two items share is counted on one row.
    items = table(run_dir, "items")
    assert (items["input_tokens"].sum(), items["output_tokens"].sum()) == (tokens_in, tokens_out)
    assert items["judge_cost"].sum() == pytest.approx(ended["cost"]["judge"])


def test_a_batch_run_and_its_rerun_from_the_cache_bill_their_rows_alike(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # Before: a line several items shared was on each of their rows (57,874 tokens on the rows,
    # 55,424 billed), and a rerun answered by the cache said its items used tokens it never paid.
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    cache = f"runner.cache_path={tmp_path / 'cache'}"
    overrides = (*openai_run(chat_server.base_url, dataset), PRICED, *BATCH, cache)

    first = run_app(tmp_path / "first", *overrides, env=ENV)
    sent = len(chat_server.requests)
    again = run_app(tmp_path / "again", *overrides, env=ENV)

    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    assert len(chat_server.requests) == sent  # the rerun sent nothing
    rows: dict[str, pd.DataFrame] = {
        name: table(tmp_path / name, "items") for name in ("first", "again")
    }
    for name, items in rows.items():
        bill = manifest(tmp_path / name)
        assert items["input_tokens"].sum() == bill["tokens"]["input"], name
        assert items["output_tokens"].sum() == bill["tokens"]["output"], name
    assert manifest(tmp_path / "first")["tokens"]["input"] == billed(chat_server)[0]
    assert (rows["again"]["judge_calls_reused"] == rows["again"]["judge_calls"]).all()
    assert rows["first"]["judge_calls_reused"].sum() < rows["first"]["judge_calls"].sum()
