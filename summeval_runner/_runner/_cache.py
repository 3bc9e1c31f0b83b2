"""The judge response cache: sqlite on disk, keyed by everything that decides a reply.

A key covers the judge's identity (provider, model, base URL, sampling parameters), the prompt
version, the step's schema and the exact messages, so a change to any of them is a miss. Only
replies that pass the step's schema are stored: an error or a malformed reply is never served
again. The database runs in WAL mode with a busy timeout, so the processes of a multirun (and
the tasks of one run) read and write it at once. A cache problem (a locked or full disk) is
logged and the call goes to the judge: the cache never fails a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from summeval_runner._errors import ConfigError
from summeval_runner._judges._protocol import (
    STEP_OUTPUTS,
    Judge,
    JudgeReply,
    JudgeRequest,
    TokenUsage,
    judge_name,
)
from summeval_runner._secrets import scrub

logger = logging.getLogger("summeval_runner")

CacheMode = Literal["off", "read", "write", "readwrite"]
CACHE_MODES: tuple[CacheMode, ...] = ("off", "read", "write", "readwrite")
CACHE_FILE = "judge-cache.sqlite"
# Bump when the key's or the table's layout changes: old entries then simply stop matching.
_KEY_VERSION = 1
_BUSY_TIMEOUT_S = 30.0


def default_cache_path() -> Path:
    """``$SUMMEVAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/summeval_runner``, else ``~/.cache/...``."""
    folder = os.environ.get("SUMMEVAL_CACHE_DIR")
    if folder:
        return Path(folder) / CACHE_FILE
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "summeval_runner" / CACHE_FILE


def cache_identity(judge: Judge) -> Mapping[str, Any] | None:
    """What decides a judge's replies besides the request, or ``None`` for a judge not cached.

    Judges opt in with a ``cache_identity()`` method. The offline judge does not: it is as fast
    as a cache lookup.
    """
    identify = getattr(judge, "cache_identity", None)
    if identify is None:
        return None
    identity = identify()
    return identity if isinstance(identity, Mapping) else None


def request_key(identity: Mapping[str, Any], request: JudgeRequest) -> str:
    """The cache key of one request to one judge: a SHA-256 of every part that decides it."""
    parts = {
        "key_version": _KEY_VERSION,
        "judge": dict(identity),
        "prompt_version": request.prompt_version,
        "step": request.step,
        "schema_name": request.schema_name,
        "json_schema": request.json_schema,
        "messages": [[m.role, m.content] for m in request.messages],
    }
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheStats:
    path: Path
    entries: int
    size_bytes: int


class ResponseCache:
    """One connection to the cache database, for one run (or one command)."""

    def __init__(self, path: Path, mode: CacheMode = "readwrite") -> None:
        if mode not in CACHE_MODES:
            raise ConfigError(f"cache must be one of {', '.join(CACHE_MODES)}, got {mode!r}")
        self.path = path
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self.stored = 0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL without a sync per commit: a crash may lose the newest entries, never corrupt
            # the file; a lost entry is only a call made again.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, content TEXT NOT NULL,"
                " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
                " judge TEXT NOT NULL, created REAL NOT NULL)"
            )
        except (OSError, sqlite3.Error) as error:
            raise ConfigError(f"cache_path {path} cannot be opened as a cache: {error}") from None

    @property
    def reads(self) -> bool:
        return self.mode in ("read", "readwrite")

    @property
    def writes(self) -> bool:
        return self.mode in ("write", "readwrite")

    def get(self, key: str) -> JudgeReply | None:
        try:
            row = self._db.execute(
                "SELECT content, input_tokens, output_tokens FROM replies WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as error:
            logger.warning(
                "judge cache %s could not be read (%s); asking the judge", self.path, error
            )
            row = None
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return JudgeReply(
            content=row[0], usage=TokenUsage(input_tokens=row[1], output_tokens=row[2])
        )

    def put(self, key: str, reply: JudgeReply, judge: str) -> None:
        content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        # A reply that quotes a key (a server that echoes the Authorization header) keeps it
        # out of the cache file too; replayed, the reply says *** instead.
        content = scrub(content)
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    content,
                    reply.usage.input_tokens,
                    reply.usage.output_tokens,
                    judge,
                    time.time(),
                ),
            )
            self.stored += 1
        except sqlite3.Error as error:
            logger.warning("judge cache %s could not be written (%s)", self.path, error)

    def stats(self) -> CacheStats:
        (entries,) = self._db.execute("SELECT COUNT(*) FROM replies").fetchone()
        size = sum(
            p.stat().st_size
            for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
            if p.exists()
        )
        return CacheStats(self.path, int(entries), size)

    def clear(self) -> int:
        """Delete every entry; return how many there were."""
        (entries,) = self._db.execute("SELECT COUNT(*) FROM replies").fetchone()
        self._db.execute("DELETE FROM replies")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.execute("VACUUM")
        return int(entries)

    def close(self) -> None:
        self._db.close()


class CachedJudge:
    """A judge behind the response cache: a hit never reaches the judge (or its limits)."""

    def __init__(self, judge: Judge, cache: ResponseCache, identity: Mapping[str, Any]) -> None:
        self.judge = judge
        self.cache = cache
        self.identity = dict(identity)
        self.name = judge_name(judge)

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        key = request_key(self.identity, request)
        if self.cache.reads:
            cached = self.cache.get(key)
            if cached is not None:
                return cached
        reply = await self.judge.complete(request)
        if self.cache.writes and _valid(request, reply):
            self.cache.put(key, reply, self.name)
        return reply

    async def aclose(self) -> None:
        close = getattr(self.judge, "aclose", None)
        if close is not None:
            await close()


def _valid(request: JudgeRequest, reply: JudgeReply) -> bool:
    output = STEP_OUTPUTS[request.step]
    try:
        if isinstance(reply.content, str):
            output.model_validate_json(reply.content)
        else:
            output.model_validate(reply.content)
    except ValidationError:
        return False
    return True
