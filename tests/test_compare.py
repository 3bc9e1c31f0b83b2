"""Comparing runs (issue 5): paired statistics, the regression gate, history.

``summeval-compare`` and ``summeval-run`` run in this process (``tests/app.py``). The HTML
report's tests are in ``tests/test_report.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from summeval_runner import (
    DatasetFile,
    EvalRunResult,
    FieldMap,
    InputError,
    ItemResult,
    compare_runs,
    create_summarization_scorer,
    run_evals,
    write_report,
)
from summeval_runner._rundir._manifest import DatasetInfo, Manifest
from summeval_runner._rundir._tables import ITEMS_SCHEMA
from summeval_runner._stats import paired_bootstrap_ci, paired_permutation_p
from tests.app import (
    ENV,
    SAMPLE,
    SAMPLE_ITEMS,
    Completed,
    openai_run,
    run_app,
    run_sweep,
    summeval_compare,
)
from tests.chat_server import ChatServer, Fault
from tests.documents import write_dataset

PLANTED = [f"item-{i:03d}" for i in range(0, 60, 3)]  # 20 items that get worse


def make_run(
    path: Path,
    variant: str,
    scores: dict[str, tuple[float, float, float]],
    *,
    summaries: dict[str, str] | None = None,
    started_at: str = "2026-11-30T10:00:00+00:00",
    statuses: dict[str, str] | None = None,
    run_status: str = "completed",
    unfinished: int = 0,
) -> Path:
    """A run directory with the given (score, alignment, coverage) per item; items given
    another status in ``statuses`` ("error", "unscorable") have no scores, a blank summary 0.
    The manifest says ``run_status`` and ``unfinished`` (by default a completed run)."""
    path.mkdir(parents=True)
    rows = []
    for item_id, (score, alignment, coverage) in scores.items():
        status = (statuses or {}).get(item_id, "scored")
        row = dict.fromkeys(ITEMS_SCHEMA.names)
        row |= {
            "run_id": f"run-{variant}",
            "variant": variant,
            "item_id": item_id,
            "scorer_id": "summarization-scorer",
            "trial": 0,
            "status": status,
            "reason": f"reason for {item_id}",
            "summary": (summaries or {}).get(item_id, f"summary of {item_id}"),
            "scale": 1.0,
        }
        if status == "scored":
            row |= {"score": score, "alignment_score": alignment, "coverage_score": coverage}
        elif status == "blank_summary":  # 0 on every dimension, as the scorer writes it
            row |= {"score": 0.0, "alignment_score": 0.0, "coverage_score": 0.0}
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows, schema=ITEMS_SCHEMA), path / "items.parquet")
    manifest = {
        "run_id": f"run-{variant}",
        "variant": variant,
        "status": run_status,
        "unfinished": unfinished,
        "started_at": started_at,
        "config": {"dataset": {"path": "d"}, "target": {}, "model": {}, "scorer": {}},
        "judge": {"name": "offline"},
        "prompt_version": "p1",
    }
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path


def baseline_scores(count: int = 60, seed: int = 1) -> dict[str, tuple[float, float, float]]:
    rng = random.Random(seed)
    scores = {}
    for i in range(count):
        coverage = rng.uniform(0.5, 0.9)
        alignment = rng.uniform(0.8, 1.0)
        scores[f"item-{i:03d}"] = (min(alignment, coverage), alignment, coverage)
    return scores


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    base = baseline_scores()
    worse = {
        item: (s - 0.3, a, c - 0.3) if item in PLANTED else (s, a, c)
        for item, (s, a, c) in base.items()
    }
    return make_run(tmp_path / "base", "base", base), make_run(tmp_path / "new", "new", worse)


def test_a_planted_drop_is_measured_on_the_paired_items(planted: tuple[Path, Path]) -> None:
    base, new = planted

    table = compare_runs([new], baseline=base).set_index(["variant", "dimension"])

    score = table.loc[("new", "score")]
    assert score["n_paired"] == 60
    assert score["mean_diff"] == pytest.approx(-0.3 * 20 / 60)
    assert score["diff_ci95_low"] < score["mean_diff"] < score["diff_ci95_high"] < 0
    assert score["p_value"] < 0.001
    assert (score["better"], score["worse"], score["tied"]) == (0, 20, 40)
    assert set(score["worst_items"]) <= set(PLANTED)
    assert table.loc[("new", "alignment"), "mean_diff"] == 0
    assert not table.loc[("new", "alignment"), "significant"]


def test_the_gate_flags_the_planted_drop_with_its_dimension_and_worst_items(
    planted: tuple[Path, Path], tmp_path: Path
) -> None:
    base, new = planted

    gated = summeval_compare(
        str(base), str(new), "--fail-if-drop", "0.02", "--out", str(tmp_path), cwd=tmp_path
    )

    assert gated.returncode == 1, gated.stderr
    lines = [line for line in gated.stderr.splitlines() if "regression" in line]
    dropped = set(re.findall(r"regression: new: (\w+) dropped", gated.stderr))
    assert dropped == {"score", "coverage"}
    assert all(any(item in line for item in PLANTED) for line in lines)
    assert "alignment" not in gated.stderr
    saved = pd.read_parquet(tmp_path / "comparison.parquet")
    assert set(saved["dimension"]) == {"score", "alignment", "coverage"}


def test_an_identical_variant_passes_the_gate(tmp_path: Path) -> None:
    base = make_run(tmp_path / "base", "base", baseline_scores())
    same = make_run(tmp_path / "same", "same", baseline_scores())

    gated = summeval_compare(
        str(base), str(same), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )

    assert gated.returncode == 0, gated.stderr
    table = compare_runs([same], baseline=base)
    assert (table.dropna(subset=["mean_diff"])["p_value"] == 1.0).all()


def test_a_tiny_noisy_difference_on_few_items_is_not_significant(tmp_path: Path) -> None:
    rng = random.Random(7)
    base_scores = baseline_scores(count=6)
    noisy = {item: (s + rng.uniform(-0.03, 0.02), a, c) for item, (s, a, c) in base_scores.items()}
    base = make_run(tmp_path / "base", "base", base_scores)
    new = make_run(tmp_path / "new", "new", noisy)

    table = compare_runs([new], baseline=base).set_index(["variant", "dimension"])
    gated = summeval_compare(
        str(base), str(new), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )

    assert table.loc[("new", "score"), "p_value"] > 0.05
    assert not table.loc[("new", "score"), "significant"]
    assert gated.returncode == 0, gated.stderr


def test_items_in_only_one_run_are_listed_not_dropped(tmp_path: Path) -> None:
    scores = baseline_scores(count=10)
    base = make_run(tmp_path / "base", "base", scores)
    partial = {k: v for k, v in scores.items() if k not in {"item-003", "item-007"}}
    partial["item-new"] = (0.5, 0.5, 0.5)
    new = make_run(tmp_path / "new", "new", partial)

    row = compare_runs([new], baseline=base).query("dimension == 'score' and variant == 'new'")
    printed = summeval_compare(str(base), str(new), "--out", str(tmp_path), cwd=tmp_path)

    assert list(row["items_only_here"].item()) == ["item-new"]
    assert list(row["items_only_in_baseline"].item()) == ["item-003", "item-007"]
    assert row["n_paired"].item() == 8
    assert "items only in new: item-new" in printed.stdout
    assert "items only in the baseline base: item-003, item-007" in printed.stdout


def test_a_directory_that_is_not_a_run_is_bad_input(tmp_path: Path) -> None:
    completed = summeval_compare(str(tmp_path), "--out", str(tmp_path), cwd=tmp_path)

    assert completed.returncode == 2
    assert f"{tmp_path} is not a finished run directory" in completed.stderr


def test_history_compares_the_newest_run_with_the_earlier_ones(tmp_path: Path) -> None:
    folder = tmp_path / "outputs"
    for day, shift in ((1, 0.0), (2, 0.0), (3, -0.3)):
        scores = {k: (s + shift, a, c + shift) for k, (s, a, c) in baseline_scores().items()}
        make_run(
            folder / f"2026-11-0{day}" / "run",
            "nightly",
            scores,
            started_at=f"2026-11-0{day}T03:00:00+00:00",
        )
    # Timestamps as runs write them (UTC, with the offset); a date alone is the next test's.
    make_run(
        folder / "other",
        "other-variant",
        baseline_scores(),
        started_at="2026-10-01T03:00:00+00:00",
    )

    completed = summeval_compare(
        "--history", str(folder), "--fail-if-drop", "0.05", "--out", str(tmp_path), cwd=tmp_path
    )

    assert completed.returncode == 1, completed.stderr
    assert "history of nightly" in completed.stdout
    assert "(3 runs)" in completed.stdout
    assert "2026-11-03T03:00:00" in completed.stdout
    assert "nightly (2026-11-03/run): score dropped by 0.300" in completed.stderr


@pytest.mark.parametrize(
    ("status", "unfinished", "tables", "gate"),
    [
        ("failed", 50, True, "is failed with 50 of 60 items unfinished: resume it before"),
        ("interrupted", 50, True, "is interrupted with 50 of 60 items unfinished: resume it"),
        ("aborted", 0, False, "is aborted: resume it before gating on it"),
        # Its starting manifest, never replaced: the run is in progress, or was killed.
        ("running", 0, False, "is running: it is still in progress, or was killed; let it"),
    ],
)  # fmt: skip
def test_history_gates_on_the_newest_run_even_when_it_did_not_complete(
    tmp_path: Path, status: str, unfinished: int, tables: bool, gate: str
) -> None:
    folder = tmp_path / "outputs"
    for day in (1, 2):
        make_run(
            folder / f"day{day}",
            "nightly",
            baseline_scores(),
            started_at=f"2026-11-0{day}T03:00:00+00:00",
        )
    newest = make_run(
        folder / "day3",
        "nightly",
        dict(list(baseline_scores().items())[:10]),
        started_at="2026-11-03T03:00:00+00:00",
        run_status=status,
        unfinished=unfinished,
    )
    if not tables:
        (newest / "items.parquet").unlink()

    gated = summeval_compare(
        "--history", str(folder), "--fail-if-drop", "0.02", "--out", str(tmp_path), cwd=tmp_path
    )
    ungated = summeval_compare("--history", str(folder), "--out", str(tmp_path), cwd=tmp_path)

    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "(3 runs)" in gated.stdout
    assert f"summeval-compare: gate: nightly ({newest}) {gate}" in gated.stderr
    # Compared with the latest earlier completed run, which passes.
    assert "day2" in gated.stdout
    assert "day1)" not in gated.stderr
    assert "day2)" not in gated.stderr
    assert ungated.returncode == 0, ungated.stderr
    assert f"summeval-compare: note: nightly ({newest}) is {status}" in ungated.stderr


def test_a_killed_run_counts_its_whole_selection_unfinished(tmp_path: Path) -> None:
    # Killed: its manifest is the one written at its start (no counts, unfinished not yet
    # known) and it has no tables; its dataset had 26 items.
    folder = tmp_path / "outputs"
    make_run(folder / "day1", "nightly", baseline_scores(count=26), started_at="2026-11-01")
    killed = make_run(folder / "day2", "nightly", {}, started_at="2026-11-02", run_status="running")
    manifest = json.loads((killed / "manifest.json").read_text("utf-8"))
    manifest |= {"unfinished": None, "dataset": {"path": "d", "items": 26}}
    (killed / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (killed / "items.parquet").unlink()

    completed = summeval_compare("--history", str(folder), "--out", str(tmp_path), cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    rows = pd.read_parquet(tmp_path / "comparison.parquet").query("dimension == 'score'")
    killed_row = rows[rows["run_dir"] == str(killed)].iloc[0]
    assert (killed_row["status"], killed_row["items"], killed_row["unfinished"]) == (
        "running",
        0,
        26,
    )


def test_history_gates_on_a_first_run_that_did_not_complete(tmp_path: Path) -> None:
    only = make_run(
        tmp_path / "outputs" / "day1",
        "nightly",
        baseline_scores(count=5),
        run_status="aborted",
    )

    gated = summeval_compare(
        "--history", str(tmp_path / "outputs"), "--fail-if-drop", "0", "--out", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip

    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert f"summeval-compare: gate: nightly ({only}) is aborted" in gated.stderr


def test_history_reads_a_run_whose_timestamp_has_no_offset(tmp_path: Path) -> None:
    folder = tmp_path / "outputs"
    make_run(folder / "old", "nightly", baseline_scores(), started_at="2026-10-01")
    make_run(folder / "new", "nightly", baseline_scores(), started_at="2026-11-01T03:00:00+00:00")

    completed = summeval_compare("--history", str(folder), "--out", str(tmp_path), cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    assert "history of nightly" in completed.stdout
    assert "(2 runs)" in completed.stdout


def test_a_sweep_writes_its_comparison_and_report(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    completed = run_sweep(sweep, "target.k=1,3", "dataset.limit=8", "runner.progress=false")

    assert completed.returncode == 0, completed.stderr
    # Each variant's directory is its overrides (runner settings left out); its label, what the
    # sweep varies (issue 32: dataset.limit=8, fixed for every job, told no variant apart).
    variants = ["dataset.limit=8,target.k=1", "dataset.limit=8,target.k=3"]
    labels = ["target.k=1", "target.k=3"]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == variants
    comparison = pd.read_parquet(sweep / "comparison.parquet").set_index(["variant", "dimension"])
    assert comparison.loc[(labels[1], "score"), "baseline"] == labels[0]
    assert comparison.loc[(labels[1], "score"), "mean_diff"] > 0
    for variant, label in zip(variants, labels, strict=True):
        assert set(pd.read_parquet(sweep / variant / "items.parquet")["variant"]) == {label}


def test_runs_with_no_item_in_common_compare_without_a_difference_and_fail_the_gate(
    tmp_path: Path,
) -> None:
    base = make_run(tmp_path / "base", "base", baseline_scores(count=3))
    other = make_run(tmp_path / "other", "other", {f"x-{i}": (0.5, 0.5, 0.5) for i in range(2)})

    printed = summeval_compare(str(base), str(other), "--out", str(tmp_path), cwd=tmp_path)
    gated = summeval_compare(
        str(base), str(other), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )

    # Shards of one run, or files whose generated ids differ: nothing was compared, so the gate
    # cannot have found a drop.
    assert gated.returncode == 1, gated.stderr
    assert gated.stderr == (
        f"summeval-compare: gate: other ({other}) has no item in common with the baseline "
        "base: nothing was compared\n"
    )
    assert printed.returncode == 0, printed.stderr
    score_lines = [line for line in printed.stdout.splitlines() if line.startswith("score")]
    assert "base" in score_lines[0].split()
    assert "n/a" in score_lines[1].split()  # nothing to pair: no difference, no verdict
    assert "items only in other: x-0, x-1" in printed.stdout
    assert "no item scored in both" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_two_runs_of_the_same_variant_get_labels_of_their_own(tmp_path: Path) -> None:
    first = make_run(tmp_path / "2026-11-29" / "03-00-00", "default", baseline_scores())
    second = make_run(tmp_path / "2026-11-30" / "03-00-00", "default", baseline_scores())

    table = compare_runs([first, second], baseline=first)

    labels = sorted(set(table["variant"]))
    assert labels == ["default (2026-11-29/03-00-00)", "default (2026-11-30/03-00-00)"]
    assert set(table["baseline"].dropna()) == {"default (2026-11-29/03-00-00)"}


# The gate on broken runs (issue 16, point 7): a run that measured nothing, or errored, has no
# drop to find, so it fails the gate whatever its scores say.


def test_the_gate_fails_on_a_run_whose_every_item_errored(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    overrides = openai_run(
        chat_server.base_url, dataset, "runner.retry.max_attempts=1", "runner.cache=off"
    )
    monday = run_app(tmp_path / "monday", *overrides, "runner.variant=monday", env=ENV)
    assert monday.returncode == 0, monday.stderr
    # Tuesday the judge answers every request with a 503: every item ends in error.
    chat_server.fail_every_request(Fault(503, "overloaded"))
    tuesday = run_app(tmp_path / "tuesday", *overrides, "runner.variant=tuesday", env=ENV)
    assert tuesday.returncode == 1, tuesday.stderr

    gated = summeval_compare(
        str(tmp_path / "monday"),
        str(tmp_path / "tuesday"),
        "--fail-if-drop",
        "0.02",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )

    assert gated.returncode == 1, gated.stderr
    assert "regression" not in gated.stderr  # nothing was scored, so nothing "dropped"
    assert (
        f"gate: tuesday ({tmp_path / 'tuesday'}) scored no item (4 items: 0 unscorable, "
        "4 errors): it measured nothing" in gated.stderr
    )
    assert "monday" not in gated.stderr.replace(str(tmp_path / "monday"), "")


def test_the_gate_fails_on_a_run_with_no_item_scored_in_both(tmp_path: Path) -> None:
    scores = baseline_scores(count=4)
    base = make_run(tmp_path / "base", "base", scores, statuses={"item-000": "unscorable"})
    new = make_run(
        tmp_path / "new",
        "new",
        scores,
        statuses={"item-001": "unscorable", "item-002": "unscorable", "item-003": "unscorable"},
    )

    gated = summeval_compare(
        str(base), str(new), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )

    assert gated.returncode == 1, gated.stderr
    assert (
        f"summeval-compare: gate: new ({new}) has no item scored in both it and the baseline "
        "base: nothing was compared"
    ) in gated.stderr


def test_the_gate_fails_on_a_run_with_no_scored_item(tmp_path: Path) -> None:
    scores = baseline_scores(count=5)
    base = make_run(tmp_path / "base", "base", scores)
    nothing = make_run(
        tmp_path / "new", "new", scores, statuses=dict.fromkeys(scores, "unscorable")
    )

    gated = summeval_compare(
        str(base), str(nothing), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )
    ungated = summeval_compare(str(base), str(nothing), "--out", str(tmp_path), cwd=tmp_path)

    assert gated.returncode == 1, gated.stderr
    assert (
        f"summeval-compare: gate: new ({nothing}) scored no item (5 items: 5 unscorable, "
        "0 errors)" in gated.stderr
    )
    assert ungated.returncode == 0  # without --fail-if-drop, a comparison gates nothing


def test_the_gate_fails_on_errored_items_above_max_error_rate(tmp_path: Path) -> None:
    scores = baseline_scores(count=20)
    base = make_run(tmp_path / "base", "base", scores)
    # The same scores, but two items (10%) ended in error: the scored ones did not drop.
    new = make_run(
        tmp_path / "new", "new", scores, statuses={"item-004": "error", "item-011": "error"}
    )

    def gate(*options: str) -> Completed:
        return summeval_compare(
            str(base), str(new), "--fail-if-drop", "0", *options, "--out", str(tmp_path),
            cwd=tmp_path,
        )  # fmt: skip

    by_default, strict, tolerant = (
        gate(),
        gate("--max-error-rate", "0.05"),
        gate("--max-error-rate", "0.1"),
    )

    assert by_default.returncode == 1, by_default.stderr
    assert f"gate: new ({new}): 2 of 20 items errored (10.0%), more than the 0.0% allowed" in (
        by_default.stderr
    )
    assert strict.returncode == 1
    assert "more than the 5.0% allowed" in strict.stderr
    assert tolerant.returncode == 0, tolerant.stderr
    assert "regression" not in by_default.stderr + strict.stderr + tolerant.stderr


def lead(text: str) -> str:
    return text.split(". ")[0] + "."


def sample_run(run_dir: Path, *, stop_after: int | None = None) -> EvalRunResult:
    """The offline judge over the bundled sample's first sentences, in ``run_dir`` (variant: its
    name); told to stop, as Ctrl-C does, once ``stop_after`` items finished."""

    async def run() -> EvalRunResult:
        stop = asyncio.Event()
        finished: list[str] = []

        def count(item: ItemResult) -> None:
            finished.append(item.item_id)
            if len(finished) == stop_after:
                stop.set()

        return await run_evals(
            target=lead,
            scorers=[create_summarization_scorer("offline")],
            data=DatasetFile(SAMPLE, FieldMap(input="text")),
            on_item_complete=count,
            output_dir=run_dir,
            variant=run_dir.name,
            stop=stop,
            max_items_in_flight=1,
        )

    return asyncio.run(run())


def test_the_gate_fails_on_an_interrupted_run_and_says_how_much_is_unfinished(
    tmp_path: Path,
) -> None:
    full, part = tmp_path / "full", tmp_path / "part"
    assert sample_run(full).passed
    stopped = sample_run(part, stop_after=2)
    assert (stopped.status, stopped.counts.total) == ("interrupted", 2)
    assert stopped.unfinished == SAMPLE_ITEMS - 2
    out = tmp_path / "out"

    gated = summeval_compare(
        "--baseline", str(full), str(full), str(part), "--fail-if-drop", "0", "--out", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    ungated = summeval_compare(str(full), str(part), "--out", str(out), cwd=tmp_path)

    # Its two items scored as the full run's did: no drop, yet 24 items were never judged.
    assert gated.returncode == 1, gated.stderr
    assert (
        f"summeval-compare: gate: part ({part}) is interrupted with {SAMPLE_ITEMS - 2} of "
        f"{SAMPLE_ITEMS} items unfinished: resume it before gating on it" in gated.stderr
    )
    assert "regression" not in gated.stderr
    assert f"({full})" not in gated.stderr
    # Without the gate the comparison informs, and says what it covers.
    assert ungated.returncode == 0, ungated.stderr
    assert (
        f"summeval-compare: note: part ({part}) is interrupted with {SAMPLE_ITEMS - 2} of "
        f"{SAMPLE_ITEMS} items unfinished: its figures cover its 2 finished items only"
        in ungated.stderr
    )
    printed = [line.split() for line in ungated.stdout.splitlines()[:3]]
    assert printed[1:] == [
        ["full", "completed", str(SAMPLE_ITEMS), str(SAMPLE_ITEMS), "0", "0", "0", "0"],
        ["part", "interrupted", "2", "2", "0", "0", "0", str(SAMPLE_ITEMS - 2)],
    ]
    saved = duckdb.sql(
        f"SELECT DISTINCT variant, status, unfinished FROM '{out / 'comparison.parquet'}' "
        "ORDER BY variant"
    ).fetchall()
    assert saved == [("full", "completed", 0), ("part", "interrupted", SAMPLE_ITEMS - 2)]
    schema = pq.read_schema(out / "comparison.parquet")
    assert pa.types.is_int64(schema.field("unfinished").type)
    assert schema.field("status").type in (pa.string(), pa.large_string())


@pytest.mark.parametrize(
    ("status", "unfinished", "message"),
    [
        ("aborted", 0, "new ({new}) is aborted: resume it before gating on it"),
        ("failed", 3, "new ({new}) is failed with 3 of 10 items unfinished: resume it"),
        ("partial", 5, "new ({new}) is partial with 5 of 10 items unfinished: merge its missing"),
    ],
)
def test_the_gate_fails_on_a_run_that_did_not_complete(
    tmp_path: Path, status: str, unfinished: int, message: str
) -> None:
    scores = baseline_scores(count=10 - unfinished)
    base = make_run(tmp_path / "base", "base", scores)
    new = make_run(tmp_path / "new", "new", scores, run_status=status, unfinished=unfinished)

    gated = summeval_compare(
        str(base), str(new), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
    )

    assert gated.returncode == 1, gated.stderr
    assert f"summeval-compare: gate: {message.format(new=new)}" in gated.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--max-error-rate", "1.5"), "--max-error-rate must be between 0 and 1, got 1.5"),
        (("--max-error-rate", "0.1"), "--max-error-rate is a rule of the gate"),
    ],
)
def test_max_error_rate_out_of_range_or_without_the_gate_is_bad_input(
    tmp_path: Path, options: tuple[str, ...], message: str
) -> None:
    base = make_run(tmp_path / "base", "base", baseline_scores(count=3))
    gate = ("--fail-if-drop", "0") if "1.5" in options else ()

    refused = summeval_compare(str(base), *gate, *options, "--out", str(tmp_path), cwd=tmp_path)

    assert refused.returncode == 2
    assert message in refused.stderr


def test_each_runs_counts_are_in_the_printed_table_and_the_parquet(tmp_path: Path) -> None:
    scores = baseline_scores(count=10)
    base = make_run(tmp_path / "base", "base", scores)
    statuses = {
        "item-001": "unscorable",
        "item-002": "unscorable",
        "item-003": "error",
        "item-004": "blank_summary",
    }
    new = make_run(tmp_path / "new", "new", scores, statuses=statuses)
    out = tmp_path / "out"

    printed = summeval_compare(str(base), str(new), "--out", str(out), cwd=tmp_path)

    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[0].split() == [
        "variant", "status", "items", "scored", "blank", "unscorable", "errors", "unfinished"
    ]  # fmt: skip
    assert lines[1].split() == ["base", "completed", "10", "10", "0", "0", "0", "0"]
    assert lines[2].split() == ["new", "completed", "10", "6", "1", "2", "1", "0"]
    saved = duckdb.sql(
        f"SELECT DISTINCT variant, items, scored, blank_summaries, unscorable, errors, n "
        f"FROM '{out / 'comparison.parquet'}' WHERE dimension = 'score' ORDER BY variant"
    ).fetchall()
    # The blank summary counts (as 0) in n; the unscorable and the error do not.
    assert saved == [("base", 10, 10, 0, 0, 0, 10), ("new", 10, 6, 1, 2, 1, 7)]
    schema = pq.read_schema(out / "comparison.parquet")
    assert all(pa.types.is_integer(schema.field(c).type) for c in ("items", "errors"))
    report = (out / "report.html").read_text(encoding="utf-8")
    assert (
        '<td class="num">10</td><td class="num">6</td><td class="num">1</td>'
        '<td class="num">2</td><td class="num">1</td>'
    ) in report


# comparison.parquet for analysis, and where summeval-compare writes (issue 19, points 5 and 6).


def test_comparison_parquet_keeps_counts_integer_and_flags_boolean(
    planted: tuple[Path, Path], tmp_path: Path
) -> None:
    base, new = planted
    out = tmp_path / "out"

    compared = summeval_compare(str(base), str(new), "--out", str(out), cwd=tmp_path)

    assert compared.returncode == 0, compared.stderr
    path = out / "comparison.parquet"
    # A plain read_parquet: the baseline's rows hold no comparison, and the columns keep their
    # types (pandas' nullable Int64 and boolean, <NA> where nothing was compared).
    saved = pd.read_parquet(path)
    counts = ("items", "scored", "unfinished", "n", "n_paired", "better", "worse", "tied")
    assert {column: str(saved[column].dtype) for column in counts} == dict.fromkeys(counts, "Int64")
    assert str(saved["significant"].dtype) == "boolean"
    baseline_rows = saved[saved["variant"] == "base"]
    assert baseline_rows["n_paired"].isna().all()
    assert baseline_rows["significant"].isna().all()
    assert [list(ids) for ids in baseline_rows["worst_items"]] == [[], [], []]
    assert saved[saved["variant"] == "new"]["significant"].tolist() == [True, False, True]
    # DuckDB reads the Arrow types: no DOUBLE counts, no untyped empty lists.
    types = dict(
        duckdb.sql(f"DESCRIBE SELECT * FROM '{path}'")
        .project("column_name, column_type")
        .fetchall()
    )
    assert {types[column] for column in counts} == {"BIGINT"}
    assert types["significant"] == "BOOLEAN"
    assert types["items_only_here"] == types["worst_items"] == "VARCHAR[]"
    schema = pq.read_schema(path)
    assert [f.name for f in schema if not (f.metadata or {}).get(b"description")] == []
    # compare_runs returns the same types as the file holds.
    assert compare_runs([new], baseline=base)["n_paired"].dtype == "Int64"


def test_summeval_compare_writes_beside_the_newest_run_not_into_the_current_folder(
    tmp_path: Path,
) -> None:
    outputs = tmp_path / "outputs"
    older = make_run(
        outputs / "2026-11-29" / "03-00-00", "nightly", baseline_scores(),
        started_at="2026-11-29T03:00:00+00:00",
    )  # fmt: skip
    newer = make_run(
        outputs / "2026-11-30" / "03-00-00", "nightly", baseline_scores(),
        started_at="2026-11-30T03:00:00+00:00",
    )  # fmt: skip
    here = tmp_path / "here"
    here.mkdir()

    # The newest run given first or last, or found by --history: its folder gets the outputs.
    pair = summeval_compare(str(newer), str(older), "--no-report", cwd=here)
    (newer.parent / "comparison.parquet").unlink()
    nightly = summeval_compare("--history", str(outputs), cwd=here)

    assert pair.returncode == 0, pair.stderr
    assert f"comparison: {outputs / '2026-11-30' / 'comparison.parquet'}" in pair.stdout
    assert nightly.returncode == 0, nightly.stderr
    assert (newer.parent / "comparison.parquet").is_file()
    assert (newer.parent / "report.html").is_file()
    assert not (older.parent / "comparison.parquet").exists()
    assert list(here.iterdir()) == []


def test_the_newest_run_given_as_the_current_folder_gets_its_outputs_beside_it(
    tmp_path: Path,
) -> None:
    older = make_run(
        tmp_path / "2026-11-29" / "03-00-00", "nightly", baseline_scores(),
        started_at="2026-11-29T03:00:00+00:00",
    )  # fmt: skip
    newer = make_run(
        tmp_path / "2026-11-30" / "03-00-00", "nightly", baseline_scores(),
        started_at="2026-11-30T03:00:00+00:00",
    )  # fmt: skip
    before = sorted(path.name for path in newer.iterdir())

    completed = summeval_compare(str(older), ".", "--no-report", cwd=newer)

    assert completed.returncode == 0, completed.stderr
    assert (newer.parent / "comparison.parquet").is_file()
    assert sorted(path.name for path in newer.iterdir()) == before


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_out_that_cannot_be_a_folder_is_bad_input_not_a_failed_gate(
    planted: tuple[Path, Path], tmp_path: Path, where: str
) -> None:
    base, new = planted
    out = base / "items.parquet" if where == "a file" else base / "items.parquet" / "sub"
    before = (base / "items.parquet").read_bytes()

    completed = summeval_compare(str(base), str(new), "--out", str(out), cwd=tmp_path)

    assert completed.returncode == 2
    assert completed.stderr.startswith(
        f"summeval-compare: error: the comparison cannot be written into {out}: "
    )
    assert "Traceback" not in completed.stderr
    assert (base / "items.parquet").read_bytes() == before


def test_the_baseline_is_named_by_its_label_or_by_its_directory(
    planted: tuple[Path, Path], tmp_path: Path
) -> None:
    base, new = planted

    def compare(*args: str) -> Completed:
        return summeval_compare(str(new), str(base), *args, "--no-report", cwd=tmp_path)

    by_label = compare("--baseline", "base", "--out", str(tmp_path / "label"))
    by_directory = compare("--baseline", str(base), "--out", str(tmp_path / "directory"))
    unknown = compare("--baseline", "nightly", "--out", str(tmp_path / "unknown"))

    assert by_label.returncode == by_directory.returncode == 0, by_label.stderr
    for out in ("label", "directory"):
        saved = pd.read_parquet(tmp_path / out / "comparison.parquet")
        assert set(saved["baseline"].dropna()) == {"base"}
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "summeval-compare: error: baseline 'nightly' is neither a run directory nor the label "
        "of a compared run; the labels are: 'new', 'base'\n"
    )
    assert not (tmp_path / "unknown").exists()


def test_a_baseline_label_two_runs_share_is_refused_naming_the_labels_that_differ(
    tmp_path: Path,
) -> None:
    first = make_run(tmp_path / "2026-11-29" / "03-00-00", "default", baseline_scores(count=3))
    second = make_run(tmp_path / "2026-11-30" / "03-00-00", "default", baseline_scores(count=3))

    shared = summeval_compare(
        str(first), str(second), "--baseline", "default", "--out", str(tmp_path), cwd=tmp_path
    )
    named = summeval_compare(
        str(second), str(first), "--baseline", "default (2026-11-29/03-00-00)", "--no-report",
        "--out", str(tmp_path / "named"), cwd=tmp_path,
    )  # fmt: skip

    assert shared.returncode == 2
    assert (
        "baseline 'default' is the variant of 2 runs; name one by its label "
        "('default (2026-11-29/03-00-00)', 'default (2026-11-30/03-00-00)') or its directory"
    ) in shared.stderr
    assert named.returncode == 0, named.stderr
    saved = pd.read_parquet(tmp_path / "named" / "comparison.parquet")
    assert set(saved["baseline"].dropna()) == {"default (2026-11-29/03-00-00)"}


# Runs that do not measure alike are not compared, unless asked.


def test_runs_of_different_scales_are_refused_unless_allowed(tmp_path: Path) -> None:
    for name, scale in (("one", "1.0"), ("five", "5.0")):
        completed = run_app(
            tmp_path / name, "dataset.limit=3", "runner.progress=false", f"scorer.scale={scale}"
        )
        assert completed.returncode == 0, completed.stderr
    out = tmp_path / "out"
    runs = (str(tmp_path / "one"), str(tmp_path / "five"))

    refused = summeval_compare(*runs, "--fail-if-drop", "0", "--out", str(out), cwd=tmp_path)

    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert "scale: dataset.limit=3,scorer.scale=5.0 has 5.0, " in refused.stderr
    assert "dataset.limit=3,scorer.scale=1.0 has 1.0" in refused.stderr
    assert "--allow-mismatch" in refused.stderr
    assert not out.exists()  # nothing written
    with pytest.raises(InputError, match=r"scale: .* has 5\.0"):
        compare_runs(runs[1:], baseline=runs[0])

    allowed = summeval_compare(*runs, "--allow-mismatch", "--out", str(out), cwd=tmp_path)

    assert allowed.returncode == 0, allowed.stderr
    assert "warning: compared anyway (--allow-mismatch): scale:" in allowed.stderr
    assert set(pd.read_parquet(out / "comparison.parquet")["variant"]) == {
        "dataset.limit=3,scorer.scale=1.0",
        "dataset.limit=3,scorer.scale=5.0",
    }
    assert len(compare_runs(runs[1:], baseline=runs[0], allow_mismatch=True)) == 6
    with pytest.raises(InputError, match="allow_mismatch=True"):
        write_report(runs[1:], tmp_path / "refused.html", baseline=runs[0])
    assert not (tmp_path / "refused.html").exists()
    write_report(runs[1:], tmp_path / "allowed.html", baseline=runs[0], allow_mismatch=True)


def test_a_new_prompt_version_in_the_history_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "outputs"
    make_run(folder / "old", "nightly", baseline_scores(), started_at="2026-11-01T03:00:00+00:00")
    newer = make_run(
        folder / "new", "nightly", baseline_scores(), started_at="2026-11-02T03:00:00+00:00"
    )
    manifest = json.loads((newer / "manifest.json").read_text(encoding="utf-8"))
    manifest["prompt_version"] = "p2"
    (newer / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")

    refused = summeval_compare("--history", str(folder), "--out", str(tmp_path), cwd=tmp_path)

    assert refused.returncode == 2
    assert "prompt version: nightly (new) has 'p2', the baseline nightly (old) has 'p1'" in (
        refused.stderr
    )


def test_a_sweep_over_the_scale_still_compares_and_says_so(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"

    completed = run_sweep(sweep, "scorer.scale=1.0,5.0", "dataset.limit=3", "runner.progress=false")

    assert completed.returncode == 0, completed.stderr
    assert "the sweep's variants differ in what decides their scores" in completed.stderr
    assert "scale: scorer.scale=5.0 has 5.0" in completed.stderr  # the label: what it varies
    comparison = pd.read_parquet(sweep / "comparison.parquet")
    assert len(set(comparison["variant"])) == 2


def write_docs(path: Path, texts: list[str]) -> Path:
    """A JSONL dataset with no id column: the runs generate ids from the content."""
    path.write_text("".join(json.dumps({"input": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def run_offline(dataset: Path, run_dir: Path) -> Manifest:
    """A run of the offline judge over a dataset's sources as their own summaries (``input``)."""
    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=DatasetFile(dataset, FieldMap(output="input")),
            output_dir=run_dir,
            variant=run_dir.name,
        )
    )
    assert result.manifest is not None
    return result.manifest


def test_generated_ids_over_changed_data_warn_that_changed_rows_are_not_paired(
    tmp_path: Path,
) -> None:
    texts = [f"Article {i} says the harbour opened. It cost {i} million." for i in range(5)]
    before = write_docs(tmp_path / "before.jsonl", texts)
    after = write_docs(tmp_path / "after.jsonl", [*texts[:4], "Article 4 was rewritten. Yes."])
    for name, dataset in (("before", before), ("after", after)):
        manifest = run_offline(dataset, tmp_path / name)
        assert manifest.dataset is not None
        assert manifest.dataset.ids == "generated"  # the file has no "id" column
    runs = (str(tmp_path / "before"), str(tmp_path / "after"))

    compared = summeval_compare(*runs, "--allow-mismatch", "--out", str(tmp_path), cwd=tmp_path)

    assert compared.returncode == 0, compared.stderr
    assert (
        "warning: after and the baseline before have no id column: items were paired by ids "
        "derived from their content (the input, and a precomputed output), so a row whose "
        "content differs between them is not paired (4 items paired; 1 only in after, 1 only "
        "in before); give the data an id column to pair its rows by it" in compared.stderr
    )


def test_runs_with_their_own_ids_over_changed_data_get_no_content_warning(tmp_path: Path) -> None:
    before = write_dataset(tmp_path / "before.jsonl", 3)
    after = tmp_path / "after.jsonl"
    after.write_text(before.read_text("utf-8").replace("copy 2", "copy two"), encoding="utf-8")
    for name, dataset in (("before", before), ("after", after)):
        manifest = run_offline(dataset, tmp_path / name)
        assert manifest.dataset is not None
        assert manifest.dataset.ids == "given"

    compared = summeval_compare(
        str(tmp_path / "before"), str(tmp_path / "after"), "--allow-mismatch", "--out",
        str(tmp_path), cwd=tmp_path,
    )  # fmt: skip

    assert compared.returncode == 0, compared.stderr
    assert "dataset: after has inputs sha256" in compared.stderr  # the data changed: it says so
    assert "derived from their content" not in compared.stderr


# The dataset a comparison checks is the documents summarized (issue 16, point 6): not the
# file's bytes, which change with the rows' order and with the precomputed outputs under test.


def test_reordered_rows_without_ids_compare_with_every_item_paired_and_tied(
    tmp_path: Path,
) -> None:
    rows = [json.loads(line) for line in SAMPLE.read_text("utf-8").splitlines()]
    reordered = tmp_path / "reordered.jsonl"
    reordered.write_text(
        "".join(
            json.dumps({k: v for k, v in row.items() if k != "id"}) + "\n" for row in rows[::-1]
        ),
        encoding="utf-8",
    )
    forward = run_app(tmp_path / "forward", "dataset.fields.id=null", "runner.progress=false")
    backward = run_app(
        tmp_path / "backward", f"dataset.path={reordered}", "dataset.fields.input=text",
        "dataset.fields.metadata=[title,domain]", "runner.progress=false",
    )  # fmt: skip
    assert forward.returncode == 0, forward.stderr
    assert backward.returncode == 0, backward.stderr
    out = tmp_path / "out"

    compared = summeval_compare(
        str(tmp_path / "forward"), str(tmp_path / "backward"), "--out", str(out), cwd=tmp_path
    )

    assert compared.returncode == 0, compared.stderr
    assert "warning" not in compared.stderr
    assert "0/0/26      0/0" in compared.stdout
    comparison = pd.read_parquet(out / "comparison.parquet")
    paired = comparison[comparison["baseline"].notna()]
    assert sorted(paired["dimension"]) == ["alignment", "coverage", "score"]
    for row in paired.to_dict("records"):
        assert (row["n_paired"], row["better"], row["worse"], row["tied"]) == (
            SAMPLE_ITEMS, 0, 0, SAMPLE_ITEMS
        ), row["dimension"]  # fmt: skip
        assert len(row["items_only_here"]) == len(row["items_only_in_baseline"]) == 0


def write_outputs(path: Path, summaries: list[tuple[str, str]], *, ids: bool) -> Path:
    """A JSONL dataset of (text, summary) rows, with an ``id`` column when ``ids``."""
    rows = [
        ({"id": f"doc-{i}"} if ids else {}) | {"text": text, "summary": summary}
        for i, (text, summary) in enumerate(summaries)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def judge_outputs(dataset: Path, run_dir: Path) -> None:
    """The offline judge over a dataset's precomputed summaries (field ``summary``)."""
    asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer("offline")],
            data=DatasetFile(dataset, FieldMap(input="text", output="summary")),
            output_dir=run_dir,
            variant=run_dir.name,
        )
    )


def test_two_systems_outputs_of_the_same_inputs_compare_and_other_inputs_do_not(
    tmp_path: Path,
) -> None:
    texts = [
        f"Article {i} says the harbour opened. It cost {i} million. Ships came." for i in range(4)
    ]
    short = [(t, t.split(". ")[0] + ".") for t in texts]
    longer = [(t, ". ".join(t.split(". ")[:2]) + ".") for t in texts]
    other = [*short[:3], ("Article 3 is another document. It says other things.", "Other.")]
    for name, rows, ids in (
        ("short", short, True),
        ("longer", longer, True),
        ("other", other, True),
        ("short-no-ids", short, False),
        ("longer-no-ids", longer, False),
    ):
        judge_outputs(write_outputs(tmp_path / f"{name}.jsonl", rows, ids=ids), tmp_path / name)

    def compare(*names: str) -> Completed:
        dirs = [str(tmp_path / name) for name in names]
        return summeval_compare(*dirs, "--out", str(tmp_path / "out"), cwd=tmp_path)

    same_inputs = compare("short", "longer")
    same_inputs_paired = (
        pd.read_parquet(tmp_path / "out" / "comparison.parquet")["n_paired"].dropna().tolist()
    )
    other_inputs = compare("short", "other")
    unpaired = compare("short-no-ids", "longer-no-ids")

    assert same_inputs.returncode == 0, same_inputs.stderr
    assert "warning" not in same_inputs.stderr
    # Every item paired with its other summary (read before the next comparison overwrote it).
    assert same_inputs_paired == [4, 4, 4]
    assert other_inputs.returncode == 2
    assert "dataset: other has inputs sha256" in other_inputs.stderr
    # Ids made from input and output differ with the outputs: nothing pairs, and it says why.
    assert unpaired.returncode == 0, unpaired.stderr
    assert (
        "(0 items paired; 4 only in longer-no-ids, 4 only in short-no-ids); give the data an id "
        "column to pair its rows by it" in unpaired.stderr
    )


def test_lists_of_the_same_inputs_in_another_order_with_other_outputs_compare(
    tmp_path: Path,
) -> None:
    texts = [f"Item {i} opened. It cost {i} million." for i in range(3)]

    def run(name: str, rows: list[dict[str, str]]) -> DatasetInfo:
        result = asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer("offline")],
                data=rows,
                output_dir=tmp_path / name,
                variant=name,
            )
        )
        assert result.manifest is not None
        assert result.manifest.dataset is not None
        return result.manifest.dataset

    first = run("first", [{"id": f"d{i}", "input": t, "output": t} for i, t in enumerate(texts)])
    second = run(
        "second",
        [{"id": f"d{i}", "input": t, "output": t[:10]} for i, t in enumerate(texts)][::-1],
    )
    other = run("other", [{"id": "d0", "input": "Another item. Other words.", "output": "x"}])

    assert first.sha256 != second.sha256  # a resume over either is refused
    assert first.inputs_sha256 == second.inputs_sha256
    assert first.inputs_sha256 != other.inputs_sha256
    comparison = compare_runs([tmp_path / "second"], baseline=tmp_path / "first")
    assert comparison["n_paired"].dropna().tolist() == [3, 3, 3]
    with pytest.raises(InputError, match="dataset: other has inputs sha256"):
        compare_runs([tmp_path / "first", tmp_path / "other"])


def test_items_pair_by_id_whatever_the_order_of_the_rows(tmp_path: Path) -> None:
    # The comparison pairs ids in Arrow, in the ids' sorted order: the figures must be those of
    # the differences taken item by item in that order, however each run's rows are ordered.
    scores = baseline_scores(count=40)
    rng = random.Random(5)
    shifted = {k: (max(0.0, s - rng.uniform(0.0, 0.2)), a, c) for k, (s, a, c) in scores.items()}
    shuffled = list(shifted)
    rng.shuffle(shuffled)
    base = make_run(tmp_path / "base", "base", scores)
    new = make_run(tmp_path / "new", "new", {k: shifted[k] for k in shuffled})

    row = compare_runs([new], baseline=base).query("dimension == 'score' and variant == 'new'")

    ids = sorted(scores)
    diffs = np.array([shifted[i][0] - scores[i][0] for i in ids])
    assert row["n_paired"].item() == 40
    assert row["mean_diff"].item() == float(diffs.mean())
    assert (row["diff_ci95_low"].item(), row["diff_ci95_high"].item()) == paired_bootstrap_ci(
        diffs, seed=0
    )
    assert row["p_value"].item() == paired_permutation_p(diffs, seed=0)
    assert next(iter(row["worst_items"].item())) == ids[int(np.argmin(diffs))]
