"""The own-data page's walk, run as written: a CSV of a user's own summaries to two runs, a
comparison and a gate (issue 42). Blank summaries count as 0 in every figure, so a version that
returned nothing for its hardest items cannot pass a gate by it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import duckdb
import pandas as pd

from tests.app import ENV
from tests.docs_pages import block
from tests.prestarted import commands_path

PAGE_COMMAND = "summeval-compare runs/lazy --fail-if-below 0.4"


def test_the_own_data_walk_runs_as_written_and_prints_what_the_page_shows(
    tmp_path: Path,
) -> None:
    script = block("bash", PAGE_COMMAND)
    shown = block("text", "2 blank summaries (scored 0)")
    # The console scripts of this interpreter's environment, as a shell after `pip install`
    # (served prestarted: tests/prestarted.py).
    path = commands_path()

    walked = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={**os.environ, **ENV, "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert walked.returncode == 0, walked.stderr  # the last command is `echo "exit $?"`
    printed = [line.rstrip() for line in (walked.stdout + walked.stderr).splitlines()]
    for line in shown.strip().splitlines():
        assert any(p.startswith(line.rstrip()) for p in printed), (line, printed)

    # The blank summaries are 0 in the tables, and the paired comparison holds them.
    items = pd.read_parquet(tmp_path / "runs" / "lazy" / "items.parquet").set_index("item_id")
    assert items.loc[["floods", "museum"], "status"].tolist() == ["blank_summary"] * 2
    assert items.loc[["floods", "museum"], "score"].tolist() == [0.0, 0.0]
    compared = tmp_path / "runs" / "compared" / "comparison.parquet"
    paired = duckdb.sql(
        f"SELECT n_paired, blank_summaries FROM '{compared}' "
        "WHERE variant = 'lazy' AND dimension = 'score'"
    ).fetchall()
    assert paired == [(5, 2)]

    # The page's error for the same file without dataset.fields.input, as it shows it.
    refused = subprocess.run(
        ["summeval-run", "dataset.path=news.csv", "target=precomputed"],
        cwd=tmp_path,
        env={**os.environ, **ENV, "PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2
    error = block("text", "no field 'input' (dataset.fields.input)")
    assert refused.stderr.replace(f"{tmp_path}{os.sep}", "") == error


def test_blank_summaries_fail_a_drop_gate_they_used_to_pass(tmp_path: Path) -> None:
    """Issue 42: with the blanks left out, a version that returned nothing for its hardest
    items kept (or raised) its mean and passed --fail-if-drop; counted as 0, it fails."""
    from tests.app import run_app, summeval_compare
    from tests.documents import write_dataset

    docs = write_dataset(tmp_path / "docs.jsonl", 24)
    rows = pd.read_json(docs, lines=True)
    full = rows.assign(output=[text.split(". ")[0] + "." for text in rows["input"]])
    # Blank where the full version covered least: the hardest items.
    blanked = full.assign(output=[o if i % 3 else "" for i, o in enumerate(full["output"])])
    for name, frame in (("full", full), ("blank", blanked)):
        frame.to_json(tmp_path / f"{name}.jsonl", orient="records", lines=True)
        done = run_app(
            tmp_path / name, f"dataset.path={tmp_path / f'{name}.jsonl'}", "target=precomputed",
            f"runner.variant={name}", "runner.progress=false",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    gated = summeval_compare(
        str(tmp_path / "full"), str(tmp_path / "blank"), "--fail-if-drop", "0.02",
        "--out", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip
    floor = summeval_compare(
        str(tmp_path / "blank"), "--fail-if-below", "0.15", "--out", str(tmp_path / "out2"),
        cwd=tmp_path,
    )  # fmt: skip

    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "blank" in gated.stderr
    assert floor.returncode == 1, floor.stdout + floor.stderr


def test_without_an_id_column_changed_summaries_fail_the_drop_gate_not_drop_out(
    tmp_path: Path,
) -> None:
    """Found trying SummEval's rows as a new user would: with no id column, an item's id is
    generated from its input and summary, so the blanked items got new ids, did not pair, and
    --fail-if-drop passed on the unchanged rest (a difference of +0.000 over them)."""
    from tests.app import run_app, summeval_compare
    from tests.documents import write_dataset

    docs = pd.read_json(write_dataset(tmp_path / "docs.jsonl", 24), lines=True).drop(columns="id")
    full = docs.assign(output=[text.split(". ")[0] + "." for text in docs["input"]])
    blanked = full.assign(output=[o if i % 4 else "" for i, o in enumerate(full["output"])])
    for name, frame in (("full", full), ("blank", blanked)):
        frame.to_json(tmp_path / f"{name}.jsonl", orient="records", lines=True)
        done = run_app(
            tmp_path / name, f"dataset.path={tmp_path / f'{name}.jsonl'}", "target=precomputed",
            f"runner.variant={name}", "runner.progress=false",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    gated = summeval_compare(
        str(tmp_path / "full"), str(tmp_path / "blank"), "--fail-if-drop", "0.02",
        "--out", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip

    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "summeval-compare: gate: blank (" in gated.stderr
    assert "6 of its items and 6 of the baseline full's did not pair" in gated.stderr
    saved = duckdb.sql(
        f"SELECT DISTINCT variant, ids_from_summaries FROM '{tmp_path / 'out'}/comparison.parquet' "
        "ORDER BY variant"
    ).fetchall()
    assert saved == [("blank", True), ("full", True)]
