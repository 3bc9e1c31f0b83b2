"""Pairing two runs' items by id, at a million and at ten million items each.

    python bench/pairing.py                                  # 1M and 10M; the old way at 1M, 2M
    python bench/pairing.py --items 1000000 --blocks-up-to 1000000

Each measurement is its own child process, as ``million.py``'s steps are (so its peak RSS is
its own: ``os.wait4``'s ``ru_maxrss``): it makes two runs' ids as a dataset's are (``doc-`` and
a number, each run in its own shuffled order, 90% of them shared), holds them as the Arrow
strings a run's items table holds, and pairs them the way ``summeval-compare`` does
(``_Pairing``: the run's ids sorted, each matched to the baseline's row). It prints the wall
time of the pairing alone (the ids' making is not timed), the pairs found (checked: 90% of the
items), and the peak RSS of the whole child.

``merge`` is the library's: the two sorted id lists merged a block at a time. ``blocks`` is the
way it was until 2026-12-07 (every block of the run's ids hashed against every block of the
baseline's, so the time grows with the product of the lengths), kept here to give the ratio;
``--blocks-up-to`` bounds the sizes it is run at (at ten million it took about 85 s by
extrapolation).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SHARED = 0.9


def make_ids(items: int, seed: int) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    rng = np.random.default_rng(seed)
    numbers = rng.permutation(int(items / SHARED) + 1)
    shared = int(items * SHARED)
    ours = numbers[:items]
    theirs = np.concatenate([ours[:shared], numbers[items : items + items - shared]])
    rng.shuffle(theirs)

    def strings(values: np.ndarray) -> pa.ChunkedArray:
        text = pc.binary_join_element_wise("doc-", pa.array(values).cast(pa.string()), "")
        return pa.chunked_array([text])

    return strings(ours), strings(theirs)


def blocks(here: pa.ChunkedArray, there: pa.ChunkedArray) -> np.ndarray:
    """The old way: each block of the run's ids hashed against each block of the baseline's."""
    step = 1 << 17
    rows = np.full(len(here), -1, dtype=np.int64)
    for start in range(0, len(there), step):
        block = there.slice(start, step).combine_chunks()
        for first in range(0, len(here), step):
            looked_up = here.slice(first, step)
            found = pc.index_in(looked_up, value_set=block).fill_null(-1).to_numpy()
            part = rows[first : first + len(looked_up)]
            new = (found >= 0) & (part < 0)
            part[new] = found[new] + start
    order = pc.sort_indices(here).to_numpy().astype(np.int64)
    ordered: np.ndarray = rows[order]
    return ordered


def child(method: str, items: int) -> None:
    from summeval_runner._analysis._compare import _matched

    here, there = make_ids(items, seed=11)
    started = time.perf_counter()
    if method == "merge":
        order = pc.sort_indices(here).to_numpy().astype(np.int64)
        match = _matched(here, there, order)
    else:
        match = blocks(here, there)
    wall = time.perf_counter() - started
    paired = int((match >= 0).sum())
    assert paired == int(items * SHARED), (paired, items)
    print(json.dumps({"method": method, "items": items, "wall_s": wall, "paired": paired}))


def measure(method: str, items: int) -> dict[str, float]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", method, str(items)], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{method} at {items:,} items failed: {status}")
    figures: dict[str, float] = json.loads(out)
    figures["peak_rss_mb"] = usage.ru_maxrss / 1024
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--items", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--blocks-up-to", type=int, default=2_000_000)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    sizes = sorted(set(args.items) | {n for n in (1_000_000, 2_000_000) if n <= args.blocks_up_to})
    print(f"{'method':<7} {'items each':>12} {'paired':>12} {'wall s':>8} {'peak RSS MB':>12}")
    walls: dict[tuple[str, int], float] = {}
    for items in sizes:
        for method in ("merge", "blocks"):
            if method == "blocks" and items > args.blocks_up_to:
                continue
            if method == "merge" and items not in args.items:
                continue
            f = measure(method, items)
            walls[(method, items)] = f["wall_s"]
            print(
                f"{method:<7} {items:>12,} {int(f['paired']):>12,} {f['wall_s']:>8.2f} "
                f"{f['peak_rss_mb']:>12.0f}"
            )
    for items in sizes:
        if ("merge", items) in walls and ("blocks", items) in walls:
            ratio = walls[("blocks", items)] / walls[("merge", items)]
            print(f"at {items:,} items each: merge {ratio:.1f}x faster than blocks")


if __name__ == "__main__":
    main()
