"""The app's own cost a run, in process: ``summeval-run`` on its defaults, two items, run again
and again in one process as the test suite and an in-process sweep run it (Hydra composes the
config each time; the data, the offline judge and the tables are small, so what is left is the
overhead every run pays).

    python bench/app_overhead.py [--runs 8] [--repeats 3]

Prints the seconds a run (the best of ``--repeats`` rounds of ``--runs``) and each round's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.app import run_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    overrides = ("dataset.limit=2", "runner.progress=false")
    if run_app(folder / "warm", *overrides).returncode != 0:  # imports and first compose
        raise SystemExit("the warm-up run failed")
    rounds = []
    for repeat in range(args.repeats):
        started = time.perf_counter()
        for run in range(args.runs):
            run_app(folder / f"{repeat}-{run}", *overrides)
        rounds.append((time.perf_counter() - started) / args.runs)
    shown = ", ".join(f"{seconds:.3f}" for seconds in rounds)
    print(f"in-process run, 2 items: {min(rounds):.3f} s (best of {args.repeats}; rounds {shown})")


if __name__ == "__main__":
    main()
