"""Guards that hold (issue 44 point 5): a gate that cannot fail is refused, an agent nobody can
reach stops the run as a judge outage does, and no test waits without a bound."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import random
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from summeval_runner import (
    AgentUnreachableError,
    ConfigError,
    RetryPolicy,
    compare_runs,
    create_summarization_scorer,
    gate_comparison,
    run_evals,
)
from summeval_runner._agents import LeadK
from summeval_runner._analysis._compare import _matched
from summeval_runner._rundir._manifest import read_manifest
from summeval_runner._scorers._prompts import UNTRUSTED
from tests.app import ENV, run_app, summeval_compare
from tests.chat_server import ChatServer
from tests.documents import write_dataset
from tests.test_compare import baseline_scores, make_run
from tests.waiting import until


def _dropped_runs(tmp_path: Path) -> tuple[Path, Path]:
    base = baseline_scores()
    worse = {item: (s - 0.36, a, c - 0.36) for item, (s, a, c) in base.items()}
    return make_run(tmp_path / "base", "base", base), make_run(tmp_path / "new", "new", worse)


@pytest.mark.parametrize("threshold", ["nan", "inf", "-inf", "-0.1"])
def test_a_drop_threshold_no_drop_can_pass_is_bad_input(tmp_path: Path, threshold: str) -> None:
    # NaN compared False with every drop: a significant drop of 0.36 passed the gate, exit 0.
    base, new = _dropped_runs(tmp_path)
    out = tmp_path / "out"

    refused = summeval_compare(
        str(base), str(new), f"--fail-if-drop={threshold}", "--out", str(out), cwd=tmp_path
    )
    wrote_when_refused = out.exists()
    gated = summeval_compare(
        str(base), str(new), "--fail-if-drop", "0.1", "--out", str(out), cwd=tmp_path
    )

    assert refused.returncode == 2, refused.stderr
    assert "--fail-if-drop must be a finite number >= 0" in refused.stderr
    assert not wrote_when_refused
    assert gated.returncode == 1, gated.stderr
    assert "score" in gated.stderr


@pytest.mark.parametrize(
    ("rules", "said"),
    [
        ({"fail_if_drop": float("nan")}, "fail_if_drop must be a finite number >= 0, got nan"),
        ({"fail_if_drop": float("inf")}, "fail_if_drop must be a finite number >= 0, got inf"),
        (
            {"fail_if_below": {"score": float("nan")}},
            "fail_if_below['score'] must be a finite number >= 0, got nan",
        ),
        (
            {"fail_if_drop": 0.1, "max_error_rate": float("nan")},
            "max_error_rate must be between 0 and 1, got nan",
        ),
    ],
)
def test_the_library_gate_refuses_a_rule_that_cannot_fail(
    tmp_path: Path, rules: dict[str, object], said: str
) -> None:
    base, new = _dropped_runs(tmp_path)
    comparison = compare_runs([new], baseline=base)

    with pytest.raises(ConfigError) as raised:
        gate_comparison(comparison, **rules)  # type: ignore[arg-type]

    assert str(raised.value) == said
    assert not gate_comparison(comparison, fail_if_drop=0.1).passed


# --- an agent nobody can reach -----------------------------------------------------------------

SOURCES = [
    {
        "id": f"d{i}",
        "input": f"Document {i} says the harbour opened in spring. It cost {i} million.",
    }
    for i in range(8)
]


class SummaryService:
    """A summary service of the user's own on 127.0.0.1: its socket is bound from the start,
    so every connection is refused until ``open()`` makes it listen (same port, never let go)."""

    def __init__(self) -> None:
        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), _SummaryHandler, bind_and_activate=False
        )
        self.server.server_bind()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/summarize"
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        self.server.server_activate()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join()
        self.server.server_close()


class _SummaryHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["text"]
        body = json.dumps({"summary": text.split(". ")[0] + "."}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class ServiceAgent:
    """The agent under test as a user writes one: a POST to their service, with the stdlib."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, input: str) -> str:
        request = urllib.request.Request(
            self.url, data=json.dumps({"text": input}).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            return str(json.loads(reply.read())["summary"])


@pytest.fixture
def service() -> Iterator[SummaryService]:
    service = SummaryService()
    yield service
    service.close()


def test_an_agent_nobody_can_reach_stops_the_run_resumably(
    tmp_path: Path, service: SummaryService
) -> None:
    # Before: every item an error within seconds, and the run "completed" under max_error_rate.
    run_dir = tmp_path / "run"
    agent = ServiceAgent(service.url)
    settings = {"outage_timeout_s": 0.5, "max_error_rate": 0.9, "cache": "off"}

    with pytest.raises(AgentUnreachableError) as raised:
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer("offline")],
                data=SOURCES,
                target=agent,
                output_dir=run_dir,
                **settings,
            )
        )

    said = str(raised.value)
    assert said.startswith(
        "the agent tests.test_guards.ServiceAgent could not connect (connection refused): "
        "URLError: "
    ), said
    assert "the agent is unreachable; the run stops, resumable once the agent answers again" in (
        said
    )
    manifest = read_manifest(run_dir)
    assert manifest.status == "interrupted"
    assert manifest.stopped_because == said
    assert manifest.counts is not None
    assert (manifest.counts.total, manifest.counts.errors) == (0, 0)
    assert manifest.unfinished == len(SOURCES)

    service.open()
    resumed = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=SOURCES,
            target=agent,
            output_dir=run_dir,
            resume=True,
            **settings,
        )
    )

    assert resumed.status == "completed"
    assert (resumed.counts.scored, resumed.counts.errors) == (len(SOURCES), 0)
    assert {item.output for item in resumed.items} == {
        f"Document {i} says the harbour opened in spring." for i in range(len(SOURCES))
    }


def test_a_short_agent_outage_costs_no_item(tmp_path: Path) -> None:
    refusals = 3
    calls = 0

    async def agent(input: str) -> str:
        nonlocal calls
        calls += 1
        if calls <= refusals:
            raise OSError("the summary service failed") from ConnectionRefusedError(111, "refused")
        return input.split(". ")[0] + "."

    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=SOURCES,
            target=agent,
            outage_timeout_s=3600,
            retry=RetryPolicy(base_delay_s=0.001, max_delay_s=0.01),
            max_target_calls_in_flight=1,
        )
    )

    assert result.status == "completed"
    assert (result.counts.scored, result.counts.errors) == (len(SOURCES), 0)
    assert calls == len(SOURCES) + refusals


def test_an_agent_that_answers_with_an_error_still_errors_its_item(tmp_path: Path) -> None:
    # Only a failed connection is an outage: the agent's own failure is the item's, as before.
    def agent(input: str) -> str:
        if input.startswith("Document 3 "):
            raise TimeoutError("the summary service timed out")
        return input.split(". ")[0] + "."

    result = asyncio.run(
        run_evals(scorers=[create_summarization_scorer("offline")], data=SOURCES, target=agent)
    )

    assert result.status == "completed"
    assert (result.counts.scored, result.counts.errors) == (len(SOURCES) - 1, 1)
    (failed,) = [item for item in result.items if item.status == "error"]
    assert failed.item_id == "d3"


def test_the_app_stops_on_an_llm_agent_nobody_can_reach_and_names_it(
    tmp_path: Path, service: SummaryService
) -> None:
    base_url = service.url.rsplit("/", 1)[0] + "/v1"
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        "target=llm_summarizer",
        f"target.base_url={base_url}",
        "target.api_key_env=null",
        "+target.max_retries=0",
        "runner.outage_timeout_s=0.5",
        "runner.max_error_rate=0.9",
        env=ENV,
    )

    assert completed.returncode == 1, completed.stderr
    cause = (
        "the agent summeval_runner._agents.LLMSummarizer: could not connect to the agent's "
        f"model at {base_url} (connection refused)"
    )
    assert cause in completed.stderr
    assert "6 of 6 items unfinished" in completed.stderr
    assert f"runner.resume={run_dir}" in completed.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "interrupted"
    assert manifest["stopped_because"].startswith(cause)
    assert manifest["counts"]["errors"] == 0


# --- no test waits without a bound -------------------------------------------------------------


def test_a_wait_on_a_run_that_ended_fails_at_once_with_the_runs_error() -> None:
    # The cancelled-run test waited `while chat_server.arrivals < 8` alone: a run that failed
    # before its eighth request left the suite spinning until CI killed it.
    async def main() -> None:
        run = asyncio.create_task(
            run_evals(scorers=[create_summarization_scorer("offline")], data=[{"id": "a"}])
        )
        await until(lambda: False, "8 requests at the server", task=run)

    with pytest.raises(AssertionError) as raised:
        asyncio.run(main())

    assert str(raised.value).startswith("ended before 8 requests at the server: InputError(")


# --- pairing two runs: a merge of their sorted ids ---------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "shared"),
    [
        (3000, 3000, 2000),
        (200_000, 150_000, 140_000),
        (40, 150_000, 25),
        (150_000, 40, 25),
        (0, 9, 0),
    ],
)
def test_pairing_matches_every_shared_id_and_no_other(ours: int, theirs: int, shared: int) -> None:
    # Ids of every kind a dataset holds (numbers, words, non-ASCII), in blocks of the matching
    # and across them; checked against a dictionary of one run's ids.
    rng = random.Random(5)
    pool = [f"{rng.choice(['doc', 'Ärger', '記事', 'z'])}-{i:07d}" for i in range(ours + theirs)]
    rng.shuffle(pool)
    here_ids = pool[:ours]
    there_ids = here_ids[:shared] + pool[ours : ours + theirs - shared]
    rng.shuffle(there_ids)
    here, there = pa.chunked_array([here_ids], pa.string()), pa.chunked_array([there_ids])
    order = np.argsort(np.array(here_ids, dtype=object), kind="stable").astype(np.int64)

    match = _matched(here, there, order)

    where = {item: row for row, item in enumerate(there_ids)}
    expected = [where.get(here_ids[row], -1) for row in order]
    assert match.tolist() == expected
    assert int((match >= 0).sum()) == shared


# --- what an item costs in tokens --------------------------------------------------------------


def test_a_judged_item_costs_at_most_1200_tokens_and_keeps_its_fences_and_rule(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    # The loopback server's count (the messages as JSON over four, its short replies): about
    # 1,370 an item with the fenced-text rule in 97 tokens a step, 1,180 with it in 44.
    lines = write_dataset(tmp_path / "docs.jsonl", 26).read_text("utf-8").splitlines()
    data = [json.loads(line) for line in lines]
    scorer = create_summarization_scorer(
        {"provider": "openai", "name": "gpt-4o-mini", "base_url": chat_server.base_url,
         "api_key_env": None}
    )  # fmt: skip

    result = asyncio.run(run_evals(scorers=[scorer], data=data, target=LeadK(), cache="off"))

    assert result.counts.scored == 26
    spent = sum(prompt + reply for prompt, reply in chat_server.usage.values())
    assert spent / 26 <= 1200, spent / 26
    for request in chat_server.requests:
        system, user = (str(m["content"]) for m in request.body["messages"])
        assert UNTRUSTED in system
        assert re.search(r"<(source|summary|questions|verdicts)-[0-9a-f]{16}>", user)
        assert (
            "reason first" in system
            or request.body["response_format"]["json_schema"]["name"] == "summarization_reason"
        )


# --- a reader that stops reading ---------------------------------------------------------------


def test_a_run_whose_reader_stops_reading_ends_as_it_would_have(tmp_path: Path) -> None:
    # `summeval-run | head`: the summary lines met a closed pipe, and a completed run exited 1
    # with "internal error, a bug of summeval-run" and a traceback.
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "summeval_runner", f"hydra.run.dir={run_dir}", "dataset.limit=3",
         "runner.progress=false"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")},
    )  # fmt: skip
    assert process.stdout is not None
    process.stdout.close()  # the reader is gone before the first line
    _, stderr = process.communicate(timeout=180)

    assert process.returncode == 0, stderr
    assert "internal error" not in stderr
    assert "Traceback" not in stderr
    manifest = read_manifest(run_dir)
    assert (manifest.status, manifest.exit_code) == ("completed", 0)
    assert (run_dir / "items.parquet").exists()
