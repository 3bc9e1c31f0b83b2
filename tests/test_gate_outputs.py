"""The regression gate in CI's languages: ``summeval-compare --summary-md FILE`` (GitHub-flavoured
Markdown for ``$GITHUB_STEP_SUMMARY``) and ``--junit FILE`` (a test case per run and dimension
and one per run's health, failing exactly where the gate fails), and ``gate_comparison`` from
Python; run as a user runs them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from summeval_runner import GateVerdict, compare_runs, gate_comparison
from tests.app import summeval_compare
from tests.test_compare import PLANTED, baseline_scores, make_run

DIMENSIONS = ("score", "alignment", "coverage")


def _cases(junit: Path) -> dict[tuple[str, str], str | None]:
    """Each test case (run, name): its failure's message, or None where it passed."""
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    cases = {}
    for case in suite.iter("testcase"):
        failure = case.find("failure")
        cases[(case.get("classname", ""), case.get("name", ""))] = (
            None if failure is None else failure.get("message")
        )
    assert int(suite.get("tests", "-1")) == len(cases)
    assert int(suite.get("failures", "-1")) == sum(m is not None for m in cases.values())
    return cases


def _compare(tmp_path: Path, *args: str) -> tuple[int, str, Path, Path]:
    summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    done = summeval_compare(
        *args, "--out", str(tmp_path), "--summary-md", str(summary), "--junit", str(junit),
        cwd=tmp_path,
    )  # fmt: skip
    return done.returncode, done.stderr, summary, junit


def test_a_passing_comparison_is_all_passed_cases_and_a_page_that_says_so(tmp_path: Path) -> None:
    scores = baseline_scores()
    base = make_run(tmp_path / "base", "base", scores)
    same = make_run(tmp_path / "new", "new", scores)

    code, stderr, summary, junit = _compare(
        tmp_path, str(base), str(same), "--fail-if-drop", "0.05"
    )

    assert code == 0, stderr
    cases = _cases(junit)
    assert set(cases) == {
        (run, name) for run in ("base", "new") for name in (*DIMENSIONS, "run health")
    }
    assert all(message is None for message in cases.values())
    page = summary.read_text("utf-8")
    assert page.startswith("### summeval-compare: the gate passed\n")
    assert "**" not in page  # nothing failed, nothing in bold
    for dimension in DIMENSIONS:
        # The baseline's row and the variant's, with its difference against the baseline.
        assert re.search(rf"^\| {dimension} \| base \| 60 \| .* \| baseline \|", page, re.M)
        assert re.search(
            rf"^\| {dimension} \| new \| 60 \| .* \| \+0\.000 \| .* \| pass \|$", page, re.M
        )


def test_a_failing_comparison_fails_exactly_the_cases_the_gate_names(tmp_path: Path) -> None:
    base_scores = baseline_scores()
    worse = {
        k: (s - 0.3, a, c - 0.3) if k in PLANTED else (s, a, c)
        for k, (s, a, c) in base_scores.items()
    }
    base = make_run(tmp_path / "base", "base", base_scores)
    new = make_run(tmp_path / "new", "new", worse)

    code, stderr, summary, junit = _compare(
        tmp_path, str(base), str(new), "--fail-if-drop", "0.05", "--fail-if-below", "alignment=0.95"
    )

    assert code == 1
    cases = _cases(junit)
    failed = {case: message for case, message in cases.items() if message is not None}
    # The drop (score and coverage: alignment did not move), and alignment below its floor in
    # both runs; every other case passed, the runs' health among them.
    assert set(failed) == {
        ("new", "score"),
        ("new", "coverage"),
        ("base", "alignment"),
        ("new", "alignment"),
    }
    reasons = [
        line.split(": ", 2)[2]
        for line in stderr.splitlines()
        if line.startswith(("summeval-compare: regression:", "summeval-compare: below threshold:"))
    ]
    assert sorted(failed.values()) == sorted(reasons)  # the very words the console gives
    assert "score dropped by 0.100" in failed[("new", "score")]

    page = summary.read_text("utf-8")
    assert page.startswith("### summeval-compare: **the gate failed**\n")
    assert re.search(
        r"^\| score \| new \| 60 \| .* \| -0\.100 \| .* \| \*\*regression\*\* \|$", page, re.M
    )
    assert re.search(r"^\| alignment \| base \| .* \| \*\*below threshold\*\* \|$", page, re.M)
    # The items that dropped most, and why the gate failed, as the console said it.
    dropped = re.search(r"^- new against base: (.*)$", page, re.M)
    assert dropped is not None
    assert set(dropped.group(1).split(", ")) <= set(PLANTED)
    assert page.count("\n- ") >= 1 + len(reasons)


def test_a_run_that_errored_fails_its_health_case_and_no_dimension(tmp_path: Path) -> None:
    scores = baseline_scores(count=10)
    base = make_run(tmp_path / "base", "base", scores)
    broken = make_run(tmp_path / "new", "new", scores, statuses={"item-000": "error"})

    code, stderr, summary, junit = _compare(
        tmp_path, str(base), str(broken), "--fail-if-drop", "0.05"
    )

    assert code == 1
    failed = {case: m for case, m in _cases(junit).items() if m is not None}
    assert list(failed) == [("new", "run health")]
    assert (
        "1 of 10 items errored (10.0%), more than the 0.0% allowed" in failed[("new", "run health")]
    )
    assert f"gate: new ({broken}): 1 of 10 items errored" in stderr
    assert re.search(
        r"^\| new \| completed \| 10 \| 9 \| 0 \| 0 \| 1 \| 0 \| \*\*fail\*\* \|$",
        summary.read_text("utf-8"),
        re.M,
    )


def test_without_a_gate_every_case_passes_and_the_page_says_no_gate_was_set(tmp_path: Path) -> None:
    base = make_run(tmp_path / "base", "base", baseline_scores(count=10))
    broken = make_run(
        tmp_path / "new", "new", baseline_scores(count=10), statuses={"item-000": "error"}
    )

    code, _, summary, junit = _compare(tmp_path, str(base), str(broken))

    assert code == 0  # no gate, exit 0: and so no failed case
    assert all(message is None for message in _cases(junit).values())
    assert summary.read_text("utf-8").startswith("### summeval-compare: compared, no gate set\n")


def _unescaped_bars(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_text_from_the_runs_stays_text_on_the_page(tmp_path: Path) -> None:
    # A label and an item id chosen by a user or a dataset: a table cell's bar, an image, a
    # link, a backtick that would end a code span.
    sly = "a|b <img src=x onerror=alert(1)> [click](http://evil.example) `x`"
    scores = {f"item-{i}": (0.8, 0.9, 0.8) for i in range(10)}
    scores[sly] = (0.8, 0.9, 0.8)
    worse = scores | {sly: (0.1, 0.9, 0.1)}
    base = make_run(tmp_path / "base", "base", scores)
    new = make_run(tmp_path / "new", sly, worse)

    _, _, summary, junit = _compare(tmp_path, str(base), str(new), "--fail-if-drop", "0")

    page = summary.read_text("utf-8")
    assert re.search(r"(?<!\\)<", page) is None  # no tag: each < is escaped
    assert re.search(r"(?<!\\)\]\(", page) is None  # no link: each ] is escaped
    # Every row of a table has its header's cells: no bar from the data opened a cell.
    tables = re.findall(r"(?:^\|.*\n)+", page, re.M)
    assert len(tables) == 2
    for table in tables:
        rows = table.splitlines()
        assert {_unescaped_bars(row) for row in rows} == {_unescaped_bars(rows[0])}
    assert sum("a\\|b" in row for table in tables for row in table.splitlines()) == 4
    # The item that dropped most is listed whole, as text.
    dropped = next(line for line in page.splitlines() if line.startswith("- a\\|b"))
    assert dropped.endswith(
        r"a\|b \<img src=x onerror=alert(1)\> \[click\](http://evil.example) \`x\`"
    )
    # The XML carries the label as it is: a parser reads it back unchanged.
    assert (sly, "score") in _cases(junit)


def test_python_gets_the_verdict_the_command_exits_on_and_writes_the_same_files(
    tmp_path: Path,
) -> None:
    base_scores = baseline_scores()
    worse = {
        k: (s - 0.3, a, c - 0.3) if k in PLANTED else (s, a, c)
        for k, (s, a, c) in base_scores.items()
    }
    base = make_run(tmp_path / "base", "base", base_scores)
    new = make_run(tmp_path / "new", "new", worse)
    code, _, summary, junit = _compare(tmp_path, str(base), str(new), "--fail-if-drop", "0.05")

    verdict = gate_comparison(compare_runs([new], baseline=base), fail_if_drop=0.05)

    assert (code, verdict.passed) == (1, False)
    assert [(r.variant, r.dimension) for r in verdict.regressions] == [
        ("new", "score"),
        ("new", "coverage"),
    ]
    assert verdict.junit_xml() == junit.read_text("utf-8")
    assert verdict.markdown() == summary.read_text("utf-8")
    assert gate_comparison(compare_runs([new], baseline=base)).gated is False


def test_a_verdict_built_from_its_fields_writes_the_runs_of_its_comparison(tmp_path: Path) -> None:
    """GateVerdict is public. Before: the writers read rows that only gate_comparison passed
    in, so a verdict built from its fields wrote pages and JUnit files with no run."""
    base = make_run(tmp_path / "base", "base", baseline_scores())
    comparison = compare_runs([base])
    made = gate_comparison(comparison)

    built = GateVerdict(comparison, False, None, 0.0, {})

    assert "| base |" in built.markdown()
    assert built.markdown() == made.markdown()
    assert built.junit_xml() == made.junit_xml()


def test_a_first_night_that_errored_fails_the_gate_with_history(tmp_path: Path) -> None:
    # One run of its config: nothing to compare it with, but it errored: it fails the gate as
    # any other night would (it passed, exit 0, with nothing written).
    folder = tmp_path / "outputs"
    scores = baseline_scores(count=10)
    make_run(folder / "night-1", "nightly", scores, statuses={"item-003": "error"})

    code, stderr, summary, junit = _compare(
        tmp_path, "--history", str(folder), "--fail-if-drop", "0.05"
    )

    assert code == 1, stderr
    assert "1 of 10 items errored" in stderr
    assert [case for case, m in _cases(junit).items() if m is not None] == [
        ("nightly", "run health")
    ]
    assert summary.is_file()


def test_a_clean_first_night_passes_and_still_writes_its_outputs(tmp_path: Path) -> None:
    folder = tmp_path / "outputs"
    make_run(folder / "night-1", "nightly", baseline_scores(count=10))

    code, stderr, summary, junit = _compare(
        tmp_path, "--history", str(folder), "--fail-if-drop", "0.05"
    )

    assert code == 0, stderr
    assert all(message is None for message in _cases(junit).values())
    assert summary.read_text("utf-8").startswith("### summeval-compare: the gate passed\n")


@pytest.mark.parametrize("option", ["--summary-md", "--junit"])
def test_an_output_that_cannot_be_written_is_exit_2_not_the_gates_1(
    tmp_path: Path, option: str
) -> None:
    base = make_run(tmp_path / "base", "base", baseline_scores(count=10))
    (tmp_path / "taken").mkdir()

    done = summeval_compare(
        str(base), "--fail-if-drop", "0.05", "--out", str(tmp_path), option, str(tmp_path / "taken"),
        cwd=tmp_path,
    )  # fmt: skip

    assert done.returncode == 2
    assert f"summeval-compare: error: {tmp_path / 'taken'} cannot be written" in done.stderr
