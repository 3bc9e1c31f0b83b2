"""Fault injection: the real app against a loopback OpenAI-compatible server, one fault mix a row.

Runs ``summeval-run`` (a subprocess, the openai SDK inside) against the test suite's loopback
server with each fault mix, and prints per mix: items scored / errored / lost, judge requests,
retries, 429s received, and the run's wall time against the ideal for the same items without
faults (3 sequential calls an item at the server's latency: 3 x L x ceil(N / C)).

    python bench/faults.py                 # 200 items, 50 ms latency, 16 in flight
    python bench/faults.py --items 1000 --latency 0.2 --concurrency 32
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.chat_server import ChatServer, FaultMix  # noqa: E402
from tests.documents import write_dataset  # noqa: E402

MIXES: dict[str, FaultMix] = {
    "clean": FaultMix(),
    "10% HTTP 500": FaultMix(seed=1, server_errors=0.10),
    "429 storms, 25% of the time": FaultMix(seed=2, storm_every_s=2.0, storm_s=0.5),
    "10% malformed JSON": FaultMix(seed=3, malformed=0.10),
    "3% hanging requests": FaultMix(seed=4, hangs=0.03, hang_s=5.0),
    "5% dropped connections": FaultMix(seed=5, drops=0.05),
    "all of the above": FaultMix(
        seed=6,
        server_errors=0.10,
        malformed=0.10,
        hangs=0.03,
        drops=0.05,
        hang_s=5.0,
        storm_every_s=2.0,
        storm_s=0.5,
    ),
}


@dataclass(frozen=True)
class Outcome:
    mix: str
    scored: int
    errored: int
    lost: int
    requests: int
    retries: int
    throttled: int
    run_s: float
    exit_code: int


def run_mix(name: str, mix: FaultMix, args: argparse.Namespace, work: Path) -> Outcome:
    server = ChatServer().start()
    server.mix = mix
    server.latency_s = args.latency
    run_dir = work / name.replace(" ", "_").replace("%", "pct").replace(",", "")
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
                f"model.base_url={server.base_url}",
                f"dataset.path={work / 'docs.jsonl'}",
                "dataset.fields.metadata=[]",
                "runner.cache=off",
                "runner.progress=false",
                f"runner.max_items_in_flight={args.concurrency}",
                f"runner.max_judge_requests_in_flight={args.concurrency}",
                f"runner.request_timeout_s={args.request_timeout}",
                "runner.retry.max_attempts=8",
                "runner.max_error_rate=1.0",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            check=False,
        )
    finally:
        server.stop()
    if completed.returncode not in (0, 1):
        sys.exit(f"{name}: the run failed ({completed.returncode}):\n{completed.stderr}")
    statuses = pq.read_table(run_dir / "items.parquet", columns=["status"])["status"].to_pylist()
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return Outcome(
        mix=name,
        scored=statuses.count("scored"),
        errored=statuses.count("error"),
        lost=args.items - len(statuses),
        requests=len(server.requests),
        retries=manifest["judge"]["retries"],
        throttled=server.counts["429"],
        run_s=float(manifest["duration_s"]),
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
    parser.add_argument("--only", nargs="*", default=None, help="run only these mixes")
    args = parser.parse_args()
    ideal = 3 * args.latency * math.ceil(args.items / args.concurrency)
    print(
        f"{args.items} items, server latency {args.latency * 1000:.0f} ms, "
        f"{args.concurrency} in flight; ideal without faults {ideal:.2f} s"
    )
    header = (
        f"{'mix':<28} {'scored':>6} {'errored':>7} {'lost':>4} {'requests':>8} "
        f"{'retries':>7} {'429s':>5} {'run s':>6} {'x ideal':>7}"
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
                f"{o.mix:<28} {o.scored:>6} {o.errored:>7} {o.lost:>4} {o.requests:>8} "
                f"{o.retries:>7} {o.throttled:>5} {o.run_s:>6.2f} {o.run_s / ideal:>7.2f}"
            )
    print(f"(bench wall time {time.perf_counter() - started:.0f} s; 'run s' is the manifest's")
    print(" duration, planning included; 'x ideal' is run s over the fault-free ideal)")


if __name__ == "__main__":
    main()
