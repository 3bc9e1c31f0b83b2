"""A Gemini API server on 127.0.0.1 for tests: ``POST /v1beta/models/{model}:generateContent``
as Google's Generative Language API speaks it, with scripted replies and faults.

It answers each step with a valid reply made from the request, read as the judge's steps are
read by ``tests/chat_server.py`` (the system instruction and the user turn give the step). The
key comes in the ``x-goog-api-key`` header; a request with another key than ``key`` is answered
as Google answers a key it does not know: HTTP 400 ``INVALID_ARGUMENT`` with the reason
``API_KEY_INVALID`` (not 401). A test queues what the next requests get with ``script``:
``Reply(text)``, ``Fault(status, ...)`` (Google's error body, its ``status`` name and, for a
429, a ``RetryInfo`` detail with ``retryDelay``), ``Finish("MAX_TOKENS")`` for a reply cut at
its bound (half of a valid reply's text), ``Finish("SAFETY")`` for a candidate blocked with no
text, ``Blocked()`` for a prompt blocked with no candidate at all. ``thoughts_tokens`` makes
every reply report a thinking model's thought tokens (``usageMetadata.thoughtsTokenCount``);
``hanging`` holds every request unanswered until ``stop()``. It serves the Batch API too
(``models/{model}:batchGenerateContent`` with inlined requests, ``batches/{name}``, ``batches``):
a batch's requests are answered as interactive ones are (scripts apply, line by line) when the
batch is first read, their errors as ``google.rpc.Status`` with its gRPC code.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.chat_server import SUMMARY_REPLY, valid_content

BATCH_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch"
# The google.rpc code of each HTTP status, as a batch's inlined errors carry it.
RPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 429: 8, 500: 13, 503: 14}
# The status names Google's errors carry beside each HTTP code.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass(frozen=True)
class Reply:
    text: str


@dataclass(frozen=True)
class Fault:
    status: int
    message: str = "injected fault"
    # A 429's RetryInfo (``"0.05s"``), as Gemini sends it in the error's details.
    retry_delay: str | None = None
    reason: str | None = None  # an ErrorInfo detail's reason (API_KEY_INVALID)


@dataclass(frozen=True)
class Finish:
    """A candidate that ended for ``reason``: MAX_TOKENS (its text cut to ``kept`` of it:
    none when a thinking model's thoughts took the whole bound), SAFETY (no text)."""

    reason: str
    kept: float = 0.5


@dataclass(frozen=True)
class Blocked:
    """The prompt blocked: ``promptFeedback.blockReason``, no candidate."""

    reason: str = "SAFETY"


@dataclass
class GeminiRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return self.path.split("/models/", 1)[1].split(":", 1)[0]

    @property
    def chat(self) -> dict[str, Any]:
        """The request as Chat Completions messages: what ``tests/chat_server.py`` reads a step
        from (a json reply wanted: ``response_format`` json_object, the step from the prompt)."""
        system = self.body.get("systemInstruction", {}).get("parts", [])
        messages = [{"role": "system", "content": "".join(p.get("text", "") for p in system)}]
        for turn in self.body.get("contents", []):
            text = "".join(p.get("text", "") for p in turn.get("parts", []))
            messages.append({"role": turn.get("role", "user"), "content": text})
        chat: dict[str, Any] = {"messages": messages}
        config = self.body.get("generationConfig", {})
        if config.get("responseMimeType") == "application/json":
            chat["response_format"] = {"type": "json_object"}
        return chat


@dataclass
class GeminiServer:
    key: str | None = None
    thoughts_tokens: int = 0
    requests: list[GeminiRequest] = field(default_factory=list)
    # The tokens each answered reply reported: (prompt, candidates, thoughts).
    usage: list[tuple[int, int, int]] = field(default_factory=list)
    # The Batch API's batches (``batchGenerateContent``), by name: their operation and their
    # inlined requests, answered as interactive requests are when the batch is first read.
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    _script: list[Reply | Fault | Finish | Blocked] = field(default_factory=list)
    _always: Fault | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        # While set, requests are held unanswered (a model that never replies) until stop().
        self.hanging = False
        self._released = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def script(self, *entries: Reply | Fault | Finish | Blocked) -> None:
        with self._lock:
            self._script.extend(entries)

    def fail_every_request(self, fault: Fault | None) -> None:
        with self._lock:
            self._always = fault

    def start(self) -> GeminiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, request: GeminiRequest) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
            given = request.headers.get("x-goog-api-key")
            if self.key is not None and given != self.key:
                return _error(
                    Fault(400, "API key not valid. Please pass a valid API key.",
                          reason="API_KEY_INVALID")
                )  # fmt: skip
            entry = self._always or (self._script.pop(0) if self._script else None)
        if isinstance(entry, Fault):
            return _error(entry)
        if isinstance(entry, Blocked):
            return 200, {
                "promptFeedback": {"blockReason": entry.reason},
                "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10},
            }
        chat = request.chat
        if isinstance(entry, Reply):
            text = entry.text
        elif "response_format" not in chat:
            text = SUMMARY_REPLY
        else:
            text = json.dumps(valid_content(chat))
        finish = "STOP"
        if isinstance(entry, Finish):
            finish = entry.reason
            text = text[: int(len(text) * entry.kept)] if entry.reason == "MAX_TOKENS" else ""
        candidate: dict[str, Any] = {"finishReason": finish, "index": 0}
        if text:
            candidate["content"] = {"role": "model", "parts": [{"text": text}]}
        if finish == "SAFETY":
            candidate["safetyRatings"] = [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH",
                 "blocked": True}
            ]  # fmt: skip
        prompt_tokens = len(json.dumps(request.body)) // 4
        usage = {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": len(text) // 4,
            "totalTokenCount": prompt_tokens + len(text) // 4 + self.thoughts_tokens,
        }
        if self.thoughts_tokens:
            usage["thoughtsTokenCount"] = self.thoughts_tokens
        with self._lock:
            self.usage.append((prompt_tokens, len(text) // 4, self.thoughts_tokens))
        return 200, {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": request.model,
            "responseId": f"resp-{len(self.requests)}",
        }

    def create_batch(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        model = path.split("/models/", 1)[1].split(":", 1)[0]
        if self.key is not None and headers.get("x-goog-api-key") != self.key:
            return _error(Fault(400, "API key not valid.", reason="API_KEY_INVALID"))
        batch = body["batch"]
        with self._lock:
            name = f"batches/b{len(self.batches) + 1}"
            self.batches[name] = {
                "requests": batch["inputConfig"]["requests"]["requests"],
                "model": model,
                "headers": headers,
                "operation": {
                    "name": name,
                    "metadata": {
                        "@type": BATCH_TYPE,
                        "model": f"models/{model}",
                        "displayName": batch.get("displayName", ""),
                        "state": "BATCH_STATE_PENDING",
                        "createTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    },
                },
            }
            return 200, self.batches[name]["operation"]

    def read_batch(self, name: str) -> tuple[int, dict[str, Any]]:
        batch = self.batches.get(name)
        if batch is None:
            return _error(Fault(404, f"{name} not found"))
        operation = batch["operation"]
        if operation["metadata"]["state"] == "BATCH_STATE_PENDING":
            responses = []
            for inlined in batch["requests"]:
                request = GeminiRequest(
                    path=f"/v1beta/models/{batch['model']}:generateContent",
                    headers=batch["headers"],
                    body=inlined["request"],
                )
                status, answer = self.answer(request)
                line: dict[str, Any] = {"metadata": inlined.get("metadata", {})}
                if status == 200:
                    line["response"] = answer
                else:
                    error = answer["error"]
                    line["error"] = {"code": RPC_CODES.get(status, 13), "message": error["message"]}
                responses.append(line)
            operation["metadata"]["state"] = "BATCH_STATE_SUCCEEDED"
            operation["metadata"]["output"] = {"inlinedResponses": {"inlinedResponses": responses}}
            operation["done"] = True
        return 200, operation

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def send_json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].removeprefix("/v1beta/")
                if path == "batches":
                    with server._lock:
                        listed = [b["operation"] for b in reversed(server.batches.values())]
                    self.send_json(200, {"operations": listed})
                elif path.startswith("batches/"):
                    self.send_json(*server.read_batch(path))
                else:
                    self.send_json(404, _error(Fault(404, f"no route {path}"))[1])

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                path = self.path.split("?", 1)[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                if path.endswith(":batchGenerateContent"):
                    self.send_json(*server.create_batch(path, headers, json.loads(raw)))
                    return
                if not (path.startswith("/v1beta/models/") and path.endswith(":generateContent")):
                    self.send_json(404, _error(Fault(404, f"no route {path}"))[1])
                    return
                request = GeminiRequest(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=json.loads(raw or b"{}"),
                )
                if server.hanging:
                    server._released.wait()
                    self.close_connection = True
                    return
                self.send_json(*server.answer(request))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _error(fault: Fault) -> tuple[int, dict[str, Any]]:
    """Google's error body (``google.rpc.Status``) for ``fault``."""
    details: list[dict[str, Any]] = []
    if fault.retry_delay is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": fault.retry_delay}
        )
    if fault.reason is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": fault.reason,
             "domain": "googleapis.com"}
        )  # fmt: skip
    error: dict[str, Any] = {
        "code": fault.status,
        "message": fault.message,
        "status": STATUS_NAMES.get(fault.status, "UNKNOWN"),
    }
    if details:
        error["details"] = details
    return fault.status, {"error": error}
