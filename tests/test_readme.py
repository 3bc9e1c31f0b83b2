"""The README's commands and examples are the ones that work."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.chat_server import ChatServer

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def run_example(name: str, env: dict[str, str] | None = None) -> str:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    return completed.stdout


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    install_and_run, test = blocks("bash")[0].strip().splitlines()
    assert install_and_run.startswith("pip install -e . && ")
    assert test.startswith("pip install -e '.[test]' && ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == test


def test_the_offline_example_prints_what_the_readme_shows() -> None:
    example = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    assert blocks("python")[0] == example

    printed = run_example("quickstart.py")

    assert printed == blocks("text")[0]
    assert re.search(r"^score: +0\.\d\d \(scored\)$", printed, flags=re.M)
    assert "reason:    Score" in printed


def test_the_openai_example_runs_against_an_openai_compatible_server(
    chat_server: ChatServer,
) -> None:
    example = (ROOT / "examples" / "openai_judge.py").read_text(encoding="utf-8")
    assert blocks("python")[1] == example
    env = os.environ | {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": chat_server.base_url}

    printed = run_example("openai_judge.py", env)

    assert printed.count("scored") == 2
    assert len(chat_server.requests) == 6


def test_the_fake_judge_example_runs() -> None:
    snippet = blocks("python")[2]
    assert "FakeJudge(" in snippet
    exec(compile(snippet, "README.md", "exec"), {})
