"""The sync twins of the async API: the same typed parameters, and Ctrl-C ends a run as a
cancelled run ends (its state written, resumable) before ``KeyboardInterrupt`` reaches the
caller."""

from __future__ import annotations

import inspect
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import summeval_runner
from summeval_runner._rundir._journal import journaled_statuses
from tests.waiting import wait_until

SCRIPT = """
import asyncio, sys
from pathlib import Path
from summeval_runner import create_summarization_scorer, run_evals_sync

gate, out, resume = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "resume"

async def target(text):
    # The first item passes; the others wait at the gate, which the test opens only to resume.
    while not text.startswith("Item 0.") and not gate.exists():
        await asyncio.sleep(0.01)
    return text

data = [{"id": f"d{i}", "input": f"Item {i}. The council approved a budget of {i} million."}
        for i in range(10)]
result = run_evals_sync(data=data, scorers=[create_summarization_scorer("offline")],
                        target=target, output_dir=out, resume=resume, max_items_in_flight=3)
print(result.status, result.counts.scored)
"""


@pytest.mark.parametrize(
    ("twin", "function"),
    [
        ("run_evals_sync", "run_evals"),
        ("estimate_evals_sync", "estimate_evals"),
        ("judge_agreement_sync", "judge_agreement"),
    ],
)
def test_each_sync_twin_takes_its_async_functions_parameters(twin: str, function: str) -> None:
    synced = getattr(summeval_runner, twin)
    original = getattr(summeval_runner, function)

    assert inspect.signature(synced).parameters == inspect.signature(original).parameters
    assert synced.__name__ == twin
    assert f"``{function}`` for callers without a running event loop" in (synced.__doc__ or "")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child needs POSIX signals")
def test_ctrl_c_in_run_evals_sync_writes_the_run_interrupted_and_it_resumes(
    tmp_path: Path,
) -> None:
    script, gate, out = tmp_path / "night.py", tmp_path / "gate", tmp_path / "run"
    script.write_text(SCRIPT, encoding="utf-8")
    command = [sys.executable, str(script), str(gate), str(out)]
    process = subprocess.Popen(
        [*command, "fresh"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_until(
        lambda: (out / "journal.jsonl").exists() and "d0" in journaled_statuses(out),
        "the first item journaled",
        process=process,
    )

    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == -signal.SIGINT, stderr
    assert stderr.rstrip().endswith("KeyboardInterrupt")
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    assert (manifest["status"], manifest["unfinished"]) == ("interrupted", 9)

    gate.touch()
    resumed = subprocess.run(
        [*command, "resume"], capture_output=True, text=True, timeout=120, check=False
    )

    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == ["completed", "10"]
