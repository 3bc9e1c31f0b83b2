"""Shards: a run split across processes or machines (``runner.shard=I/N``).

An item belongs to shard ``sha256(key) mod N``, where the key is the item's id, or, in a run
that shares each source's coverage questions (``questions="per_source"``), the fingerprint of
its source text (``ShardRule``: ``"id"`` or ``"source"``). The split depends on nothing but the
item, so every worker computes it alone, a resumed shard holds the same items, and the shards
of one dataset are disjoint and cover it. Split by source, all the items of a source are in
one shard, so the one process that draws its questions asks them of every item of it: shards
split by id would each draw their own set for a source whose items they share.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from summeval_runner._errors import ConfigError

# What an item's shard is chosen by: its id, or its source's fingerprint (source_fingerprint).
ShardRule = Literal["id", "source"]
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int
    count: int

    @classmethod
    def parse(cls, spec: str) -> Shard:
        """``"I/N"`` as a shard; ``ConfigError`` stating the rule otherwise.

        >>> Shard.parse("1/4")
        Shard(index=1, count=4)
        """
        match = _SPEC.match(str(spec))
        if match is None:
            raise ConfigError(f"shard must be I/N (shard I of N, counted from 0), got {spec!r}")
        index, count = int(match[1]), int(match[2])
        if count < 1:
            raise ConfigError(f"shard must be I/N with N >= 1 shards, got {spec!r}")
        if index >= count:
            raise ConfigError(
                f"shard must be I/N with 0 <= I < N (shards 0/{max(count, 1)} to "
                f"{max(count, 1) - 1}/{max(count, 1)}), got {spec!r}"
            )
        return cls(index, count)

    def holds(self, key: str) -> bool:
        """Whether the item with this key (its id, or its source's fingerprint) is this one's."""
        return shard_of(key, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(key: str, count: int) -> int:
    """The shard an item's key (its id, or its source's fingerprint) falls in: stable across
    processes, machines and Python versions.

    >>> shard_of("doc-1", 1)
    0
    """
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count
