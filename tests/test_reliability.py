"""Never lose work, never hammer the API: faults, retries, the cache, resume, interrupts.

Every test runs the real app against the loopback server, through the openai SDK: in this
process, or in a subprocess where a signal or a second process is the point. A run that is to
be stopped in the middle is held there by the server (``hold_after``), never caught by timing.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest

from summeval_runner._rundir._journal import RunWriter
from tests.app import ENV, Completed, openai_run, run_app, start_app, summeval_cache, table
from tests.chat_server import ChatServer, Fault, FaultMix, unfenced
from tests.documents import write_dataset
from tests.prestarted import PrestartedApp
from tests.waiting import wait_until


def journal_lines(run_dir: Path) -> int:
    """The items journaled (whole lines; traffic lines are not items)."""
    journal = run_dir / "journal.jsonl"
    if not journal.exists():
        return 0
    return sum(
        line.startswith('{"position":') for line in journal.read_text("utf-8").split("\n")[:-1]
    )


def wait_for_items(run_dir: Path, count: int, process: PrestartedApp) -> None:
    wait_until(lambda: journal_lines(run_dir) >= count, f"{count} items journaled", process=process)


def start_held_run(
    tmp_path: Path,
    server: ChatServer,
    *,
    items: int,
    in_flight: int,
    finished: int,
    extra: tuple[str, ...] = (),
) -> tuple[tuple[str, ...], Path, PrestartedApp]:
    """Start a run in a subprocess and return once ``finished`` items are journaled, with the
    server holding every later request: the run cannot finish until ``server.release()``.
    Returns the overrides that made it, its directory, and its process (still running)."""
    # Enough answers for `finished` items, whichever items in flight they went to.
    server.hold_after(3 * finished + 2 * in_flight)
    dataset = write_dataset(tmp_path / "docs.jsonl", items)
    overrides = openai_run(
        server.base_url, dataset, f"runner.max_items_in_flight={in_flight}", *extra
    )
    run_dir = tmp_path / "run"
    process = start_app(run_dir, *overrides)
    wait_for_items(run_dir, finished, process)
    return overrides, run_dir, process


def comparable(run_dir: Path, name: str) -> pd.DataFrame:
    """A table without what legitimately differs between two runs: run ids and timings."""
    frame = table(run_dir, name)
    drop = [c for c in frame.columns if c == "run_id" or c.endswith("latency_s")]
    return frame.drop(columns=drop).reset_index(drop=True)


def test_every_item_ends_scored_through_500s_malformed_replies_and_429_storms(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.mix = FaultMix(
        seed=7, server_errors=0.1, malformed=0.1, storm_every_s=1.0, storm_s=0.2
    )
    dataset = write_dataset(tmp_path / "docs.jsonl", 120)

    completed = run_app(
        tmp_path / "run",
        *openai_run(
            chat_server.base_url, dataset, "runner.retry.max_attempts=10", "runner.cache=off"
        ),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    items = table(tmp_path / "run", "items")
    assert len(items) == 120
    assert set(items["status"]) == {"scored"}
    # The faults happened, and the run rode them out.
    assert chat_server.counts["500"] >= 20
    assert chat_server.counts["429"] >= 3  # how many depends on the run's pace
    assert chat_server.counts["malformed"] >= 10
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text("utf-8"))
    assert manifest["judge"]["retries"] == chat_server.counts["500"] + chat_server.counts["429"]
    assert manifest["judge"]["throttled_429"] == chat_server.counts["429"]
    assert items["judge_retries"].sum() == manifest["judge"]["retries"]  # each retry, per item
    # A malformed reply was re-asked: that step made two calls.
    assert (items["judge_calls"] > 3).sum() >= 10


def test_hanging_requests_and_dropped_connections_are_retried(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.mix = FaultMix(seed=3, hangs=0.05, drops=0.05, hang_s=3.0)
    dataset = write_dataset(tmp_path / "docs.jsonl", 30)

    completed = run_app(
        tmp_path / "run",
        *openai_run(
            chat_server.base_url, dataset, "runner.request_timeout_s=0.5", "runner.cache=off"
        ),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    assert set(table(tmp_path / "run", "items")["status"]) == {"scored"}
    assert chat_server.counts["hang"] >= 1
    assert chat_server.counts["drop"] >= 1


def test_retries_give_up_in_the_end_and_the_error_is_data(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.fail_every_request(Fault(503, "overloaded"))
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    completed = run_app(
        tmp_path / "run",
        *openai_run(chat_server.base_url, dataset, "runner.retry.max_attempts=3"),
        env=ENV,
    )

    assert completed.returncode == 1  # above runner.max_error_rate, which is 0
    items = table(tmp_path / "run", "items")
    assert items["status"].tolist() == ["error", "error"]
    assert items["score"].isna().all()  # an error is never a score of 0
    assert items["error_type"].tolist() == ["JudgeAPIError"] * 2
    assert items["error_attempts"].tolist() == [3, 3]
    assert items["judge_retries"].tolist() == [2, 2]
    assert items["error_message"].str.contains("HTTP 503").all()
    assert len(chat_server.requests) == 6


@pytest.mark.parametrize("status", [400, 404])
def test_a_request_the_server_rejects_is_never_retried(
    tmp_path: Path, chat_server: ChatServer, status: int
) -> None:
    chat_server.fail_every_request(Fault(status, "bad request"))
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)

    completed = run_app(tmp_path / "run", *openai_run(chat_server.base_url, dataset), env=ENV)

    assert completed.returncode == 1
    assert len(chat_server.requests) == 2  # one per item
    assert table(tmp_path / "run", "items")["error_attempts"].tolist() == [1, 1]


def test_an_oversized_input_is_an_item_error_found_before_the_call(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = tmp_path / "docs.jsonl"
    long_text = "The council met again to discuss the budget. " * 400
    dataset.write_text(
        json.dumps({"id": "long", "input": long_text})
        + "\n"
        + json.dumps({"id": "short", "input": "The council met. The budget passed."})
        + "\n",
        encoding="utf-8",
    )

    completed = run_app(
        tmp_path / "run",
        *openai_run(
            chat_server.base_url,
            dataset,
            "model.max_input_tokens=2000",
            "runner.max_error_rate=0.5",
        ),
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    items = table(tmp_path / "run", "items").set_index("item_id")
    assert items.loc["short", "status"] == "scored"
    assert items.loc["long", "status"] == "error"
    assert items.loc["long", "error_type"] == "JudgeInputTooLargeError"
    assert "more than the judge's max_input_tokens (2000)" in items.loc["long", "error_message"]
    assert items.loc["long", "error_attempts"] == 1
    assert all("council met again" not in r.text for r in chat_server.requests)


def test_the_servers_context_length_error_is_an_item_error_and_not_retried(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.fail_every_request(
        Fault(400, "This model's maximum context length is 8192 tokens", "context_length_exceeded")
    )
    dataset = write_dataset(tmp_path / "docs.jsonl", 1)

    run_app(tmp_path / "run", *openai_run(chat_server.base_url, dataset), env=ENV)

    items = table(tmp_path / "run", "items")
    assert items["error_type"].tolist() == ["JudgeInputTooLargeError"]
    assert len(chat_server.requests) == 1


def first_hits(run_dir: Path) -> int:
    hits: int = json.loads((run_dir / "manifest.json").read_text("utf-8"))["judge"]["cache"]["hits"]
    return hits


def test_the_second_run_of_a_config_sends_no_request(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 12)
    first = run_app(tmp_path / "first", *openai_run(chat_server.base_url, dataset), env=ENV)
    sent = len(chat_server.requests)

    second = run_app(tmp_path / "second", *openai_run(chat_server.base_url, dataset), env=ENV)

    assert first.returncode == second.returncode == 0, second.stderr
    assert sent > 0
    assert len(chat_server.requests) == sent
    # The same rows, but what they cost: the first run's calls at the price table's price for
    # the default model (gpt-4o-mini), the second's answered by the cache (nothing paid: no
    # token billed, every call reused).
    before, after = (comparable(tmp_path / name, "items") for name in ("first", "second"))
    assert (before.pop("judge_cost") > 0).all()
    assert (after.pop("judge_cost") == 0.0).all()
    billed = json.loads((tmp_path / "first" / "manifest.json").read_text("utf-8"))["tokens"]
    for column in ("input_tokens", "output_tokens"):
        assert before.pop(column).sum() == billed[column.removesuffix("_tokens")]
        assert (after.pop(column) == 0).all()
    # The first run's own hits (an item's step alike another's) were reused there already.
    assert before.pop("judge_calls_reused").sum() == first_hits(tmp_path / "first")
    assert (after.pop("judge_calls_reused") == after["judge_calls"]).all()
    pd.testing.assert_frame_equal(before, after)
    manifest = json.loads((tmp_path / "second" / "manifest.json").read_text("utf-8"))
    assert manifest["judge"]["requests"] == 0
    assert manifest["judge"]["cache"]["hits"] == 36


def test_the_cache_keys_on_the_judge_and_can_be_turned_off(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    run_app(tmp_path / "a", *openai_run(chat_server.base_url, dataset), env=ENV)
    sent = len(chat_server.requests)

    run_app(tmp_path / "b", *openai_run(chat_server.base_url, dataset, "model.name=other"), env=ENV)
    changed_model = len(chat_server.requests) - sent
    run_app(tmp_path / "c", *openai_run(chat_server.base_url, dataset, "runner.cache=off"), env=ENV)
    cache_off = len(chat_server.requests) - sent - changed_model

    assert changed_model > 0
    # Every call of both items goes out again, though run "a" cached them all. (Run "a" itself
    # may send 5 or 6: the two items' reason requests can be identical, and the second is a
    # cache hit only when the first has been answered by then.)
    assert sent <= 3 * 2
    assert cache_off == 3 * 2


def test_errors_are_never_cached(tmp_path: Path, chat_server: ChatServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 1)
    chat_server.fail_every_request(Fault(500, "down"))
    run_app(
        tmp_path / "a",
        *openai_run(chat_server.base_url, dataset, "runner.retry.max_attempts=1"),
        env=ENV,
    )
    chat_server.fail_every_request(None)
    before = len(chat_server.requests)

    completed = run_app(tmp_path / "b", *openai_run(chat_server.base_url, dataset), env=ENV)

    assert completed.returncode == 0
    assert len(chat_server.requests) - before == 3
    assert table(tmp_path / "b", "items")["status"].tolist() == ["scored"]


def test_summeval_cache_reports_and_clears_the_cache(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    run_app(tmp_path / "a", *openai_run(chat_server.base_url, dataset), env=ENV)

    def cache(*args: str) -> Completed:
        return summeval_cache(*args, cwd=tmp_path)

    info = cache("info")
    cleared = cache("clear")
    after = cache("info")

    # One entry per distinct request (both items' reason steps asked the same), but for the
    # fences' markers, fresh per request and no part of the cache key.
    distinct = len({unfenced(json.dumps(r.body, sort_keys=True)) for r in chat_server.requests})
    assert info.returncode == 0, info.stderr
    assert f"entries: {distinct}" in info.stdout
    assert os.environ["SUMMEVAL_CACHE_DIR"] in info.stdout
    assert f"removed {distinct} entries" in cleared.stdout
    assert "entries: 0" in after.stdout


def test_a_run_killed_at_any_moment_resumes_to_the_same_tables(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    overrides, killed, process = start_held_run(
        tmp_path, chat_server, items=40, in_flight=4, finished=12, extra=("runner.cache=off",)
    )
    dataset = tmp_path / "docs.jsonl"
    process.send_signal(signal.SIGKILL)
    process.communicate()
    chat_server.release()
    # Whole lines only: the kill may have cut the last one short.
    whole_lines = (killed / "journal.jsonl").read_text("utf-8").split("\n")[:-1]
    done = {json.loads(line)["item_id"] for line in whole_lines if '"item_id"' in line}
    before = len(chat_server.requests)

    resumed = run_app(killed, *overrides, f"runner.resume={killed}", env=ENV)

    assert resumed.returncode == 0, resumed.stderr
    after_kill = chat_server.requests[before:]
    texts = dataset.read_text("utf-8").splitlines()
    done_texts = [json.loads(line)["input"] for line in texts if json.loads(line)["id"] in done]
    assert len(done) >= 12
    assert not [r for r in after_kill if any(text in r.text for text in done_texts)]
    # The same run made in one go gives the same tables.
    whole = tmp_path / "whole"
    assert run_app(whole, *overrides, env=ENV).returncode == 0
    for name in ("items", "alignment", "coverage", "aggregates"):
        pd.testing.assert_frame_equal(comparable(killed, name), comparable(whole, name))
    manifest = json.loads((killed / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "completed"
    (resumption,) = manifest["resumptions"]
    assert resumption["items_kept"] == len(done)
    assert resumption["items_to_score"] == 40 - len(done)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_writes_everything_reports_the_unfinished_and_resumes(
    tmp_path: Path, chat_server: ChatServer, signum: signal.Signals, code: int
) -> None:
    overrides, run_dir, process = start_held_run(
        tmp_path, chat_server, items=30, in_flight=2, finished=3
    )

    process.send_signal(signum)
    # The items in flight, held by the server until now, finish within the grace period.
    chat_server.release()
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == code
    finished = len(table(run_dir, "items"))
    assert 3 <= finished < 30
    assert f"interrupted: {30 - finished} of 30 items unfinished" in stderr
    assert f"runner.resume={run_dir}" in stderr
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    assert (manifest["status"], manifest["unfinished"]) == ("interrupted", 30 - finished)

    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)

    assert resumed.returncode == 0, resumed.stderr
    assert "30 items: 30 scored" in resumed.stdout
    assert table(run_dir, "items")["item_id"].tolist() == [f"doc-{i:05d}" for i in range(30)]


def test_a_second_ctrl_c_exits_at_once_and_the_run_still_resumes(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    overrides, run_dir, process = start_held_run(
        tmp_path, chat_server, items=20, in_flight=4, finished=1
    )

    process.send_signal(signal.SIGINT)
    # The second comes once the first is handled (the app says so), while the items in flight
    # are still held by the server: only exiting at once ends the run now.
    wait_until(
        lambda: "SIGINT received" in process.stderr_so_far(),
        "the run says it received the signal",
        process=process,
    )
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    chat_server.release()

    assert process.returncode == 130
    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)
    assert resumed.returncode == 0, resumed.stderr
    assert "20 items: 20 scored" in resumed.stdout


def test_resume_refuses_a_changed_config(tmp_path: Path, chat_server: ChatServer) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 2)
    run_dir = tmp_path / "run"
    run_app(run_dir, *openai_run(chat_server.base_url, dataset), env=ENV)

    changed = run_app(
        tmp_path / "other",
        *openai_run(chat_server.base_url, dataset, "scorer.max_questions=3"),
        f"runner.resume={run_dir}",
        env=ENV,
    )
    missing = run_app(tmp_path / "x", "runner.resume=/nonexistent/run")

    assert changed.returncode == 2
    assert "scorer.max_questions was 10, now 3" in changed.stderr
    assert missing.returncode == 2
    assert "/nonexistent/run is not a run directory" in missing.stderr


def test_processes_running_at_once_share_the_cache_safely(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.latency_s = 0.01
    dataset = write_dataset(tmp_path / "docs.jsonl", 30)
    overrides = openai_run(chat_server.base_url, dataset)
    processes = [start_app(tmp_path / f"run{index}", *overrides) for index in range(3)]
    outputs = [process.communicate(timeout=120) for process in processes]
    sent = len(chat_server.requests)

    rerun = run_app(tmp_path / "rerun", *overrides, env=ENV)

    assert [process.returncode for process in processes] == [0, 0, 0], outputs
    assert not any("cache" in stderr for _, stderr in outputs)  # no lock or write warnings
    # Every distinct request was sent at least once (a reply one process stored may serve another).
    assert sent >= len({json.dumps(r.body, sort_keys=True) for r in chat_server.requests}) > 30
    assert rerun.returncode == 0
    assert len(chat_server.requests) == sent


def test_a_run_still_being_written_cannot_be_resumed_alongside(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)
    overrides = openai_run(chat_server.base_url, dataset)
    run_dir = tmp_path / "run"
    assert run_app(run_dir, *overrides, env=ENV).returncode == 0
    journal_before = (run_dir / "journal.jsonl").read_bytes()
    manifest_before = (run_dir / "manifest.json").read_bytes()
    # Another writer holds the run directory, as a summeval-run still running it does.
    still_running = RunWriter(run_dir, resume=True)
    try:
        second = run_app(tmp_path / "other", *overrides, f"runner.resume={run_dir}", env=ENV)
    finally:
        still_running.close()

    assert second.returncode == 2
    assert f"{run_dir} is being written by another summeval-run" in second.stderr
    # The refused resume wrote nothing into the run.
    assert (run_dir / "journal.jsonl").read_bytes() == journal_before
    assert (run_dir / "manifest.json").read_bytes() == manifest_before
