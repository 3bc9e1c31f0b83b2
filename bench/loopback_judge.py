"""A loopback OpenAI-compatible judge for benchmarks: fixed latency, realistic replies, counts.

Runs in its own process (so that its CPU is not the runner's) on asyncio, with HTTP/1.1
keep-alive: ``python bench/loopback_judge.py [--port P] [--latency 0.2] [--rpm R]`` prints its
port on the first line of stdout (and its address on stderr), then serves until Ctrl-C or
SIGTERM; a bench that starts it passes ``--until-stdin-closes`` so that it also stops when its
parent closes the pipe (or dies). ``GET /stats`` returns what it counted: TCP connections
opened, requests, 429s sent, prompt and completion tokens.

No key and no network: ``summeval-run model=openai model.name=loopback
model.base_url=http://127.0.0.1:P/v1 model.api_key_env=null`` judges with it (docs/judges.md).

Replies are what a careful judge would write for the request, sized like a real model's: one
claim per summary sentence with a one-line reason, the questions asked for, a verdict with a
reason for each question, a two-sentence explanation. With ``--sampling`` (``reply_for(body,
sampling=True)``) it answers as a sampling model whose seed varies by trial: one question in
ten, drawn from the request's ``seed`` and the question, gets the other verdict. Token counts
are estimated as a real tokenizer counts English text and JSON, at four bytes a token, for
prompt and reply alike.

With ``--rpm R`` the server limits requests as providers do: a token bucket refilled at R a
minute, holding at most one second's worth, so a client faster than R gets 429s with
``Retry-After``. With ``--tpm T`` it limits tokens the same way: a request's prompt and reply
tokens are taken from a bucket refilled at T a minute, holding one second's worth; a request
the bucket cannot cover gets a 429, and every answer says what is left in OpenAI's
``x-ratelimit-limit-tokens``, ``-remaining-tokens`` and ``-reset-tokens`` headers.

With ``--record FILE`` every chat request's body is appended to FILE, one per line, as it came:
``bench/bare_client.py`` sends the same bodies again, the floor a runner's CPU is held against.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from summeval_runner._scorers._fences import fenced


def tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / 4)


class Stats:
    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.throttled = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_at: float | None = None
        self.last_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class Bucket:
    """R requests a minute, at most one second's worth at once."""

    def __init__(self, rpm: float) -> None:
        self.rate = rpm / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self.at = time.monotonic()

    def take(self) -> float:
        """0 when a request may pass; else the seconds until one may."""
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / self.rate


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _step(body: dict[str, Any]) -> str:
    name = str(body.get("response_format", {}).get("json_schema", {}).get("name", ""))
    if name:
        return name.removeprefix("summarization_")
    system = str(body["messages"][0]["content"])
    if "QUESTIONS" in system or "KEY FACTS" in system:
        return "analyze"
    if "Task 2, key facts" in system:
        return "key_facts"
    if "Task 1, claims" in system:
        return "preprocess"
    return "claims" if "atomic claims" in system else "reason"


def _drawn(seed: object, question: str) -> bool:
    """One question in ten, by the request's seed: the verdicts a sampling model changes."""
    digest = hashlib.sha256(f"{seed}\0{question}".encode()).digest()
    return digest[0] % 10 == 0


def reply_for(body: dict[str, Any], sampling: bool = False) -> dict[str, Any]:
    """The judge's reply for the request's step, as a careful model would size it; with
    ``sampling``, one verdict in ten follows the request's seed (each trial's own)."""
    user = str(body["messages"][-1]["content"])
    step = _step(body)
    if step in ("preprocess", "claims", "key_facts"):
        summary = (fenced(user, "summary") or "").strip()
        source = (fenced(user, "source") or "").strip()
        sentences = [s for s in _SENTENCE.split(source) if s.strip()]
        wanted = re.search(r"at most (\d+) (?:questions|key facts)", user)
        # A claims-only call (the source's questions are shared) asks for none.
        facts = sentences[: int(wanted[1])] if wanted else []
        claims = [s for s in _SENTENCE.split(summary) if s.strip()]
        reply: dict[str, Any] = {
            "alignment": [
                {
                    "claim": claim,
                    "supported": i % 4 != 3,
                    "reason": "The source states this in its opening paragraph."
                    if i % 4 != 3
                    else f"The source gives a different figure: {sentences[0][:40]}",
                }
                for i, claim in enumerate(claims)
            ]
        }
        if step == "key_facts":
            reference = (fenced(user, "reference") or "").strip()
            facts = [s for s in _SENTENCE.split(reference) if s.strip()]
            reply["key_facts"] = facts[: int(wanted[1])] if wanted else facts
        if step == "preprocess":
            # At most 12 words, as the prompt asks.
            reply["questions"] = [
                f"Does it say {' '.join(fact.split()[:9]).rstrip('.').lower()}?" for fact in facts
            ]
        return reply
    if step == "analyze":
        label = "QUESTIONS:\n" if "QUESTIONS:\n" in user else "KEY FACTS:\n"
        questions = [
            line.split(". ", 1)[1] for line in user.split(label, 1)[1].splitlines() if ". " in line
        ]
        answered = [
            (i % 3 != 2) != (sampling and _drawn(body.get("seed"), question))
            for i, question in enumerate(questions)
        ]
        return {
            "coverage": [
                {
                    "answered": yes,
                    "reason": f"The summary {'states' if yes else 'omits'} that "
                    f"{' '.join(question.split()[4:9])}",
                }
                for yes, question in zip(answered, questions, strict=True)
            ]
        }
    return {
        "reason": "Coverage set the score: the summary answers 7 of 10 questions and 3 of its 4 "
        "claims are supported. It omits the figures the source gives."
    }


class TokenBucket:
    """T tokens a minute, at most one second's worth at once; a request takes its tokens."""

    def __init__(self, tpm: float) -> None:
        self.limit = tpm
        self.rate = tpm / 60.0
        self.capacity = self.rate
        self.level = self.capacity
        self.at = time.monotonic()

    def take(self, tokens: int) -> float:
        """0 when the bucket covers ``tokens`` (taken); else the seconds until it would."""
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        need = min(float(tokens), self.capacity)
        if self.level < need:
            return (need - self.level) / self.rate
        self.level -= tokens
        return 0.0

    def headers(self) -> str:
        full_in = max(0.0, self.capacity - self.level) / self.rate
        return (
            f"x-ratelimit-limit-tokens: {self.limit:.0f}\r\n"
            f"x-ratelimit-remaining-tokens: {max(0, int(self.level))}\r\n"
            f"x-ratelimit-reset-tokens: {full_in * 1000:.0f}ms\r\n"
        )


def completion(body: dict[str, Any], content: str) -> dict[str, Any]:
    prompt = sum(tokens(str(m.get("content", ""))) + 4 for m in body["messages"])
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema")
    if schema is not None:
        prompt += tokens(json.dumps(schema, separators=(",", ":")))
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "bench"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": tokens(content),
            "total_tokens": prompt + tokens(content),
        },
    }


class Server:
    def __init__(
        self,
        latency_s: float,
        rpm: float | None,
        tpm: float | None = None,
        record: BinaryIO | None = None,
        sampling: bool = False,
    ) -> None:
        self.latency_s = latency_s
        self.record = record
        self.sampling = sampling
        self.bucket = Bucket(rpm) if rpm else None
        self.tokens = TokenBucket(tpm) if tpm else None
        self.stats = Stats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload, extra = await self.answer(method, path, raw)
                data = json.dumps(payload).encode()
                writer.write(
                    (
                        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                        f"content-length: {len(data)}\r\n{extra}\r\n"
                    ).encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, path: str, raw: bytes) -> tuple[str, Any, str]:
        if method == "GET" and path.endswith("/stats"):
            return "200 OK", self.stats.as_dict(), ""
        stats = self.stats
        now = time.monotonic()
        stats.first_at = stats.first_at or now
        stats.last_at = now
        stats.requests += 1
        if self.bucket is not None:
            wait = self.bucket.take()
            if wait > 0:
                stats.throttled += 1
                error = {"error": {"message": "Rate limit reached", "type": "requests"}}
                return "429 Too Many Requests", error, f"retry-after-ms: {int(wait * 1000) + 1}\r\n"
        if self.record is not None:
            self.record.write(raw.replace(b"\n", b"") + b"\n")
        body = json.loads(raw)
        content = json.dumps(reply_for(body, self.sampling))
        result = completion(body, content)
        extra = ""
        if self.tokens is not None:
            # Charged as the request arrives, as providers count a request against the limit.
            wait = self.tokens.take(result["usage"]["total_tokens"])
            if wait > 0:
                stats.throttled += 1
                error = {"error": {"message": "Rate limit reached", "type": "tokens"}}
                after = f"retry-after-ms: {int(wait * 1000) + 1}\r\n{self.tokens.headers()}"
                return "429 Too Many Requests", error, after
            extra = self.tokens.headers()
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            stats.in_flight -= 1
        stats.prompt_tokens += result["usage"]["prompt_tokens"]
        stats.completion_tokens += result["usage"]["completion_tokens"]
        return "200 OK", result, extra


async def serve(args: argparse.Namespace, record: BinaryIO | None) -> None:
    server = Server(args.latency, args.rpm, args.tpm, record, args.sampling)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, backlog=1024)
    port = listener.sockets[0].getsockname()[1]
    print(port, flush=True)
    print(
        f"loopback judge: an OpenAI-compatible chat API on http://127.0.0.1:{port}/v1 "
        "(any model name, no key); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    waits = [asyncio.ensure_future(stop.wait())]
    if args.until_stdin_closes:
        # A bench's child: stop too when the parent closes our stdin (or dies).
        waits.append(asyncio.ensure_future(loop.run_in_executor(None, sys.stdin.read)))
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in pending:
        waiting.cancel()
    listener.close()
    print(f"loopback judge: stopped after {server.stats.requests} requests", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per reply")
    parser.add_argument("--rpm", type=float, default=None, help="429 beyond this many a minute")
    parser.add_argument("--tpm", type=float, default=None, help="429 beyond these tokens a minute")
    parser.add_argument("--record", type=Path, default=None, help="append each request body here")
    parser.add_argument(
        "--sampling", action="store_true", help="one verdict in ten varies with the seed"
    )
    parser.add_argument(
        "--until-stdin-closes",
        action="store_true",
        help="also stop when stdin closes (for a bench that starts it)",
    )
    args = parser.parse_args()
    if args.record is None:
        asyncio.run(serve(args, None))
        return
    with args.record.open("ab") as record:
        asyncio.run(serve(args, record))


if __name__ == "__main__":
    main()
