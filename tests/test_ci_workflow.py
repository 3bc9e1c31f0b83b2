"""The GitHub Actions workflow of docs/guides/nightly-ci.md, run step by step as Actions would.

The workflow is read out of the page (its one ``yaml`` block), so the page cannot show one
workflow while the suite tests another. Its structure is checked (a schedule, the cache on the
cache dir, the upload of what the run writes, the gate's flags), then it runs night after night,
each night in a fresh workspace as a new runner would be: every ``run:`` step's script with
bash (``shell: bash`` is ``bash --noprofile --norc -eo pipefail``), with the workflow's and the
step's ``env:``, the variables Actions sets, the secret replaced by a dummy key and the judge at
the suite's loopback server (``OPENAI_BASE_URL``). The ``uses:`` steps are emulated by what they
provide: the checkout is the repository's files, setup-python and ``pip install .`` are this
interpreter with the package installed, the cache steps copy their paths from and into a store
that outlives the night (a key saved once, never overwritten), the upload step's paths must
exist, the JUnit reporter's file must parse. ``if:`` is honoured.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import chat_server as chat_server_module
from tests.app import ROOT
from tests.chat_server import ChatServer, Fault
from tests.docs_pages import block
from tests.prestarted import commands_path

PAGE = ROOT / "docs" / "guides" / "nightly-ci.md"
# Put together here, so that the checkout's copy of this file does not hold it.
KEY = "-".join(("sk", "dummy", "nightly", "ci", "5f0c1e2d3b4a"))
# A manual dispatch's input: a few items a night keep each night to seconds.
DISPATCH = {"overrides": "dataset.limit=8"}
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", flags=re.S)
KNOWN_ACTIONS = {
    "actions/checkout@v4",
    "actions/setup-python@v5",
    "actions/cache/restore@v4",
    "actions/cache/save@v4",
    "actions/upload-artifact@v4",
    "mikepenz/action-junit-report@v5",
}


def workflow() -> dict[Any, Any]:
    (text,) = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def job(flow: dict[Any, Any]) -> dict[str, Any]:
    (only,) = flow["jobs"].values()
    assert isinstance(only, dict)
    return only


def steps_using(flow: dict[Any, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job(flow)["steps"] if step.get("uses", "").startswith(action)]


def gate_step(flow: dict[Any, Any]) -> dict[str, Any]:
    (gate,) = [step for step in job(flow)["steps"] if "summeval-compare" in step.get("run", "")]
    return gate


def path_lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


# --- the workflow's structure -----------------------------------------------------------------


def test_the_workflow_runs_nightly_and_on_demand_with_the_key_from_the_secret_only() -> None:
    flow = workflow()
    triggers = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as true
    (schedule,) = triggers["schedule"]
    minute, hour, *every_day = schedule["cron"].split()
    assert every_day == ["*", "*", "*"]
    assert minute.isdigit()
    assert hour.isdigit()
    assert "workflow_dispatch" in triggers
    assert flow["concurrency"]["cancel-in-progress"] is False
    steps = job(flow)["steps"]
    assert {step["uses"] for step in steps if "uses" in step} == KNOWN_ACTIONS
    keyed = [step for step in steps if "OPENAI_API_KEY" in step.get("env", {})]
    assert [step["env"]["OPENAI_API_KEY"] for step in keyed] == ["${{ secrets.OPENAI_API_KEY }}"]
    assert "OPENAI_API_KEY" not in flow.get("env", {})
    assert "env" not in job(flow)
    # The key is never echoed, and no input is pasted into a script (shell injection).
    for step in steps:
        assert "OPENAI_API_KEY" not in step.get("run", ""), step["name"]
        assert "inputs." not in step.get("run", ""), step["name"]


def test_the_cache_steps_carry_the_response_cache_dir_and_save_after_a_failed_night() -> None:
    flow = workflow()
    assert flow["env"]["SUMMEVAL_CACHE_DIR"].startswith("${{ github.workspace }}/")
    (restore,) = steps_using(flow, "actions/cache/restore")
    (save,) = steps_using(flow, "actions/cache/save")
    for step in (restore, save):
        assert "${{ env.SUMMEVAL_CACHE_DIR }}" in path_lines(step["with"]["path"])
    assert restore["with"]["path"] == save["with"]["path"]
    # A cache entry is never overwritten: a key of each run's own, the newest restored by prefix.
    assert "${{ github.run_id }}" in save["with"]["key"]
    (prefix,) = path_lines(restore["with"]["restore-keys"])
    assert save["with"]["key"].startswith(prefix)
    assert save["if"] == "always()"
    names = [step["name"] for step in job(flow)["steps"]]
    run_step = next(step for step in job(flow)["steps"] if "summeval-run" in step.get("run", ""))
    assert names.index(restore["name"]) < names.index(run_step["name"]) < names.index(save["name"])


def test_the_gate_takes_the_history_every_rule_and_writes_the_summary_and_junit() -> None:
    flow = workflow()
    gate = gate_step(flow)
    script = gate["run"].replace("\\\n", " ")
    for flag in ("--history", "--fail-if-drop", "--fail-if-below", "--fail-if-flagged"):
        assert flag in script
    assert '--summary-md "$GITHUB_STEP_SUMMARY"' in script
    junit = re.search(r"--junit (\S+)", script)
    assert junit is not None
    (reporter,) = steps_using(flow, "mikepenz/action-junit-report")
    assert reporter["with"]["report_paths"] == junit.group(1)
    # The gate runs after a failed run step, so a broken night is a failed test case too.
    assert gate["if"] == "${{ !cancelled() }}"
    (upload,) = steps_using(flow, "actions/upload-artifact")
    uploaded = path_lines(upload["with"]["path"])
    assert "${{ env.RUN_DIR }}" in uploaded
    out = re.search(r"--out (\S+)", script)
    assert out is not None
    assert any(p.rstrip("/") == out.group(1) for p in uploaded)
    assert junit.group(1).startswith(out.group(1) + "/")


# --- running it -------------------------------------------------------------------------------


@dataclass
class Step:
    name: str
    ran: bool
    returncode: int = 0
    output: str = ""
    summary: str = ""


@dataclass
class Night:
    workspace: Path
    home: Path
    steps: list[Step] = field(default_factory=list)
    uploaded: list[Path] = field(default_factory=list)
    junit: ET.Element | None = None
    env: dict[str, str] = field(default_factory=dict)

    def step(self, command: str) -> Step:
        flow = job(workflow())["steps"]
        (name,) = [s["name"] for s in flow if command in s.get("run", "")]
        (found,) = [s for s in self.steps if s.name == name]
        return found

    @property
    def failed(self) -> bool:
        return any(step.returncode != 0 for step in self.steps)


def stored_key(entry: Path) -> str:
    """The key a cache entry of the store was saved under (its name less the order it was made)."""
    return entry.name.split("-", 1)[1]


class Actions:
    """One job of the workflow on one emulated runner; ``store`` is the Actions cache."""

    def __init__(self, store: Path, root: Path, run_id: int, base_url: str) -> None:
        self.store = store
        self.run_id = run_id
        self.night = Night(workspace=root / "workspace", home=root / "home")
        self.temp = root / "runner-temp"
        for folder in (self.night.workspace, self.night.home, self.temp):
            folder.mkdir(parents=True)
        self.contexts: dict[str, dict[str, str]] = {
            "github": {
                "workspace": str(self.night.workspace),
                "run_id": str(run_id),
                "run_attempt": "1",
                "event_name": "workflow_dispatch",
            },
            "secrets": {"OPENAI_API_KEY": KEY},
            "vars": {},
            "inputs": dict(DISPATCH),
            "runner": {"temp": str(self.temp)},
            "env": {},
        }
        inherited = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("OPENAI_", "SUMMEVAL_", "GITHUB_", "RUNNER_"))
        }
        self.env = inherited | {
            # The package's console scripts (served prestarted: tests/prestarted.py), then
            # this interpreter's folder: what setup-python and `pip install .` put first.
            "PATH": commands_path(),
            "HOME": str(self.night.home),
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(self.night.workspace),
            "GITHUB_RUN_ID": str(run_id),
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_EVENT_NAME": "workflow_dispatch",
            "RUNNER_TEMP": str(self.temp),
            "OPENAI_BASE_URL": base_url,
        }

    # GitHub's expressions, as far as the workflow uses them: anything else fails the test.
    def evaluate(self, expression: str) -> str | bool:
        expression = expression.strip()
        functions = {
            "always()": True,
            "!cancelled()": True,
            "cancelled()": False,
            "success()": not self.night.failed,
            "failure()": self.night.failed,
        }
        if expression in functions:
            return functions[expression]
        value: str = ""
        for term in expression.split("||"):
            term = term.strip()
            literal = re.fullmatch(r"'([^']*)'", term)
            looked_up = re.fullmatch(r"([a-z]+)\.([A-Za-z_][A-Za-z0-9_]*)", term)
            if literal:
                value = literal.group(1)
            elif looked_up and looked_up.group(1) in self.contexts:
                value = self.contexts[looked_up.group(1)].get(looked_up.group(2), "")
            else:
                raise AssertionError(f"an expression the emulator does not know: {term!r}")
            if value:
                return value
        return value

    def substitute(self, text: str) -> str:
        return EXPRESSION.sub(lambda match: str(self.evaluate(match.group(1))), text)

    def condition(self, step: dict[str, Any]) -> bool:
        written = str(step.get("if", "success()"))
        inner = EXPRESSION.fullmatch(written.strip())
        return bool(self.evaluate(inner.group(1) if inner else written))

    def layer(self, env: dict[str, Any]) -> None:
        for name, value in env.items():
            self.contexts["env"][name] = self.substitute(str(value))

    def inside(self, path: str) -> Path:
        resolved = (self.night.workspace / path).resolve()
        assert resolved.is_relative_to(self.night.workspace.resolve()), path
        return resolved

    def run_job(self, flow: dict[Any, Any]) -> Night:
        self.layer(flow.get("env", {}))
        spec = job(flow)
        assert spec["defaults"]["run"]["shell"] == "bash"
        for step in spec["steps"]:
            if not self.condition(step):
                self.night.steps.append(Step(step["name"], ran=False))
                continue
            if "uses" in step:
                self.night.steps.append(self.use(step))
            else:
                self.night.steps.append(self.run(step))
        return self.night

    def run(self, step: dict[str, Any]) -> Step:
        assert "shell" not in step, "the job's default shell (bash) is the one emulated"
        script = step["run"]
        if re.search(r"\bpip install\b", script):
            # setup-python and the install: this interpreter, where the package is installed.
            assert script.strip() == "python -m pip install .", script
            return Step(step["name"], ran=False)
        index = len(self.night.steps)
        script_file = self.temp / f"step-{index}.sh"
        script_file.write_text(script, encoding="utf-8")
        summary = self.temp / f"step-summary-{index}.md"
        env_file = self.temp / f"set-env-{index}"
        for made in (summary, env_file):
            made.write_text("", encoding="utf-8")
        step_env = dict(self.contexts["env"])
        for name, value in step.get("env", {}).items():
            step_env[name] = self.substitute(str(value))
        env = (
            self.env | step_env | {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ENV": str(env_file)}
        )
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_file)],
            cwd=self.night.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        for line in env_file.read_text(encoding="utf-8").splitlines():
            name, sep, value = line.partition("=")
            assert sep, line
            assert re.fullmatch(r"[A-Z_]+", name), line
            self.contexts["env"][name] = value
        return Step(
            step["name"],
            ran=True,
            returncode=done.returncode,
            output=done.stdout + done.stderr,
            summary=summary.read_text(encoding="utf-8"),
        )

    def use(self, step: dict[str, Any]) -> Step:
        action = step["uses"]
        given = {name: self.substitute(str(value)) for name, value in step.get("with", {}).items()}
        name = step["name"]
        workspace = self.night.workspace
        if action == "actions/checkout@v4":
            listed = subprocess.run(
                ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
            ).stdout.decode()
            for relative in filter(None, listed.split("\0")):
                source = ROOT / relative
                if source.is_file():
                    (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, workspace / relative)
        elif action == "actions/setup-python@v5":
            assert given["python-version"]
        elif action == "actions/cache/restore@v4":
            saved = sorted(self.store.iterdir()) if self.store.is_dir() else []
            keys = [given["key"], *path_lines(given.get("restore-keys", ""))]
            # The key itself, else the newest entry whose key starts with a restore key.
            hit = next(
                (
                    entry
                    for key in keys
                    for entry in reversed(saved)
                    if stored_key(entry) == key
                    or (key != keys[0] and stored_key(entry).startswith(key))
                ),
                None,
            )
            for path in path_lines(given["path"]):
                target = self.inside(path)
                kept = hit / target.relative_to(workspace.resolve()) if hit else None
                if kept is not None and kept.exists():
                    shutil.copytree(kept, target)
        elif action == "actions/cache/save@v4":
            # Saved in order (the emulated entries' names sort as they were made).
            entry = self.store / f"{len(list(self.store.glob('*'))):04d}-{given['key']}"
            assert all(stored_key(e) != given["key"] for e in self.store.glob("*")), given
            for path in path_lines(given["path"]):
                source = self.inside(path)
                if source.exists():
                    shutil.copytree(source, entry / source.relative_to(workspace.resolve()))
        elif action == "actions/upload-artifact@v4":
            assert given["name"]
            assert int(given["retention-days"]) > 0
            for path in path_lines(given["path"]):
                uploaded = self.inside(path)
                assert uploaded.exists(), f"the upload names {path}, which the night did not write"
                self.night.uploaded.append(uploaded)
        elif action == "mikepenz/action-junit-report@v5":
            self.night.junit = ET.parse(self.inside(given["report_paths"])).getroot()
        else:
            raise AssertionError(f"a step the emulator does not know: {action}")
        return Step(name, ran=True)


def the_key_is_in_no_file(night: Night, store: Path) -> None:
    for folder in (night.workspace, night.home, store):
        for path in folder.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path
    for step in night.steps:
        assert KEY not in step.output, step.name


def cases(junit: ET.Element) -> dict[tuple[str, str], str | None]:
    """Each test case (classname, name) -> its failure's message, or None where it passed."""
    found: dict[tuple[str, str], str | None] = {}
    for case in junit.iter("testcase"):
        failure = case.find("failure")
        key = (case.get("classname", ""), case.get("name", ""))
        found[key] = None if failure is None else failure.get("message", "")
    return found


def tonight(night: Night) -> str:
    return Path(night.env["RUN_DIR"]).name


def night_of(actions: Actions) -> Night:
    night = actions.run_job(workflow())
    night.env = dict(actions.contexts["env"])
    return night


# A judge that answers as the loopback server does by default: the night before's, and good
# nights'. The store (the Actions cache) is the one thing that outlives a night.
@pytest.fixture(scope="module")
def first_night(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Night, Path]]:
    root = tmp_path_factory.mktemp("first-night")
    server = ChatServer().start()
    try:
        night = night_of(Actions(root / "store", root / "runner", 7001, server.base_url))
    finally:
        server.stop()
    return night, root / "store"


def a_later_night(first: tuple[Night, Path], tmp_path: Path, server: ChatServer) -> Night:
    store = tmp_path / "store"
    shutil.copytree(first[1], store)
    return night_of(Actions(store, tmp_path / "runner", 7002, server.base_url))


def gate_of(night: Night) -> Step:
    return night.step("summeval-compare")


def test_a_first_night_passes_and_leaves_its_run_cache_and_summary(
    first_night: tuple[Night, Path],
) -> None:
    night, store = first_night
    assert all(step.returncode == 0 for step in night.steps), [
        (step.name, step.output[-2000:]) for step in night.steps if step.returncode
    ]
    run_step = night.step("summeval-run")
    assert run_step.ran
    assert (
        "8 items: 8 scored, 0 blank summaries (scored 0), 0 unscorable, 0 errors" in run_step.output
    )
    gate = gate_of(night)
    assert gate.ran
    assert gate.returncode == 0
    assert "### summeval-compare: the gate passed" in gate.summary
    assert re.search(r"^\| score \| nightly \| 8 \| 0\.333 \|", gate.summary, re.M)
    assert night.junit is not None
    results = cases(night.junit)
    assert results
    assert all(message is None for message in results.values())
    assert {name for _, name in results} == {"score", "alignment", "coverage", "run health"}
    run_dir = night.workspace / night.env["RUN_DIR"]
    assert run_dir in night.uploaded
    assert (run_dir / "items.parquet").is_file()
    assert {"comparison.parquet", "report.html", "junit.xml"} <= {
        p.name for p in (night.workspace / "comparison").iterdir()
    }
    # The cache step saved the response cache (the judge's replies) and the night's run.
    (entry,) = store.iterdir()
    assert list((entry / "summeval-cache").glob("*.sqlite"))
    assert (entry / "nightly" / tonight(night) / "manifest.json").is_file()
    the_key_is_in_no_file(night, store)


def test_a_night_judged_lower_than_the_last_fails_the_gate_on_its_dimensions(
    first_night: tuple[Night, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tonight the judge (a new address, so the cache does not answer for it) finds every
    # claim unsupported: alignment and the score fall to 0, coverage stays as it was.
    answered = chat_server_module.valid_content

    def unsupported(body: dict[str, Any], follow: bool = False) -> dict[str, Any]:
        content = answered(body, follow)
        for claim in content.get("alignment", []):
            claim["supported"] = False
        return content

    monkeypatch.setattr(chat_server_module, "valid_content", unsupported)
    server = ChatServer().start()
    try:
        night = a_later_night(first_night, tmp_path, server)
    finally:
        server.stop()

    assert night.step("summeval-run").returncode == 0
    gate = gate_of(night)
    assert gate.returncode == 1, gate.output[-3000:]
    assert "regression: nightly" in gate.output
    assert "below threshold: nightly" in gate.output
    # The page shows these lines as this test prints them, tonight's run id as it was then.
    printed = gate.output.replace(tonight(night), "2026-12-03T20-01-55Z-7002-1").splitlines()
    shown = block("text", "alignment dropped by 0.500 against the baseline").splitlines()
    assert [line for line in shown if line not in printed] == []
    assert "### summeval-compare: **the gate failed**" in gate.summary
    assert re.search(r"^\| score \| nightly \(.*\) \| 8 \| 0\.000 \|", gate.summary, re.M)
    assert night.junit is not None
    failed = {case for case, message in cases(night.junit).items() if message is not None}
    last_night = tonight(first_night[0])
    assert {name for _, name in failed} == {"score", "alignment"}
    assert all(
        tonight(night) in classname and last_night not in classname for classname, _ in failed
    )
    # The failing night is uploaded and its cache saved all the same.
    assert night.workspace / night.env["RUN_DIR"] in night.uploaded
    saved = sorted((tmp_path / "store").iterdir())
    assert len(saved) == 2
    assert (saved[-1] / "nightly" / last_night).is_dir()
    the_key_is_in_no_file(night, tmp_path / "store")


def test_a_night_whose_key_is_refused_fails_its_run_and_the_gates_health_case(
    first_night: tuple[Night, Path], tmp_path: Path
) -> None:
    server = ChatServer().start()
    server.fail_every_request(Fault(401, "Incorrect API key provided"))
    try:
        night = a_later_night(first_night, tmp_path, server)
    finally:
        server.stop()

    assert night.step("summeval-run").returncode == 1
    gate = gate_of(night)
    assert gate.ran
    assert gate.returncode == 1, gate.output[-3000:]
    assert "### summeval-compare: **the gate failed**" in gate.summary
    assert night.junit is not None
    failed = {case for case, message in cases(night.junit).items() if message is not None}
    assert failed
    assert all(tonight(night) in classname for classname, _ in failed)
    assert "run health" in {name for _, name in failed}
    assert all(path.exists() for path in night.uploaded)
    assert len(night.uploaded) == 2
    the_key_is_in_no_file(night, tmp_path / "store")
