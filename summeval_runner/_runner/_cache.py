"""The response cache: sqlite on disk, keyed by everything that decides a reply.

A key covers the judge's identity (provider, model, base URL, sampling parameters), the prompt
version, the step's schema and the exact messages, so a change to any of them is a miss. Only
replies that pass the step's schema are stored: an error or a malformed reply is never served
again. The agent under test keeps its model calls in the same file (``AgentCache``, keyed by
its endpoint, model, prompt, sampling and input), so a rerun that changes only the judge or
the scorer calls no agent again. A second table keeps each source's coverage questions as a
judge drew them (``questions="per_source"``), so other variants of a sweep and later runs ask
the same ones.
The database runs in WAL mode with a busy timeout, so the processes of a multirun (and the
tasks of one run) read and write it at once.

The cache never fails a run. A file that is not a cache (not a database, damaged, truncated, or
a table of another shape) is moved aside to ``<name>.corrupt-<YYYYmmddTHHMMSS>`` with a warning
naming both paths, and a fresh cache takes its place. A problem met later (a database still
locked after the busy timeout, a full disk, damage found in a page only read now) is warned
about once, and the run goes on without the cache; damage also moves the file aside, for the
next run to start afresh. A cache kept inside a run directory is that run's disk: a write that
fails there stops the run (``_failed_writes``). A database that is merely busy is never moved.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None  # type: ignore[assignment]

from summeval_runner._errors import ConfigError
from summeval_runner._judges._protocol import (
    Judge,
    JudgeReply,
    JudgeRequest,
    TokenUsage,
    close_judge,
    judge_name,
    judge_price,
    reply_model,
    request_body_of,
)
from summeval_runner._rundir._failed_writes import failed_write
from summeval_runner._scorers._questions import QuestionKey, QuestionSet
from summeval_runner._secrets import scrub

logger = logging.getLogger("summeval_runner")

CacheMode = Literal["off", "read", "write", "readwrite"]
CACHE_MODES: tuple[CacheMode, ...] = ("off", "read", "write", "readwrite")
CACHE_FILE = "judge-cache.sqlite"
# Bump when the key's or the table's layout changes: old entries then simply stop matching.
_KEY_VERSION = 1
_BUSY_TIMEOUT_S = 30.0
# What a request's fence marker is in its key (not hex: no marker is it).
_MARKER_IN_KEY = "FENCE"
_COLUMNS = ("key", "content", "input_tokens", "output_tokens", "judge", "created")
# Added to the replies table since (a reasoning model's reasoning tokens, of output_tokens): a
# cache without it gains it, its earlier entries at 0, and stays readable by earlier versions.
_ADDED_COLUMN = "reasoning_tokens"


def default_cache_path() -> Path:
    """``$SUMMEVAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/summeval_runner``, else ``~/.cache/...``."""
    folder = os.environ.get("SUMMEVAL_CACHE_DIR")
    if folder:
        return Path(folder) / CACHE_FILE
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "summeval_runner" / CACHE_FILE


def request_key(identity: Mapping[str, Any], request: JudgeRequest) -> str:
    """The cache key of one request to one judge: a SHA-256 of every part that decides it.

    A trial after the first (``RunOptions.trials``) is part of the key: each trial's reply is
    kept apart. The first trial's key is a plain request's, so runs without trials share it.
    The request's fence marker (random, fresh per request) is replaced by a constant: the key
    is the request's with its texts fenced the same way every time, so a rerun's requests,
    fenced with new markers, find what the first run cached. (A marker derived from the text
    instead would be one the text's author could compute, and so write a closing fence for.)
    """
    marker = request.fence_marker
    parts: dict[str, Any] = {
        "key_version": _KEY_VERSION,
        "judge": dict(identity),
        "prompt_version": request.prompt_version,
        "step": request.step,
        "schema_name": request.schema_name,
        "json_schema": request.json_schema,
        "messages": [
            [m.role, m.content.replace(marker, _MARKER_IN_KEY) if marker else m.content]
            for m in request.messages
        ],
    }
    if request.trial:
        parts["trial"] = request.trial
    return _digest(parts)


def agent_key(identity: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """The cache key of one call of an agent: a SHA-256 of its identity (provider, endpoint)
    and the request (model, messages, sampling), apart from every judge's keys."""
    return _digest({"key_version": _KEY_VERSION, "agent": dict(identity), "request": request})


def questions_key(identity: Mapping[str, Any], key: QuestionKey) -> str:
    """The cache key of a source's question set drawn by one judge."""
    return _digest({"key_version": _KEY_VERSION, "judge": dict(identity), "questions": key.text})


def _digest(parts: Mapping[str, Any]) -> str:
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheStats:
    path: Path
    entries: int
    size_bytes: int


class DamagedCacheError(Exception):
    """The cache file is not a cache database: not sqlite, damaged, or its table of another
    shape."""


class ResponseCache:
    """One connection to the cache database, for one run (or one command).

    ``ConfigError`` only when the file cannot be opened at all (no permission, a directory in
    the way). A damaged file is moved aside and replaced by a fresh cache (``moved_to`` says
    where it went); a database still busy after ``busy_timeout_s`` is left alone and this
    cache is off (``usable`` is false).
    """

    def __init__(
        self, path: Path, mode: CacheMode = "readwrite", *, busy_timeout_s: float = _BUSY_TIMEOUT_S
    ) -> None:
        if mode not in CACHE_MODES:
            raise ConfigError(f"cache must be one of {', '.join(CACHE_MODES)}, got {mode!r}")
        self.path = path
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self.stored = 0
        self.moved_to: Path | None = None
        self._busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None
        # The file this cache opened: damage found later moves it aside only if it is still
        # the one at ``path`` (another process may have replaced it since).
        self._inode: int | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._db = self._connect()
            except DamagedCacheError as damage:
                self._db = self._replace_damaged(damage)
            self._inode = _inode_of(path)
        except sqlite3.Error as error:
            if not _busy(error):
                raise ConfigError(
                    f"cache_path {path} cannot be opened as a cache: {error}"
                ) from None
            logger.warning(
                "judge cache %s is busy (%s); this run goes on without the cache", path, error
            )
        except OSError as error:
            raise ConfigError(f"cache_path {path} cannot be opened as a cache: {error}") from None

    @property
    def reads(self) -> bool:
        return self.mode in ("read", "readwrite")

    @property
    def writes(self) -> bool:
        return self.mode in ("write", "readwrite")

    @property
    def usable(self) -> bool:
        """Whether the cache is in use: false once a problem turned it off for this run."""
        return self._db is not None

    def _connect(self) -> sqlite3.Connection:
        """A connection to the cache file, its table made if new and checked if not;
        ``DamagedCacheError`` if the file is no cache."""
        db = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        try:
            # Checked before anything is written, so that a file of another shape is moved
            # aside as it was found.
            columns = {row[1] for row in db.execute("PRAGMA table_info(replies)")}
            if columns and not set(_COLUMNS) <= columns:
                raise DamagedCacheError(
                    f"its replies table has the columns {', '.join(sorted(columns))}, not "
                    f"{', '.join(_COLUMNS)}"
                )
            db.execute("PRAGMA journal_mode=WAL")
            # WAL without a sync per commit: a crash may lose the newest entries, never corrupt
            # the file; a lost entry is only a call made again.
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, content TEXT NOT NULL,"
                " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
                " judge TEXT NOT NULL, created REAL NOT NULL,"
                f" {_ADDED_COLUMN} INTEGER NOT NULL DEFAULT 0)"
            )
            if columns and _ADDED_COLUMN not in columns:
                try:
                    db.execute(
                        f"ALTER TABLE replies ADD COLUMN {_ADDED_COLUMN} INTEGER NOT NULL DEFAULT 0"
                    )
                except sqlite3.OperationalError as error:
                    # Another process of a multirun added it first.
                    if "duplicate column" not in str(error).lower():
                        raise
            db.execute(
                "CREATE TABLE IF NOT EXISTS questions (key TEXT PRIMARY KEY,"
                " questions TEXT NOT NULL, drawn_with TEXT NOT NULL, judge TEXT NOT NULL,"
                " created REAL NOT NULL)"
            )
        except sqlite3.Error as error:
            db.close()
            if _damaged(error):
                raise DamagedCacheError(str(error)) from None
            raise
        except DamagedCacheError:
            db.close()
            raise
        return db

    def _replace_damaged(self, damage: DamagedCacheError) -> sqlite3.Connection | None:
        """Move the damaged file aside and open a fresh cache in its place (None: the file
        could not be moved, and the run goes on without the cache)."""
        with _repairing(self.path):
            # Another process may have moved it aside already, and made a fresh one: use that.
            try:
                return self._connect()
            except DamagedCacheError:
                pass
            try:
                self.moved_to = _move_aside(self.path)
            except OSError as error:
                logger.warning(
                    "judge cache %s is not a usable cache (%s) and could not be moved aside "
                    "(%s); this run goes on without the cache",
                    self.path,
                    damage,
                    error,
                )
                return None
            logger.warning(
                "judge cache %s is not a usable cache (%s); it was moved to %s and a fresh "
                "cache is used",
                self.path,
                damage,
                self.moved_to,
            )
            return self._connect()

    def _failed(self, doing: str, error: sqlite3.Error) -> None:
        """Turn the cache off for the rest of the run after an error, with one warning; damage
        also moves the file aside, so that the next run starts a fresh cache."""
        db, self._db = self._db, None
        if db is None:
            return
        db.close()
        where = ""
        if _damaged(error):
            try:
                with _repairing(self.path):
                    if self._inode is not None and _inode_of(self.path) == self._inode:
                        self.moved_to = _move_aside(self.path)
                        where = f"; it was moved to {self.moved_to}, so the next run starts afresh"
            except OSError as move_error:
                where = f"; it could not be moved aside ({move_error})"
        # A cache kept in a run directory (runner.cache_path) is written there: a write that
        # fails stops that run, as any failed write in its directory does (and says why).
        stopped = doing == "written" and failed_write(
            self.path, f"the response cache {self.path}", error
        )
        logger.log(
            logging.INFO if stopped else logging.WARNING,
            "judge cache %s could not be %s (%s); this run goes on without the cache%s",
            self.path,
            doing,
            error,
            where,
        )

    def get(self, key: str) -> JudgeReply | None:
        """The judge's reply stored under ``key`` (a hit or a miss is counted: the judge's)."""
        reply = self.lookup(key)
        if reply is None:
            self.misses += 1
        else:
            self.hits += 1
        return reply

    def lookup(self, key: str) -> JudgeReply | None:
        """The reply stored under ``key``, uncounted."""
        row = None
        if self._db is not None:
            try:
                row = self._db.execute(
                    "SELECT content, input_tokens, output_tokens, reasoning_tokens FROM replies "
                    "WHERE key = ?",
                    (key,),
                ).fetchone()
            except sqlite3.Error as error:
                self._failed("read", error)
        if row is None:
            return None
        usage = TokenUsage(input_tokens=row[1], output_tokens=row[2], reasoning_tokens=row[3])
        return JudgeReply(content=row[0], usage=usage)

    def put(self, key: str, reply: JudgeReply, judge: str) -> bool:
        """Store a judge's reply; whether it was stored (counted: the judge's)."""
        stored = self.store(key, reply, judge)
        self.stored += stored
        return stored

    def store(self, key: str, reply: JudgeReply, judge: str) -> bool:
        """Store a reply under ``key``, uncounted; whether it was stored. ``judge`` names who
        answered (``summeval-cache info`` and a person reading the file)."""
        if self._db is None:
            return False
        content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        # A reply that quotes a key (a server that echoes the Authorization header) keeps it
        # out of the cache file too; replayed, the reply says *** instead.
        content = scrub(content)
        try:
            self._db.execute(
                f"INSERT OR REPLACE INTO replies ({', '.join(_COLUMNS)}, {_ADDED_COLUMN}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    content,
                    reply.usage.input_tokens,
                    reply.usage.output_tokens,
                    judge,
                    time.time(),
                    reply.usage.reasoning_tokens,
                ),
            )
        except sqlite3.Error as error:
            self._failed("written", error)
            return False
        return True

    def get_questions(self, key: str) -> QuestionSet | None:
        """A question set stored under ``key``, when the mode reads and the cache holds one."""
        if self._db is None or not self.reads:
            return None
        try:
            row = self._db.execute(
                "SELECT questions, drawn_with FROM questions WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as error:
            self._failed("read", error)
            return None
        if row is None:
            return None
        try:
            questions = json.loads(row[0])
        except ValueError:
            return None
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            return None
        return QuestionSet(tuple(questions), str(row[1]))

    def put_questions(self, key: str, drawn: QuestionSet, judge: str) -> QuestionSet:
        """Keep a question set unless one is stored under ``key`` already (another process drew
        it at the same moment); the set stored now, or ``drawn`` when nothing could be."""
        if self._db is None or not self.writes:
            return drawn
        try:
            self._db.execute(
                "INSERT OR IGNORE INTO questions (key, questions, drawn_with, judge, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    key,
                    scrub(json.dumps(list(drawn.questions), ensure_ascii=False)),
                    drawn.drawn_with,
                    judge,
                    time.time(),
                ),
            )
        except sqlite3.Error as error:
            self._failed("written", error)
            return drawn
        return (self.get_questions(key) if self.reads else None) or drawn

    def add_question_drawer(self, key: str, held: QuestionSet) -> None:
        """Record ``held``'s drawers for the set stored under ``key`` (one drew it too)."""
        if self._db is None or not self.writes:
            return
        try:
            self._db.execute(
                "UPDATE questions SET drawn_with = ? WHERE key = ?", (held.drawn_with, key)
            )
        except sqlite3.Error as error:
            self._failed("written", error)

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise ConfigError(f"the judge cache {self.path} is not usable now (see the warning)")
        return self._db

    def stats(self) -> CacheStats:
        (entries,) = self._connection().execute("SELECT COUNT(*) FROM replies").fetchone()
        size = sum(
            p.stat().st_size
            for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm"))
            if p.exists()
        )
        return CacheStats(self.path, int(entries), size)

    def clear(self) -> int:
        """Delete every entry (replies and question sets); return how many replies there were."""
        db = self._connection()
        (entries,) = db.execute("SELECT COUNT(*) FROM replies").fetchone()
        db.execute("DELETE FROM replies")
        db.execute("DELETE FROM questions")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        return int(entries)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


def _damaged(error: sqlite3.Error) -> bool:
    """Whether sqlite says the file is no database or a damaged one (never a busy one)."""
    name = getattr(error, "sqlite_errorname", None)  # Python 3.11+
    if name is not None:
        return name == "SQLITE_NOTADB" or str(name).startswith("SQLITE_CORRUPT")
    text = str(error)
    return "file is not a database" in text or "malformed" in text


def _busy(error: sqlite3.Error) -> bool:
    name = getattr(error, "sqlite_errorname", None)
    if name is not None:
        return str(name).startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return "locked" in str(error) or "busy" in str(error)


def _inode_of(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


@contextlib.contextmanager
def _repairing(path: Path) -> Iterator[None]:
    """Hold the cache directory's lock while a damaged cache is moved aside and replaced, so
    that processes finding the same damage at once replace it once (POSIX; elsewhere none)."""
    if fcntl is None:
        yield
        return
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)


def _move_aside(path: Path) -> Path:
    """Rename a damaged cache file (and its WAL files, which belong to it) to
    ``<name>.corrupt-<time>``; the name is new, so nothing earlier is overwritten."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    number = 1
    while aside.exists():
        number += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{number}")
    for suffix in ("-wal", "-shm", ""):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside


class CachedJudge:
    """A judge behind the response cache: a hit never reaches the judge (or its limits)."""

    def __init__(
        self,
        judge: Judge,
        cache: ResponseCache,
        identity: Mapping[str, Any],
        *,
        on_traffic: Callable[[Mapping[str, float]], None] | None = None,
    ) -> None:
        self.judge = judge
        self.cache = cache
        self.identity = dict(identity)
        self.name = judge_name(judge)
        self.price = judge_price(judge)
        # Hears each hit and each store (a recorded run journals them).
        self._on_traffic = on_traffic

    async def complete(self, request: JudgeRequest) -> JudgeReply:
        key = request_key(self.identity, request)
        if self.cache.reads:
            cached = self.cache.get(key)
            if cached is not None:
                self._count("cache_hits")
                # Paid for when it was stored: this answer costs nothing, at any price; with
                # no price given, what this run's calls cost is not known, this one's neither.
                return replace(cached, cost=0.0 if self.price is not None else None, cached=True)
        reply = await self.judge.complete(request)
        stored = (
            self.cache.writes
            and self.cache.usable
            and _valid(request, reply)
            and self.cache.put(key, reply, self.name)
        )
        if stored:
            self._count("cache_stored")
        return reply

    def request_body(self, request: JudgeRequest) -> Mapping[str, Any] | None:
        """What the wrapped judge sends for ``request`` (a transcript shows it)."""
        return request_body_of(self.judge, request)

    def _count(self, counter: str) -> None:
        if self._on_traffic is not None:
            self._on_traffic({counter: 1})

    async def aclose(self) -> None:
        await close_judge(self.judge)


class AgentCache:
    """The run's response cache as the agent under test calls it: ``run_evals`` gives it to an
    agent that offers ``with_cache(cache)`` (the bundled LLM summarizer), as it wraps judges.

    ``complete(identity, request, call)`` answers from the cache when the mode reads and it
    holds the call (its reply costs 0), else makes the call and keeps a reply with text when
    the mode writes. Hits are counted apart from the judge's (``target_cache_hits``): the
    manifest's cache counts stay the judge's.
    """

    def __init__(
        self,
        cache: ResponseCache,
        *,
        on_traffic: Callable[[Mapping[str, float]], None] | None = None,
    ) -> None:
        self._cache = cache
        self._on_traffic = on_traffic

    async def complete(
        self,
        identity: Mapping[str, Any],
        request: Mapping[str, Any],
        call: Callable[[], Awaitable[JudgeReply]],
    ) -> JudgeReply:
        """``call``'s reply, or the one kept for the same ``identity`` and ``request``.

        ``identity`` is what decides the reply besides the request (provider, endpoint);
        ``request`` the call's parameters (model, messages, sampling), as JSON values.
        """
        key = agent_key(identity, request)
        if self._cache.reads:
            cached = self._cache.lookup(key)
            if cached is not None:
                if self._on_traffic is not None:
                    self._on_traffic({"target_cache_hits": 1})
                return replace(cached, cost=0.0)
        reply = await call()
        # A blank reply is not kept: more likely a failed call than a summary.
        if self._cache.writes and isinstance(reply.content, str) and reply.content.strip():
            self._cache.store(key, reply, f"agent {identity.get('model') or request.get('model')}")
        return reply


class CachedQuestions:
    """The response cache as one judge's ``QuestionStore``: its question sets, kept across runs."""

    def __init__(self, cache: ResponseCache, identity: Mapping[str, Any], judge: str) -> None:
        self._cache = cache
        self._identity = dict(identity)
        self._judge = judge

    def get(self, key: QuestionKey) -> QuestionSet | None:
        return self._cache.get_questions(questions_key(self._identity, key))

    def put(self, key: QuestionKey, drawn: QuestionSet) -> QuestionSet:
        return self._cache.put_questions(questions_key(self._identity, key), drawn, self._judge)

    def add_drawer(self, key: QuestionKey, held: QuestionSet) -> None:
        self._cache.add_question_drawer(questions_key(self._identity, key), held)


def _valid(request: JudgeRequest, reply: JudgeReply) -> bool:
    output = reply_model(request)
    try:
        if isinstance(reply.content, str):
            output.model_validate_json(reply.content)
        else:
            output.model_validate(reply.content)
    except ValidationError:
        return False
    return True
