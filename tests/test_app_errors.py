"""Bad config or input: exit code 2, one clear message, no judge call, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from summeval_runner._cli import _app
from summeval_runner._rundir._journal import locked
from tests.app import Completed, run_app, run_command, run_sweep
from tests.chat_server import ChatServer

BAD_DATA = {
    "duplicate.jsonl": '{"id": "a", "input": "One."}\n{"id": "a", "input": "Two."}\n',
    "no_input.jsonl": '{"id": "a", "input": "One."}\n{"id": "b", "body": "Two."}\n',
    "not_text.jsonl": '{"id": "a", "input": ["One."], "x": 1}\n{"id": "b", "input": 3.5}\n',
    "empty.jsonl": "",
    "object.jsonl": '{"id": "a", "input": "One."}\n{"id": "b", "input": {"body": "Two."}}\n',
    "nested.jsonl": '{"id": "a", "input": [{"role": "user", "content": [["Two."]]}]}\n',
    "latin1.jsonl": '{"id": "a", "input": "One."}\n{"id": "b", "input": "caf\u00e9"}\n',
    "a_directory.jsonl": None,
    "unterminated.csv": 'id,text\na,"unterminated. One.\nb,second. row\n',
}
CASES = [
    ("dataset.path={dir}/missing.jsonl", "dataset.path: no such file: {dir}/missing.jsonl"),
    ("dataset.path={dir}/duplicate.jsonl", "{dir}/duplicate.jsonl row 2: duplicate id 'a' (dataset.fields.id); first seen at row 1"),
    ("dataset.path={dir}/no_input.jsonl", "{dir}/no_input.jsonl row 2: no field 'input' (dataset.fields.input)"),
    ("dataset.path={dir}/not_text.jsonl", "{dir}/not_text.jsonl row 2: field 'input' (dataset.fields.input) must be text, got float 3.5"),
    ("dataset.path={dir}/empty.jsonl", "{dir}/empty.jsonl: the dataset has no rows"),
    ("model.provider=acme", "model: unknown judge provider 'acme'"),
    ("scorer.max_questions=0", "scorer.max_questions must be >= 1, got 0"),
    ("scorer.scale=0", "scorer.scale must be > 0 and finite, got 0.0"),
    ("scorer.scale=-2", "scorer.scale must be > 0 and finite, got -2.0"),
    ("scorer.questions=once", "scorer.questions must be one of per_source, per_item, got 'once'"),
    ("target._target_=no_such_module.Agent", "target._target_ 'no_such_module.Agent' could not be built: ModuleNotFoundError"),
    ("target.k=0", "target.k must be an integer >= 1, got 0"),
    ("runner.judge_rpm=0", "runner.judge_rpm must be > 0, or None (null) for no limit; got 0.0"),
    ("scorer.max_questions=ten", "Value 'ten' of type 'str' could not be converted to Integer"),
    ("dataset=no_such_dataset", "dataset=no_such_dataset: dataset has no option 'no_such_dataset'; (the choices: sample)"),
    # An input the scorer cannot read: refused at the check, not an error row (or blank) later.
    ("dataset.path={dir}/object.jsonl", "{dir}/object.jsonl row 2: the scorer cannot read this input: field 'input' (dataset.fields.input): a mapping must hold a message ('role', 'content') or a list under one of messages"),
    ("dataset.path={dir}/nested.jsonl", "{dir}/nested.jsonl row 1: the scorer cannot read this input: field 'input' (dataset.fields.input) message 0 part 0: a content part must be a string or a mapping, got list ['Two.']"),
    ("dataset.path={dir}/latin1.jsonl", "{dir}/latin1.jsonl line 2: not valid UTF-8 at byte offset 54"),
    ("dataset.path={dir}/unterminated.csv", "{dir}/unterminated.csv line 2: not valid CSV: a quoted field that starts in this row is never closed"),
    ("dataset.path={dir}/a_directory.jsonl", "dataset.path: {dir}/a_directory.jsonl is a directory; name a JSONL, CSV or Parquet file"),
    ("model.base_url=ftp://judge.example/v1", "model: base_url must be an http:// or https:// URL (http://localhost:8000/v1), got 'ftp://judge.example/v1'"),
    ("model.base_url=localhost:8000/v1", "got 'localhost:8000/v1'"),
    ("+dataset.sample=10", "dataset.sample is not a setting (dataset takes: path, format, fields, limit, ignore_outputs)"),
    ("+dataset.fields.summary=answer", "dataset.fields.summary is not a setting (dataset.fields takes: input, id, output, key_facts, questions, reference, ground_truth, metadata)"),
    ("+scorer.max_question=5", "scorer.max_question is not a setting (scorer takes: max_questions, scale, questions)"),
    ("+runner.concurency=4", "runner.concurency is not a setting (runner takes: max_items_in_flight,"),
    ("+runner.retry.attempts=2", "runner.retry.attempts is not a setting (runner.retry takes: max_attempts,"),
    ("+model.temprature=0.5", "model: invalid openai judge settings: unknown setting 'temprature'"),
    ("+target.words=20", "target.words is not an argument of summeval_runner._agents.LeadK (it takes: k, max_words)"),
    ("+seed=1", "seed is not a setting (the config has: dataset, target, model, scorer, runner)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "message"),
    CASES,
    ids=[case[0].split("=")[0] + "=" + case[0].split("=")[1][:20] for case in CASES],
)
def test_bad_config_or_input_exits_2_before_any_judge_call(
    override: str, message: str, tmp_path: Path, chat_server: ChatServer
) -> None:
    for name, content in BAD_DATA.items():
        if content is None:
            (tmp_path / name).mkdir()
        else:
            # Latin-1, so that é is one byte that UTF-8 cannot read.
            encoding = "latin-1" if name.startswith("latin1") else "utf-8"
            (tmp_path / name).write_text(content, encoding=encoding)
    run_dir = tmp_path / "run"

    completed = run_app(
        run_dir,
        "model=openai",
        f"model.base_url={chat_server.base_url}",
        override.format(dir=tmp_path),
        env={"OPENAI_API_KEY": "sk-test"},
    )

    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert message.format(dir=tmp_path) in completed.stderr
    assert "Traceback" not in completed.stderr
    assert chat_server.requests == []
    # Hydra made the run's directory before the job was refused: nothing of it is left.
    assert not run_dir.exists()


def test_a_missing_key_is_bad_config(tmp_path: Path) -> None:
    completed = run_app(tmp_path / "run", "model=openai")

    assert completed.returncode == 2
    assert "OPENAI_API_KEY" in completed.stderr


def test_a_run_directory_that_holds_a_run_is_not_reused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=2", "runner.progress=false").returncode == 0
    before = {path: path.read_bytes() for path in run_dir.glob("*.parquet")}

    again = run_app(run_dir, "dataset.limit=3", "runner.progress=false")

    assert again.returncode == 2
    assert f"{run_dir} already holds a run; choose another directory" in again.stderr
    assert f"runner.resume={run_dir}" in again.stderr
    assert {path: path.read_bytes() for path in run_dir.glob("*.parquet")} == before


def hydra_files(run_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in (run_dir / ".hydra").glob("*.yaml")}


def test_a_run_refused_from_a_directory_that_holds_a_run_leaves_its_hydra_files(
    tmp_path: Path,
) -> None:
    """Hydra writes .hydra/ before the job runs: the refusal comes before it."""
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=2", "runner.progress=false").returncode == 0
    before = hydra_files(run_dir)
    assert sorted(before) == ["config.yaml", "hydra.yaml", "overrides.yaml"]

    again = run_app(run_dir, "target.k=1", "scorer.scale=7", "runner.progress=false")

    assert again.returncode == 2, again.stderr
    assert f"{run_dir} already holds a run; choose another directory" in again.stderr
    assert "Traceback" not in again.stderr
    assert hydra_files(run_dir) == before


def test_a_sweep_job_refused_from_a_directory_that_holds_a_run_leaves_its_hydra_files(
    tmp_path: Path,
) -> None:
    """In a sweep, Hydra writes the job's .hydra/ before anything of ours can refuse it: the
    earlier run's files are kept and put back."""
    sweep = tmp_path / "sweep"
    first = run_sweep(sweep, "scorer.scale=1,5", "dataset.limit=2", "runner.progress=false")
    assert first.returncode == 0, first.stderr
    runs = sorted(path for path in sweep.iterdir() if (path / "manifest.json").is_file())
    before = {run_dir: hydra_files(run_dir) for run_dir in runs}
    assert [sorted(files) for files in before.values()] == [
        ["config.yaml", "hydra.yaml", "overrides.yaml"]
    ] * 2

    # runner.cache is left out of the directories' names: the same two directories.
    again = run_sweep(
        sweep, "scorer.scale=1,5", "dataset.limit=2", "runner.progress=false", "runner.cache=off"
    )

    assert again.returncode == 2, again.stderr
    assert again.stderr.count("already holds a run; choose another directory") == 2
    assert {run_dir: hydra_files(run_dir) for run_dir in runs} == before


def test_a_resume_into_a_directory_another_run_is_writing_is_refused_before_hydra_writes(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=2", "runner.progress=false").returncode == 0
    before = hydra_files(run_dir)

    # Another summeval-run writing there holds the journal's lock: this one takes it as one.
    with locked(run_dir):
        refused = run_app(
            run_dir, "dataset.limit=2", f"runner.resume={run_dir}", "runner.progress=false"
        )

    assert refused.returncode == 2, refused.stderr
    assert refused.stderr == (
        f"summeval-run: error: {run_dir} is being written by another summeval-run\n"
    )
    assert hydra_files(run_dir) == before
    # With no one writing there, the same resume runs.
    resumed = run_app(
        run_dir, "dataset.limit=2", f"runner.resume={run_dir}", "runner.progress=false"
    )
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize("option", ["hydra.run.dir", "hydra.sweep.dir"])
def test_an_empty_run_directory_is_bad_config(option: str, tmp_path: Path) -> None:
    sweep = ["-m", "target.k=1,2"] if option == "hydra.sweep.dir" else []

    completed = run_here(tmp_path, *sweep, f"{option}=", "dataset.limit=1")

    assert completed.returncode == 2, completed.stderr
    assert completed.stderr == (
        f"summeval-run: error: {option} is empty; give it a directory of its own "
        f"({option}=outputs/my-run), or leave it out for a new one under outputs/\n"
    )
    assert list(tmp_path.iterdir()) == []


def run_here(cwd: Path, *argv: str, env: dict[str, str] | None = None) -> Completed:
    """``summeval-run <argv>`` from ``cwd``, on Hydra's default run directory unless given."""
    return run_command(_app.run, [*argv, "runner.progress=false"], cwd=cwd, env=env)


@pytest.mark.parametrize(
    ("option", "path", "problem"),
    [
        ("hydra.run.dir", "a_file/run", "{dir}/a_file/run cannot be made: {dir}/a_file is a file, not a directory"),
        ("hydra.run.dir", "a_file", "{dir}/a_file is a file, not a directory"),
        ("hydra.sweep.dir", "a_file/sweep", "{dir}/a_file/sweep cannot be made: {dir}/a_file is a file, not a directory"),
    ],
)  # fmt: skip
def test_a_run_directory_that_cannot_be_made_is_bad_config(
    option: str, path: str, problem: str, tmp_path: Path
) -> None:
    (tmp_path / "a_file").write_text("not a directory", encoding="utf-8")
    sweep = ["-m", "target.k=1,2"] if option == "hydra.sweep.dir" else []

    completed = run_here(tmp_path, *sweep, f"{option}={tmp_path / path}")

    assert completed.returncode == 2, completed.stderr
    assert completed.stderr == (f"summeval-run: error: {option}: {problem.format(dir=tmp_path)}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes in a read-only (0o555) directory: permission bits do not stop it",
)
def test_a_run_directory_that_cannot_be_written_is_bad_config(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        completed = run_here(tmp_path, f"hydra.run.dir={locked / 'run'}")
    finally:
        locked.chmod(0o755)

    assert completed.returncode == 2
    assert completed.stderr == (
        f"summeval-run: error: hydra.run.dir: {locked / 'run'} cannot be written: "
        f"{locked} is not writable\n"
    )


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_run_directory_the_file_system_refuses_is_bad_config(tmp_path: Path) -> None:
    # /proc takes no new directory, whoever asks (root included): only making it can tell.
    completed = run_here(tmp_path, "hydra.run.dir=/proc/summeval-run-test/run")

    assert completed.returncode == 2
    assert completed.stderr.startswith(
        "summeval-run: error: hydra.run.dir: /proc/summeval-run-test/run cannot be made: "
    )
    assert "Traceback" not in completed.stderr
    assert completed.stderr.count("\n") == 1


def test_a_refused_resume_keeps_the_run_and_leaves_no_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "dataset.limit=2", "runner.progress=false").returncode == 0
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    (tmp_path / "object.jsonl").write_text(BAD_DATA["object.jsonl"] or "", encoding="utf-8")

    refused = run_here(tmp_path, f"runner.resume={run_dir}", "dataset.path=object.jsonl")

    assert refused.returncode == 2
    assert "object.jsonl row 2: the scorer cannot read this input" in refused.stderr
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    # The directory Hydra made for the resuming run (outputs/<date>/<time>...) is gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["object.jsonl", "run"]


def test_a_refused_run_in_a_directory_it_did_not_make_leaves_that_directory(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes", encoding="utf-8")

    refused = run_here(tmp_path, f"hydra.run.dir={mine}", "scorer.max_questions=0")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused_again = run_here(tmp_path, f"hydra.run.dir={empty}", "scorer.max_questions=0")

    assert (refused.returncode, refused_again.returncode) == (2, 2)
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "my notes"
    assert empty.is_dir()


AGENTS = """
def summarize(input, words=20):
    return " ".join(input.split()[:words])


class Flexible:
    def __init__(self, **options):
        self.options = options

    def __call__(self, input):
        return input
"""


def test_target_arguments_are_checked_against_the_callable(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENTS, encoding="utf-8")
    targets = tmp_path / "conf" / "target"
    targets.mkdir(parents=True)
    (targets / "words.yaml").write_text(
        "_target_: my_agents.summarize\n_partial_: true\nwords: 5\n", encoding="utf-8"
    )
    (targets / "flexible.yaml").write_text("_target_: my_agents.Flexible\n", encoding="utf-8")
    env = {"PYTHONPATH": str(tmp_path)}
    config_dir = f"--config-dir={tmp_path / 'conf'}"

    # A function called on each item (_partial_): the key would have failed every item.
    refused = run_here(tmp_path, config_dir, "target=words", "+target.style=short", env=env)
    fine = run_here(tmp_path, config_dir, "target=words", "target.words=3", env=env)
    # **options takes any name.
    flexible = run_here(tmp_path, config_dir, "target=flexible", "+target.style=short", env=env)

    assert refused.returncode == 2
    assert refused.stderr == (
        "summeval-run: error: target.style is not an argument of my_agents.summarize "
        "(it takes: input, words); check its spelling\n"
    )
    assert (fine.returncode, flexible.returncode) == (0, 0), fine.stderr + flexible.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "scorer.max_question=5",
            "summeval-run: error: scorer.max_question is not a setting; did you mean "
            "max_questions? (scorer takes: max_questions, scale, questions)",
        ),
        (
            "model=foo",
            "summeval-run: error: model=foo: model has no option 'foo'; (the choices: "
            "anthropic, azure, google, offline, openai, panel)",
        ),
        (
            "model=ofline",
            "summeval-run: error: model=ofline: model has no option 'ofline'; did you mean "
            "offline? (the choices: anthropic, azure, google, offline, openai, panel)",
        ),
        (
            "modle=openai",
            "summeval-run: error: modle is not a config group or setting; did you mean model? "
            "(the config has: dataset, target, model, scorer, runner)",
        ),
    ],
)
def test_a_misspelt_key_or_option_is_one_line_naming_the_closest_and_the_choices(
    tmp_path: Path, override: str, message: str
) -> None:
    """Issue 42: not Hydra's config-search-path dump, nor its advice to append with +."""
    refused = run_app(tmp_path / "run", override)

    assert refused.returncode == 2
    assert refused.stderr.strip() == message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("source", ["--config-dir={}", "hydra.searchpath=[file://{}]"])
def test_options_of_ones_own_configs_are_not_refused_as_misspelt(
    tmp_path: Path, source: str
) -> None:
    """A --config-dir's options join the check; options from a search path it cannot list are
    left to Hydra, never refused."""
    mine = tmp_path / "my_configs" / "scorer"
    mine.mkdir(parents=True)
    (mine / "strict.yaml").write_text("max_questions: 3\n", encoding="utf-8")

    ran = run_app(
        tmp_path / "run", source.format(tmp_path / "my_configs"), "scorer=strict",
        "runner.estimate=true",
    )  # fmt: skip

    assert ran.returncode == 0, ran.stderr
