"""A million items end to end in bounded memory: a killed run resumed, shards merged, compared.

Each step is its own child process (so each peak RSS is its own: ``os.wait4``'s ``ru_maxrss``
for that process), run as a user runs it, with the offline judge on N items made as
``throughput.py``'s scale scenario makes them (a 250-word source and a 60-word summary each,
precomputed outputs, ``max_questions`` 10, distinct sources, 16 items in flight):

- run A: ``summeval-run`` on the N items, killed with SIGKILL (``kill -9``: no handler runs, the
  harder case) once half of them are journaled;
- resume A: ``summeval-run ... runner.resume=<A>``, which scores the other half;
- run B: the same N items as 4 shards (``runner.shard=I/4``, ``--jobs`` of them at once), each
  shard its own process and figure; then ``summeval-merge`` of the four;
- ``summeval-compare A B --no-report``: the paired comparison (bootstrap included).

It prints each step's peak RSS, wall time, items and command, checks the tables (A and B hold
each of the N items once, the comparison pairs N), writes the figures as JSON to ``--figures``,
and deletes its work folder (under ``--work``) at the end: a million items' journals take about
20 GB.

    python bench/million.py --items 20000 --figures /tmp/million-20k.json    # about 3 minutes
    python bench/million.py --items 1000000 --figures million.json           # see bench/README.md
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import write_items  # bench/ is not a package: its folder is on the path

BIN = Path(sys.executable).parent
ITEM_LINE = b'{"position":'
LIMIT_MB = 400.0


@dataclass(frozen=True)
class Step:
    name: str
    command: str
    peak_rss_mb: float
    wall_s: float
    items: int
    exit: int


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return env | {"SUMMEVAL_CACHE_DIR": str(cache)}


def _run_command(run_dir: Path, dataset: Path, *overrides: str) -> list[str]:
    return [
        str(BIN / "summeval-run"),
        f"hydra.run.dir={run_dir}",
        f"dataset.path={dataset}",
        "dataset.fields.output=summary",
        "dataset.fields.metadata=[]",
        "target=precomputed",
        "model=offline",
        "scorer.max_questions=10",
        "runner.max_items_in_flight=16",
        "runner.progress=false",
        *overrides,
    ]


def _shown(command: list[str]) -> str:
    return shlex.join([Path(command[0]).name, *command[1:]])


def _wait(process: subprocess.Popen[bytes]) -> tuple[int, float]:
    """The child's exit code and its own peak RSS in MB (``ru_maxrss``, KB on Linux)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss / 1024


def _log(out: Path, name: str) -> Any:
    return (out / f"{name}.log").open("wb")


def step(name: str, command: list[str], env: dict[str, str], logs: Path, *, items: int) -> Step:
    started = time.perf_counter()
    with _log(logs, name) as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        code, peak = _wait(process)
    result = Step(name, _shown(command), peak, time.perf_counter() - started, items, code)
    _print(result)
    if code != 0:
        sys.exit(f"{name}: exit {code}; see {logs / (name + '.log')}")
    return result


def killed_run(
    name: str, command: list[str], env: dict[str, str], logs: Path, journal: Path, *, half: int
) -> Step:
    """``command`` killed with SIGKILL once ``half`` items are journaled."""
    started = time.perf_counter()
    with _log(logs, name) as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        offset, rest, count = 0, b"", 0
        ended: tuple[int, float] | None = None
        while ended is None:
            time.sleep(0.5)
            # Not process.poll(): it would reap a child that ended on its own, and with it
            # the peak RSS that os.wait4 reads (and wait4 would then fail, "No child processes").
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                ended = (process.returncode, usage.ru_maxrss / 1024)
                break
            if journal.exists():
                with journal.open("rb") as file:
                    file.seek(offset)
                    data = rest + file.read()
                    offset = file.tell()
                lines = data.split(b"\n")
                rest = lines.pop()
                count += sum(1 for line in lines if line.startswith(ITEM_LINE))
            if count >= half:
                os.kill(process.pid, signal.SIGKILL)
                ended = _wait(process)
        code, peak = ended
    result = Step(
        name, _shown(command) + "  # SIGKILL", peak, time.perf_counter() - started, count, code
    )
    _print(result)
    if code != -signal.SIGKILL:
        sys.exit(f"{name}: ended (exit {code}) before it was killed; see {logs}")
    return result


def shards(dataset: Path, env: dict[str, str], logs: Path, b_dir: Path, *, jobs: int) -> list[Step]:
    """The four shards, ``jobs`` at a time, each its own process and figure."""
    pending = [
        (index, _run_command(b_dir / f"shard-{index}", dataset, f"runner.shard={index}/4"))
        for index in range(4)
    ]
    running: dict[int, tuple[int, list[str], float, Any, subprocess.Popen[bytes]]] = {}
    done: list[Step] = []
    while pending or running:
        while pending and len(running) < jobs:
            index, shard_command = pending.pop(0)
            log = _log(logs, f"shard-{index}")
            process = subprocess.Popen(shard_command, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[process.pid] = (index, shard_command, time.perf_counter(), log, process)
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        index, shard_command, started, log, process = running.pop(pid)
        log.close()
        process.returncode = code = os.waitstatus_to_exitcode(status)
        manifest = json.loads((b_dir / f"shard-{index}" / "manifest.json").read_text("utf-8"))
        result = Step(
            f"run B shard {index}/4",
            _shown(shard_command),
            usage.ru_maxrss / 1024,
            time.perf_counter() - started,
            int(manifest["counts"]["total"]),
            code,
        )
        _print(result)
        if code != 0:
            sys.exit(f"shard {index}: exit {code}; see {logs}")
        done.append(result)
    return sorted(done, key=lambda s: s.name)


def _print(result: Step) -> None:
    flag = "" if result.peak_rss_mb <= LIMIT_MB else f"  ABOVE {LIMIT_MB:.0f} MB"
    print(
        f"{result.name:<18} peak RSS {result.peak_rss_mb:7.1f} MB{flag}  "
        f"wall {result.wall_s:8.1f} s  items {result.items:>9,}\n    $ {result.command}",
        flush=True,
    )


def check_tables(a_dir: Path, b_dir: Path, comparison: Path, items: int) -> dict[str, Any]:
    """A and B hold each item once, the same items, and the comparison pairs them all."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    checks: dict[str, Any] = {}
    ids = {}
    for name, run in (("A", a_dir), ("B", b_dir)):
        column = pq.read_table(run / "items.parquet", columns=["item_id"])["item_id"]
        unique = len(pc.unique(column))
        checks[f"{name} rows"], checks[f"{name} distinct ids"] = len(column), unique
        ids[name] = column
    checks["A and B same ids"] = bool(
        pc.all(pc.is_in(ids["A"], value_set=pc.unique(ids["B"]))).as_py()
    )
    table = pq.read_table(comparison).to_pylist()
    checks["comparison paired"] = sorted(
        {int(row["n_paired"]) for row in table if row.get("n_paired") is not None}
    )
    ok = (
        checks["A rows"] == checks["A distinct ids"] == items
        and checks["B rows"] == checks["B distinct ids"] == items
        and checks["A and B same ids"]
        and checks["comparison paired"] == [items]
    )
    checks["ok"] = ok
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000, help="N (default 20,000)")
    parser.add_argument("--jobs", type=int, default=2, help="shards run at once (default 2)")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()),
        help="folder under which the run directories are made (and deleted at the end)",
    )
    parser.add_argument("--figures", type=Path, required=True, help="JSON file for the figures")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="summeval-million-", dir=args.work))
    logs = work / "logs"
    logs.mkdir()
    started = time.perf_counter()
    print(f"million: N={args.items:,}, offline judge, work folder {work}", flush=True)
    try:
        dataset = write_items(work / "items.jsonl", args.items)
        a_dir, b_dir, out = work / "A", work / "B", work / "compare"
        a_env, b_env = _env(work / "cache-A"), _env(work / "cache-B")
        steps = [
            killed_run(
                "run A (killed)",
                _run_command(a_dir, dataset),
                a_env,
                logs,
                a_dir / "journal.jsonl",
                half=args.items // 2,
            )
        ]
        steps.append(
            step(
                "resume A",
                _run_command(a_dir, dataset, f"runner.resume={a_dir}"),
                a_env,
                logs,
                items=args.items,
            )
        )
        steps += shards(dataset, b_env, logs, b_dir, jobs=args.jobs)
        merged = b_dir / "merged"
        steps.append(
            step(
                "merge B",
                [
                    str(BIN / "summeval-merge"),
                    *(str(b_dir / f"shard-{i}") for i in range(4)),
                    "--out",
                    str(merged),
                ],
                b_env,
                logs,
                items=args.items,
            )
        )
        steps.append(
            step(
                "compare A B",
                [
                    str(BIN / "summeval-compare"),
                    str(a_dir),
                    str(merged),
                    "--out",
                    str(out),
                    "--no-report",
                ],
                b_env,
                logs,
                items=args.items,
            )
        )
        checks = check_tables(a_dir, merged, out / "comparison.parquet", args.items)
        print(f"checks: {json.dumps(checks)}")
        peak = max(s.peak_rss_mb for s in steps)
        print(
            f"largest peak RSS {peak:.1f} MB (limit {LIMIT_MB:.0f}); "
            f"total {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        args.figures.write_text(
            json.dumps(
                {
                    "items": args.items,
                    "steps": [asdict(s) for s in steps],
                    "checks": checks,
                    "largest_peak_rss_mb": peak,
                    "total_s": time.perf_counter() - started,
                    "host": os.uname().nodename,
                    "cpus": os.cpu_count(),
                    "load_average_at_end": os.getloadavg(),
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        if not checks["ok"]:
            sys.exit("the tables do not hold what they should: see checks")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
