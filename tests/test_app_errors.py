"""Bad config or input: exit code 2, one clear message, no judge call, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app import run_app
from tests.chat_server import ChatServer

BAD_DATA = {
    "duplicate.jsonl": '{"id": "a", "text": "One."}\n{"id": "a", "text": "Two."}\n',
    "no_input.jsonl": '{"id": "a", "text": "One."}\n{"id": "b", "body": "Two."}\n',
    "not_text.jsonl": '{"id": "a", "text": ["One."], "x": 1}\n{"id": "b", "text": 3.5}\n',
    "empty.jsonl": "",
}
CASES = [
    ("dataset.path={dir}/missing.jsonl", "dataset.path: no such file: {dir}/missing.jsonl"),
    ("dataset.path={dir}/duplicate.jsonl", "{dir}/duplicate.jsonl row 2: duplicate id 'a' (dataset.fields.id); first seen at row 1"),
    ("dataset.path={dir}/no_input.jsonl", "{dir}/no_input.jsonl row 2: no field 'text' (dataset.fields.input)"),
    ("dataset.path={dir}/not_text.jsonl", "{dir}/not_text.jsonl row 2: field 'text' (dataset.fields.input) must be text, got float 3.5"),
    ("dataset.path={dir}/empty.jsonl", "{dir}/empty.jsonl: the dataset has no rows"),
    ("model.provider=acme", "model: unknown judge provider 'acme'"),
    ("scorer.max_questions=0", "scorer.max_questions must be >= 1, got 0"),
    ("scorer.scale=0", "scorer.scale must be > 0 and finite, got 0.0"),
    ("scorer.scale=-2", "scorer.scale must be > 0 and finite, got -2.0"),
    ("target._target_=no_such_module.Agent", "target._target_ 'no_such_module.Agent' could not be built: ModuleNotFoundError"),
    ("target.k=0", "target.k must be an integer >= 1, got 0"),
    ("runner.judge_rpm=0", "runner.judge_rpm must be > 0, or None (null) for no limit; got 0.0"),
    ("scorer.max_questions=ten", "Value 'ten' of type 'str' could not be converted to Integer"),
    ("dataset=no_such_dataset", "Could not find 'dataset/no_such_dataset'"),
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
        (tmp_path / name).write_text(content, encoding="utf-8")
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
    assert chat_server.requests == []
    assert not list(run_dir.glob("*.parquet"))


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
