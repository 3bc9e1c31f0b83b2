"""Comparing runs (issue 5): paired statistics, the regression gate, history, the HTML report.

``summeval-compare`` and ``summeval-run`` run in this process (``tests/app.py``); only the
browser that opens the report is another process.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from summeval_runner import compare_runs, write_report
from summeval_runner._io._tables import ITEMS_SCHEMA
from tests.app import run_app, run_sweep, summeval_compare

PLANTED = [f"item-{i:03d}" for i in range(0, 60, 3)]  # 20 items that get worse


def make_run(
    path: Path,
    variant: str,
    scores: dict[str, tuple[float, float, float]],
    *,
    summaries: dict[str, str] | None = None,
    started_at: str = "2026-11-30T10:00:00+00:00",
) -> Path:
    """A finished run directory with the given (score, alignment, coverage) per item."""
    path.mkdir(parents=True)
    rows = []
    for item_id, (score, alignment, coverage) in scores.items():
        row = dict.fromkeys(ITEMS_SCHEMA.names)
        row |= {
            "run_id": f"run-{variant}",
            "variant": variant,
            "item_id": item_id,
            "scorer_id": "summarization-scorer",
            "status": "scored",
            "score": score,
            "alignment_score": alignment,
            "coverage_score": coverage,
            "reason": f"reason for {item_id}",
            "summary": (summaries or {}).get(item_id, f"summary of {item_id}"),
            "scale": 1.0,
        }
        rows.append(row)
    pq.write_table(pa.Table.from_pylist(rows, schema=ITEMS_SCHEMA), path / "items.parquet")
    manifest = {
        "run_id": f"run-{variant}",
        "variant": variant,
        "status": "completed",
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


def test_history_reads_a_run_whose_timestamp_has_no_offset(tmp_path: Path) -> None:
    folder = tmp_path / "outputs"
    make_run(folder / "old", "nightly", baseline_scores(), started_at="2026-10-01")
    make_run(folder / "new", "nightly", baseline_scores(), started_at="2026-11-01T03:00:00+00:00")

    completed = summeval_compare("--history", str(folder), "--out", str(tmp_path), cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    assert "history of nightly" in completed.stdout
    assert "(2 runs)" in completed.stdout


class Elements(HTMLParser):
    """Every element's tag and attribute names in a page: what the browser made of it."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.append([name for name, _ in attrs])


def run_chromium(page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip(
            "no Chromium on this machine: install Debian's chromium to run the browser check"
        )
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--enable-logging=stderr",
                "--v=0",
                *flags,
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


ATTACK = (
    "<script>console.error('xss'); document.title = 'PWNED'</script>"
    "<img src=x onerror=\"console.error('xss-img'); document.title = 'PWNED'\">"
)


def test_the_report_opens_in_chromium_and_planted_html_stays_text(
    planted: tuple[Path, Path],
) -> None:
    base, _ = planted
    scores = baseline_scores()
    attacked = make_run(
        base.parent / "attacked",
        "variant <b>bold</b>",
        scores,
        summaries={"item-000": f"A fine summary. {ATTACK}"},
    )
    report = write_report([attacked], base.parent / "report.html", baseline=base)

    dom = run_chromium(report, "--dump-dom")
    shot = run_chromium(
        report, f"--screenshot={base.parent / 'report.png'}", "--window-size=1280,900"
    )

    assert dom.returncode == 0, dom.stderr
    assert "CONSOLE" not in dom.stderr  # nothing logged: no error, and the planted code never ran
    assert "<title>Comparison of 2 runs</title>" in dom.stdout
    elements = Elements()
    elements.feed(dom.stdout)
    assert "script" not in elements.tags
    assert not [attrs for attrs in elements.attrs if any(name.startswith("on") for name in attrs)]
    assert "&lt;script&gt;console.error('xss')" in dom.stdout
    assert "variant &lt;b&gt;bold&lt;/b&gt;" in dom.stdout
    assert shot.returncode == 0
    assert (base.parent / "report.png").stat().st_size > 10_000


def test_a_report_of_one_run_has_every_item_and_its_verdicts(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    completed = run_app(run_dir, "dataset.limit=3", "runner.progress=false")
    assert completed.returncode == 0, completed.stderr

    report = write_report([run_dir], tmp_path / "one.html")

    text = report.read_text(encoding="utf-8")
    items = pd.read_parquet(run_dir / "items.parquet")
    claims = pd.read_parquet(run_dir / "alignment.parquet")
    assert all(f"<td>{item}</td>" in text for item in items["item_id"])
    assert text.count("<details>") >= 3
    assert claims["claim"].iloc[0].replace("'", "&#x27;") in text
    assert "Does the text say that" in text
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_a_sweep_writes_its_comparison_and_report(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    completed = run_sweep(sweep, "target.k=1,3", "dataset.limit=8", "runner.progress=false")

    assert completed.returncode == 0, completed.stderr
    # Each variant's directory and label are its overrides (runner settings left out).
    variants = ["dataset.limit=8,target.k=1", "dataset.limit=8,target.k=3"]
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == variants
    comparison = pd.read_parquet(sweep / "comparison.parquet").set_index(["variant", "dimension"])
    assert comparison.loc[(variants[1], "score"), "baseline"] == variants[0]
    assert comparison.loc[(variants[1], "score"), "mean_diff"] > 0
    assert (sweep / "report.html").read_text(encoding="utf-8").count("<h2>Items: dataset") == 2
    for variant in variants:
        assert set(pd.read_parquet(sweep / variant / "items.parquet")["variant"]) == {variant}


def test_runs_with_no_item_in_common_compare_without_a_difference(tmp_path: Path) -> None:
    base = make_run(tmp_path / "base", "base", baseline_scores(count=3))
    other = make_run(tmp_path / "other", "other", {f"x-{i}": (0.5, 0.5, 0.5) for i in range(2)})

    printed = summeval_compare(
        str(base), str(other), "--fail-if-drop", "0", "--out", str(tmp_path), cwd=tmp_path
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
