"""The commands' ``--help``, read as a new user reads it: every group it lists runs, the related
commands are named, and ``summeval-compare``'s examples and exit codes are the ones it has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from summeval_runner._cli import _agree, _app, _compare_command
from tests.app import ROOT, run_app, run_command, summeval_compare


def _groups(help_text: str) -> dict[str, list[str]]:
    """The ``group: option, option`` lines under ``== Configuration groups ==``."""
    section = help_text.split("== Configuration groups ==")[1].split("== Config ==")[0]
    found = {}
    for line in section.splitlines():
        if match := re.fullmatch(r"(\w+): (\w+(?:, \w+)*)", line.strip()):
            found[match[1]] = match[2].split(", ")
    return found


def test_summeval_run_help_lists_only_its_own_groups_and_names_every_related_command(
    tmp_path: Path,
) -> None:
    """Issue 42: ``human=binary`` was listed, and exited 2; summeval-agree was not named."""
    shown = run_command(_app.run, ["--help"], cwd=tmp_path)

    assert shown.returncode == 0, shown.stderr
    groups = _groups(shown.stdout)
    assert set(groups) == {"dataset", "model", "runner", "scorer", "target"}
    assert "offline" in groups["model"]
    # The options listed are the bundled ones, each of which the test below runs.
    assert sorted((g, o) for g, options in groups.items() for o in options) == BUNDLED_OPTIONS
    related = shown.stdout.split("== Related commands ==")[1]
    for command in ("summeval-compare", "summeval-merge", "summeval-cache", "summeval-agree"):
        assert re.search(rf"^\s+{command}\s+\w", related, re.MULTILINE), command


def test_summeval_agree_help_lists_the_groups_it_runs_with(tmp_path: Path) -> None:
    shown = run_command(_agree.run, ["--help"], cwd=tmp_path)

    assert shown.returncode == 0, shown.stderr
    assert set(_groups(shown.stdout)) == {"human", "model", "runner", "scorer"}


def test_a_config_dirs_options_are_listed_beside_the_bundled_ones(tmp_path: Path) -> None:
    mine = tmp_path / "mine" / "model"
    mine.mkdir(parents=True)
    (mine / "house_judge.yaml").write_text("provider: offline\n", encoding="utf-8")

    shown = run_command(_app.run, [f"--config-dir={tmp_path / 'mine'}", "--help"], cwd=tmp_path)

    assert shown.returncode == 0, shown.stderr
    assert "house_judge" in _groups(shown.stdout)["model"]


# What an option listed in the help needs before it runs: each says so in one line, exit 2.
NEEDS = {
    ("model", "azure"): "an azure judge needs its deployment's name",
    ("model", "panel"): "a panel needs at least two judges, got 0",
    ("target", "precomputed"): "Name the field that holds the summaries",
}


# summeval-run's option files, read from the configs it ships: the first test above checks that
# its --help lists these and no other (asking the help here would run it at collection, on
# every worker of the suite).
BUNDLED_OPTIONS = sorted(
    (path.parent.name, path.stem)
    for group in ("dataset", "model", "runner", "scorer", "target")
    for path in (ROOT / "configs" / group).glob("*.yaml")
)


@pytest.mark.parametrize(("group", "option"), BUNDLED_OPTIONS)
def test_every_option_the_help_lists_runs_or_names_what_it_still_needs(
    tmp_path: Path, group: str, option: str
) -> None:
    """An estimate needs no key: each listed option runs as it is, or its one-line error names
    the setting it still needs; none is refused as unknown."""
    ran = run_app(tmp_path / "run", f"{group}={option}", "runner.estimate=true")

    if (group, option) in NEEDS:
        assert ran.returncode == 2
        assert NEEDS[group, option] in ran.stderr
        assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    else:
        assert ran.returncode == 0, ran.stderr
        assert "requests" in ran.stdout


def test_another_commands_setting_sends_the_user_to_that_command(tmp_path: Path) -> None:
    refused = run_app(tmp_path / "run", "human=binary")

    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "summeval-run: error: human is summeval-agree's setting, not summeval-run's: "
        "summeval-agree human=binary runs it (see summeval-agree --help)"
    )


def _compare_help(tmp_path: Path) -> str:
    shown = summeval_compare("--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_summeval_compare_help_states_each_exit_code_it_returns(tmp_path: Path) -> None:
    codes = _compare_help(tmp_path).split("exit codes:")[1]

    returned = {value for name, value in vars(_compare_command).items() if name.startswith("EXIT_")}
    assert returned == {0, 1, 2}
    for code in returned:
        assert re.search(rf"^\s+{code}\s+\w", codes, re.MULTILINE), code


def test_summeval_compare_help_examples_run_as_written(tmp_path: Path) -> None:
    """Both examples, on runs made as a user makes them: the gate's exit code is the one the
    example's words promise (a lead-1 candidate drops against lead-3; a nightly of lead-3 is
    above 0.1 and below 0.99)."""
    examples = re.findall(
        r"^\s+(summeval-compare .+)$", _compare_help(tmp_path).split("examples:")[1], re.M
    )
    assert len(examples) == 2
    outputs = tmp_path / "outputs"
    for run_dir, overrides in [
        (outputs / "baseline", ()),
        (outputs / "candidate", ("target.k=1",)),
        (outputs / "nightly" / "1", ()),
        (outputs / "nightly" / "2", ()),
    ]:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        made = run_app(run_dir, "runner.progress=false", *overrides)
        assert made.returncode == 0, made.stderr

    drop, history = (shlex.split(example)[1:] for example in examples)
    dropped = summeval_compare(*drop, cwd=tmp_path)
    assert dropped.returncode == 1, dropped.stdout + dropped.stderr
    assert "regression: target.k=1: score dropped by" in dropped.stderr

    floor = float(history[history.index("--fail-if-below") + 1])
    newest = pd.read_parquet(outputs / "nightly" / "2" / "items.parquet")
    gated = summeval_compare(*history, cwd=tmp_path)
    assert gated.returncode == (1 if newest.score.mean() < floor else 0), gated.stdout
    assert "gate" in (tmp_path / "summary.md").read_text(encoding="utf-8").lower()
    for other, code in (("0.99", 1), ("0.1", 0)):
        moved = summeval_compare(*[other if a == str(floor) else a for a in history], cwd=tmp_path)
        assert moved.returncode == code, moved.stdout + moved.stderr
