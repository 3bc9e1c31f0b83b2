"""``summeval-cache``: see where the judge response cache is, how big it is, and clear it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from summeval_runner._errors import ConfigError
from summeval_runner._runner._cache import ResponseCache, default_cache_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="summeval-cache",
        description="The judge response cache that summeval-run reads and writes "
        "(runner.cache, runner.cache_path).",
    )
    parser.add_argument(
        "command", choices=("info", "clear"), help="info: path, entries, size; clear: empty it"
    )
    parser.add_argument(
        "--path",
        type=Path,
        default=None,
        help=f"the cache file (default: runner.cache_path's default, now {default_cache_path()})",
    )
    args = parser.parse_args(argv)
    path: Path = args.path or default_cache_path()
    if not path.exists():
        print(f"cache: {path}\nentries: 0 (no cache file yet)")
        return 0
    try:
        cache = ResponseCache(path, "readwrite")
    except ConfigError as error:
        print(f"summeval-cache: error: {error}", file=sys.stderr)
        return 2
    try:
        if args.command == "clear":
            print(f"cache: {path}\nremoved {cache.clear()} entries")
        else:
            stats = cache.stats()
            print(f"cache: {stats.path}\nentries: {stats.entries}\nsize: {stats.size_bytes} bytes")
    finally:
        cache.close()
    return 0


def run() -> None:
    """The ``summeval-cache`` entry point."""
    sys.exit(main())
