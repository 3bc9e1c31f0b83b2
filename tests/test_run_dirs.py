"""Runs started together don't collide: the default run directory's name is unique, read once
per run, and still a name that sweeps and ``runner.resume`` take."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from summeval_runner._cli import _app
from summeval_runner._cli._resume import resume_command
from summeval_runner._cli._rundir import run_dir_name
from tests.app import run_command
from tests.prestarted import start

NAME = re.compile(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d\.\d{3}-[0-9a-f]{6}")


def test_names_for_the_same_millisecond_differ() -> None:
    moment = datetime(2026, 11, 30, 15, 2, 11, 374_999)

    names = {run_dir_name(moment) for _ in range(200)}

    assert len(names) == 200
    assert all(name.startswith("2026-11-30/15-02-11.374-") for name in names)
    assert all(NAME.fullmatch(name) for name in names)


def run_dirs(root: Path) -> list[Path]:
    return sorted(path.parent for path in root.glob("*/*/manifest.json"))


def test_three_runs_started_at_once_on_the_defaults_each_finish_in_their_own_directory(
    tmp_path: Path,
) -> None:
    """Three processes of ``python -m summeval_runner``, each forked as it starts from one that
    has the package imported (``tests/prestarted.py``): they start within milliseconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    argv = ["dataset.limit=3", "runner.progress=false"]
    started = [start(argv, cwd=tmp_path, env=env) for _ in range(3)]
    finished = [process.communicate(timeout=180) for process in started]

    assert [p.returncode for p in started] == [0, 0, 0], finished
    found = run_dirs(tmp_path / "outputs")
    assert len(found) == 3
    for run_dir in found:
        assert NAME.fullmatch(run_dir.relative_to(tmp_path / "outputs").as_posix())
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        assert (manifest["status"], manifest["exit_code"]) == ("completed", 0)
        assert manifest["counts"]["total"] == 3
        assert (run_dir / "items.parquet").is_file()
    # Each process printed its own directory.
    printed = sorted(re.findall(r"results: (\S+)", "".join(out for out, _ in finished)))
    assert printed == [str(run_dir) for run_dir in found]


def test_a_run_reads_its_directory_name_once(tmp_path: Path) -> None:
    """Hydra reads hydra.run.dir more than once (the check, the directory, the log, the record
    in .hydra): every reading is the same name, so one directory holds the whole run."""
    completed = run_command(_app.run, ["dataset.limit=2", "runner.progress=false"], cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    (run_dir,) = run_dirs(tmp_path / "outputs")
    assert list((tmp_path / "outputs").glob("*/*")) == [run_dir]
    hydra = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml")
    assert hydra.hydra.runtime.output_dir == str(run_dir)
    assert (run_dir / "summeval-run.log").is_file()
    assert f"results: {run_dir}" in completed.stdout

    # The name is one that runner.resume takes as it is printed.
    command = resume_command(run_dir.relative_to(tmp_path), ["dataset.limit=2"])
    assert command == f"summeval-run dataset.limit=2 runner.resume={run_dir.relative_to(tmp_path)}"
    resumed = run_command(_app.run, [*command.split()[1:], "runner.progress=false"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr


def test_a_sweep_on_the_defaults_keeps_its_jobs_in_one_directory(tmp_path: Path) -> None:
    completed = run_command(
        _app.run, ["-m", "target.k=1,2", "dataset.limit=2", "runner.progress=false"], cwd=tmp_path
    )

    assert completed.returncode == 0, completed.stderr
    (sweep_dir,) = (tmp_path / "multirun").glob("*/*")
    assert NAME.fullmatch(sweep_dir.relative_to(tmp_path / "multirun").as_posix())
    assert sorted(p.parent.name for p in sweep_dir.glob("*/manifest.json")) == [
        "dataset.limit=2,target.k=1",
        "dataset.limit=2,target.k=2",
    ]
    assert (sweep_dir / "comparison.parquet").is_file()
