"""summeval-run end to end, as a user runs it: in this process, and once as the console script."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from summeval_runner._inputs._metadata import MetadataTypes
from summeval_runner._rundir._tables import TABLES, items_schema
from tests.app import SAMPLE_ITEMS, SECRET, run_app, run_process, table
from tests.chat_server import SUMMARY_REPLY, ChatServer, Fault


@pytest.fixture(scope="module")
def default_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The defaults, run by the installed console script, with a key set that must not leak."""
    run_dir = tmp_path_factory.mktemp("runs") / "default"
    completed = run_process(
        ["summeval-run", f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        env={"OPENAI_API_KEY": SECRET},
    )
    return run_dir, completed


def test_the_defaults_do_the_whole_job_offline(
    default_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, completed = default_run

    assert completed.returncode == 0, completed.stderr
    assert f"results: {run_dir}" in completed.stdout
    assert (
        f"{SAMPLE_ITEMS} items: {SAMPLE_ITEMS} scored, 0 blank summaries (scored 0), 0 unscorable, 0 errors"
        in completed.stdout
    )
    assert "summarization-scorer   score" in completed.stdout


def test_every_table_has_its_schema_and_its_rows(
    default_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = default_run

    # The sample's metadata fields (dataset.fields.metadata) are text.
    sample = {"title": "string", "domain": "string"}
    for name, schema in {**TABLES, "items": items_schema(MetadataTypes.of(sample))}.items():
        assert pq.read_schema(run_dir / f"{name}.parquet").equals(schema, check_metadata=True), name
    items, alignment, coverage, aggregates = (
        table(run_dir, n) for n in ("items", "alignment", "coverage", "aggregates")
    )
    assert len(items) == SAMPLE_ITEMS
    assert items["item_id"].is_unique
    assert set(items["status"]) == {"scored"}
    assert len(alignment) == items["claims"].sum()
    assert len(coverage) == items["questions"].sum()
    claims = items.set_index("item_id")["claims"]
    assert (alignment.groupby("item_id").size().reindex(claims.index, fill_value=0) == claims).all()
    assert sorted(aggregates["metric"]) == ["alignment", "coverage", "score"]
    assert (aggregates["n"] == SAMPLE_ITEMS).all()
    assert (items["judge_calls"] == 3).all()
    # The metadata mapped in the dataset config travels with each item.
    assert items.loc[items["item_id"] == "cup-final", "metadata"].item() == {
        "title": "Riverside win the county cup on penalties",
        "domain": "sports",
    }
    # The baseline is lead-3: an extract, so every claim is in the source.
    assert (items["alignment_score"] == 1.0).all()


def test_aggregates_agree_with_the_items(
    default_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = default_run
    items = table(run_dir, "items")
    aggregates = table(run_dir, "aggregates").set_index("metric")

    for metric, column in (
        ("score", "score"),
        ("alignment", "alignment_score"),
        ("coverage", "coverage_score"),
    ):
        row, values = aggregates.loc[metric], items[column]
        assert row["mean"] == pytest.approx(values.mean())
        assert row["std"] == pytest.approx(values.std())
        assert row["median"] == pytest.approx(values.median())
        assert row["p25"] == pytest.approx(values.quantile(0.25))
        assert row["ci95_low"] <= row["mean"] <= row["ci95_high"]
    score = aggregates.loc["score"]
    half_width = 2.060 * score["std"] / SAMPLE_ITEMS**0.5  # t(0.975, 25 df)
    assert score["ci95_high"] - score["mean"] == pytest.approx(half_width, rel=1e-3)


def test_the_run_is_written_as_it_goes_and_described_in_the_manifest(
    default_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = default_run

    journal = (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    # One line per item; the rest count the judge's traffic as it goes.
    assert sum(line.startswith('{"position":') for line in journal) == SAMPLE_ITEMS
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "completed"
    assert manifest["exit_code"] == 0
    assert manifest["counts"] == {
        "total": SAMPLE_ITEMS,
        "scored": SAMPLE_ITEMS,
        "blank_summaries": 0,
        "unscorable": 0,
        "errors": 0,
        "flagged": 0,
    }
    assert manifest["config"]["scorer"] == {
        "max_questions": 10,
        "scale": 1.0,
        "questions": "per_source",
    }
    assert manifest["prompt_version"].startswith("summarization-")
    assert manifest["judge"]["requests"] == 3 * SAMPLE_ITEMS
    assert manifest["variant"] == "default"
    assert manifest["finished_at"] >= manifest["started_at"]
    # What the run cost the machine, for benches and capacity planning.
    assert 0 < manifest["resources"]["cpu_s"] < 120
    assert 50 < manifest["resources"]["peak_rss_mb"] < 4000


def test_no_secret_is_written_even_when_a_key_is_set(
    default_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = default_run

    written = [path for path in run_dir.rglob("*") if path.is_file()]
    assert written
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path


def test_the_tables_load_in_duckdb(
    default_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    duckdb = pytest.importorskip("duckdb")
    run_dir, _ = default_run

    rows = duckdb.sql(
        f"""
        SELECT i.item_id, i.score, count(c.question) FILTER (WHERE NOT c.answered) AS missed
        FROM '{run_dir}/items.parquet' i JOIN '{run_dir}/coverage.parquet' c USING (item_id)
        GROUP BY ALL ORDER BY i.score LIMIT 3
        """
    ).fetchall()

    assert len(rows) == 3
    assert all(missed >= 1 for _, _, missed in rows)


def test_scorer_overrides_change_the_results(
    tmp_path: Path, default_run: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    two = run_app(tmp_path / "two", "scorer.max_questions=2", "runner.progress=false")
    scaled = run_app(
        tmp_path / "scaled", "scorer.max_questions=2", "scorer.scale=10", "runner.progress=false"
    )

    assert two.returncode == 0, two.stderr
    assert scaled.returncode == 0, scaled.stderr
    default_items = table(default_run[0], "items").set_index("item_id")
    two_items = table(tmp_path / "two", "items").set_index("item_id")
    scaled_items = table(tmp_path / "scaled", "items").set_index("item_id")
    assert default_items["questions"].max() > 2
    assert two_items["questions"].max() == 2
    assert table(tmp_path / "two", "coverage").groupby("item_id").size().max() == 2
    pd.testing.assert_series_equal(scaled_items["score"], two_items["score"] * 10)
    pd.testing.assert_series_equal(scaled_items["coverage_score"], two_items["coverage_score"])
    assert table(tmp_path / "scaled", "items")["variant"].unique().tolist() == [
        "scorer.max_questions=2,scorer.scale=10"
    ]


def test_progress_is_plain_off_a_terminal_and_can_be_turned_off(
    tmp_path: Path, default_run: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    assert re.search(
        rf"^progress: {SAMPLE_ITEMS}/{SAMPLE_ITEMS} items, \d\d:\d\d elapsed, mean ",
        default_run[1].stderr,
        flags=re.M,
    )
    assert "\r" not in default_run[1].stderr

    quiet = run_app(tmp_path / "quiet", "runner.progress=false", "dataset.limit=2")

    assert quiet.returncode == 0
    assert "progress:" not in quiet.stderr


def test_the_openai_judge_end_to_end_within_a_request_rate(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    started = time.monotonic()
    completed = run_app(
        tmp_path / "openai",
        "model=openai",
        f"model.base_url={chat_server.base_url}",
        "runner.cache=off",
        "dataset.limit=8",
        "runner.judge_rpm=600",
        env={"OPENAI_API_KEY": SECRET},
    )

    assert completed.returncode == 0, completed.stderr
    assert len(chat_server.requests) == 24
    # No line per request from the HTTP client, on the terminal or in the run's log.
    log = (tmp_path / "openai" / "summeval-run.log").read_text(encoding="utf-8")
    assert "HTTP Request" not in completed.stdout + completed.stderr + log
    # 600 a minute is one request per 100 ms: the i-th request cannot reach the server before
    # i x 100 ms have passed since the run started, however late any request arrives (a busy
    # machine only delays arrivals). A burst would put them all within milliseconds of the
    # first. (How evenly requests leave the pacer is measured where it happens, in
    # test_limits.py.)
    arrivals = sorted(request.arrived for request in chat_server.requests)
    early = [i for i, arrived in enumerate(arrivals) if arrived - started < 0.095 * i]
    assert early == []
    items = table(tmp_path / "openai", "items")
    assert set(items["judge"]) == {"openai/gpt-4o-mini"}
    assert (items["input_tokens"] > 0).all()


def test_users_bring_their_own_dataset_and_agent_with_config_dir(tmp_path: Path) -> None:
    (tmp_path / "conf" / "dataset").mkdir(parents=True)
    (tmp_path / "conf" / "target").mkdir()
    (tmp_path / "agents").mkdir()
    pd.DataFrame(
        {
            "key": ["k1", "k2", "k3"],
            "article": [
                "Alpha beta gamma. Delta.",
                "One two three. Four.",
                "Red green blue. Cyan.",
            ],
        }
    ).to_csv(tmp_path / "mine.csv", index=False)
    (tmp_path / "conf" / "dataset" / "mine.yaml").write_text(
        f"path: {tmp_path / 'mine.csv'}\nfields:\n  input: article\n  id: key\n", encoding="utf-8"
    )
    (tmp_path / "agents" / "my_agents.py").write_text(
        "class FirstWords:\n"
        "    def __init__(self, n: int) -> None:\n        self.n = n\n"
        "    def __call__(self, text: str) -> str:\n        return ' '.join(text.split()[: self.n])\n",
        encoding="utf-8",
    )
    (tmp_path / "conf" / "target" / "first_words.yaml").write_text(
        "_target_: my_agents.FirstWords\nn: 2\n", encoding="utf-8"
    )

    completed = run_app(
        tmp_path / "run",
        f"--config-dir={tmp_path / 'conf'}",
        "dataset=mine",
        "target=first_words",
        env={"PYTHONPATH": str(tmp_path / "agents")},
    )

    assert completed.returncode == 0, completed.stderr
    items = table(tmp_path / "run", "items").set_index("item_id")
    assert items.loc["k2", "summary"] == "One two"
    assert items.loc["k2", "source"] == "One two three. Four."


def test_precomputed_outputs_are_scored_without_a_target(tmp_path: Path) -> None:
    data = tmp_path / "outputs.jsonl"
    data.write_text(
        json.dumps({"id": "same", "input": "The dam opened in May. It cost 9 million.", "summary": "The dam opened in May. It cost 9 million."}) + "\n"
        + json.dumps({"id": "other", "input": "The dam opened in May. It cost 9 million.", "summary": "Penguins are birds."}) + "\n",
        encoding="utf-8",
    )  # fmt: skip

    completed = run_app(
        tmp_path / "run",
        "target=precomputed",
        f"dataset.path={data}",
        "dataset.fields.output=summary",
        "dataset.fields.metadata=[]",
    )

    assert completed.returncode == 0, completed.stderr
    scores = table(tmp_path / "run", "items").set_index("item_id")["score"]
    assert scores["same"] == 1.0
    assert scores["other"] == 0.0


def test_a_run_that_scores_nothing_fails(tmp_path: Path) -> None:
    data = tmp_path / "outputs.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "input": " ", "summary": "The dam opened in May."}) + "\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )

    completed = run_app(
        tmp_path / "run",
        "target=precomputed",
        f"dataset.path={data}",
        "dataset.fields.output=summary",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
    )

    # Every source was blank (the data's failure): nothing was measured, and a gate must not
    # pass it; the items to fix are named.
    assert completed.returncode == 1, completed.stderr
    assert (
        "3 items: 0 scored, 0 blank summaries (scored 0), 3 unscorable (blank source: d0, d1, "
        "d2), 0 errors"
    ) in completed.stdout
    assert "no item was scored (3 unscorable, 0 errors): the run measured nothing" in (
        completed.stderr
    )
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["status"], manifest["exit_code"]) == ("completed", 1)


def test_errors_above_max_error_rate_fail_the_run(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "flaky.py").write_text(
        "class Flaky:\n"
        "    def __call__(self, text: str) -> str:\n"
        "        if 'penalties' in text or 'bakery' in text.lower():\n"
        "            raise RuntimeError('agent crashed')\n"
        "        return text[:200]\n",
        encoding="utf-8",
    )
    (tmp_path / "conf" / "target").mkdir(parents=True)
    (tmp_path / "conf" / "target" / "flaky.yaml").write_text(
        "_target_: flaky.Flaky\n", encoding="utf-8"
    )
    env = {"PYTHONPATH": str(tmp_path / "agents")}
    options = (f"--config-dir={tmp_path / 'conf'}", "target=flaky")

    strict = run_app(tmp_path / "strict", *options, env=env)
    lenient = run_app(tmp_path / "lenient", *options, "runner.max_error_rate=0.5", env=env)

    assert strict.returncode == 1, strict.stderr
    assert "more than runner.max_error_rate" in strict.stderr
    assert lenient.returncode == 0, lenient.stderr
    errors = table(tmp_path / "strict", "items").query("status == 'error'")
    assert sorted(errors["item_id"]) == ["bakery-expansion", "cup-final"]
    assert set(errors["error_type"]) == {"RuntimeError"}
    assert set(errors["error_step"]) == {"target"}
    assert errors["score"].isna().all()  # an error is never a score of 0


def test_a_run_whose_every_item_errored_has_every_dimension_aggregated_over_none(
    tmp_path: Path,
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "broken.py").write_text(
        "def broken(text: str) -> str:\n    raise RuntimeError('agent crashed')\n",
        encoding="utf-8",
    )
    (tmp_path / "conf" / "target").mkdir(parents=True)
    (tmp_path / "conf" / "target" / "broken.yaml").write_text(
        "_target_: hydra.utils.get_method\npath: broken.broken\n", encoding="utf-8"
    )

    completed = run_app(
        tmp_path / "run",
        f"--config-dir={tmp_path / 'conf'}",
        "target=broken",
        "dataset.limit=3",
        "runner.progress=false",
        env={"PYTHONPATH": str(tmp_path / "agents")},
    )

    assert completed.returncode == 1, completed.stderr
    assert (
        "3 items: 0 scored, 0 blank summaries (scored 0), 0 unscorable, 3 errors"
        in completed.stdout
    )
    # The tables were written for the summarization scorer: each of its metrics is there,
    # over no item, as in a run that scored some.
    aggregates = table(tmp_path / "run", "aggregates").set_index("metric")
    assert sorted(aggregates.index) == ["alignment", "coverage", "score"]
    assert list(aggregates["n"]) == [0, 0, 0]
    assert list(aggregates["errors"]) == [3, 3, 3]
    runs = table(tmp_path / "run", "runs")
    assert (runs["score_n"][0], runs["alignment_n"][0], runs["coverage_n"][0]) == (0, 0, 0)


def test_the_llm_summarizer_agent_is_swept_against_a_fixed_judge(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    completed = run_app(
        tmp_path / "llm",
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=small-model",
        "target.prompt=Summarize in one sentence.",
        "dataset.limit=3",
        env={"OPENAI_API_KEY": SECRET},
    )

    assert completed.returncode == 0, completed.stderr
    assert len(chat_server.requests) == 3  # the agent's calls; the judge is offline
    bodies = [request.body for request in chat_server.requests]
    assert {body["model"] for body in bodies} == {"small-model"}
    assert all(
        body["messages"][0] == {"role": "system", "content": "Summarize in one sentence."}
        for body in bodies
    )
    # The three documents, in whatever order the concurrent calls arrived.
    sent = sorted(body["messages"][1]["content"][:20] for body in bodies)
    assert sent == ["A team from the Valm", "Riverside Athletic w", "The town council of "]
    items = table(tmp_path / "llm", "items")
    assert set(items["summary"]) == {SUMMARY_REPLY}
    # The agent in a person's words, then the overrides that fit a label of 64 characters, and
    # the whole's hash (issue 32: a label of every override, 150 characters here, widened every
    # table it is in; issue 42: the agent first, by its option and model).
    (label,) = set(items["variant"])
    assert re.fullmatch(r"llm_summarizer/small-model,dataset\.limit=3,\.\.\.~[0-9a-f]{8}", label)


@pytest.mark.parametrize("role", ["model", "target"])
def test_a_refused_key_stops_the_run_with_one_message(
    tmp_path: Path, chat_server: ChatServer, role: str
) -> None:
    chat_server.fail_every_request(Fault(401, "Incorrect API key provided"))
    endpoint = (
        ["model=openai", f"model.base_url={chat_server.base_url}"]
        if role == "model"
        else ["target=llm_summarizer", f"target.base_url={chat_server.base_url}"]
    )

    completed = run_app(
        tmp_path / "run", *endpoint, "runner.max_items_in_flight=2", env={"OPENAI_API_KEY": SECRET}
    )

    assert completed.returncode == 1
    assert completed.stderr.count("refused the credentials (HTTP 401)") == 1
    assert len(chat_server.requests) <= 4  # the items in flight, not one per item
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "aborted"
    assert len(table(tmp_path / "run", "items")) == 0  # readable, and nothing counted as scored
