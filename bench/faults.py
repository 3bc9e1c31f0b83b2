"""Fault injection: the real app against a loopback OpenAI-compatible server, one fault mix a row.

Runs ``summeval-run`` (a subprocess, the openai SDK inside) against the test suite's loopback
server with each fault mix, and prints per mix: items scored / errored / unfinished (counted in
the manifest, to resume) / lost (in neither: never), judge requests sent (refused connections
included), retries, 429s received, the run's status, and its wall time against the ideal for
the same items without faults (3 sequential calls an item at the server's latency:
3 x L x ceil(N / C)). Two rows are not mixes: an outage (the server goes down once a third of
the requests are answered, for ``--outage`` seconds, and comes back on its port) and a dead
judge (a port that refuses every connection; the run stops after ``--outage-timeout`` seconds,
``runner.outage_timeout_s``).

    python bench/faults.py                 # 200 items, 50 ms latency, 16 in flight
    python bench/faults.py --items 1000 --latency 0.2 --concurrency 32
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.chat_server import ChatServer, FaultMix  # noqa: E402
from tests.documents import write_dataset  # noqa: E402


@dataclass(frozen=True)
class Outage:
    """The server goes down once a third of the run's requests are answered, and comes back
    on the same port ``--outage`` seconds later."""


@dataclass(frozen=True)
class DeadJudge:
    """The judge's port refuses every connection, for the whole run."""


MIXES: dict[str, FaultMix | Outage | DeadJudge] = {
    "clean": FaultMix(),
    "10% HTTP 500": FaultMix(seed=1, server_errors=0.10),
    "429 storms, 25% of the time": FaultMix(seed=2, storm_every_s=2.0, storm_s=0.5),
    "10% malformed JSON": FaultMix(seed=3, malformed=0.10),
    "3% hanging requests": FaultMix(seed=4, hangs=0.03, hang_s=5.0),
    "5% dropped connections": FaultMix(seed=5, drops=0.05),
    "5% cut-off 200 bodies": FaultMix(seed=7, cut_bodies=0.05),
    "all of the above": FaultMix(
        seed=6,
        server_errors=0.10,
        malformed=0.10,
        hangs=0.03,
        drops=0.05,
        cut_bodies=0.05,
        hang_s=5.0,
        storm_every_s=2.0,
        storm_s=0.5,
    ),
    "outage mid-run": Outage(),
    "dead judge (refused port)": DeadJudge(),
}


@dataclass(frozen=True)
class Outcome:
    mix: str
    scored: int
    errored: int
    unfinished: int
    lost: int
    requests: int
    retries: int
    throttled: int
    run_s: float
    status: str
    exit_code: int


def take_down(server: ChatServer, after: int, down_s: float) -> threading.Thread:
    """Down once ``after`` requests are answered, back ``down_s`` seconds later."""

    def outage() -> None:
        while server.answered < after:
            time.sleep(0.01)
        server.go_down()
        time.sleep(down_s)
        server.come_back()

    thread = threading.Thread(target=outage, daemon=True)
    thread.start()
    return thread


def run_mix(
    name: str, mix: FaultMix | Outage | DeadJudge, args: argparse.Namespace, work: Path
) -> Outcome:
    server = ChatServer().start()
    server.mix = mix if isinstance(mix, FaultMix) else None
    server.latency_s = args.latency
    base_url = server.base_url
    refused: socket.socket | None = None
    if isinstance(mix, DeadJudge):
        # Bound, never listening: every connection is refused.
        refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        refused.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{refused.getsockname()[1]}/v1"
    outage = take_down(server, args.items, args.outage) if isinstance(mix, Outage) else None
    run_dir = work / re.sub(r"[^A-Za-z0-9]+", "_", name.replace("%", "pct")).strip("_")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env |= {"OPENAI_API_KEY": "sk-bench-not-a-real-key", "SUMMEVAL_CACHE_DIR": str(work / "cache")}
    try:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "summeval_runner",
                f"hydra.run.dir={run_dir}",
                "model=openai",
                f"model.base_url={base_url}",
                f"dataset.path={work / 'docs.jsonl'}",
                "dataset.fields.metadata=[]",
                "runner.cache=off",
                "runner.progress=false",
                f"runner.max_items_in_flight={args.concurrency}",
                f"runner.max_judge_requests_in_flight={args.concurrency}",
                f"runner.request_timeout_s={args.request_timeout}",
                "runner.retry.max_attempts=8",
                f"runner.outage_timeout_s={args.outage_timeout}",
                "runner.max_error_rate=1.0",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            check=False,
        )
    finally:
        if outage is not None:
            outage.join()
        server.stop()
        if refused is not None:
            refused.close()
    manifest_path = run_dir / "manifest.json"
    # Exit 1: errors above max_error_rate; a dead judge stops the run, never with 0.
    expected = completed.returncode != 0 if isinstance(mix, DeadJudge) else completed.returncode < 2
    if not expected or not manifest_path.exists():
        sys.exit(f"{name}: the run failed ({completed.returncode}):\n{completed.stderr}")
    statuses = pq.read_table(run_dir / "items.parquet", columns=["status"])["status"].to_pylist()
    manifest = json.loads(manifest_path.read_text("utf-8"))
    return Outcome(
        mix=name,
        scored=statuses.count("scored"),
        errored=statuses.count("error"),
        unfinished=manifest["unfinished"] or 0,
        lost=args.items - len(statuses) - (manifest["unfinished"] or 0),
        requests=manifest["judge"]["requests"],
        retries=manifest["judge"]["retries"],
        throttled=server.counts["429"],
        run_s=float(manifest["duration_s"]),
        status=manifest["status"],
        exit_code=completed.returncode,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05, help="server latency, seconds")
    parser.add_argument("--concurrency", type=int, default=16, help="items and requests in flight")
    parser.add_argument(
        "--request-timeout", type=float, default=1.0, help="runner.request_timeout_s"
    )
    parser.add_argument(
        "--outage", type=float, default=15.0, help="seconds the server is down mid-run"
    )
    parser.add_argument(
        "--outage-timeout", type=float, default=60.0, help="runner.outage_timeout_s"
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these mixes")
    args = parser.parse_args()
    ideal = 3 * args.latency * math.ceil(args.items / args.concurrency)
    print(
        f"{args.items} items, server latency {args.latency * 1000:.0f} ms, "
        f"{args.concurrency} in flight; ideal without faults {ideal:.2f} s"
    )
    header = (
        f"{'mix':<28} {'scored':>6} {'errored':>7} {'unfinished':>10} {'lost':>4} {'requests':>8} "
        f"{'retries':>7} {'429s':>5} {'status':>11} {'run s':>6} {'x ideal':>7}"
    )
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="summeval-faults-") as folder:
        work = Path(folder)
        write_dataset(work / "docs.jsonl", args.items)
        for name, mix in MIXES.items():
            if args.only and name not in args.only:
                continue
            o = run_mix(name, mix, args, work)
            print(
                f"{o.mix:<28} {o.scored:>6} {o.errored:>7} {o.unfinished:>10} {o.lost:>4} "
                f"{o.requests:>8} {o.retries:>7} {o.throttled:>5} {o.status:>11} "
                f"{o.run_s:>6.2f} {o.run_s / ideal:>7.2f}",
                flush=True,
            )
    print(f"(bench wall time {time.perf_counter() - started:.0f} s; 'run s' is the manifest's")
    print(" duration, planning included; 'x ideal' is run s over the fault-free ideal; the")
    print(f" outage lasts {args.outage:g} s; outage_timeout_s is {args.outage_timeout:g} s)")


if __name__ == "__main__":
    main()
