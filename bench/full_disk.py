"""What a full disk costs: the judge requests a run sends after its first failed write.

Runs the real ``summeval-run`` (a subprocess: Hydra, the OpenAI provider with the official SDK,
the journal, the log file) on N items (``tests/documents.py``'s) against the test suite's
loopback server (``tests/chat_server.py``, in this process, which counts every request), with
the run directory on a tmpfs of SIZE bytes (root on Linux; elsewhere, or with ``--rlimit``, a
file-size limit of SIZE on the process, ``RLIMIT_FSIZE``, which any user may set), then frees
the space and resumes the run. It prints one JSON line:

- ``requests_after_first_failed_write``: the server's requests less those the journal's last
  whole traffic line counted (nothing is journaled after the first failed write, so that line
  counts every request sent before it); with ``--probe``, the journal's writes are watched in
  the process instead (for a version of the runner that went on journaling after a failure);
- ``exit_code``, ``tracebacks`` and ``logging_errors`` on stderr, the cause printed, the items
  journaled;
- the resume's exit code and requests, and the requests of the whole (both parts) against those
  of an uninterrupted run.

    python bench/full_disk.py                       # 100 items, 300 KB
    python bench/full_disk.py --items 200 --size 400k --cache readwrite
    PYTHONPATH=<another checkout> python bench/full_disk.py --probe   # another version
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.chat_server import ChatServer  # noqa: E402
from tests.documents import write_dataset  # noqa: E402

# Run in the child with --probe: the journal's last traffic count written before its first
# failed write, saved to $FULL_DISK_PROBE.
PROBE = """
import json, os, sys
from summeval_runner._rundir import _journal
state = {"ok": 0, "failed": False}
def watched(name):
    original = getattr(_journal.RunWriter, name)
    def write(self, line, *args, **kwargs):
        try:
            original(self, line, *args, **kwargs)
        except OSError as error:
            if not state["failed"]:
                state["failed"] = True
                with open(os.environ["FULL_DISK_PROBE"], "w") as out:
                    json.dump({"write": name, "requests": state["ok"], "error": str(error)}, out)
            raise
        if name == "write_traffic" and not state["failed"]:
            state["ok"] = line.requests
    setattr(_journal.RunWriter, name, write)
for name in ("write", "write_traffic", "write_questions", "write_batch"):
    watched(name)
from summeval_runner._cli._app import main
sys.argv[0] = "summeval-run"
main()
"""


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20}
    if text[-1].lower() in units:
        return int(float(text[:-1]) * units[text[-1].lower()])
    return int(text)


def journaled(run_dir: Path) -> tuple[int, int]:
    """The items the journal holds whole, and the requests its last whole traffic line counts."""
    items = requests = 0
    journal = run_dir / "journal.jsonl"
    if not journal.exists():
        return 0, 0
    for line in journal.read_bytes().splitlines(keepends=True):
        if not line.endswith(b"\n"):
            continue
        if line.startswith(b'{"position":'):
            items += 1
        elif line.startswith(b'{"traffic":'):
            requests = json.loads(line)["traffic"].get("requests", 0)
    return items, requests


def mount(point: Path, size: int) -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--size", default="300k", help="the tmpfs's size (or the file size limit)")
    parser.add_argument("--cache", default="off", choices=("off", "readwrite"))
    parser.add_argument("--rlimit", action="store_true", help="a file-size limit, not a tmpfs")
    parser.add_argument("--probe", action="store_true", help="watch the journal's writes")
    args = parser.parse_args()
    size = parse_size(args.size)
    server = ChatServer().start()
    work = Path(tempfile.mkdtemp(prefix="full-disk-"))
    disk = work / "disk"
    tmpfs = not args.rlimit and mount(disk, size)
    try:
        dataset = write_dataset(work / "docs.jsonl", args.items)
        env = dict(os.environ, OPENAI_API_KEY="sk-bench", FULL_DISK_PROBE=str(work / "probe"))
        overrides = [
            "model=openai",
            f"model.base_url={server.base_url}",
            f"dataset.path={dataset}",
            "dataset.fields.metadata=[]",
            "runner.progress=false",
        ]
        cached = (f"runner.cache={args.cache}", f"runner.cache_path={work / 'cache.sqlite'}")

        def run(run_dir: Path, *more: str, limit: int | None = None) -> Any:
            program = ["-c", PROBE] if args.probe else ["-m", "summeval_runner"]

            def small_files() -> None:
                import resource

                if limit is not None:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

            return subprocess.run(
                [sys.executable, *program, f"hydra.run.dir={run_dir}", *overrides, *more],
                capture_output=True,
                text=True,
                cwd=work,
                env=env,
                preexec_fn=small_files,
                check=False,
            )

        whole = run(work / "whole", "runner.cache=off")
        whole_requests = len(server.requests)
        run_dir = (disk if tmpfs else work) / "run"
        start = len(server.requests)
        failed = run(run_dir, *cached, limit=None if tmpfs else size)
        sent = len(server.requests) - start
        items, counted = journaled(run_dir)
        if args.probe and (work / "probe").exists():
            counted = json.loads((work / "probe").read_text())["requests"]
        if tmpfs:
            subprocess.run(["mount", "-o", f"remount,size={256 << 20}", str(disk)], check=True)
        resumed = run(run_dir, *cached, f"runner.resume={run_dir}")
        cause = [line for line in failed.stderr.splitlines() if ": failed: " in line]
        print(
            json.dumps(
                {
                    "disk": f"tmpfs of {size} bytes" if tmpfs else f"RLIMIT_FSIZE {size} bytes",
                    "items": args.items,
                    "cache": args.cache,
                    "uninterrupted_exit_code": whole.returncode,
                    "uninterrupted_requests": whole_requests,
                    "exit_code": failed.returncode,
                    "requests_sent": sent,
                    "requests_after_first_failed_write": sent - counted,
                    "items_journaled": items,
                    "tracebacks": failed.stderr.count("Traceback"),
                    "logging_errors": failed.stderr.count("--- Logging error ---"),
                    "cause": cause[0] if cause else None,
                    "resume_exit_code": resumed.returncode,
                    "resume_requests": len(server.requests) - start - sent,
                    "requests_both_parts": len(server.requests) - start,
                }
            )
        )
    finally:
        server.stop()
        if tmpfs:
            subprocess.run(["umount", str(disk)], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
