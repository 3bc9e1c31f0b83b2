"""Nightly trends (issue 19, point 2): ``runs.parquet`` in every run directory, ``load_history``
over a folder of runs, and the trend ``summeval-compare --history`` draws in its report.

Runs are made by the app in this process (``tests/app.py``), with the offline judge.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import pytest

from summeval_runner import load_history
from summeval_runner._analysis._history import config_history, history_trend
from summeval_runner._cli import _compare_command
from tests.app import run_app, summeval_compare
from tests.docs_pages import block as block_containing
from tests.documents import SAMPLE
from tests.test_compare import baseline_scores, make_run

QUIET = ("runner.progress=false", "runner.cache=off")
COUNTS = ["items", "scored", "unscorable", "errors", "unfinished", "input_tokens", "output_tokens"]


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return loaded


def run(run_dir: Path, *overrides: str) -> Path:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    completed = run_app(run_dir, "dataset.limit=3", *QUIET, *overrides)
    assert completed.returncode == 0, completed.stderr
    return run_dir


def test_a_run_writes_its_row_to_runs_parquet(tmp_path: Path) -> None:
    run_dir = run(tmp_path / "run")

    path = run_dir / "runs.parquet"
    written = manifest(run_dir)
    aggregates = pd.read_parquet(run_dir / "aggregates.parquet").set_index("metric")
    (row,) = pd.read_parquet(path).to_dict("records")

    assert row["run_id"] == written["run_id"]
    assert row["variant"] == "dataset.limit=3"
    assert row["status"] == "completed"
    assert row["judge"] == "offline"
    assert row["prompt_version"] == written["prompt_version"]
    assert row["dataset_fingerprint"] == written["dataset"]["inputs_sha256"]
    assert len(row["config_hash"]) == 64
    assert row["started_at"] == pd.Timestamp(written["started_at"])
    assert row["finished_at"] == pd.Timestamp(written["finished_at"])
    assert row["duration_s"] == written["duration_s"]
    assert [row[c] for c in COUNTS] == [3, 3, 0, 0, 0, 0, 0]
    # The offline judge and the lead-k baseline cost nothing: known, and 0.
    assert row["cost_usd"] == written["cost"]["total"] == 0.0
    for dimension in ("score", "alignment", "coverage"):
        assert row[f"{dimension}_n"] == 3
        assert row[f"{dimension}_mean"] == aggregates.loc[dimension, "mean"]
        assert row[f"{dimension}_ci95_low"] == aggregates.loc[dimension, "ci95_low"]
    # The types a reader gets: pandas (a plain read_parquet) and DuckDB.
    frame = pd.read_parquet(path)
    assert {str(frame[c].dtype) for c in COUNTS} == {"Int64"}
    assert str(frame["started_at"].dtype) == "datetime64[us, UTC]"
    types = dict(
        duckdb.sql(f"DESCRIBE SELECT * FROM '{path}'")
        .project("column_name, column_type")
        .fetchall()
    )
    assert types["started_at"] == types["finished_at"] == "TIMESTAMP WITH TIME ZONE"
    assert {types[c] for c in COUNTS} == {"BIGINT"}
    assert types["cost_usd"] == types["score_mean"] == "DOUBLE"
    schema = pq.read_schema(path)
    assert [f.name for f in schema if not (f.metadata or {}).get(b"description")] == []


def test_load_history_has_every_run_under_a_folder_oldest_first(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    elsewhere = tmp_path / "copy" / "articles.jsonl"
    elsewhere.parent.mkdir()
    shutil.copy(SAMPLE, elsewhere)
    first = run(outputs / "1")
    # The same data at another path, read with the sample's field names.
    moved = run(
        outputs / "2", f"dataset.path={elsewhere}", "dataset.fields.input=text",
        "dataset.fields.metadata=[title,domain]",
    )  # fmt: skip
    other = run(outputs / "3", "scorer.max_questions=5")
    shard = run(outputs / "4", "runner.shard=0/2")
    stored = pd.read_parquet(first / "runs.parquet")
    # An older run, without runs.parquet: read from its manifest and aggregates.
    (first / "runs.parquet").unlink()
    # A run resumed since its runs.parquet was written: its manifest says what it is now.
    resumed = manifest(moved) | {"status": "interrupted"}
    (moved / "manifest.json").write_text(json.dumps(resumed), encoding="utf-8")
    # A run still going (or killed): its starting manifest only.
    going = make_run(
        outputs / "5", "nightly", {}, started_at="2099-01-01T03:00:00+00:00", run_status="running"
    )
    (going / "items.parquet").unlink()

    history = load_history(outputs)

    assert history["run_dir"].tolist() == [str(first), str(moved), str(other), str(going)]
    assert str(shard) not in history["run_dir"].tolist()  # its merged run would stand for it
    rebuilt = history.iloc[[0]].drop(columns="run_dir")
    pd.testing.assert_frame_equal(rebuilt, stored)  # the same row as the file held
    assert history["status"].tolist() == ["completed", "interrupted", "completed", "running"]
    hashes = history["config_hash"].tolist()
    assert hashes[0] == hashes[1] != hashes[2]  # where the data lies is not what it is
    assert history.loc[3, ["items", "score_n"]].isna().all()
    assert {str(history[c].dtype) for c in COUNTS} == {"Int64"}
    assert str(history["started_at"].dtype) == "datetime64[us, UTC]"
    # DuckDB over the files: a row for each run that wrote one, shards none.
    assert duckdb.sql(f"SELECT count(*) FROM '{outputs}/**/runs.parquet'").fetchall() == [(2,)]


def nights(folder: Path) -> list[Path]:
    """Four nights of one config: the third was interrupted, and the third and fourth dropped
    on a third of the items."""
    made = []
    for day, shift, status in ((1, 0.0, "completed"), (2, 0.0, "completed"),
                               (3, -0.3, "interrupted"), (4, -0.3, "completed")):  # fmt: skip
        scores = {
            k: (s + shift, a, c + shift) if int(k[-3:]) % 3 == 0 else (s, a, c)
            for k, (s, a, c) in baseline_scores().items()
        }
        made.append(
            make_run(
                folder / f"day{day}",
                "nightly",
                scores,
                started_at=f"2026-11-0{day}T03:00:00+00:00",
                run_status=status,
            )
        )
    return made


def test_the_history_trend_marks_each_nights_regression(tmp_path: Path) -> None:
    days = nights(tmp_path / "outputs")

    trend = history_trend(config_history(tmp_path / "outputs"), alpha=0.05, threshold=0.05)

    assert trend.columns.tolist() == [
        "run_id", "variant", "run_dir", "started_at", "status", "dimension", "n", "mean",
        "ci95_low", "ci95_high", "mean_diff", "regression",
    ]  # fmt: skip
    assert str(trend["started_at"].dtype) == "datetime64[us, UTC]"
    score = trend[trend["dimension"] == "score"].set_index("run_dir")
    assert score["status"].tolist() == ["completed", "completed", "interrupted", "completed"]
    assert pd.isna(score.loc[str(days[0]), "mean_diff"])
    assert score.loc[str(days[1]), "mean_diff"] == 0
    # Night 4 is compared with night 2, the last that completed, not the interrupted night 3.
    assert score.loc[str(days[2]), "mean_diff"] == pytest.approx(-0.1)
    assert score.loc[str(days[3]), "mean_diff"] == pytest.approx(-0.1)
    assert score["regression"].tolist() == [False, False, True, True]
    regressions = trend[trend["regression"]]
    assert set(regressions["dimension"]) == {"score", "coverage"}  # alignment did not move
    for row in score.to_dict("records"):
        assert row["ci95_low"] <= row["mean"] <= row["ci95_high"]


def test_summeval_compare_history_gives_the_report_the_whole_trend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nights(tmp_path / "outputs")
    given: list[pd.DataFrame | None] = []
    render = _compare_command.render_report

    def recording(*args: Any, history: pd.DataFrame | None = None, **kwargs: Any) -> Path:
        given.append(history)
        return render(*args, history=history, **kwargs)

    monkeypatch.setattr(_compare_command, "render_report", recording)

    gated = summeval_compare(
        "--history", str(tmp_path / "outputs"), "--fail-if-drop", "0.05", cwd=tmp_path
    )

    assert gated.returncode == 1, gated.stderr
    assert "regression: nightly (day4): score dropped by 0.100" in gated.stderr
    (trend,) = given
    assert trend is not None
    expected = history_trend(config_history(tmp_path / "outputs"), alpha=0.05, threshold=0.05)
    pd.testing.assert_frame_equal(trend, expected)
    assert (tmp_path / "outputs" / "report.html").is_file()  # beside the newest run


def test_the_readmes_history_example_runs(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    for night in ("1", "2"):
        run(outputs / night)
    example = block_containing("python", "load_history(").replace('"outputs"', repr(str(outputs)))

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "docs/guides/outputs.md", "exec"), {})

    lines = printed.getvalue().splitlines()
    assert lines[0].split() == [
        "started_at", "status", "score_n", "score_mean", "score_ci95_low", "score_ci95_high"
    ]  # fmt: skip
    assert len(lines) == 3
    assert all(" completed " in line for line in lines[1:])


def test_the_history_and_runs_parquet_group_a_benchmarks_nights_alike_across_an_upgrade(
    tmp_path: Path,
) -> None:
    # Two nights of one config and label; an upgrade between them changed the prompts (the
    # run's setup). They are one benchmark to --history and in runs.parquet alike; the
    # comparison then refuses them loudly (exit 2), instead of gating the second night alone.
    outputs = tmp_path / "outputs"
    first = make_run(outputs / "day1", "nightly", baseline_scores(), started_at="2026-11-01")
    second = make_run(outputs / "day2", "nightly", baseline_scores(), started_at="2026-11-02")
    for night, version in ((first, "p1"), (second, "p2")):
        recorded = manifest(night) | {"prompt_version": version, "setup": {"prompts": version}}
        (night / "manifest.json").write_text(json.dumps(recorded), encoding="utf-8")
    make_run(outputs / "other", "other-label", baseline_scores(), started_at="2026-10-01")

    history = load_history(outputs).set_index("variant")
    gated = summeval_compare(
        "--history", str(outputs), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )

    nightly = history.loc["nightly"]
    assert nightly["benchmark_id"].nunique() == 1  # one benchmark ...
    assert nightly["config_hash"].nunique() == 2  # ... whose setup changed
    assert history.loc["other-label", "benchmark_id"] not in set(nightly["benchmark_id"])
    assert [run.path for run in config_history(outputs)] == [first, second]
    assert gated.returncode == 2, gated.stdout + gated.stderr
    assert "prompt version" in gated.stderr
