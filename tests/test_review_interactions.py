"""Where the features merged side by side meet: a panel of judges in batch mode resumed, a
merged run of shards compared, and the other crossings a reviewer found broken.

Each test is a case that failed on the merge of the panel, flags, full-disk, bounds and
Anthropic branches, and names what a user would have seen.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from tests.app import ENV, run_app, start_app
from tests.chat_server import ChatServer
from tests.documents import write_dataset
from tests.test_batch_mode import BATCH, journal_batches, twice
from tests.test_panel import openai_entry, panel_run


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def test_a_batch_mode_panel_killed_with_batches_out_resumes_counting_each_batch_once(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # Two judges of one provider: each journals its own batches. On resume every judge read
    # every batch of the journal, and counted the tokens and cost of each batch out at the
    # kill once per judge (the manifest said 1.6 x the tokens the server served).
    dataset = write_dataset(tmp_path / "docs.jsonl", 5)
    entries = (openai_entry(chat_server), openai_entry(chat_server, "gpt-4.1"))
    overrides = (*panel_run(dataset, *entries), *BATCH, "runner.cache=off")
    run_dir = tmp_path / "run"
    chat_server.hold_batches()
    process = start_app(run_dir, *overrides)
    try:
        # Killed once each judge's first batch is out and journaled (a condition, not a delay).
        deadline = time.monotonic() + 120
        while not (run_dir / "journal.jsonl").exists() or len(journal_batches(run_dir)) < 2:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no batch was journaled"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()
    chat_server.release_batches()

    resumed = run_app(run_dir, *overrides, f"runner.resume={run_dir}", env=ENV)

    assert resumed.returncode == 0, resumed.stderr
    ended = manifest(run_dir)
    assert ended["counts"]["scored"] == 5
    assert twice(chat_server) == 0
    served = [i for i, r in enumerate(chat_server.requests) if r.batch is not None]
    assert ended["tokens"]["input"] == sum(chat_server.usage[i][0] for i in served)
    assert ended["tokens"]["output"] == sum(chat_server.usage[i][1] for i in served)
    assert ended["judge"]["requests"] == len(chat_server.batch_lines)
    # Each batch ended once in the journal, by the judge that made it.
    records = journal_batches(run_dir)
    ends = [record["id"] for record in records if record["state"] == "ended"]
    assert len(ends) == len(set(ends))
    made_by = {record["id"]: record.get("judge") for record in records}
    assert set(made_by.values()) == {"openai/gpt-4.1-mini", "openai/gpt-4.1"}
