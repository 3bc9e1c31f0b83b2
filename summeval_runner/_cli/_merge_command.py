"""``summeval-merge``: join the run directories of shards (``runner.shard=I/N``) into one run.

Exit codes: 0 merged (every shard, or what there is with ``--allow-missing``); 2 refused: not
shards of one run, shards split by different rules (by id, by source), a shard given twice or
overlapping another, shards missing, an output directory that is not empty. Nothing is written
when refused. A merge whose shards asked one source's items different coverage questions is
made, with a warning on stderr (``question_conflicts`` in its manifest).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from summeval_runner._cli._allocator import use_system_allocator
from summeval_runner._cli._summary import print_summary
from summeval_runner._errors import SummevalError
from summeval_runner._rundir._manifest import read_manifest
from summeval_runner._rundir._merge import merge_runs

EXIT_OK, EXIT_BAD_INPUT = 0, 2


class _Prefixed(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"summeval-merge: {record.levelname.lower()}: {record.getMessage()}"


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """The library's warnings (sources asked different questions, damaged journal lines) on
    stderr, named as this command's, for as long as the command runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_Prefixed())
    library = logging.getLogger("summeval_runner")
    library.addHandler(handler)
    try:
        yield
    finally:
        library.removeHandler(handler)


def main(argv: list[str] | None = None) -> int:
    with _warnings_on_stderr():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="summeval-merge",
        description="Merge the run directories of shards 0/N .. N-1/N (summeval-run "
        "runner.shard=I/N) into one run: tables in dataset order, aggregates recomputed.",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="the shards' run directories")
    parser.add_argument(
        "--out", type=Path, required=True, help="the merged run's directory (new or empty)"
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="merge even when shards or items are missing; the manifest's status is then "
        "'partial' and it lists what is missing",
    )
    args = parser.parse_args(argv)
    try:
        merged = merge_runs(args.runs, args.out, allow_missing=args.allow_missing)
    except SummevalError as error:
        print(f"summeval-merge: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    shards = ", ".join(merged.shards)
    split = ", split by source" if merged.by == "source" else ""
    print(f"merged {len(merged.shards)} of {merged.shard_count} shards ({shards}){split}")
    if not merged.complete:
        missing = ", ".join(merged.missing_shards) or "none"
        print(
            f"summeval-merge: partial: missing shards: {missing}; {merged.missing_items} items "
            "of the dataset are in no merged shard",
            file=sys.stderr,
        )
    print_summary(merged.run_dir, read_manifest(merged.run_dir))
    return EXIT_OK


def run() -> None:
    """The ``summeval-merge`` entry point."""
    use_system_allocator()
    sys.exit(main())
