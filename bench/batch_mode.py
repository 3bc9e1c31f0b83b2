"""Batch mode's request counts: what a run sends through the Batch API, against interactive.

Runs the real ``summeval-run`` (a subprocess: Hydra, the OpenAI provider with the official SDK,
the journal, the tables) on N items (``bench/throughput.py``'s: a 250-word source and a 60-word
summary each, all distinct) against the test suite's loopback server (``tests/chat_server.py``,
which serves ``/v1/chat/completions``, ``/v1/files`` and ``/v1/batches`` in this process),
answering as ``bench/loopback_judge.py`` does (a careful model's replies), with ``model.price``
set and a fresh response cache per run (so a request two items make alike is paid once in both
modes):

- interactive: the requests sent and the judge's cost;
- batch (``runner.mode=batch``): the batches made, their lines (requests), lines per item, and
  the judge's cost against the interactive run's;
- killed and resumed: a batch run killed (SIGKILL) once its first batch is out, then resumed:
  the batches and lines of both parts, and how many lines were sent more than once (paid twice).

    python bench/batch_mode.py                 # 1,000 items
    python bench/batch_mode.py --items 200
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from loopback_judge import reply_for  # noqa: E402
from throughput import write_items  # noqa: E402

import tests.chat_server  # noqa: E402
from tests.chat_server import ChatServer  # noqa: E402


def careful_reply(body: dict[str, Any], questions_follow_summary: bool = False) -> dict[str, Any]:
    return reply_for(body)


# The loopback server answers as a careful model would (each reply its own), not with its
# fixed test replies.
tests.chat_server.valid_content = careful_reply

PRICE = "model.price={input:2.5,output:10}"


def command(run_dir: Path, dataset: Path, base_url: str, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "summeval_runner",
        f"hydra.run.dir={run_dir}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "dataset.fields.output=summary",
        "target=precomputed",
        "model=openai",
        f"model.base_url={base_url}",
        PRICE,
        f"runner.cache_path={run_dir.parent / (run_dir.name + '-cache.sqlite')}",
        "runner.progress=false",
        *overrides,
    ]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return env | {"OPENAI_API_KEY": "sk-bench-not-a-real-key"}


def run(run_dir: Path, dataset: Path, base_url: str, *overrides: str) -> dict[str, Any]:
    completed = subprocess.run(
        command(run_dir, dataset, base_url, *overrides),
        capture_output=True,
        text=True,
        env=environment(),
        check=False,
    )
    if completed.returncode != 0:
        sys.exit(f"{run_dir.name}: exit {completed.returncode}\n{completed.stderr}")
    manifest: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return manifest


def twice(lines: list[str]) -> int:
    return sum(count - 1 for count in Counter(lines).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args()
    n = args.items
    batch = ("runner.mode=batch", "runner.batch_poll_s=0.2")
    with tempfile.TemporaryDirectory(prefix="summeval-batch-") as folder:
        work = Path(folder)
        dataset = write_items(work / "items.jsonl", n)

        server = ChatServer().start()
        try:
            interactive = run(work / "interactive", dataset, server.base_url)
            requests = len(server.requests)
        finally:
            server.stop()

        server = ChatServer().start()
        try:
            batched = run(work / "batched", dataset, server.base_url, *batch)
            batches, lines = len(server.batches), list(server.batch_lines)
            direct = sum(request.batch is None for request in server.requests)
        finally:
            server.stop()

        server = ChatServer().start()
        try:
            run_dir = work / "killed"
            server.hold_batches()
            process = subprocess.Popen(
                command(run_dir, dataset, server.base_url, *batch),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=environment(),
            )
            journal = run_dir / "journal.jsonl"
            while not journal.exists() or b'{"batch":' not in journal.read_bytes():
                if process.poll() is not None:
                    sys.exit("the run ended before its first batch was journaled")
                time.sleep(0.1)
            process.send_signal(signal.SIGKILL)
            process.wait()
            killed_batches = len(server.batches)
            server.release_batches()
            resumed = run(run_dir, dataset, server.base_url, *batch, f"runner.resume={run_dir}")
            resumed_lines = list(server.batch_lines)
        finally:
            server.stop()

    cost_i, cost_b = interactive["cost"]["judge"], batched["cost"]["judge"]
    print(f"{n} items, model.price input 2.50 / output 10.00 USD per million tokens")
    print(f"  interactive   {requests} requests ({requests / n:.3f}/item), judge ${cost_i:.4f}")
    print(
        f"  batch         {batches} batches, {len(lines)} lines ({len(lines) / n:.3f}/item), "
        f"{direct} requests outside a batch, {twice(lines)} lines sent twice, judge "
        f"${cost_b:.4f} = {cost_b / cost_i:.2f} x interactive"
    )
    print(
        f"  killed        SIGKILL with {killed_batches} batch out; resumed: "
        f"{len(server.batches)} batches in all, {len(resumed_lines)} lines "
        f"({len(resumed_lines) / n:.3f}/item), {twice(resumed_lines)} sent twice; "
        f"{resumed['counts']['scored']} of {n} scored"
    )


if __name__ == "__main__":
    main()
