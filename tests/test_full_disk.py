"""A write that fails stops the spending (issue 30, point 1).

The first write that fails in a run directory, of any kind (an item, a traffic line, a source's
questions, the log file), stops the run's judge calls at once: only a request already on its way
is paid for after it. The run ends ``failed`` (``RunRecordError``; ``summeval-run`` exits 3 with
one line naming the cause and the resume command, no traceback), and the resume, once there is
room again, completes it with the tables an uninterrupted run writes, paying again only for what
was in flight.

The disks: a journal whose disk fills at a chosen kind of line (a fake of the file, in this
process: it always runs); a file-size limit (``RLIMIT_FSIZE``, any user on POSIX) on a
``summeval-run`` process; a real tmpfs of a few pages (root only, where mounts are allowed).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from summeval_runner import RunRecordError, create_summarization_scorer, run_evals
from summeval_runner._rundir import _journal
from summeval_runner._rundir._failed_writes import RunLogHandler
from summeval_runner._runner._cache import ResponseCache
from tests.app import ENV, _process_env, openai_run, run_app
from tests.chat_server import ChatServer
from tests.documents import write_dataset

ITEMS = 24
IN_FLIGHT = 4
# An item asks its judge one request at a time (claims, then answers, then reasons), per judge
# and trial: one judge and one trial here.
REQUESTS_PER_ITEM_IN_FLIGHT = 1
STEPS = 3
# What may be sent after the first failed write: the requests already in flight.
IN_FLIGHT_BOUND = IN_FLIGHT * REQUESTS_PER_ITEM_IN_FLIGHT
# What a resume may pay again without a cache: every request of the items left unfinished.
REPAID_BOUND = IN_FLIGHT * STEPS
OPTIONS = {"max_items_in_flight": IN_FLIGHT, "cache": "off", "progress": False}
# Columns that differ between any two runs of the same config: the run's id and the clock.
VOLATILE = ("run_id", "judge_latency_s", "target_latency_s")
TABLES = ("items", "alignment", "coverage", "aggregates", "questions")
NO_SPACE = "No space left on device"


def data() -> list[dict[str, str]]:
    return [
        {
            "id": f"doc-{i:03d}",
            "input": f"Document {i}: the harbour reopened in spring, after {i} weeks of work.",
            "output": f"The harbour reopened after {i} weeks.",
        }
        for i in range(ITEMS)
    ]


def scorer(server: ChatServer) -> Any:
    return create_summarization_scorer(
        {"provider": "openai", "name": "gpt-4o-mini", "base_url": server.base_url}
    )


def rows(run_dir: Path, name: str, volatile: tuple[str, ...] = VOLATILE) -> list[dict[str, Any]]:
    """A table read with pyarrow, less the columns that differ between any two runs."""
    table = pq.read_table(run_dir / f"{name}.parquet")
    return table.drop_columns([c for c in volatile if c in table.column_names]).to_pylist()


# What a resume answered from the response cache changes in the tables: what its items paid.
CACHE_CHANGES = (
    *VOLATILE,
    "judge_cost",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "judge_calls_reused",
    "origin",
)


def assert_same_tables(resumed: Path, whole: Path, volatile: tuple[str, ...] = VOLATILE) -> None:
    for name in TABLES:
        if name == "questions":
            # In the order each source's set was first drawn, which concurrency decides.
            def order(row: dict[str, Any]) -> tuple[Any, ...]:
                return (row["judge"], row["source_sha256"], row["position"])

            got, expected = rows(resumed, name, volatile), rows(whole, name, volatile)
            assert sorted(got, key=order) == sorted(expected, key=order)
        else:
            got, expected = rows(resumed, name, volatile), rows(whole, name, volatile)
            assert len(got) == len(expected), name
            for row, like in zip(got, expected, strict=True):
                differ = {key: (row[key], like[key]) for key in row if row[key] != like[key]}
                assert not differ, f"{name}: {differ}"


def journaled_requests(run_dir: Path) -> int:
    """The requests the journal's last whole traffic line counted: every request sent before
    the first failed write (nothing is journaled after it)."""
    counted = 0
    for line in (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True):
        if line.startswith(b'{"traffic":') and line.endswith(b"\n"):
            counted = json.loads(line)["traffic"].get("requests", 0)
    return counted


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return loaded


class SmallDisk:
    """A journal file whose disk fills at the first line of ``kind`` written past ``room``
    bytes: that line lands in part, as write(2) leaves it, and it and every later write fail
    with ENOSPC."""

    def __init__(self, file: Any, room: int, kind: bytes) -> None:
        self._file = file
        self.room = room
        self.kind = kind
        self.full = False

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        if not self.full and (len(data) <= self.room or not self._is_kind(data)):
            self.room -= len(data)
            return int(self._file.write(text))
        if not self.full:
            self.full = True
            self._file.write(data[: len(data) // 2].decode("utf-8", errors="ignore"))
            self._file.flush()
        raise OSError(errno.ENOSPC, NO_SPACE)

    def _is_kind(self, data: bytes) -> bool:
        return data.startswith(self.kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


@contextlib.contextmanager
def small_disk(room: int, kind: bytes) -> Iterator[list[SmallDisk]]:
    """Every journal opened meanwhile is on a disk with ``room`` bytes left."""
    opened: list[SmallDisk] = []
    original = _journal.RunWriter.__init__

    def on_small_disk(self: _journal.RunWriter, run_dir: Path, *, resume: bool = False) -> None:
        original(self, run_dir, resume=resume)
        disk = SmallDisk(self._journal, room, kind)
        opened.append(disk)
        self._journal = disk  # type: ignore[assignment]

    _journal.RunWriter.__init__ = on_small_disk  # type: ignore[method-assign]
    try:
        yield opened
    finally:
        _journal.RunWriter.__init__ = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def judge_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])


@pytest.fixture
def whole(tmp_path: Path, chat_server: ChatServer) -> tuple[Path, int]:
    """The run made without a failure, and the requests it paid for."""
    run_dir = tmp_path / "whole"
    result = asyncio.run(
        run_evals(scorers=[scorer(chat_server)], data=data(), output_dir=run_dir, **OPTIONS)
    )
    assert result.passed
    return run_dir, len(chat_server.requests)


@pytest.mark.parametrize(
    "kind",
    [b'{"position":', b'{"traffic":', b'{"questions":'],
    ids=["item line", "traffic line", "questions line"],
)
def test_the_first_failed_write_of_the_journal_stops_every_request_and_the_resume_completes(
    tmp_path: Path, chat_server: ChatServer, whole: tuple[Path, int], kind: bytes
) -> None:
    whole_dir, whole_paid = whole
    room = (whole_dir / "journal.jsonl").stat().st_size // 2
    run_dir = tmp_path / "run"
    start = len(chat_server.requests)

    with small_disk(room, kind) as disks, pytest.raises(RunRecordError) as raised:
        asyncio.run(
            run_evals(scorers=[scorer(chat_server)], data=data(), output_dir=run_dir, **OPTIONS)
        )

    assert disks[0].full
    sent = len(chat_server.requests) - start
    counted = journaled_requests(run_dir)
    # Nothing was sent after the first failed write: every call, waiting for its turn or about
    # to go out (the one whose own traffic line failed), was cancelled before it was sent.
    assert sent == counted
    assert NO_SPACE in str(raised.value)
    assert raised.value.manifest is not None
    assert raised.value.manifest_written
    ended = manifest(run_dir)
    assert ended["status"] == "failed"
    assert NO_SPACE in ended["stopped_because"]
    assert ended["judge"]["requests"] == sent  # counted as sent, exactly
    # The journal ends in the line cut short; what it held before is counted, and kept.
    journal = (run_dir / "journal.jsonl").read_bytes()
    assert not journal.endswith(b"\n")
    lines = journal.splitlines(keepends=True)
    kept = sum(line.startswith(b'{"position":') and line.endswith(b"\n") for line in lines)
    assert 0 < kept < ITEMS
    assert ended["counts"]["total"] == kept
    assert ended["unfinished"] == ITEMS - kept

    # Room again: the resume scores the rest, and the run is the one an uninterrupted run is.
    resumed = asyncio.run(
        run_evals(
            scorers=[scorer(chat_server)], data=data(), output_dir=run_dir, resume=True, **OPTIONS
        )
    )

    assert resumed.passed
    assert manifest(run_dir)["status"] == "completed"
    assert_same_tables(run_dir, whole_dir)
    paid = len(chat_server.requests) - start
    assert paid <= whole_paid + REPAID_BOUND
    assert manifest(run_dir)["judge"]["requests"] == paid  # both parts, none lost or doubled


class FailingStream:
    """A log file's stream whose disk fills after ``lines`` lines."""

    def __init__(self, stream: Any, lines: int) -> None:
        self._stream = stream
        self.lines = lines

    def write(self, text: str) -> int:
        if self.lines <= 0:
            raise OSError(errno.ENOSPC, NO_SPACE)
        self.lines -= text.count("\n")
        return int(self._stream.write(text))

    def flush(self) -> None:
        if self.lines <= 0:
            raise OSError(errno.ENOSPC, NO_SPACE)
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def test_a_log_file_that_cannot_be_written_says_so_once_and_stops_the_run(
    tmp_path: Path,
    chat_server: ChatServer,
    whole: tuple[Path, int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    whole_dir, whole_paid = whole
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    handler = RunLogHandler(str(run_dir / "run.log"))
    handler.stream = FailingStream(handler.stream, lines=3)  # type: ignore[assignment]
    handler.setLevel(logging.INFO)
    library = logging.getLogger("summeval_runner")
    library.addHandler(handler)
    level = library.level
    library.setLevel(logging.INFO)
    app_log = logging.getLogger("summeval_runner.my_dashboard")
    start = len(chat_server.requests)

    def hook(result: Any) -> None:
        # What a user's hook logs as each item completes (an INFO line in the run's log).
        app_log.info("item %s scored %s", result.item_id, result.status)

    try:
        with pytest.raises(RunRecordError) as raised:
            asyncio.run(
                run_evals(
                    scorers=[scorer(chat_server)],
                    data=data(),
                    output_dir=run_dir,
                    on_item_complete=hook,
                    **OPTIONS,
                )
            )
        app_log.info("a line after the failure is not attempted")
    finally:
        library.removeHandler(handler)
        library.setLevel(level)
        handler.close()

    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert "Logging error" not in stderr
    said = [line for line in stderr.splitlines() if "run.log" in line]
    assert said == [
        f"the log file {run_dir / 'run.log'} could not be written (OSError: [Errno 28] "
        f"{NO_SPACE}); nothing more is logged to it"
    ]
    assert f"the log file {run_dir / 'run.log'} could not be written" in str(raised.value)
    sent = len(chat_server.requests) - start
    # The failure came in a hook, once its item was journaled: nothing was sent after it.
    assert sent - journaled_requests(run_dir) <= IN_FLIGHT_BOUND
    assert manifest(run_dir)["status"] == "failed"

    resumed = asyncio.run(
        run_evals(
            scorers=[scorer(chat_server)], data=data(), output_dir=run_dir, resume=True, **OPTIONS
        )
    )
    assert resumed.passed
    assert_same_tables(run_dir, whole_dir)
    assert len(chat_server.requests) - start <= whole_paid + REPAID_BOUND


def app_overrides(server: ChatServer, dataset: Path, cache: str = "off") -> tuple[str, ...]:
    return openai_run(
        server.base_url, dataset, f"runner.max_items_in_flight={IN_FLIGHT}", f"runner.cache={cache}"
    )


def one_clear_failure(stderr: str, run_dir: Path, cause: str) -> None:
    """What a full disk shows: no traceback, one line naming the cause, the resume command."""
    assert "Traceback" not in stderr, stderr
    assert "Logging error" not in stderr, stderr
    failures = [line for line in stderr.splitlines() if line.startswith("summeval-run: failed:")]
    assert len(failures) == 1, stderr
    assert cause in failures[0]
    assert any(
        line.startswith("  summeval-run ") and line.endswith(f"runner.resume={run_dir}")
        for line in stderr.splitlines()
    ), stderr


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_summeval_run_under_a_file_size_limit_exits_3_at_once_and_its_resume_completes(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    overrides = app_overrides(chat_server, dataset)
    whole = run_app(tmp_path / "whole", *overrides, env=ENV)
    assert whole.returncode == 0, whole.stderr
    whole_paid = len(chat_server.requests)
    # Every file the run writes may grow to half the journal of the whole run: the journal
    # reaches it half way through.
    limit = (tmp_path / "whole" / "journal.jsonl").stat().st_size // 2
    run_dir = tmp_path / "run"

    def small_files() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    failed = subprocess.run(
        [sys.executable, "-m", "summeval_runner", f"hydra.run.dir={run_dir}", *overrides],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_process_env(ENV),
        preexec_fn=small_files,
        timeout=120,
        check=False,
    )

    assert failed.returncode == 3, failed.stderr
    one_clear_failure(failed.stderr, run_dir, "File too large")
    sent = len(chat_server.requests) - whole_paid
    assert sent - journaled_requests(run_dir) <= IN_FLIGHT_BOUND
    ended = manifest(run_dir)
    assert (ended["status"], ended["exit_code"]) == ("failed", 3)
    assert "File too large" in ended["stopped_because"]

    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)

    assert resumed.returncode == 0, resumed.stderr
    assert manifest(run_dir)["status"] == "completed"
    assert_same_tables(run_dir, tmp_path / "whole")
    assert len(chat_server.requests) - whole_paid <= whole_paid + REPAID_BOUND


def _tmpfs(mount_point: Path, size: int) -> str | None:
    """Mount a tmpfs of ``size`` bytes; why not, where it cannot be."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "mounting a tmpfs needs root on Linux"
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if done.returncode == 0 else f"mount refused: {done.stderr.strip()}"


def _pages(path: Path) -> int:
    """What a file takes on a tmpfs: whole pages."""
    return -(-path.stat().st_size // 4096) * 4096


def test_summeval_run_on_a_full_tmpfs_stops_and_its_resume_pays_only_for_what_was_in_flight(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    overrides = app_overrides(chat_server, dataset)
    whole_dir = tmp_path / "whole"
    whole = run_app(whole_dir, *overrides, env=ENV)
    assert whole.returncode == 0, whole.stderr
    whole_paid = len(chat_server.requests)
    # Room for what a run writes first (Hydra's files, the manifest), and half its journal.
    first = [*whole_dir.joinpath(".hydra").iterdir(), whole_dir / "manifest.json"]
    size = sum(_pages(path) for path in first) + _pages(whole_dir / "journal.jsonl") // 2
    disk = tmp_path / "disk"
    refused = _tmpfs(disk, size)
    if refused is not None:
        pytest.skip(refused)
    try:
        run_dir = disk / "run"
        # With the response cache on (outside the full disk), what the items in flight had
        # asked before the failure is not paid for again.
        cached = (
            *app_overrides(chat_server, dataset, cache="readwrite"),
            f"runner.cache_path={tmp_path / 'cache.sqlite'}",
        )

        failed = run_app(run_dir, *cached, env=ENV)

        assert failed.returncode == 3, failed.stderr
        one_clear_failure(failed.stderr, run_dir, NO_SPACE)
        # The log file on the same disk: said once, if it was written after the disk filled.
        assert failed.stderr.count("summeval-run.log could not be written") <= 1
        sent = len(chat_server.requests) - whole_paid
        assert sent - journaled_requests(run_dir) <= IN_FLIGHT_BOUND

        subprocess.run(["mount", "-o", f"remount,size={64 << 20}", str(disk)], check=True)
        resumed = run_app(run_dir, *cached, f"runner.resume={run_dir}", env=ENV)

        assert resumed.returncode == 0, resumed.stderr
        assert manifest(run_dir)["status"] == "completed"
        # What the cache changes, as documented: an item's judge_cost and tokens are what this
        # run paid for it (0 for a reply from the cache, counted in judge_calls_reused), and a
        # source's questions the resume found there are "stored" rather than "drawn" (the same
        # questions).
        assert_same_tables(run_dir, whole_dir, volatile=CACHE_CHANGES)
        assert len(chat_server.requests) - whole_paid <= whole_paid + IN_FLIGHT_BOUND
    finally:
        subprocess.run(["umount", str(disk)], check=False)


class FullCacheDisk:
    """A cache database whose disk fills after ``room`` stores: every later one fails, as
    sqlite says of a full disk."""

    def __init__(self, db: sqlite3.Connection, room: int) -> None:
        self._db = db
        self.room = room

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().startswith(("INSERT", "UPDATE")):
            if self.room <= 0:
                raise sqlite3.OperationalError("database or disk is full")
            self.room -= 1
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_response_cache_kept_in_the_run_directory_that_fills_stops_the_run(
    tmp_path: Path,
    chat_server: ChatServer,
    whole: tuple[Path, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    whole_dir, whole_paid = whole
    run_dir = tmp_path / "run"
    connect = ResponseCache._connect
    monkeypatch.setattr(
        ResponseCache, "_connect", lambda self: FullCacheDisk(connect(self), room=ITEMS)
    )
    cached = {**OPTIONS, "cache": "readwrite", "cache_path": run_dir / "cache.sqlite"}
    start = len(chat_server.requests)

    with pytest.raises(RunRecordError) as raised:
        asyncio.run(
            run_evals(scorers=[scorer(chat_server)], data=data(), output_dir=run_dir, **cached)
        )

    assert f"the response cache {run_dir / 'cache.sqlite'} could not be written" in str(
        raised.value
    )
    assert "database or disk is full" in str(raised.value)
    sent = len(chat_server.requests) - start
    # The store follows a reply: no request was on its way for the item that failed it.
    assert sent - journaled_requests(run_dir) <= 1
    assert sent < whole_paid
    assert manifest(run_dir)["status"] == "failed"

    monkeypatch.setattr(ResponseCache, "_connect", connect)
    resumed = asyncio.run(
        run_evals(
            scorers=[scorer(chat_server)], data=data(), output_dir=run_dir, resume=True, **cached
        )
    )
    assert resumed.passed
    assert_same_tables(run_dir, whole_dir, volatile=CACHE_CHANGES)


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_disk_full_before_the_first_item_is_a_run_record_error_with_no_call(
    tmp_path: Path,
) -> None:
    script = (
        "import asyncio, resource, sys\n"
        "from summeval_runner import FakeJudge, RunRecordError, create_summarization_scorer\n"
        "from summeval_runner import run_evals\n"
        "judge = FakeJudge()\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))\n"
        "try:\n"
        "    asyncio.run(run_evals(scorers=[create_summarization_scorer(judge)],\n"
        "        data=[{'id': 'a', 'input': 'The dam opened.', 'output': 'It opened.'}],\n"
        f"        output_dir={str(tmp_path / 'run')!r}))\n"
        "except RunRecordError as error:\n"
        "    print(f'RunRecordError: {error}; requests: {len(judge.requests)}')\n"
    )

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"RunRecordError: the manifest could not be written in {tmp_path / 'run'}" in (
        done.stdout
    )
    assert "File too large; requests: 0" in done.stdout


def test_a_log_line_that_fails_in_an_agents_thread_stops_the_run_on_its_loop(
    tmp_path: Path, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    handler = RunLogHandler(str(run_dir / "run.log"))
    handler.stream = FailingStream(handler.stream, lines=2)  # type: ignore[assignment]
    agent_log = logging.getLogger("my_agent")
    agent_log.addHandler(handler)
    agent_log.setLevel(logging.INFO)
    threads: set[str] = set()

    def summarize(text: str) -> str:
        # A sync agent: the runner calls it in a worker thread, where its log line is written.
        import threading

        threads.add(threading.current_thread().name)
        agent_log.info("summarizing %d characters", len(text))
        return text.split(":")[0]

    inputs = [{"id": item["id"], "input": item["input"]} for item in data()]
    try:
        with pytest.raises(RunRecordError) as raised:
            asyncio.run(
                run_evals(
                    scorers=[scorer(chat_server)],
                    data=inputs,
                    target=summarize,
                    output_dir=run_dir,
                    **OPTIONS,
                )
            )
    finally:
        agent_log.removeHandler(handler)
        handler.close()

    assert "MainThread" not in threads
    assert f"the log file {run_dir / 'run.log'} could not be written" in str(raised.value)
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr
    assert stderr.count("could not be written") == 1
    ended = manifest(run_dir)
    assert ended["status"] == "failed"
    assert ended["unfinished"] > 0
