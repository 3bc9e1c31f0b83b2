"""No item vanishes (issue 16, point 1): a result that cannot be recorded stops the run, loudly,
keeps what was recorded, and a resume finishes it; hook errors and unfinished items are said."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from summeval_runner import (
    FakeJudge,
    ItemResult,
    RunRecordError,
    create_summarization_scorer,
    run_evals,
)
from summeval_runner._rundir import _journal
from tests.app import SAMPLE_ITEMS, run_app, run_process

DATA = [
    {"id": f"d{i}", "input": f"Document {i} says the harbour opened in spring.", "output": "S."}
    for i in range(30)
]
# The same items for an agent to summarize: a target's items carry no output of their own.
INPUTS = [{"id": item["id"], "input": item["input"]} for item in DATA]
IN_FLIGHT = 3
STEPS = 3  # judge requests per item


def counting_judge() -> FakeJudge:
    return FakeJudge(
        preprocess={
            "alignment": [{"claim": "c", "supported": True, "reason": "r"}],
            "questions": ["q1"],
        },
        analyze={"coverage": [{"question": "q1", "answered": True, "reason": "r"}]},
    )


def test_a_result_that_cannot_be_recorded_stops_the_run_and_a_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = counting_judge()
    scorer = create_summarization_scorer(judge)
    run_dir = tmp_path / "run"
    write = _journal.RunWriter.write
    written: list[int] = []
    requests_at_failure: list[int] = []

    def full_disk(self: _journal.RunWriter, record: Any) -> None:
        if len(written) == 4:
            requests_at_failure.append(len(judge.requests))
            raise OSError(errno.ENOSPC, "No space left on device")
        write(self, record)
        written.append(record.position)

    monkeypatch.setattr(_journal.RunWriter, "write", full_disk)
    with pytest.raises(RunRecordError) as raised:
        asyncio.run(
            run_evals(
                scorers=[scorer], data=DATA, output_dir=run_dir, max_items_in_flight=IN_FLIGHT
            )
        )

    assert "could not be recorded" in str(raised.value)
    assert "No space left on device" in str(raised.value)
    # No item starts after the failure; those in flight stop: the judge is not paid for
    # results that cannot be kept.
    assert len(judge.requests) - requests_at_failure[0] <= IN_FLIGHT * STEPS
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert "No space left on device" in manifest["stopped_because"]
    assert manifest["unfinished"] == len(DATA) - 4
    assert manifest["counts"]["total"] == 4  # what was recorded is kept, and counted

    # Space freed: the resume scores the rest, and every item is in the table once.
    monkeypatch.setattr(_journal.RunWriter, "write", write)
    result = asyncio.run(run_evals(scorers=[scorer], data=DATA, output_dir=run_dir, resume=True))
    assert result.passed
    items = pd.read_parquet(run_dir / "items.parquet")
    assert sorted(items.item_id) == sorted(item["id"] for item in DATA)
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_exits_3_with_the_resume_command_and_the_resume_completes(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"

    def small_disk() -> None:
        import resource

        # A file-size limit makes every write past it fail (EFBIG) as a full disk would:
        # a few items fit in the journal, the tables never do.
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    command = [
        sys.executable,
        "-m",
        "summeval_runner",
        f"hydra.run.dir={run_dir}",
        "runner.cache=off",
        "runner.max_items_in_flight=2",
    ]
    failed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=small_disk,
        timeout=180,
        check=False,
    )

    assert failed.returncode == 3, failed.stderr
    assert "File too large" in failed.stderr
    assert (
        f"summeval-run runner.cache=off runner.max_items_in_flight=2 runner.resume={run_dir}"
        in (failed.stderr)
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 3)
    assert "could not be recorded" in manifest["stopped_because"]
    lines = (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)
    recorded = sum(line.startswith(b'{"position":') and line.endswith(b"\n") for line in lines)
    assert 0 < recorded < SAMPLE_ITEMS
    # What is kept and what is not is counted, in the manifest and on the screen.
    assert manifest["counts"]["total"] == recorded
    assert manifest["unfinished"] == SAMPLE_ITEMS - recorded
    assert f"{recorded} items: " in failed.stderr
    assert f"; {SAMPLE_ITEMS - recorded} unfinished; 0 hook errors" in failed.stderr

    resumed = run_process(["summeval-run", *command[3:], f"runner.resume={run_dir}"], cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    items = pd.read_parquet(run_dir / "items.parquet")
    assert len(items) == SAMPLE_ITEMS
    assert items.item_id.is_unique
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


def test_hook_errors_are_counted_in_the_manifest_and_said_at_the_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_hook(result: ItemResult) -> None:
        if result.item_id in {"d1", "d2"}:
            raise RuntimeError("the dashboard is down")

    with caplog.at_level(logging.WARNING, logger="summeval_runner"):
        result = asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer(counting_judge())],
                data=DATA[:5],
                on_item_complete=broken_hook,
                output_dir=tmp_path / "run",
            )
        )

    assert result.hook_errors == 2
    assert result.passed  # a hook is the caller's code: it never fails the measurement
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["hook_errors"] == 2
    assert "2 on_item_complete hook calls raised" in caplog.text


def test_every_run_prints_its_unfinished_items_and_hook_errors(tmp_path: Path) -> None:
    completed = run_app(tmp_path / "run")

    assert completed.returncode == 0, completed.stderr
    assert (
        f"{SAMPLE_ITEMS} items: {SAMPLE_ITEMS} scored, 0 blank summaries (scored 0), "
        "0 unscorable, 0 errors; 0 unfinished; "
        "0 hook errors" in completed.stdout
    )


class StuckOnDocument3:
    """A judge that never answers the preprocess step of Document 3 (a server that accepted
    the request and went silent)."""

    name = "stuck"

    def __init__(self) -> None:
        self.inner = counting_judge()

    async def complete(self, request: Any) -> Any:
        if request.step == "preprocess" and request.payload.source.startswith("Document 3 "):
            await asyncio.Event().wait()
        return await self.inner.complete(request)


def test_every_error_row_says_its_step_and_attempts(tmp_path: Path) -> None:
    class Broken:
        id = "broken"

        async def run(self, *, input: Any, output: Any) -> Any:
            if input.startswith("Document 0 "):
                raise ValueError("cannot score this")
            if input.startswith("Document 1 "):
                return "not a score"
            return 1.0

    def target(text: str) -> str:
        if text.startswith("Document 2 "):
            raise RuntimeError("the agent is down")
        return "S."

    scorers = [Broken(), create_summarization_scorer(StuckOnDocument3())]
    asyncio.run(
        run_evals(target=target, scorers=scorers, data=INPUTS[:3], output_dir=tmp_path / "run")
    )
    # The stuck item alone, so that no other item races its timeout.
    asyncio.run(
        run_evals(
            target=target,
            scorers=scorers,
            data=INPUTS[3:4],
            output_dir=tmp_path / "stuck",
            item_timeout_s=0.5,
        )
    )

    items = pd.concat(
        [pd.read_parquet(tmp_path / name / "items.parquet") for name in ("run", "stuck")]
    )
    errors = items[items.status == "error"]
    # d0, d1: the broken scorer; d2: the target, for both scorers; d3: past its timeout, in
    # the preprocess step, for both scorers (a timeout stops the whole item).
    assert len(errors) == 6
    assert errors.error_step.notna().all()
    assert (errors.error_attempts >= 1).all()
    steps = {(row.item_id, row.scorer_id): row.error_step for row in errors.itertuples()}
    assert steps[("d0", "broken")] == "scorer"
    assert steps[("d1", "broken")] == "scorer"
    assert steps[("d2", "broken")] == steps[("d2", "summarization-scorer")] == "target"
    assert steps[("d3", "summarization-scorer")] == "preprocess"


def test_the_help_states_every_exit_code_the_app_returns(tmp_path: Path) -> None:
    from summeval_runner._cli import _app
    from tests.app import run_command

    completed = run_command(_app.run, ["--help"], cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    codes = [value for name, value in vars(_app).items() if name.startswith("EXIT_")]
    assert 3 in codes
    for code in codes:
        assert re.search(rf"^\s+{code}\s+\S", completed.stdout, re.MULTILINE), code
    assert re.search(r"\b130\b.*\b143\b", completed.stdout)
    assert "outage_timeout_s" in completed.stdout


# --- found by trying to break it ---------------------------------------------------------------

MORE_BAD_INPUT = [
    # A lone surrogate: valid JSON, but no UTF-8 can hold it; found at the check, not when the
    # judged item's record cannot be written (and again at every resume).
    (
        ("dataset.path={dir}/surrogate.jsonl",),
        "{dir}/surrogate.jsonl row 2: field 'input' (dataset.fields.input) holds text that "
        "cannot be written as UTF-8 (a lone surrogate, '\\ud800' at character 6)",
    ),
    (("model.base_url='http://[::1'",), "model: base_url is not a URL (Invalid IPv6 URL)"),
    # What a printed resume command shows of a credential: sent as it is, the judge would
    # refuse it.
    (
        ("model.base_url='http://127.0.0.1:9/v1?key=***'",),
        "holds *** where a credential was redacted",
    ),
    # The agent's endpoint is checked as the judge's is.
    (
        ("target=llm_summarizer", "target.base_url=ftp://agent.example/v1"),
        "base_url must be an http:// or https:// URL (http://localhost:8000/v1), got "
        "'ftp://agent.example/v1'",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), MORE_BAD_INPUT)
def test_more_bad_input_exits_2_before_any_call(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    (tmp_path / "surrogate.jsonl").write_text(
        '{"id": "a", "input": "One."}\n{"id": "b", "input": "Hello \\ud800 there."}\n',
        encoding="utf-8",
    )
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        "model=openai",
        "model.base_url=http://127.0.0.1:9/v1",
        *(override.format(dir=tmp_path) for override in overrides),
        env={"OPENAI_API_KEY": "sk-test-0123456789"},
    )

    assert completed.returncode == 2, completed.stderr
    assert message.format(dir=tmp_path) in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not run_dir.exists()


def test_sys_exit_in_an_agent_or_a_scorer_is_an_item_error_not_the_end_of_the_run() -> None:
    def agent(text: str) -> str:
        if text.startswith("Document 1 "):
            raise SystemExit(0)
        return "S."

    class Quitter:
        id = "quitter"

        async def run(self, *, input: Any, output: Any) -> float:
            if input.startswith("Document 2 "):
                raise SystemExit(0)
            return 1.0

    result = asyncio.run(run_evals(target=agent, scorers=[Quitter()], data=INPUTS[:4]))

    assert (result.counts.total, result.counts.errors) == (4, 2)
    assert not result.passed  # never "completed" with items silently gone
    by_id = {item.item_id: item for item in result.items}
    assert by_id["d1"].error is not None
    assert (by_id["d1"].error.type, by_id["d1"].error.step) == ("SystemExit", "target")
    assert by_id["d2"].error is not None
    assert (by_id["d2"].error.type, by_id["d2"].error.step) == ("SystemExit", "scorer")
