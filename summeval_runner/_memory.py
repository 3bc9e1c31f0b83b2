"""Freed memory handed back to the system, where a step has just let go of much of it.

A resume, a merge and a comparison read and write tables of a million rows in pieces. What a
piece frees stays with the allocator that held it: Arrow's pool keeps its buffers for the next
piece, and the C library's ``malloc`` keeps the small blocks of parsed metadata and Python
objects, so the process's memory grows by what the pieces' sizes leave unused. Handing both back
after each large piece keeps the peak near what is in use: two million-item runs' compared
columns held 302 MB once read instead of 376 MB (RSS read after each run was read).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

import pyarrow as pa

# glibc's mallopt parameter for the size from which a block gets a mapping of its own.
_M_MMAP_THRESHOLD = -3
# Blocks from this size up are mapped apart and unmapped when freed. glibc's own threshold
# starts at 128 kB and rises to the largest block freed (up to 32 MB), after which a million
# rows' arrays come from the heap and stay there: fixing it (which stops the rise) took a
# comparison of two million-item runs from 451 MB to 417 MB (an RSS sampler's figures).
_MMAP_THRESHOLD = 256 * 1024


@functools.cache
def _glibc(name: str) -> Callable[..., int] | None:
    """A function of glibc's allocator, or None where the C library has none (musl, macOS,
    Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function: Callable[..., int] = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    return function


def map_large_blocks() -> None:
    """Serve this process's large blocks from mappings of their own, handed back when freed.
    For a program's start (it changes the whole process's allocator); a no-op off glibc."""
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def hand_back_memory() -> None:
    """Return what Arrow's pool and the C library's allocator hold unused to the system."""
    pa.default_memory_pool().release_unused()
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)
