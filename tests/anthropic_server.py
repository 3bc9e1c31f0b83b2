"""An Anthropic Messages API server on 127.0.0.1 for tests: real HTTP, scripted replies and faults.

It speaks ``POST /v1/messages`` as Anthropic's API does: the key in ``x-api-key`` or as a
bearer token (a request without one of ``keys`` is the API's 401 ``authentication_error``),
``anthropic-version`` required, the system prompt top-level, ``max_tokens`` required (a
request without it is the API's 400 ``invalid_request_error``). A request that forces a tool
(``tool_choice`` ``tool``) is answered with a ``tool_use`` block whose input is a valid reply
for the step the tool is named after (``chat_server.valid_content``); one without tools (the
bundled LLM summarizer's) with a text block. A test queues what the next requests get with
``script``: ``ProxyPage()`` for an HTTP 200 that is a proxy's HTML page, ``Fault(status, type,
headers)`` for an error in Anthropic's shape (``{"type":
"error", "error": {...}}``: 429 ``rate_limit_error``, 529 ``overloaded_error``), ``CutOff()``
for a reply cut at ``max_tokens`` (``stop_reason`` ``max_tokens``, its tool input a
valid-looking but short one). ``edit_answer(tool, body, answer)``, when set, returns the tool
input to send in place of the valid one (a judge that sees the text otherwise than another).

It serves the Message Batches API too (``/v1/messages/batches``): a batch's requests are
answered as they would be alone (scripts apply, request by request), the batch is in progress
when made and ended from its first read, and its results are JSONL at its ``results_url``.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.chat_server import SUMMARY_REPLY, valid_content

# Tokens each answer reports: a prompt's, a reply's, and a cache read's (prompt caching's).
INPUT_TOKENS, OUTPUT_TOKENS, CACHE_READ_TOKENS = 120, 30, 20


@dataclass(frozen=True)
class Fault:
    status: int
    type: str = "api_error"
    message: str = "injected fault"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CutOff:
    """A reply cut at ``max_tokens``: its tool input parses (a claims list closed early)."""


@dataclass(frozen=True)
class ProxyPage:
    """An HTTP 200 whose body is a proxy's HTML error page (``text/html``), not a message."""


PROXY_PAGE = "<html><body>502 Bad Gateway</body></html>"


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    batch: str | None = None  # the Message Batch whose request it was

    @property
    def tool(self) -> str | None:
        choice = self.body.get("tool_choice") or {}
        return str(choice["name"]) if choice.get("type") == "tool" else None


def _chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request as a Chat Completions body, for ``chat_server.valid_content``: the tool's
    name as the schema's, the system prompt as the first message."""
    system = body.get("system") or ""
    return {
        "response_format": {"json_schema": {"name": (body.get("tool_choice") or {}).get("name")}},
        "messages": [{"role": "system", "content": system}, *body["messages"]],
    }


def _not_found(path: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "not_found_error", "message": f"no {path}"}}


class AnthropicServer:
    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        # The keys it takes; () takes any key.
        self.keys = keys
        self.requests: list[Recorded] = []
        self.counts: Counter[str] = Counter()
        self._script: deque[Fault | CutOff | ProxyPage] = deque()
        self._always: Fault | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # The Message Batches API: each batch's requests' results (custom_id, HTTP status,
        # body), and how often each batch was read; answered when first read, not before.
        self.batches: dict[str, list[tuple[str, int, dict[str, Any]]]] = {}
        self.batch_reads: Counter[str] = Counter()
        # What a request without tools (the bundled LLM summarizer's) is answered.
        self.summary_reply = SUMMARY_REPLY
        self.edit_answer: Callable[[str, dict[str, Any], dict[str, Any]], dict[str, Any]] | None = (
            None
        )
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """Anthropic's base URL has no ``/v1``: the SDK adds it."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def script(self, *entries: Fault | CutOff | ProxyPage) -> None:
        with self._lock:
            self._script.extend(entries)

    def fail_every_request(self, fault: Fault | None) -> None:
        with self._lock:
            self._always = fault

    def start(self) -> AnthropicServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, record: Recorded) -> tuple[int, dict[str, Any] | str, dict[str, str]]:
        """The status, the body (a text: an HTML page) and the headers of the answer."""
        with self._lock:
            self.requests.append(record)
            # The SDK sends the key as a bearer token; Anthropic's API takes x-api-key too.
            bearer = record.headers.get("authorization", "").removeprefix("Bearer ")
            key = record.headers.get("x-api-key", bearer)
            if self.keys and key not in self.keys:
                entry: Fault | CutOff | ProxyPage | None = Fault(
                    401, "authentication_error", "invalid api key"
                )
            elif "max_tokens" not in record.body:
                entry = Fault(400, "invalid_request_error", "max_tokens: Field required")
            elif "anthropic-version" not in record.headers:
                entry = Fault(400, "invalid_request_error", "anthropic-version header required")
            else:
                entry = self._always or (self._script.popleft() if self._script else None)
            kinds = {CutOff: "cut", ProxyPage: "page"}
            kind = str(entry.status) if isinstance(entry, Fault) else kinds.get(type(entry), "ok")
            self.counts[kind] += 1
            number = next(self._ids)
        if isinstance(entry, ProxyPage):
            return 200, PROXY_PAGE, {}
        if isinstance(entry, Fault):
            error = {"type": "error", "error": {"type": entry.type, "message": entry.message}}
            return entry.status, error, entry.headers
        tool = record.tool
        content: list[dict[str, Any]]
        if tool is None:
            content = [{"type": "text", "text": self.summary_reply}]
        else:
            answer = valid_content(_chat_body(record.body))
            if self.edit_answer is not None:
                answer = self.edit_answer(tool, record.body, answer)
            if isinstance(entry, CutOff) and "alignment" in answer:
                answer["alignment"] = answer["alignment"][:1]
            content = [{"type": "tool_use", "id": f"toolu_{number}", "name": tool, "input": answer}]
        message = {
            "id": f"msg_{number}",
            "type": "message",
            "role": "assistant",
            "model": record.body.get("model"),
            "content": content,
            "stop_reason": "max_tokens"
            if isinstance(entry, CutOff)
            else "tool_use"
            if tool
            else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": INPUT_TOKENS,
                "output_tokens": OUTPUT_TOKENS,
                "cache_read_input_tokens": CACHE_READ_TOKENS,
                "cache_creation_input_tokens": 0,
            },
        }
        return 200, message, {"anthropic-ratelimit-tokens-remaining": "90000"}

    def _create_batch(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """A Message Batch of the body's requests, each answered as it would be alone (scripts
        apply, request by request)."""
        with self._lock:
            batch_id = f"msgbatch_{next(self._ids)}"
        results = []
        for request in body["requests"]:
            status, answer, _ = self._answer(
                Recorded("/v1/messages", headers, request["params"], batch=batch_id)
            )
            results.append((str(request["custom_id"]), status, answer))
        with self._lock:
            self.batches[batch_id] = results
        return self._batch_object(batch_id)

    def _batch_object(self, batch_id: str) -> dict[str, Any]:
        # In progress when made, ended from its first read on.
        ended = self.batch_reads[batch_id] > 0
        results = self.batches[batch_id]
        errored = sum(status != 200 for _, status, _ in results)
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {
                "processing": 0 if ended else len(results),
                "succeeded": len(results) - errored if ended else 0,
                "errored": errored if ended else 0,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": "2026-12-03T10:00:00Z",
            "expires_at": "2026-12-04T10:00:00Z",
            "ended_at": "2026-12-03T10:01:00Z" if ended else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.base_url}/v1/messages/batches/{batch_id}/results"
            if ended
            else None,
        }

    def _results(self, batch_id: str) -> bytes:
        lines = []
        for custom_id, status, answer in self.batches[batch_id]:
            result = (
                {"type": "succeeded", "message": answer}
                if status == 200
                else {"type": "errored", "error": answer}
            )
            lines.append(json.dumps({"custom_id": custom_id, "result": result}))
        return ("\n".join(lines) + "\n").encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = self.path.split("?")[0].strip("/").split("/")
                batch_id = parts[3] if len(parts) > 3 else ""
                if parts[:3] != ["v1", "messages", "batches"] or batch_id not in server.batches:
                    self._send(404, _not_found(self.path), {})
                elif parts[4:] == ["results"]:
                    data = server._results(batch_id)
                    self.send_response(200)
                    self.send_header("Content-Type", "application/binary")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    answer = server._batch_object(batch_id)
                    with server._lock:
                        server.batch_reads[batch_id] += 1
                    self._send(200, answer, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                route = self.path.split("?")[0]
                if route == "/v1/messages/batches":
                    self._send(200, server._create_batch(body, headers), {})
                elif route == "/v1/messages":
                    self._send(*server._answer(Recorded(self.path, headers, body)))
                else:
                    self._send(404, _not_found(self.path), {})

            def _send(
                self, status: int, answer: dict[str, Any] | str, extra: dict[str, str]
            ) -> None:
                page = isinstance(answer, str)
                data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if page else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", "req_test")
                for name, value in extra.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler
