"""Variants as first-class (issue 19, point 3): sweeps over long values (prompt texts, paths) run
in short directories that ``variants.json`` maps back to the full overrides, labels a person can
read, and ``summeval-compare`` on a sweep's folder.

Sweeps run in this process through Hydra's basic launcher (``tests/app.py``); the agent's calls
go to the loopback chat server, the judge is the offline one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.app import ENV, SAMPLE_ITEMS, run_sweep, summeval_compare
from tests.chat_server import ChatServer
from tests.documents import copy_sample

QUIET = ("runner.progress=false", "runner.cache=off")
NAME_MAX = 255  # bytes in one directory name, on Linux and macOS


def prompt(opening: str) -> str:
    """A prompt of exactly 300 characters, with the commas and apostrophes prompts have."""
    text = (
        f"{opening} Keep the most important facts, numbers and names exactly as the text gives "
        "them, and add nothing the text doesn't say. Write for a reader in a hurry: plain words, "
        "short sentences, the outcome first, then who, where and when, and leave out quotes, "
        "opinions and background that the reader would not miss at all."
    )
    return text[:300].ljust(300, ".")


PROMPT_A = prompt("Summarize the user's text in one sentence.")
PROMPT_B = prompt("Summarize the user's text in at most three sentences.")


def variants_json(sweep: Path) -> dict[str, dict[str, Any]]:
    loaded: dict[str, dict[str, Any]] = json.loads((sweep / "variants.json").read_text("utf-8"))
    return loaded


def manifest(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    return loaded


def job_dirs(sweep: Path) -> list[Path]:
    return sorted(p for p in sweep.iterdir() if (p / "manifest.json").is_file())


def test_a_sweep_over_two_300_character_prompts_runs_in_short_directories(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    sweep = tmp_path / "sweep"

    completed = run_sweep(
        sweep,
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        "target.name=small-model",
        f'target.prompt="{PROMPT_A}","{PROMPT_B}"',
        "dataset.limit=2",
        *QUIET,
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    # The agent got each prompt whole.
    sent = {r.body["messages"][0]["content"] for r in chat_server.requests}
    assert sent == {PROMPT_A, PROMPT_B}
    runs = job_dirs(sweep)
    assert len(runs) == 2
    for run_dir in runs:
        assert len(run_dir.name.encode()) <= 160 < NAME_MAX
        assert "target.prompt=Summarize_the_user_s_tex~" in run_dir.name
    # variants.json maps each short name back to the job's full overrides, and its label.
    mapped = variants_json(sweep)
    assert sorted(mapped) == [run_dir.name for run_dir in runs]
    prompts = {}
    for name, entry in mapped.items():
        (given,) = [o for o in entry["overrides"] if o.startswith("target.prompt=")]
        prompts[name] = given.removeprefix("target.prompt=").strip("\"'")
        labels = set(pd.read_parquet(sweep / name / "items.parquet")["variant"])
        assert labels == {entry["label"]} == {manifest(sweep / name)["variant"]}
        assert entry["status"] == "completed"
        assert len(entry["label"]) < 200
    assert sorted(prompts.values()) == sorted([PROMPT_A, PROMPT_B])
    # The comparison and the report name the variants by their short labels.
    comparison = pd.read_parquet(sweep / "comparison.parquet")
    labels = [entry["label"] for entry in mapped.values()]
    assert set(comparison["variant"]) == set(labels)
    assert all(PROMPT_A not in label and PROMPT_B not in label for label in labels)
    report = (sweep / "report.html").read_text("utf-8")
    assert all(label in report for label in labels)

    # summeval-compare takes the sweep's folder, and a variant's label as the baseline.
    label_b = next(e["label"] for n, e in mapped.items() if prompts[n] == PROMPT_B)
    again = summeval_compare(str(sweep), "--baseline", label_b, cwd=tmp_path)

    assert again.returncode == 0, again.stderr
    assert f"comparison: {sweep / 'comparison.parquet'}" in again.stdout
    compared = pd.read_parquet(sweep / "comparison.parquet")
    assert set(compared["baseline"].dropna()) == {label_b}
    assert not (tmp_path / "comparison.parquet").exists()


def test_two_values_that_differ_only_by_a_slash_run_in_two_directories(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    sweep = tmp_path / "sweep"

    completed = run_sweep(
        sweep,
        "target=llm_summarizer",
        f"target.base_url={chat_server.base_url}",
        'target.prompt="Summarize a/b","Summarize a_b"',
        "dataset.limit=1",
        *QUIET,
        env=ENV,
    )

    assert completed.returncode == 0, completed.stderr
    runs = job_dirs(sweep)
    assert len(runs) == 2
    mapped = variants_json(sweep)
    assert sorted(mapped) == [run_dir.name for run_dir in runs]
    prompts = [
        next(o for o in entry["overrides"] if o.startswith("target.prompt="))
        for entry in mapped.values()
    ]
    assert sorted(prompts) == ['target.prompt="Summarize a/b"', 'target.prompt="Summarize a_b"']
    assert all(entry["status"] == "completed" for entry in mapped.values())


def test_the_prompt_file_pattern_sweeps_configs_that_extend_llm_summarizer(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    configs = tmp_path / "my_configs" / "target"
    configs.mkdir(parents=True)
    for name, text in (("prompt_a", PROMPT_A), ("prompt_b", PROMPT_B)):
        (configs / f"{name}.yaml").write_text(
            "defaults:\n  - llm_summarizer\n  - _self_\n\n"
            f"base_url: {chat_server.base_url}\napi_key_env: MY_AGENT_KEY\n"
            f"prompt: {json.dumps(text)}\n",
            encoding="utf-8",
        )
    sweep = tmp_path / "sweep"

    completed = run_sweep(
        sweep,
        f"--config-dir={tmp_path / 'my_configs'}",
        "target=prompt_a,prompt_b",
        # A key of every swept target option: ++ sets it whichever option the job composes.
        "++target.name=small-model",
        "dataset.limit=2",
        # Each job labelled by the option it sweeps.
        "runner.variant=${hydra:runtime.choices.target}",
        *QUIET,
        env={"MY_AGENT_KEY": "sk-agent-0123456789"},
    )

    assert completed.returncode == 0, completed.stderr
    sent = {r.body["messages"][0]["content"] for r in chat_server.requests}
    assert sent == {PROMPT_A, PROMPT_B}
    mapped = variants_json(sweep)
    assert [entry["label"] for entry in mapped.values()] == ["prompt_a", "prompt_b"]
    assert [name.rsplit(",", 1)[-1] for name in mapped] == ["target=prompt_a", "target=prompt_b"]
    comparison = pd.read_parquet(sweep / "comparison.parquet")
    assert set(comparison["variant"]) == {"prompt_a", "prompt_b"}
    assert set(comparison["baseline"].dropna()) == {"prompt_a"}  # the first job

    unknown = summeval_compare(str(sweep), "--baseline", "prompt_c", cwd=tmp_path)

    assert unknown.returncode == 2
    assert (
        "summeval-compare: error: baseline 'prompt_c' is neither a run directory nor the label "
        "of a compared run; the labels are: 'prompt_a', 'prompt_b'"
    ) in unknown.stderr


def test_a_name_for_every_job_becomes_each_jobs_label_with_what_it_sweeps(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "sweep"

    completed = run_sweep(sweep, "runner.variant=lead", "target.k=1,2", "dataset.limit=2", *QUIET)

    assert completed.returncode == 0, completed.stderr
    mapped = variants_json(sweep)
    # What each job varies, not dataset.limit=2, which the command line fixes for every job
    # (issue 32: a label of every override is one nobody reads).
    assert [entry["label"] for entry in mapped.values()] == ["lead: target.k=1", "lead: target.k=2"]
    # The label is not part of the directory's name: variants.json has it.
    assert list(mapped) == ["dataset.limit=2,target.k=1", "dataset.limit=2,target.k=2"]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep over two long dataset paths (the same documents), each in two shards."""
    base = tmp_path_factory.mktemp("sharded")
    folder = base / "a-rather-long-folder-name-for-the-datasets-of-this-benchmark"
    folder.mkdir()
    for name in ("first.jsonl", "second.jsonl"):
        copy_sample(folder / name)
    sweep = base / "sweep"
    completed = run_sweep(
        sweep,
        f"dataset.path={folder / 'first.jsonl'},{folder / 'second.jsonl'}",
        "runner.shard=0/2,1/2",
        "runner.variant=nightly",
        *QUIET,
    )
    assert completed.returncode == 0, completed.stderr
    return sweep


def test_shards_of_long_values_merge_into_directories_named_like_the_jobs(sharded: Path) -> None:
    shards = job_dirs(sharded)
    merged = sorted((sharded / "merged").iterdir())

    assert len(shards) == 4
    assert len(merged) == 2
    for run_dir in merged:
        name = run_dir.name
        assert "dataset.path=first.jsonl~" in name or "dataset.path=second.jsonl~" in name
        # Each merged run is named as its shards are, less the shard.
        assert {s.name.replace(",runner.shard=0_2", "") for s in shards} >= {name}
        history = pd.read_parquet(run_dir / "runs.parquet")
        assert history[["status", "items", "scored"]].to_dict("records") == [
            {"status": "completed", "items": SAMPLE_ITEMS, "scored": SAMPLE_ITEMS}
        ]
    mapped = variants_json(sharded)
    merged_names = [f"merged/{run_dir.name}" for run_dir in merged]
    assert set(mapped) == {s.name for s in shards} | set(merged_names)
    for name in merged_names:
        assert len(mapped[name]["merged_from"]) == 2
        assert all(mapped[shard]["merged_into"] == name for shard in mapped[name]["merged_from"])
        # One name for every job: the shards' label, each with the path it sweeps.
        assert mapped[name]["label"].startswith("nightly: dataset.path=")


def test_compare_takes_a_sweeps_merged_runs_in_job_order_and_writes_in_the_sweep(
    sharded: Path, tmp_path: Path
) -> None:
    (sharded / "comparison.parquet").unlink()

    compared = summeval_compare(str(sharded), cwd=tmp_path)

    assert compared.returncode == 0, compared.stderr
    comparison = pd.read_parquet(sharded / "comparison.parquet")
    run_dirs = [Path(d) for d in dict.fromkeys(comparison["run_dir"])]
    # The merged runs, not the shards; job 0's variant (the first path) is the baseline.
    assert [d.parent for d in run_dirs] == [sharded / "merged", sharded / "merged"]
    first = variants_json(sharded)[f"merged/{run_dirs[0].name}"]
    assert any(o.endswith("first.jsonl") for o in first["overrides"])
    assert set(comparison["baseline"].dropna()) == {first["label"]}
    assert list(tmp_path.iterdir()) == []  # nothing in the folder it was run from
