"""``summeval-compare --fail-if-below``: an absolute floor on a dimension's mean, beside the gate
on a drop, run as a user runs it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from summeval_runner._analysis._compare import compare_runs, compared_rows
from summeval_runner._analysis._findings import below_thresholds
from summeval_runner._errors import InputError
from tests.app import run_app, summeval_compare
from tests.test_compare import baseline_scores, make_run


def test_a_real_run_passes_a_floor_below_its_mean_and_fails_one_above(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "runner.progress=false").returncode == 0
    score = pd.read_parquet(run_dir / "aggregates.parquet").set_index("metric").loc["score"]
    mean, n = float(score["mean"]), int(score["n"])

    below, above = f"{mean - 0.01:.3f}", f"{mean + 0.01:.3f}"

    passed = summeval_compare(str(run_dir), "--fail-if-below", below, cwd=tmp_path)
    failed = summeval_compare(str(run_dir), "--fail-if-below", above, cwd=tmp_path)

    assert passed.returncode == 0, passed.stderr
    assert "below threshold" not in passed.stderr
    assert failed.returncode == 1, failed.stderr
    assert (
        f"summeval-compare: below threshold: default ({run_dir}): score mean {mean:.3f} over "
        f"{n} scored items is below the threshold {float(above):g}"
    ) in failed.stderr


def test_each_dimension_named_is_gated_and_the_message_names_the_variant(tmp_path: Path) -> None:
    scores = baseline_scores(count=20)  # alignment in [0.8, 1.0], coverage in [0.5, 0.9]
    base = make_run(tmp_path / "base", "base", scores)
    worse = {k: (s, a, c - 0.3) for k, (s, a, c) in scores.items()}
    new = make_run(tmp_path / "new", "new", worse)
    coverage = compare_runs([new]).set_index("dimension").loc["coverage", "mean"]

    def gate(*floors: str) -> tuple[int, str]:
        done = summeval_compare(str(base), str(new), *floors, "--out", str(tmp_path), cwd=tmp_path)
        return done.returncode, done.stderr

    code, stderr = gate("--fail-if-below", "alignment=0.75", "--fail-if-below", "coverage=0.45")
    assert code == 1, stderr
    assert stderr.count("below threshold") == 1  # the baseline's coverage is above 0.45
    assert (
        f"below threshold: new ({new}): coverage mean {coverage:.3f} over 20 scored items is "
        "below the threshold 0.45"
    ) in stderr
    assert "regression" not in stderr  # no --fail-if-drop: the drop itself is not gated
    assert gate("--fail-if-below", "alignment=0.75")[0] == 0
    # Both gates together: each says its own reason.
    code, stderr = gate("--fail-if-below", "coverage=0.45", "--fail-if-drop", "0.1")
    assert code == 1
    assert "below threshold: new" in stderr
    assert "regression: new: coverage dropped by 0.300" in stderr


def test_a_run_with_errored_items_does_not_pass_on_the_mean_of_the_rest(tmp_path: Path) -> None:
    scores = dict.fromkeys((f"item-{i}" for i in range(10)), (0.9, 1.0, 0.9))
    # The two items that would have dragged the mean down errored: the others' mean is 0.9.
    run = make_run(tmp_path / "run", "run", scores, statuses={"item-0": "error", "item-1": "error"})

    gated = summeval_compare(
        str(run), "--fail-if-below", "0.5", "--out", str(tmp_path), cwd=tmp_path
    )
    tolerant = summeval_compare(
        str(run), "--fail-if-below", "0.5", "--max-error-rate", "0.2", "--out", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip

    assert gated.returncode == 1, gated.stderr
    assert f"gate: run ({run}): 2 of 10 items errored (20.0%), more than the 0.0% allowed" in (
        gated.stderr
    )
    assert "below threshold" not in gated.stderr  # 0.9 is above the floor: the errors fail it
    assert tolerant.returncode == 0, tolerant.stderr


def test_an_interrupted_run_fails_the_floor_whatever_its_mean(tmp_path: Path) -> None:
    scores = {f"item-{i}": (0.9, 1.0, 0.9) for i in range(4)}
    run = make_run(tmp_path / "run", "run", scores, run_status="interrupted", unfinished=22)

    gated = summeval_compare(
        str(run), "--fail-if-below", "0.5", "--out", str(tmp_path), cwd=tmp_path
    )

    assert gated.returncode == 1, gated.stderr
    assert f"gate: run ({run}) is interrupted with 22 of 26 items unfinished" in gated.stderr


def test_with_history_only_the_newest_run_is_held_to_the_floor(tmp_path: Path) -> None:
    folder = tmp_path / "outputs"
    low = dict.fromkeys(baseline_scores(count=10), (0.4, 1.0, 0.4))
    high = dict.fromkeys(low, (0.8, 1.0, 0.8))
    make_run(folder / "day1", "nightly", low, started_at="2026-11-01T03:00:00+00:00")
    make_run(folder / "day2", "nightly", high, started_at="2026-11-02T03:00:00+00:00")

    recovered = summeval_compare(
        "--history", str(folder), "--fail-if-below", "0.6", "--out", str(tmp_path), cwd=tmp_path
    )
    make_run(folder / "day3", "nightly", low, started_at="2026-11-03T03:00:00+00:00")
    fell = summeval_compare(
        "--history", str(folder), "--fail-if-below", "0.6", "--out", str(tmp_path), cwd=tmp_path
    )
    # A history of one completed run has nothing to compare, but its floor is still gated.
    make_run(tmp_path / "alone" / "day1", "nightly", low)
    alone = summeval_compare(
        "--history", str(tmp_path / "alone"), "--fail-if-below", "0.6", "--out", str(tmp_path),
        cwd=tmp_path,
    )  # fmt: skip

    assert recovered.returncode == 0, recovered.stderr  # day1 was low; day2 is the one gated
    assert fell.returncode == 1, fell.stderr
    assert f"below threshold: nightly ({folder / 'day3'}): score mean" in fell.stderr
    assert fell.stderr.count("day3") == 1  # the run is named once: its label, its directory
    assert "score mean 0.400 over 10 scored items is below the threshold 0.6" in fell.stderr
    assert "day2" not in fell.stderr
    assert alone.returncode == 1, alone.stderr
    assert "score mean 0.400" in alone.stderr


def test_two_runs_of_one_variant_below_the_floor_are_each_named_once(tmp_path: Path) -> None:
    low = dict.fromkeys(baseline_scores(count=10), (0.4, 0.5, 0.4))
    first = make_run(tmp_path / "first", "nightly", low)
    second = make_run(tmp_path / "second", "nightly", low)

    done = summeval_compare(
        str(first), str(second), "--fail-if-below", "0.6", "--out", str(tmp_path), cwd=tmp_path
    )

    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "below threshold" in line]
    assert [line.split(": score mean")[0] for line in lines] == [
        f"summeval-compare: below threshold: nightly ({first})",
        f"summeval-compare: below threshold: nightly ({second})",
    ]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("fluency=0.5", "the dimension must be one of score, alignment, coverage, got 'fluency'"),
        ("score=high", "the threshold must be a number, got 'high'"),
        ("-0.1", "the threshold must be a finite number >= 0, got '-0.1'"),
        ("nan", "the threshold must be a finite number >= 0, got 'nan'"),
    ],
)
def test_a_floor_that_is_not_a_dimension_and_a_number_is_bad_input(
    tmp_path: Path, value: str, said: str
) -> None:
    run = make_run(tmp_path / "run", "run", baseline_scores(count=3))

    completed = summeval_compare(str(run), "--fail-if-below", value, cwd=tmp_path)

    assert completed.returncode == 2
    assert said in completed.stderr


def test_the_library_gate_refuses_an_unknown_dimension_and_flags_a_missing_mean(
    tmp_path: Path,
) -> None:
    scores = baseline_scores(count=3)
    run = make_run(tmp_path / "run", "run", scores, statuses=dict.fromkeys(scores, "error"))
    comparison = compare_runs([run])

    (missing,) = below_thresholds(compared_rows(comparison), {"alignment": 0.1})

    assert missing.mean is None
    assert "alignment has no mean (no item scored)" in missing.describe()
    with pytest.raises(InputError, match="got 'fluency'"):
        below_thresholds(compared_rows(comparison), {"fluency": 0.5})


def test_a_dimension_given_two_floors_is_refused_whatever_their_order(tmp_path: Path) -> None:
    # The last given won: 0.9 then 0.3 passed a run of mean 0.7, 0.3 then 0.9 failed it.
    run = make_run(
        tmp_path / "run", "run", dict.fromkeys((f"item-{i}" for i in range(5)), (0.7, 0.9, 0.7))
    )

    for floors in (("0.9", "0.3"), ("0.3", "0.9")):
        done = summeval_compare(
            str(run), "--fail-if-below", floors[0], "--fail-if-below", floors[1], "--out",
            str(tmp_path), cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 2
        assert "--fail-if-below gives score more than once" in done.stderr
        assert not (tmp_path / "comparison.parquet").exists()


@pytest.mark.parametrize(
    ("floor", "message"),
    [
        ("1.5", "the score floor 1.5 is outside run's score range [0, 1]"),
        (
            "coverage=1.2",
            "a coverage floor must be between 0 and 1 (a coverage is a share), got 1.2",
        ),
    ],
)
def test_a_floor_no_mean_can_reach_is_refused(tmp_path: Path, floor: str, message: str) -> None:
    run = make_run(
        tmp_path / "run", "run", dict.fromkeys((f"item-{i}" for i in range(5)), (0.7, 0.9, 0.7))
    )

    done = summeval_compare(
        str(run), "--fail-if-below", floor, "--out", str(tmp_path), cwd=tmp_path
    )

    assert done.returncode == 2  # not 1: no run failed a reachable floor
    assert message in done.stderr


def test_a_floors_message_says_how_many_of_its_items_are_blank_summaries(tmp_path: Path) -> None:
    # Blank summaries are 0 in every figure: a mean "over 10 scored items" that holds four of
    # them would read as ten judged items.
    scores = {f"item-{i:03d}": (0.8, 0.9, 0.8) for i in range(10)}
    blank = {f"item-{i:03d}": "blank_summary" for i in range(4)}
    run = make_run(tmp_path / "run", "lazy", scores, statuses=blank)

    fell = summeval_compare(
        str(run), "--fail-if-below", "0.6", "--out", str(tmp_path), cwd=tmp_path
    )

    assert fell.returncode == 1, fell.stderr
    assert (
        f"below threshold: lazy ({run}): score mean 0.480 over 10 items (6 scored, 4 blank "
        "summaries at 0) is below the threshold 0.6"
    ) in fell.stderr
