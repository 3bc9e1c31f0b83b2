"""The package runs installed from its wheel, with no checkout: configs and sample data ship in it.

A wheel is built from a copy of the package's files, installed into a fresh virtual environment
(no system site-packages, so the editable install of this checkout is not there), and its
``summeval-run`` entry point runs the default job from an empty directory. The dependencies come
from the running interpreter's site-packages, listed in a ``.pth`` file of the new environment:
paths listed there are added as they are, and the ``.pth`` files inside them (this checkout's
editable finder among them) are not run. Nothing is downloaded, except that a build environment
older than setuptools 77 leaves pip to fetch the build backend from its configured index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import summeval_runner

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_ITEMS = 26
# The repository's top-level folders that ship inside the package, under these import names.
SHIPPED_INSIDE = {"configs": "summeval_runner._configs", "data": "summeval_runner.data"}
# pyproject's `license = "MIT"` (PEP 639) needs setuptools 77 to build.
SETUPTOOLS_FOR_LICENSE_EXPRESSIONS = (77,)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    python: Path
    bin: Path


def _pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir", *args],
        check=True,
        capture_output=True,
        text=True,
    )


def _can_build_here() -> bool:
    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        return False
    major = version.split(".")[0]
    return major.isdigit() and (int(major),) >= SETUPTOOLS_FOR_LICENSE_EXPRESSIONS


def _build_wheel(work: Path) -> Path:
    # A copy of what the wheel is made of: building in the checkout would leave build/ in it,
    # and a stale build/lib could put files in the wheel that the checkout no longer has.
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    # The package and the two top-level folders pyproject.toml maps into it.
    for name in ("summeval_runner", *SHIPPED_INSIDE):
        shutil.copytree(
            ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    isolation = ["--no-build-isolation"] if _can_build_here() else []
    _pip("wheel", "--no-deps", *isolation, "--wheel-dir", str(work / "dist"), str(source))
    (wheel,) = (work / "dist").glob("summeval_runner-*.whl")
    return wheel


def _dependency_dirs() -> list[str]:
    """Where the running interpreter finds the dependencies: its site-packages directories."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("install")
    wheel = _build_wheel(work)
    venv = work / "venv"
    # From inside a virtual environment this still makes one on the base interpreter.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True
    )
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "--no-deps", "--no-index", "--no-compile", str(wheel))
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "_summeval_test_dependencies.pth").write_text(
        "".join(f"{path}\n" for path in _dependency_dirs()), encoding="utf-8"
    )
    return Installed(wheel, venv, python, venv / "bin")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # The judge cache stays where the suite put it (SUMMEVAL_CACHE_DIR), never in ~/.cache.
    assert "SUMMEVAL_CACHE_DIR" in env
    return env


def _start(command: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_the_installed_package_is_the_wheel_not_the_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    # Where `import summeval_runner` finds it, without importing it (the import takes seconds).
    find = "import importlib.util; print(importlib.util.find_spec('summeval_runner').origin)"
    out, err = _start([str(installed.python), "-c", find], cwd=tmp_path).communicate(timeout=60)
    imported = Path(out.strip()).resolve()
    assert imported.is_relative_to(installed.venv.resolve()), (imported, err)
    assert not imported.is_relative_to(ROOT)


def _checkout_files(folder: Path) -> set[str]:
    return {
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_wheel_holds_every_file_of_the_package_and_of_configs_and_data_inside_it(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    # Nothing but the package at the wheel's top level: a top-level `configs` or `data` would
    # land in every user's site-packages as modules of those names.
    assert {name.split("/")[0] for name in names} == {
        "summeval_runner",
        f"summeval_runner-{summeval_runner.__version__}.dist-info",
    }
    # Every file of the checkout's package, a subpackage missing from pyproject's list included.
    expected = {f"summeval_runner/{name}" for name in _checkout_files(ROOT / "summeval_runner")}
    # The configs and the data under the names the code imports (Hydra: pkg://summeval_runner._configs).
    for folder, package in SHIPPED_INSIDE.items():
        inside = package.replace(".", "/")
        expected |= {f"{inside}/{name}" for name in _checkout_files(ROOT / folder)}
    assert "summeval_runner/_configs/model/openai.yaml" in expected
    assert "summeval_runner/data/sample_articles.jsonl" in expected
    missing = sorted(expected - names)
    assert not missing, f"files of the checkout missing from the wheel: {missing}"


def test_summeval_run_runs_the_default_job_from_an_empty_directory(
    installed: Installed, tmp_path: Path
) -> None:
    summeval_run = str(installed.bin / "summeval-run")
    cwd = tmp_path / "empty"
    cwd.mkdir()
    run_dir = tmp_path / "run"
    # All three at once: each spends most of its seconds importing the package.
    job = _start([summeval_run, f"hydra.run.dir={run_dir}", "runner.progress=false"], cwd)
    version = _start([summeval_run, "--version"], cwd)
    help_ = _start([summeval_run, "--help"], cwd)
    (job_out, job_err), (version_out, version_err), (help_out, help_err) = (
        process.communicate(timeout=120) for process in (job, version, help_)
    )

    assert job.returncode == 0, job_out + job_err
    items = pq.read_table(run_dir / "items.parquet").to_pylist()
    assert len(items) == SAMPLE_ITEMS
    assert {row["status"] for row in items} == {"scored"}
    # The default dataset is the copy installed with the package.
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    dataset = Path(manifest["dataset"]["path"]).resolve()
    assert dataset.is_relative_to(installed.venv.resolve()), dataset
    assert dataset.name == "sample_articles.jsonl"

    assert version.returncode == 0, version_err
    assert summeval_runner.__version__ in version_out

    assert help_.returncode == 0, help_err
    for words in (
        "Exit codes",
        "runner.max_error_rate",
        "130",
        "143",
        "runner.resume=",
        "summeval-compare",
        "summeval-merge",
        "summeval-cache",
        "--hydra-help",
        # The groups and the config, filled in by Hydra.
        "dataset: sample",
        "model: anthropic, azure, google, offline, openai",
        "max_questions: 10",
    ):
        assert words in help_out, words

    # Nothing is written where the commands ran: a run writes in its run directory.
    assert not any(cwd.iterdir())
