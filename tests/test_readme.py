"""The README's commands and examples, and those of the documentation site, are the ones that
work. Each passage is read from the page it is on (``tests/docs_pages.py``).

The examples the README runs as scripts (``python examples/quickstart.py``) run as scripts; the
others, and ``summeval-run``, run in this process.
"""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import sys
from pathlib import Path

import pytest

from tests.app import ROOT, run_app, run_process
from tests.chat_server import ChatServer
from tests.docs_pages import PAGES, README, page_blocks
from tests.docs_pages import block as block_containing


def run_script(name: str) -> str:
    """``python examples/<name>`` from the repository's root, as the README shows it run."""
    completed = run_process([sys.executable, f"examples/{name}"], cwd=ROOT)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def run_example(name: str) -> str:
    """``examples/<name>`` run as ``__main__``, in this process: what it prints."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        runpy.run_path(str(ROOT / "examples" / name), run_name="__main__")
    return printed.getvalue()


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    (language, first), *_ = page_blocks("README.md")
    assert language == "bash"
    assert README.index("```bash\n" + first) < README.index("\n## ")  # before any section
    install_and_run, test = first.strip().splitlines()
    assert install_and_run == "pip install -e . && summeval-run"
    assert test.startswith("pip install -e '.[test]' && ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == test
    # The site's first page opens with the same two commands.
    assert page_blocks("docs/index.md")[0] == ("bash", first)


def test_the_offline_example_prints_what_the_readme_shows() -> None:
    example = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    assert block_containing("python", "Score a summary with the offline judge") == example

    # The README runs it as a script (`python examples/quickstart.py`): so does the test.
    printed = run_script("quickstart.py")

    assert printed == block_containing("text", "score:     ")
    assert re.search(r"^score: +0\.\d\d \(scored\)$", printed, flags=re.M)
    assert "reason:    Score" in printed


def test_the_openai_example_runs_against_an_openai_compatible_server(
    chat_server: ChatServer, no_openai_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = (ROOT / "examples" / "openai_judge.py").read_text(encoding="utf-8")
    assert block_containing("python", "Score a batch with an OpenAI judge") == example
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)

    printed = run_example("openai_judge.py")

    assert printed.count("scored") == 2
    assert len(chat_server.requests) == 6


def test_the_fake_judge_example_runs() -> None:
    exec(compile(block_containing("python", "FakeJudge("), "docs/judges.md", "exec"), {})


def test_the_run_evals_example_runs() -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(
            compile(block_containing("python", "run_evals(\n"), "docs/guides/python.md", "exec"), {}
        )

    assert "museum scored" in printed.getvalue()
    # result.counts is a pydantic model (RunCounts): print() shows its fields.
    assert (
        "\ntotal=2 scored=2 blank_summaries=0 unscorable=0 errors=0 flagged=0 "
        "{'summarization-scorer': " in printed.getvalue()
    )


def test_the_readme_queries_run_on_a_real_run(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    run_dir = tmp_path / "run"
    assert run_app(run_dir, "runner.progress=false").returncode == 0
    example_dir = "outputs/2026-11-30/15-02-11"

    rows = duckdb.sql(
        block_containing("sql", "FROM ").replace(example_dir, str(run_dir))
    ).fetchall()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(
            block_containing("python", 'pd.read_parquet("outputs/2026-11-30').replace(
                example_dir, str(run_dir)
            ),
            {},
        )

    assert len(rows) == 5
    assert rows[0][3] >= rows[-1][3] >= 1  # item_id, trial, score, missed
    assert "[5 rows x 5 columns]" in printed.getvalue()


def test_every_items_column_is_documented() -> None:
    from summeval_runner._rundir._tables import ITEMS_SCHEMA

    documented = set(
        re.findall(
            r"^\| `([a-z_0-9]+)`(?:, `([a-z_0-9]+)`)?(?:, `([a-z_0-9]+)`)?",
            PAGES["docs/guides/outputs.md"],
            flags=re.M,
        )
    )
    names = {name for group in documented for name in group if name}
    assert set(ITEMS_SCHEMA.names) <= names


def test_the_nightly_python_example_estimates_then_runs_within_its_budget(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example as written, its judge served by the loopback server (OPENAI_BASE_URL)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-readme-0123456789")
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    example = block_containing("python", "An estimate, then the run")
    printed = io.StringIO()
    names: dict[str, object] = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README nightly example", "exec"), names)

    estimate, outcome, noise = printed.getvalue().splitlines()
    assert estimate.startswith("18 requests, about $")  # 2 items x 3 trials x 3 calls
    # Every request the server saw was the run's: the estimate sent none.
    assert len(chat_server.requests) == names["result"].judge_traffic.requests  # type: ignore[attr-defined]
    assert outcome.startswith("completed False $")
    assert float(outcome.split("$")[1]) <= 0.05
    assert noise == "score std over trials: 0.000"  # the loopback server answers alike each time


def test_the_readme_links_every_page_of_the_site_and_each_link_is_a_file() -> None:
    """The README is the site's front door (the site is not hosted): each page of the docs
    folder is linked from it, relatively, and every relative link names a file that exists."""
    linked = {
        target.partition("#")[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", README)
        if not target.startswith(("http://", "https://", "#"))
    }
    missing_files = sorted(path for path in linked if not (ROOT / path).is_file())
    assert not missing_files, f"README links to files that do not exist: {missing_files}"
    pages = {path for path in PAGES if path.startswith("docs/")}
    unlinked = sorted(pages - linked)
    assert not unlinked, f"pages of the site the README does not link: {unlinked}"
    assert "mkdocs serve" in README
