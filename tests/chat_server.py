"""A Chat Completions server on 127.0.0.1 for tests: real HTTP, scripted replies and faults.

By default it answers each step with a valid reply made from the request (it reads the step from
the JSON schema's name, or from the system prompt in json_object mode). A test queues what the
next requests get with ``script``: ``Reply(content)`` for a chosen message content (malformed
JSON included) or ``Fault(status, ...)`` for an HTTP error, ``BrokenReply(kind)`` for an HTTP 200
whose body is cut off or is not JSON. ``FaultMix`` injects faults at random, seeded so that a
run's outcome does not depend on the order requests arrive in. ``go_down()`` and ``come_back()``
take the server off its port (connections refused) and put it back on the same port.
``json_schema_supported = False`` refuses ``response_format`` json_schema with the HTTP 500 that
llama-cpp-python's server sends. ``reasoning_model = True`` answers as OpenAI's reasoning models
(o-series, gpt-5.x) do: a ``temperature`` other than 1 and any ``max_tokens`` are refused with
their HTTP 400 (``REASONING_REFUSALS``), and each reply reports reasoning tokens
(``usage.completion_tokens_details.reasoning_tokens``, among its completion tokens).
It speaks Azure OpenAI's addresses too: ``/openai/deployments/{deployment}/chat/completions`` with
an ``api-version`` query, for the deployments in ``azure_deployments`` (``azure_endpoint`` is the
resource's endpoint); an unknown deployment or a missing ``api-version`` is Azure's 404.

It serves OpenAI's Files and Batch APIs too (``/v1/files``, ``/v1/batches``): an uploaded JSONL
file of requests becomes a batch whose lines are answered as the requests themselves would be
(scripts and fault mixes apply, line by line) when the batch is read; ``hold_batches`` keeps
batches in progress until ``release_batches``, and ``expire_next_batch(after=k)`` ends the next
batch expired with only its first ``k`` lines answered.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import hashlib
import itertools
import json
import math
import random
import re
import socket
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from summeval_runner._scorers._fences import fenced


@dataclass(frozen=True)
class Reply:
    content: str
    # "length": a reply cut at the request's output bound, as OpenAI reports it.
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Fault:
    status: int
    message: str = "injected fault"
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    # The parameter an HTTP 400 names (OpenAI's error.param), when it names one.
    param: str | None = None


@dataclass(frozen=True)
class BrokenReply:
    """An HTTP 200 with a broken body: ``cut`` promises more bytes (Content-Length) than it sends
    and closes the connection; ``not_json`` sends an HTML page labelled ``application/json``;
    ``html`` sends it as ``text/html``, as a proxy's error page comes."""

    kind: Literal["cut", "not_json", "html"]


BROKEN_PAGE = b"<html><body>502 Bad Gateway</body></html>"


@dataclass(frozen=True)
class FaultMix:
    """Faults injected at random into the server's answers.

    Each request's fate is drawn from a generator seeded by ``seed``, the request's body and how
    many answers other than 429 that body has had, so it is the same whatever order concurrent
    requests arrive in. ``malformed`` hits only a step's first ask (a re-ask states the problem,
    and models mostly correct it). A 429 storm, as a provider's rate limit makes: for the first
    ``storm_s`` seconds of every ``storm_every_s`` (counted from the first request), every request
    is answered 429 with the time left in the storm as ``Retry-After``; no body gets more than
    two 429s, so the outcome does not depend on timing. ``cut_bodies``: an HTTP 200 whose body
    is cut off (``BrokenReply("cut")``).
    """

    seed: int = 0
    server_errors: float = 0.0
    malformed: float = 0.0
    hangs: float = 0.0
    drops: float = 0.0
    hang_s: float = 3.0
    storm_every_s: float = 0.0
    storm_s: float = 0.0
    cut_bodies: float = 0.0


# What a batch line the batch did not reach before its window closed says.
EXPIRED = "This request could not be executed before the completion window expired."
MALFORMED = '{"alignment": [{"claim": "cut sh'

# What llama-cpp-python's server (0.3.36) answers to response_format json_schema: its request
# model knows only "text" and "json_object", and its route's error handler turns the validation
# error into an HTTP 500 in OpenAI's error shape.
JSON_SCHEMA_REFUSED = {
    "error": {
        "message": (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
            "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
            "'ctx': {'expected': \"'text' or 'json_object'\"}}\n"
        ),
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}


# What OpenAI's reasoning models answer to a parameter they do not take (HTTP 400): the body's
# shape, its message, its param and its code as the API sends them.
REASONING_REFUSALS = {
    "temperature": {
        "message": (
            "Unsupported value: 'temperature' does not support {value} with this model. Only the "
            "default (1) value is supported."
        ),
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "unsupported_value",
    },
    "max_tokens": {
        "message": (
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead."
        ),
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    },
}
# The reasoning tokens a reasoning model's reply reports, among its completion tokens.
REASONING_TOKENS = 64


def reasoning_refusal(body: dict[str, Any]) -> dict[str, Any] | None:
    """The refusal a reasoning model sends for this body, if any: its temperature first."""
    if "temperature" in body and body["temperature"] != 1:
        error = dict(REASONING_REFUSALS["temperature"])
        error["message"] = str(error["message"]).format(value=f"{body['temperature']:g}")
        return {"error": error}
    if "max_tokens" in body:
        return {"error": dict(REASONING_REFUSALS["max_tokens"])}
    return None


# Azure OpenAI's answers to a request for a deployment the resource does not have, and to one
# without an api-version.
AZURE_NO_DEPLOYMENT = {
    "error": {
        "code": "DeploymentNotFound",
        "message": (
            "The API deployment for this resource does not exist. If you created the deployment "
            "within the last 5 minutes, please wait a moment and try again."
        ),
    }
}
AZURE_NOT_FOUND = {"error": {"code": "404", "message": "Resource not found"}}


def azure_refusal(path: str, deployments: set[str]) -> dict[str, Any] | None:
    """Azure's 404 for a request to ``path`` (under ``/openai/``), or None: a deployment's chat
    completions with an ``api-version``."""
    route, _, query = path.partition("?")
    parts = route.strip("/").split("/")
    versions = [v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "api-version"]
    if len(parts) != 5 or parts[1] != "deployments" or parts[3:] != ["chat", "completions"]:
        return AZURE_NOT_FOUND
    if not versions or not versions[0]:
        return AZURE_NOT_FOUND
    return None if parts[2] in deployments else AZURE_NO_DEPLOYMENT


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    client_port: int
    arrived: float  # time.monotonic() when the request arrived
    batch: str | None = None  # the batch whose line it was, for a Batch API request

    @property
    def step(self) -> str:
        return step_of(self.body)

    @property
    def text(self) -> str:
        """Every message's content, joined: what the judge was shown."""
        return "\n".join(str(m.get("content", "")) for m in self.body.get("messages", []))


SUMMARY_REPLY = "The model's summary of the text."
# The questions a judge whose choice follows the summary in view picks three of.
QUESTION_POOL = (
    "Did the bridge open?",
    "Did it cost 40 million?",
    "Did traffic fall?",
    "Was the mayor there?",
    "Did the river flood?",
    "Was a toll charged?",
)


_MARKER = re.compile(r"(</?[a-z]+-)[0-9a-f]{16}>")


def unfenced(text: str) -> str:
    """``text`` with every fence's random marker replaced by the same constant."""
    return _MARKER.sub(r"\1FENCE>", text)


def step_of(body: dict[str, Any]) -> str:
    if "response_format" not in body:
        return "summarize"  # a plain chat request, as the bundled LLM summarizer sends
    name = body.get("response_format", {}).get("json_schema", {}).get("name", "")
    if name:
        return str(name).removeprefix("summarization_")
    system = str(body["messages"][0]["content"])
    if "QUESTIONS" in system or "KEY FACTS" in system:
        return "analyze"
    if "Task 2, key facts" in system:
        return "key_facts"
    if "Task 1, claims" in system:
        return "preprocess"
    # The preprocess call of an item whose source's questions are shared: claims only.
    return "claims" if "atomic claims" in system else "reason"


def asked_in(user: str) -> list[str]:
    """The questions (or key facts) an analyze request's user message numbers, in order."""
    for label, name in (("QUESTIONS", "questions"), ("KEY FACTS", "key_facts")):
        if f"{label}:\n" in user:
            numbered = fenced(user.split(f"{label}:\n", 1)[1], name) or ""
            return [line.split(". ", 1)[1] for line in numbered.splitlines()]
    raise ValueError("an analyze request with no QUESTIONS or KEY FACTS")


def valid_content(body: dict[str, Any], questions_follow_summary: bool = False) -> dict[str, Any]:
    """A well-formed reply for the request's step. ``questions_follow_summary``: the questions
    are three of ``QUESTION_POOL`` chosen by the summary the preprocess call shows, as a judge
    whose question choice varies with what it sees."""
    step = step_of(body)
    claims = [
        {"claim": "The bridge opened.", "supported": True, "reason": "stated"},
        {"claim": "It cost 9 dollars.", "supported": False, "reason": "no 9"},
    ]
    if step == "preprocess":
        questions = list(QUESTION_POOL[:3])
        if questions_follow_summary:
            user = str(body["messages"][-1]["content"])
            summary = fenced(user, "summary") or ""
            start = int(hashlib.sha256(summary.encode()).hexdigest(), 16) % len(QUESTION_POOL)
            questions = [QUESTION_POOL[(start + i) % len(QUESTION_POOL)] for i in range(3)]
        return {"alignment": claims, "questions": questions}
    if step == "claims":
        return {"alignment": claims}
    if step == "key_facts":
        # A reference summary's key facts: its sentences, as a judge would split them.
        user = str(body["messages"][-1]["content"])
        reference = fenced(user, "reference") or ""
        facts = [f.strip() for f in re.split(r"(?<=[.!?])\s+", reference) if f.strip()]
        return {"alignment": claims, "key_facts": facts}
    if step == "analyze":
        questions = asked_in(str(body["messages"][1]["content"]))
        return {
            "coverage": [
                {"question": q, "answered": index == 0, "reason": "checked"}
                for index, q in enumerate(questions)
            ]
        }
    return {"reason": "Alignment set the score."}


class _Server(ThreadingHTTPServer):
    # socketserver's default backlog of 5 resets connections when many clients open at once.
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A connection cut by go_down() while its request was answered is the point, not a bug
        # to print.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ChatServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        # The token usage each answered request was sent: index in ``requests`` -> (prompt,
        # completion).
        self.usage: dict[int, tuple[int, int]] = {}
        self._script: deque[Reply | Fault | BrokenReply] = deque()
        self._always: Fault | BrokenReply | None = None
        self.mix: FaultMix | None = None
        self.latency_s = 0.0
        # False: refuse response_format json_schema as llama-cpp-python's server does (HTTP 500).
        self.json_schema_supported = True
        # True: answer as a reasoning model (REASONING_REFUSALS, reasoning tokens).
        self.reasoning_model = False
        # The deployments an Azure OpenAI resource at azure_endpoint has.
        self.azure_deployments: set[str] = set()
        # True: a preprocess call's questions depend on the summary it shows (valid_content).
        self.questions_follow_summary = False
        # A tokens-per-minute limit (limit_tokens); headers for the next replies (send_headers);
        # each answered request's arrival and tokens, for checks of pacing.
        self.tpm_limit: float | None = None
        self._tpm_capacity = 0.0
        self._tpm_level = 0.0
        self._tpm_at = 0.0
        self._header_script: deque[dict[str, str]] = deque()
        self.token_arrivals: list[tuple[float, int]] = []
        # The Files and Batch APIs: uploaded files, batches, how often each batch was read,
        # and every line ever sent in a batch (custom_id), in order.
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_reads: Counter[str] = Counter()
        self.batch_lines: list[str] = []
        self._batches_held = False
        self._failing_reads = (0, 503, "/v1/")
        # False: a server with no Files or Batch API (a local one), 404 on /v1/files.
        self.batch_api = True
        self._lost_creations = 0
        # The moments a run is killed at in batch mode: a batch made whose creation is not yet
        # answered (hold_batch_creations), batches made from now on kept in progress
        # (hold_new_batches), and the results of those made from now on not yet served
        # (hold_new_results). Each counts the requests it holds; release_all lets them go.
        self._creations = threading.Event()
        self._creations.set()
        self.creations_held = 0
        self._holding_new: str | None = None
        self._held: dict[str, str] = {}  # batch id -> what is held of it
        self._results = threading.Event()
        self._results.set()
        self.results_held = 0
        # True: list batches oldest first (the API's own order is newest first).
        self.list_oldest_first = False
        # False: replies carry no "usage" (some local servers).
        self.reports_usage = True
        self._expire_after: int | None = None
        self._ids = itertools.count(1)
        # Echo each request's Authorization header and URL (its query too) into error bodies
        # and scripted replies, as careless servers and proxies do: what a secret test greps for.
        self.echo_credentials = False
        self.counts: Counter[str] = Counter()
        self._answers: Counter[str] = Counter()
        self._throttled: Counter[str] = Counter()
        self._first_request: float | None = None
        self._lock = threading.Lock()
        # Requests past the first `_answered_before_hold` wait for `release()` (None: none wait).
        self._answered_before_hold: int | None = None
        self._released = threading.Event()
        self._arrivals = 0
        # Chat requests being answered now (held ones included), and the most at once so far.
        self.in_flight = 0
        self.most_in_flight = 0
        # TCP connections a client holds open now (kept alive between requests or not).
        self.open_connections = 0
        self._connections: set[socket.socket] = set()
        # While the server is down: a socket bound to its port but not listening, so connections
        # are refused and no other program can take the port before it comes back.
        self._placeholder: socket.socket | None = None
        self.downs = 0
        self._httpd = _Server(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def azure_endpoint(self) -> str:
        """The endpoint of the Azure OpenAI resource it plays (its deployments under it)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def answered(self) -> int:
        """Requests the server has answered (or is answering) so far."""
        with self._lock:
            return len(self.requests)

    def script(self, *entries: Reply | Fault | BrokenReply) -> None:
        with self._lock:
            self._script.extend(entries)

    @property
    def arrivals(self) -> int:
        """Requests that reached the server, held ones included."""
        with self._lock:
            return self._arrivals

    def hold_after(self, requests: int) -> None:
        """Answer the next ``requests`` requests, then hold every later one until ``release()``:
        a run can then be stopped in the middle whatever the machine's speed."""
        with self._lock:
            self._answered_before_hold = self._arrivals + requests
            self._released.clear()

    def release(self) -> None:
        """Answer the held requests, and every later one at once."""
        with self._lock:
            self._answered_before_hold = None
        self._released.set()

    def fail_every_request(self, fault: Fault | BrokenReply | None) -> None:
        with self._lock:
            self._always = fault

    def start(self) -> ChatServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None
            return  # down: nothing is serving
        self._httpd.shutdown()
        self._httpd.server_close()

    def go_down(self) -> None:
        """Stop serving, as a crashed server does: the listening socket closes (new connections
        are refused) and every open connection is cut, requests being answered included."""
        address = self._httpd.server_address
        self._httpd.shutdown()
        placeholder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._httpd.server_close()
        placeholder.bind(address)  # bound, never listening: connections to it are refused
        self._placeholder = placeholder
        with self._lock:
            connections = list(self._connections)
            self.downs += 1
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def come_back(self) -> None:
        """Serve again on the same port."""
        assert self._placeholder is not None, "the server is not down"
        httpd = _Server(self._httpd.server_address, self._handler_class(), bind_and_activate=False)
        httpd.daemon_threads = True
        httpd.server_bind()  # SO_REUSEADDR: the placeholder, not listening, does not block it
        httpd.server_activate()
        self._placeholder.close()
        self._placeholder = None
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def _draw(self, body: dict[str, Any]) -> Reply | Fault | BrokenReply | str | None:
        """The injected fault for this request under ``mix``: a Reply, a Fault, "hang", "drop"."""
        mix = self.mix
        if mix is None:
            return None
        # A request's fence marker is fresh each time it is built: its fate is the same whatever
        # the marker, as it is whatever order requests arrive in.
        digest = hashlib.sha256(unfenced(json.dumps(body, sort_keys=True)).encode()).hexdigest()
        now = time.monotonic()
        if self._first_request is None:
            self._first_request = now
        phase = (now - self._first_request) % mix.storm_every_s if mix.storm_every_s else 0.0
        if phase < mix.storm_s and self._throttled[digest] < 2:
            self._throttled[digest] += 1
            left = mix.storm_s - phase
            wait = {"retry-after-ms": f"{left * 1000:.0f}", "retry-after": f"{math.ceil(left)}"}
            return Fault(429, "Rate limit reached", headers=wait)
        answered = self._answers[digest]
        self._answers[digest] += 1
        roll = random.Random(f"{mix.seed}:{digest}:{answered}").random()
        for kind, share in (("500", mix.server_errors), ("hang", mix.hangs), ("drop", mix.drops)):
            if roll < share:
                return Fault(500, "The server had an error") if kind == "500" else kind
            roll -= share
        if roll < mix.cut_bodies:
            return BrokenReply("cut")
        first_ask = len(body.get("messages", [])) == 2 and step_of(body) != "summarize"
        if first_ask and random.Random(f"{mix.seed}:{digest}:malformed").random() < mix.malformed:
            return Reply(MALFORMED)
        return None

    def _next(
        self, body: dict[str, Any], record: Recorded
    ) -> tuple[int, dict[str, Any], dict[str, str]] | BrokenReply | str:
        refused = (
            not self.json_schema_supported
            and body.get("response_format", {}).get("type") == "json_schema"
        )
        if refused:
            with self._lock:
                self.requests.append(record)
                self.counts["json_schema refused"] += 1
            return 500, JSON_SCHEMA_REFUSED, {}
        refusal = reasoning_refusal(body) if self.reasoning_model else None
        if refusal is not None:
            with self._lock:
                self.requests.append(record)
                self.counts[f"refused {refusal['error']['param']}"] += 1
            return 400, refusal, {}
        with self._lock:
            entry: Reply | Fault | BrokenReply | str | None = self._always or (
                self._script.popleft() if self._script else None
            )
            if entry is None:
                entry = self._draw(body)
            index = len(self.requests)
            self.requests.append(record)
            kind = (
                entry
                if isinstance(entry, str)
                else entry.kind
                if isinstance(entry, BrokenReply)
                else str(entry.status)
                if isinstance(entry, Fault)
                else "malformed"
                if isinstance(entry, Reply) and entry.content == MALFORMED
                else "ok"
            )
            self.counts[kind] += 1
        if isinstance(entry, str | BrokenReply):
            return entry
        echo = ""
        if self.echo_credentials:
            echo = f" [{record.headers.get('authorization')} at {record.path}]"
        if isinstance(entry, Fault):
            error = {"message": entry.message + echo, "type": "test", "code": entry.code}
            if entry.param is not None:
                error["param"] = entry.param
            return entry.status, {"error": error}, entry.headers
        if isinstance(entry, Reply):
            # "{echo}" places the echo (inside a valid reply); otherwise it ends the content.
            content = (
                entry.content.replace("{echo}", echo)
                if "{echo}" in entry.content
                else (entry.content + echo)
            )
        elif step_of(body) == "summarize":
            content = SUMMARY_REPLY
        else:
            content = json.dumps(valid_content(body, self.questions_follow_summary))
        usage = (len(json.dumps(body["messages"])) // 4, len(content) // 4)
        if self.reasoning_model:
            usage = (usage[0], usage[1] + REASONING_TOKENS)
        headers: dict[str, str] = {}
        with self._lock:
            if self.tpm_limit is not None:
                wait = self._take_tokens(sum(usage))
                if wait > 0:
                    self.counts["429 tokens"] += 1
                    error = {"error": {"message": "Rate limit reached", "type": "tokens"}}
                    return 429, error, {"retry-after-ms": f"{wait * 1000:.0f}"}
                headers = self._token_headers()
            if self._header_script:
                headers |= self._header_script.popleft()
            self.usage[index] = usage
            self.token_arrivals.append((record.arrived, sum(usage)))
        completion = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "test-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": entry.finish_reason if isinstance(entry, Reply) else "stop",
                }
            ],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": 0},
        }
        if self.reasoning_model:
            completion["usage"]["completion_tokens_details"] = {
                "reasoning_tokens": REASONING_TOKENS
            }
        if not self.reports_usage:
            del completion["usage"]
        return 200, completion, headers

    def hold_batches(self) -> None:
        """Keep every batch in progress (its lines unanswered) until ``release_batches``."""
        with self._lock:
            self._batches_held = True

    def release_batches(self) -> None:
        with self._lock:
            self._batches_held = False

    def hold_batch_creations(self) -> None:
        """Each batch creation makes its batch (its lines sent, paid once read) and holds its
        answer until ``release_all``: a client killed meanwhile never learns the batch's id."""
        with self._lock:
            self._creations.clear()

    def hold_new_batches(self) -> None:
        """Keep the batches made from now on in progress until ``release_all`` (those made
        before are answered when read, as a resume reads them)."""
        with self._lock:
            self._holding_new = "progress"

    def hold_new_results(self) -> None:
        """Serve the results files of the batches made from now on only after ``release_all``:
        such a batch ends (its lines answered and billed) but its client cannot read it."""
        with self._lock:
            self._holding_new = "results"
            self._results.clear()

    def release_all(self) -> None:
        with self._lock:
            self._holding_new = None
            self._held.clear()
        self._creations.set()
        self._results.set()

    def add_foreign_batch(self, created_at: int) -> None:
        """A batch another run made at ``created_at`` (Unix seconds), long ended."""
        with self._lock:
            batch_id = f"batch_{next(self._ids)}"
            self.batches[batch_id] = {
                "id": batch_id, "object": "batch", "endpoint": "/v1/chat/completions",
                "input_file_id": "file-elsewhere", "completion_window": "24h",
                "status": "completed", "created_at": created_at, "output_file_id": None,
                "error_file_id": None, "metadata": {"summeval_run": "another-run"},
                "request_counts": {"total": 0, "completed": 0, "failed": 0},
            }  # fmt: skip

    def _held_file(self, file_id: str) -> bool:
        with self._lock:
            return any(
                self.batches[batch_id].get("output_file_id") == file_id
                for batch_id, held in self._held.items()
                if held == "results"
            )

    def expire_next_batch(self, after: int) -> None:
        """The next batch read answers its first ``after`` lines and ends expired: the rest get
        ``batch_expired`` errors, as a batch past its completion window."""
        with self._lock:
            self._expire_after = after

    def fail_next_batch_reads(self, count: int, status: int = 503, under: str = "/v1/") -> None:
        """The next ``count`` reads (GET) of a path under ``under`` (``/v1/files/``: a file's
        content; ``/v1/batches/``: a batch) answer ``status``: an endpoint down for a while,
        the batches themselves unharmed."""
        with self._lock:
            self._failing_reads = (count, status, under)

    def lose_next_batch_creations(self, count: int) -> None:
        """The next ``count`` batch creations make their batch and answer 502: a creation whose
        answer was lost on the way (a gateway's timeout), the batch made and its lines paid."""
        with self._lock:
            self._lost_creations = count

    def _failed_read(self, path: str) -> int | None:
        with self._lock:
            count, status, under = self._failing_reads
            if count <= 0 or not path.startswith(under):
                return None
            self._failing_reads = (count - 1, status, under)
            return status

    def _upload(self, content_type: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw
        )
        fields = {
            part.get_param("name", header="content-disposition"): part
            for part in message.iter_parts()
        }
        upload = fields["file"]
        data = upload.get_payload(decode=True)
        file_id = f"file-{next(self._ids)}"
        with self._lock:
            self.files[file_id] = data
        return 200, {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": 0,
            "filename": upload.get_filename() or "upload.jsonl",
            "purpose": str(fields["purpose"].get_content()).strip(),
            "status": "processed",
        }

    def _create_batch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = self.files.get(body.get("input_file_id", ""))
        if data is None:
            return 404, {"error": {"message": "No such file", "type": "invalid_request_error"}}
        lines = [json.loads(line) for line in data.splitlines() if line.strip()]
        batch_id = f"batch_{next(self._ids)}"
        batch = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body.get("endpoint"),
            "input_file_id": body["input_file_id"],
            "completion_window": body.get("completion_window", "24h"),
            "status": "in_progress",
            "created_at": int(time.time()),
            "output_file_id": None,
            "error_file_id": None,
            "metadata": body.get("metadata"),
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
        }
        with self._lock:
            self.batches[batch_id] = batch
            self.batch_lines.extend(line["custom_id"] for line in lines)
            if self._holding_new is not None:
                self._held[batch_id] = self._holding_new
            if self._lost_creations > 0:
                self._lost_creations -= 1
                return 502, {"error": {"message": "Bad gateway", "type": "server_error"}}
            held = not self._creations.is_set()
            self.creations_held += held
        if held:
            self._creations.wait()
        return 200, batch

    def _read_batch(self, batch_id: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            batch = self.batches.get(batch_id)
            self.batch_reads[batch_id] += 1
            held = self._batches_held or self._held.get(batch_id) == "progress"
            expire_after = self._expire_after
            ended = batch is not None and batch["status"] != "in_progress"
            if batch is not None and not held and not ended:
                self._expire_after = None
        if batch is None:
            return 404, {"error": {"message": "No such batch", "type": "invalid_request_error"}}
        if held or ended:
            return 200, batch
        data = self.files[batch["input_file_id"]]
        lines = [json.loads(line) for line in data.splitlines() if line.strip()]
        output, errors = [], []
        for number, line in enumerate(lines):
            if expire_after is not None and number >= expire_after:
                errors.append({
                    "id": f"batch_req_{next(self._ids)}", "custom_id": line["custom_id"],
                    "response": None,
                    "error": {"code": "batch_expired", "message": EXPIRED},
                })  # fmt: skip
                continue
            record = Recorded(path=line["url"], headers={}, body=line["body"], client_port=0,
                              arrived=time.monotonic(), batch=batch_id)  # fmt: skip
            answer = self._next(line["body"], record)
            if not isinstance(answer, tuple):  # a hang, a drop, a broken body: a server error
                answer = (500, {"error": {"message": "The server had an error"}}, {})
            status, payload, _ = answer
            result = {
                "id": f"batch_req_{next(self._ids)}",
                "custom_id": line["custom_id"],
                "response": {"status_code": status, "request_id": "req", "body": payload},
                "error": None,
            }
            (output if status == 200 else errors).append(result)

        def stored(rows: list[dict[str, Any]]) -> str | None:
            if not rows:
                return None
            file_id = f"file-{next(self._ids)}"
            self.files[file_id] = "".join(json.dumps(row) + "\n" for row in rows).encode()
            return file_id

        with self._lock:
            batch.update(
                status="expired" if expire_after is not None else "completed",
                output_file_id=stored(output),
                error_file_id=stored(errors),
                request_counts={
                    "total": len(lines),
                    "completed": len(output),
                    "failed": len(errors),
                },
            )
        return 200, batch

    def limit_tokens(self, per_minute: float, burst_s: float = 1.0) -> None:
        """Answer 429 beyond ``per_minute`` tokens (a request's prompt and reply, charged as it
        arrives), from a bucket holding ``burst_s`` seconds' worth; every reply reports the
        bucket in OpenAI's x-ratelimit-*-tokens headers."""
        with self._lock:
            self.tpm_limit = per_minute
            self._tpm_capacity = per_minute / 60.0 * burst_s
            self._tpm_level = self._tpm_capacity
            self._tpm_at = time.monotonic()

    def send_headers(self, *headers: dict[str, str]) -> None:
        """Headers for the next successful replies, one mapping each, in order."""
        with self._lock:
            self._header_script.extend(headers)

    def _take_tokens(self, tokens: int) -> float:
        """0 when the bucket holds ``tokens`` (taken); else the seconds until it would."""
        assert self.tpm_limit is not None
        rate = self.tpm_limit / 60.0
        now = time.monotonic()
        self._tpm_level = min(self._tpm_capacity, self._tpm_level + (now - self._tpm_at) * rate)
        self._tpm_at = now
        need = min(tokens, self._tpm_capacity)
        if self._tpm_level < need:
            return (need - self._tpm_level) / rate
        self._tpm_level -= tokens
        return 0.0

    def _token_headers(self) -> dict[str, str]:
        assert self.tpm_limit is not None
        rate = self.tpm_limit / 60.0
        full_in = max(0.0, self._tpm_capacity - self._tpm_level) / rate
        return {
            "x-ratelimit-limit-tokens": f"{self.tpm_limit:.0f}",
            "x-ratelimit-remaining-tokens": f"{max(0, int(self._tpm_level))}",
            "x-ratelimit-reset-tokens": f"{full_in * 1000:.0f}ms",
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real providers
            # Headers and body go out in two writes; with Nagle's algorithm the second waits for
            # the client's delayed ACK (40 ms), which would dwarf the latency a test sets.
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.open_connections += 1
                    server._connections.add(self.connection)

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    with server._lock:
                        server.open_connections -= 1
                        server._connections.discard(self.connection)

            def send_json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(data)

            def do_GET(self) -> None:
                parts = self.path.split("?", 1)[0].rstrip("/").split("/")
                if parts[-1] == "batches":  # the list, newest first (or oldest first)
                    with server._lock:
                        listed = sorted(
                            server.batches.values(),
                            key=lambda b: b["created_at"],
                            reverse=not server.list_oldest_first,
                        )
                    self.send_json(200, {"object": "list", "data": listed, "has_more": False})
                elif self.path.startswith(("/v1/batches/", "/v1/files/")) and (
                    failed := server._failed_read(self.path)
                ):
                    self.send_json(failed, {"error": {"message": "Service Unavailable"}})
                elif self.path.startswith("/v1/batches/"):
                    self.send_json(*server._read_batch(parts[-1]))
                elif self.path.startswith("/v1/files/") and parts[-1] == "content":
                    if server._held_file(parts[-2]):
                        with server._lock:
                            server.results_held += 1
                        server._results.wait()
                    data = server.files.get(parts[-2])
                    if data is None:
                        self.send_json(404, {"error": {"message": "No such file"}})
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self.send_json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if self.path.rstrip("/") in ("/v1/files", "/v1/batches") and not server.batch_api:
                    self.send_json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if self.path.rstrip("/") == "/v1/files":
                    self.send_json(*server._upload(self.headers.get("Content-Type", ""), raw))
                    return
                if self.path.rstrip("/") == "/v1/batches":
                    self.send_json(*server._create_batch(json.loads(raw)))
                    return
                if self.path.startswith("/openai/") and (
                    refused := azure_refusal(self.path, server.azure_deployments)
                ):
                    self.send_json(404, refused)
                    return
                body = json.loads(raw or b"{}")
                record = Recorded(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    client_port=self.client_address[1],
                    arrived=time.monotonic(),
                )
                if server.latency_s:
                    time.sleep(server.latency_s)
                with server._lock:
                    arrival = server._arrivals
                    server._arrivals += 1
                    limit = server._answered_before_hold
                    held = limit is not None and arrival >= limit
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    if held:
                        server._released.wait()
                    self.answer_chat(body, record)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def answer_chat(self, body: dict[str, Any], record: Recorded) -> None:
                answer = server._next(body, record)
                if answer == "drop":
                    self.close_connection = True  # no status line: the client sees a dropped link
                    return
                if answer == "hang":
                    time.sleep(server.mix.hang_s if server.mix else 3.0)
                    self.close_connection = True
                    return
                if isinstance(answer, BrokenReply):
                    self.send_broken(answer)
                    return
                assert not isinstance(answer, str)
                status, payload, headers = answer
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                # The client may have given up on this request (a timeout) and closed the link.
                with contextlib.suppress(OSError):
                    self.wfile.write(data)

            def send_broken(self, answer: BrokenReply) -> None:
                # Only a cut body ends the connection; a whole page keeps it alive as a proxy
                # would, so the client's next try never meets a connection closed under it.
                self.close_connection = answer.kind == "cut"
                page = BROKEN_PAGE
                if server.echo_credentials and answer.kind != "cut":
                    # A gateway's error page that quotes the request's credentials early on.
                    auth = self.headers.get("authorization", "")
                    page = f"<html>Authorization: {auth} was refused</html>".encode()
                if answer.kind == "cut":
                    page = b'{"id": "chatcmpl-cut", "object": "chat.completion", "choices": [{'
                self.send_response(200)
                kind = "text/html" if answer.kind == "html" else "application/json"
                self.send_header("Content-Type", kind)
                # A cut body promises more than it sends: the link closes before the end.
                promised = len(page) + (500 if answer.kind == "cut" else 0)
                self.send_header("Content-Length", str(promised))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
