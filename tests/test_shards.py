"""Shards, merges and Hydra launchers: a run split across processes equals the run made in one.

The runs, sweeps with Hydra's basic launcher and merges run in this process (``tests/app.py``);
the launchers that start worker processes (joblib, Submitit's local executor, a local Ray
instance) and the check that another interpreter splits alike run in subprocesses, since a
process is what they test. Worker processes reused job after job, with the OpenAI judge, are
checked where the guide's joblib commands run (tests/test_readme_runs.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra

from summeval_runner import (
    FakeJudge,
    InputError,
    JudgeRequest,
    compare_runs,
    create_summarization_scorer,
    merge_runs,
    run_evals,
)
from summeval_runner._analysis._history import history
from summeval_runner._cli._config import register_configs
from summeval_runner._errors import ConfigError
from summeval_runner._inputs._shards import Shard, shard_of
from summeval_runner._scorers._questions import source_fingerprint
from tests.app import (
    ROOT,
    SAMPLE_ITEMS,
    run_app,
    run_process,
    run_sweep,
    summeval_compare,
    summeval_merge,
    table,
)
from tests.prestarted import commands_path

# Columns that differ between any two runs of the same config: the run's id and the clock.
VOLATILE = ["run_id", "judge_latency_s", "target_latency_s"]
TABLE_NAMES = ("items", "alignment", "coverage", "aggregates")
# Every run here is its own: no judge cache shared with another run or test, no progress bar.
QUIET = ("runner.progress=false", "runner.cache=off")


def launch_sweep(
    sweep_dir: Path, *overrides: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``summeval-run -m`` in a process of its own (served prestarted: tests/prestarted.py), for
    launchers that start worker processes (those start as installed). The timeout only turns a
    hung launcher into a failure."""
    return run_process(
        ["summeval-run", "-m", f"hydra.sweep.dir={sweep_dir}", *QUIET, *overrides],
        cwd=sweep_dir.parent,
        env={"PATH": commands_path(), **(env or {})},
        timeout=timeout,
    )


def comparable(run_dir: Path, name: str) -> pd.DataFrame:
    frame = pd.read_parquet(run_dir / f"{name}.parquet")
    return frame.drop(columns=[c for c in VOLATILE if c in frame.columns])


def assert_same_tables(merged: Path, one_machine: Path) -> None:
    for name in TABLE_NAMES:
        pd.testing.assert_frame_equal(comparable(merged, name), comparable(one_machine, name))
    # One run id for every row of the merged run, as in a run made in one process.
    assert pd.read_parquet(merged / "items.parquet")["run_id"].nunique() == 1


def manifest(run_dir: Path) -> dict[str, object]:
    """manifest.json as it is on disk: the contract with whoever reads a run directory."""
    loaded: dict[str, object] = json.loads((run_dir / "manifest.json").read_text())
    return loaded


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample run made in one process, and the same run in two shards (a sweep), once for
    the module: each test reads them, and copies what it changes."""
    base = tmp_path_factory.mktemp("shards")
    one = base / "one"
    completed = run_app(one, *QUIET)
    assert completed.returncode == 0, completed.stderr
    sweep = base / "sweep"
    completed = run_sweep(sweep, *QUIET, "runner.shard=0/2,1/2")
    assert completed.returncode == 0, completed.stderr
    return {
        "one": one,
        "sweep": sweep,
        "shard0": sweep / "runner.shard=0_2",
        "shard1": sweep / "runner.shard=1_2",
    }


def test_shards_split_items_by_id_the_same_way_in_every_process() -> None:
    ids = [f"doc-{i}" for i in range(2000)]
    shards = [Shard(i, 4) for i in range(4)]

    sizes = [sum(shard.holds(item_id) for item_id in ids) for shard in shards]

    assert sum(sizes) == len(ids)  # every item in exactly one shard
    assert all(400 <= size <= 600 for size in sizes), sizes
    # Not Python's salted hash(): another interpreter with another seed splits alike.
    script = (
        "from summeval_runner._inputs._shards import shard_of\n"
        "print([shard_of(f'doc-{i}', 4) for i in range(50)])"
    )
    other = run_process([sys.executable, "-c", script], cwd=ROOT, env={"PYTHONHASHSEED": "12345"})
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == str([shard_of(f"doc-{i}", 4) for i in range(50)])


@pytest.mark.parametrize("spec", ["2/2", "0/0", "1", "a/b", "-1/2"])
def test_a_bad_shard_is_named_with_the_rule(spec: str) -> None:
    # The library names no setting (the CLI adds "runner."): the message starts with the rule.
    with pytest.raises(ConfigError, match=r"^shard must be I/N") as raised:
        Shard.parse(spec)
    assert repr(spec) in str(raised.value)


def test_the_app_refuses_a_bad_shard_before_any_work(tmp_path: Path) -> None:
    completed = run_app(tmp_path / "bad", "runner.shard=3/3", "runner.cache=off")

    assert completed.returncode == 2
    assert "runner.shard must be I/N with 0 <= I < N" in completed.stderr
    assert "'3/3'" in completed.stderr
    assert not (tmp_path / "bad" / "items.parquet").exists()


def test_each_shard_scores_only_its_items_and_says_so(runs: dict[str, Path]) -> None:
    ids = [set(pd.read_parquet(runs[f"shard{i}"] / "items.parquet")["item_id"]) for i in (0, 1)]
    everything = set(pd.read_parquet(runs["one"] / "items.parquet")["item_id"])

    assert ids[0]
    assert ids[1]
    assert not ids[0] & ids[1]
    assert ids[0] | ids[1] == everything
    for i in (0, 1):
        recorded = manifest(runs[f"shard{i}"])
        # The sample's sources are its items': split by source (questions=per_source).
        assert recorded["shard"] == {"index": i, "count": 2, "items": len(ids[i]), "by": "source"}
        assert recorded["counts"]["total"] == len(ids[i])  # type: ignore[index]
        assert recorded["unfinished"] == 0


def test_two_shards_merged_equal_the_run_made_on_one_machine(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "merged"
    completed = summeval_merge(
        str(runs["shard1"]), str(runs["shard0"]), "--out", str(out), cwd=tmp_path
    )

    assert completed.returncode == 0, completed.stderr
    assert "merged 2 of 2 shards (0/2, 1/2)" in completed.stdout
    assert f"{SAMPLE_ITEMS} items: {SAMPLE_ITEMS} scored" in completed.stdout
    assert_same_tables(out, runs["one"])
    merged, one = manifest(out), manifest(runs["one"])
    assert merged["status"] == "completed"
    assert merged["counts"] == one["counts"]
    assert merged["tokens"] == one["tokens"]
    assert merged["means"] == one["means"]
    assert merged["variant"] == one["variant"]
    assert [part["shard"] for part in merged["merged_from"]] == ["0/2", "1/2"]  # type: ignore[attr-defined]
    # The sweep merged its shards itself and compared the merged run.
    assert_same_tables(runs["sweep"] / "merged" / "default", runs["one"])
    assert (runs["sweep"] / "comparison.parquet").exists()


def test_a_merged_run_compares_with_the_run_made_in_one_process(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    # The merged manifest has the shards' setup (what built the judge and scorer): without it
    # the comparison refused a merged run and its own one-process run as of different judges.
    out = tmp_path / "merged"
    merge_runs([runs["shard0"], runs["shard1"]], out)

    assert manifest(out)["setup"] == manifest(runs["shard0"])["setup"] != {}
    comparison = compare_runs([runs["one"], out], baseline=runs["one"])
    paired = comparison["n_paired"].dropna()
    assert list(paired) == [SAMPLE_ITEMS] * 3
    assert (comparison["mean_diff"].dropna() == 0).all()


def test_history_counts_a_merged_run_once_and_never_its_shards(runs: dict[str, Path]) -> None:
    trend, same = history(runs["one"].parent)

    listed = {run.path for run in same}
    assert runs["shard0"] not in listed
    assert runs["shard1"] not in listed
    assert {runs["one"], runs["sweep"] / "merged" / "default"} <= listed
    assert set(trend["n"]) == {SAMPLE_ITEMS}


def test_a_missing_shard_is_refused_unless_allowed(runs: dict[str, Path], tmp_path: Path) -> None:
    refused = summeval_merge(str(runs["shard0"]), "--out", str(tmp_path / "refused"), cwd=tmp_path)
    assert refused.returncode == 2
    assert "shard 1/2 missing (of 2 shards)" in refused.stderr
    assert "--allow-missing" in refused.stderr
    assert not (tmp_path / "refused").exists()

    partial = merge_runs([runs["shard0"]], tmp_path / "partial", allow_missing=True)

    shard0_items = len(pd.read_parquet(runs["shard0"] / "items.parquet"))
    assert not partial.complete
    assert partial.missing_shards == ("1/2",)
    assert partial.missing_items == SAMPLE_ITEMS - shard0_items
    assert partial.counts.total == shard0_items
    recorded = manifest(tmp_path / "partial")
    assert recorded["status"] == "partial"
    assert recorded["missing"]["shards"] == ["1/2"]  # type: ignore[index]
    assert recorded["missing"]["items"] == SAMPLE_ITEMS - shard0_items  # type: ignore[index]


def test_a_shard_still_running_or_with_unfinished_items_is_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    shard = tmp_path / "shard1"
    shutil.copytree(runs["shard1"], shard)
    recorded = manifest(shard)

    for status, unfinished, message in [
        ("running", 0, r"has not finished \(status running\).*runner\.resume="),
        ("interrupted", 2, r"2 unfinished items in shards 1/2 \(2\).*--allow-missing"),
    ]:
        (shard / "manifest.json").write_text(
            json.dumps(recorded | {"status": status, "unfinished": unfinished})
        )
        with pytest.raises(InputError, match=message):
            merge_runs([runs["shard0"], shard], tmp_path / "merged")
        assert not (tmp_path / "merged").exists()


def test_overlapping_shards_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"shard 0/2 is given twice"):
        merge_runs([runs["shard0"], runs["shard0"]], tmp_path / "twice")

    other_split = tmp_path / "third"
    completed = run_app(other_split, "runner.shard=0/3", *QUIET)
    assert completed.returncode == 0, completed.stderr
    with pytest.raises(InputError, match=r"shards of different splits.*0/2.*0/3"):
        merge_runs([runs["shard0"], runs["shard1"], other_split], tmp_path / "mixed")
    assert not (tmp_path / "twice").exists()
    assert not (tmp_path / "mixed").exists()


def test_shards_of_different_configs_or_a_full_run_are_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "k1"
    completed = run_app(other, "runner.shard=1/2", "target.k=1", *QUIET)
    assert completed.returncode == 0, completed.stderr

    with pytest.raises(InputError, match=r"not a shard of the same run.*target\.k was 3, now 1"):
        merge_runs([runs["shard0"], other], tmp_path / "mixed")
    with pytest.raises(InputError, match=r"is not a shard: it was run without runner\.shard"):
        merge_runs([runs["shard0"], runs["one"]], tmp_path / "full")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match=r"is not empty"):
        merge_runs([runs["shard0"], runs["shard1"]], occupied)
    assert (occupied / "notes.txt").read_text() == "keep me"
    # An --out that is a file, or under one: said, exit 2, the file untouched.
    for out in (occupied / "notes.txt", occupied / "notes.txt" / "merged"):
        completed = summeval_merge(
            str(runs["shard0"]), str(runs["shard1"]), "--out", str(out), cwd=tmp_path
        )
        assert completed.returncode == 2, completed.stderr
        assert completed.stderr.startswith(
            f"summeval-merge: error: the merged run cannot be written into {out}: "
        )
        assert completed.stderr.endswith(" a file, not a directory\n")
        assert "Traceback" not in completed.stderr
    assert (occupied / "notes.txt").read_text() == "keep me"


def test_a_shard_resumes_only_as_the_same_shard(runs: dict[str, Path], tmp_path: Path) -> None:
    # A copy, named as a sweep names its jobs ("=" and ","): a refused resume must leave it as
    # it was.
    shard0 = tmp_path / "runner.shard=0_2,target.k=3"
    shutil.copytree(runs["shard0"], shard0)
    before = {path: path.read_bytes() for path in shard0.rglob("*") if path.is_file()}

    # Quoted, as the interrupted run prints the command that resumes it.
    completed = run_app(
        tmp_path / "ignored", f"runner.resume='{shard0}'", "runner.shard=1/2", "runner.cache=off"
    )

    assert completed.returncode == 2
    assert (
        "summeval-run: error: resume: the run being resumed is shard 0/2, now shard=1/2; "
        "resume it with the same shard"
    ) in completed.stderr
    assert {path: path.read_bytes() for path in shard0.rglob("*") if path.is_file()} == before


def test_a_failed_job_under_joblib_fails_the_command(tmp_path: Path) -> None:
    completed = launch_sweep(
        tmp_path / "sweep",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "runner.shard=0/2,5/2",
    )

    assert completed.returncode == 2
    assert "runner.shard must be I/N" in completed.stderr
    assert "'5/2'" in completed.stderr
    assert "1 sweep job(s) failed: runner.shard=5_2 (exit 2)" in completed.stderr
    # The good job's run is whole.
    assert (tmp_path / "sweep" / "runner.shard=0_2" / "items.parquet").exists()


def test_a_failed_job_in_a_sweep_fails_the_command(tmp_path: Path) -> None:
    """The same with Hydra's basic launcher, whose jobs run in the command's own process."""
    completed = run_sweep(tmp_path / "sweep", *QUIET, "runner.shard=0/2,5/2")

    assert completed.returncode == 2
    assert "runner.shard must be I/N" in completed.stderr
    assert "'5/2'" in completed.stderr
    assert "1 sweep job(s) failed: runner.shard=5_2 (exit 2)" in completed.stderr
    assert (tmp_path / "sweep" / "runner.shard=0_2" / "items.parquet").exists()


def test_submitit_runs_the_shards_as_it_would_on_slurm(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Submitit's local executor: the same pickled job and process model as SLURM's."""
    sweep = tmp_path / "sweep"
    completed = launch_sweep(sweep, "hydra/launcher=submitit_local", "runner.shard=0/2,1/2")

    assert completed.returncode == 0, completed.stderr
    assert_same_tables(sweep / "merged" / "default", runs["one"])


def test_ray_runs_a_two_shard_job_on_a_local_instance(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    sweep = tmp_path / "sweep"
    completed = launch_sweep(
        sweep,
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        "runner.shard=0/2,1/2",
        env={"RAY_USAGE_STATS_ENABLED": "0"},
    )

    assert completed.returncode == 0, completed.stderr
    assert_same_tables(sweep / "merged" / "default", runs["one"])


def test_the_cluster_launcher_configs_compose() -> None:
    register_configs(ConfigStore.instance())
    GlobalHydra.instance().clear()
    try:
        # The configs the installed package ships, as summeval-run reads them.
        with initialize_config_module("summeval_runner._configs", version_base=None):
            slurm = compose("config", ["hydra/launcher=slurm"], return_hydra_config=True)
            ray = compose("config", ["hydra/launcher=ray_cluster"], return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    launcher = slurm.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.array_parallelism == 8
    assert launcher.timeout_min == 720
    assert ray.hydra.launcher._target_.endswith("ray_launcher.RayLauncher")
    assert ray.hydra.launcher.ray.init.address == "auto"


# Six sources, three summaries of each (three systems under test): split by id, the items of
# five of them would fall in both of two shards.
SOURCES = {
    f"doc{k}": f"Report {k}: the bridge opened on day {k}. It cost {k} million dollars. "
    "Traffic fell."
    for k in range(6)
}
SHARED_SOURCES = [
    {"id": f"{doc}-{n}", "input": text, "output": f"System {n}: the bridge opened on day {k}."}
    for k, (doc, text) in enumerate(SOURCES.items())
    for n in range(3)
]


def drawing_judge() -> FakeJudge:
    """A judge each of whose draws asks new questions (as a model shown each summary does):
    two draws for one source never ask the same set."""
    draws = 0

    def preprocess(request: JudgeRequest) -> dict[str, Any]:
        nonlocal draws
        claims = [{"claim": "The bridge opened.", "supported": True, "reason": "said"}]
        if request.schema_name == "summarization_claims":
            return {"alignment": claims}
        draws += 1
        drawn = [f"Draw {draws}, question {i}?" for i in range(3)]
        return {"alignment": claims, "questions": drawn}

    return FakeJudge(
        preprocess=preprocess,
        analyze=lambda request: {
            "coverage": [{"answered": True, "reason": "r"} for _ in request.payload.questions]
        },
    )


def run_shard(
    run_dir: Path,
    judge: FakeJudge,
    shard: str,
    *,
    questions: str = "per_source",
    stop: asyncio.Event | None = None,
    resume: bool = False,
) -> None:
    """One shard of a run over ``SHARED_SOURCES``, as a worker would run it."""
    scorer = create_summarization_scorer(judge, {"questions": questions})
    asyncio.run(
        run_evals(
            scorers=[scorer],
            data=SHARED_SOURCES,
            output_dir=run_dir,
            resume=resume,
            shard=shard,
            cache="off",
            stop=stop,
        )
    )


def items_of(run_dir: Path) -> set[str]:
    return set(table(run_dir, "items")["item_id"])


def doc_of(item_id: str) -> str:
    return item_id.split("-")[0]


def test_a_per_source_run_splits_by_source_and_its_merge_asks_one_set_per_source(
    tmp_path: Path,
) -> None:
    # Split by id, some source's items would land in both shards, each drawing its own set.
    assert any(len({shard_of(f"{doc}-{n}", 2) for n in range(3)}) == 2 for doc in SOURCES)
    # One judge for both shards: every draw, wherever made, asks a new set.
    judge = drawing_judge()

    shards = [tmp_path / f"shard{i}" for i in (0, 1)]
    for i, run_dir in enumerate(shards):
        run_shard(run_dir, judge, f"{i}/2")

    held = [items_of(run_dir) for run_dir in shards]
    assert held[0]
    assert held[1]
    assert held[0] | held[1] == {item["id"] for item in SHARED_SOURCES}
    for i, run_dir in enumerate(shards):
        # Each source's three items are all in the shard its text hashes to.
        assert {doc_of(item) for item in held[i]} == {
            doc for doc, text in SOURCES.items() if shard_of(source_fingerprint(text), 2) == i
        }
        assert len(held[i]) == 3 * len({doc_of(item) for item in held[i]})
        assert manifest(run_dir)["shard"] == {
            "index": i,
            "count": 2,
            "items": len(held[i]),
            "by": "source",
        }
    # One draw per source, all shards together.
    schemas = [request.schema_name for request in judge.requests_for("preprocess")]
    assert schemas.count("summarization_preprocess") == len(SOURCES)

    merged = merge_runs(shards, tmp_path / "merged")

    assert merged.complete
    assert (merged.by, merged.question_conflicts) == ("source", 0)
    recorded = manifest(tmp_path / "merged")
    assert recorded["question_conflicts"] == 0
    assert [part["by"] for part in recorded["merged_from"]] == ["source", "source"]  # type: ignore[attr-defined]
    questions = table(tmp_path / "merged", "questions")
    sets = questions.groupby("source_sha256")["question"].apply(tuple)
    assert len(sets) == len(SOURCES)  # one set per source
    assert len(questions) == 3 * len(SOURCES)
    coverage = table(tmp_path / "merged", "coverage").sort_values(["item_id", "position"])
    asked = coverage.groupby("item_id")["question"].apply(tuple)
    for doc, text in SOURCES.items():
        # Every item of the source was asked the set questions.parquet holds for it.
        assert {asked[f"{doc}-{n}"] for n in range(3)} == {sets[source_fingerprint(text)]}


def test_a_resumed_shard_keeps_the_split_it_was_recorded_with(tmp_path: Path) -> None:
    judge = drawing_judge()
    stopped = asyncio.Event()
    stopped.set()  # the shard stops before any item: interrupted, resumable
    by_source, by_id = tmp_path / "by-source", tmp_path / "by-id"
    for run_dir in (by_source, by_id):
        run_shard(run_dir, judge, "0/2", stop=stopped)
        assert manifest(run_dir)["status"] == "interrupted"
    # by-id was recorded by a version that split every run by id, and did not say so.
    recorded = manifest(by_id)
    del recorded["shard"]["by"]  # type: ignore[attr-defined]
    (by_id / "manifest.json").write_text(json.dumps(recorded))

    for run_dir in (by_source, by_id):
        run_shard(run_dir, judge, "0/2", resume=True)

    assert items_of(by_source) == {
        item["id"] for item in SHARED_SOURCES if shard_of(source_fingerprint(item["input"]), 2) == 0
    }
    assert items_of(by_id) == {
        item["id"] for item in SHARED_SOURCES if shard_of(item["id"], 2) == 0
    }
    assert items_of(by_id) != items_of(by_source)
    assert manifest(by_source)["shard"]["by"] == "source"  # type: ignore[index]
    assert manifest(by_id)["shard"]["by"] == "id"  # type: ignore[index]


def test_a_merge_of_shards_split_by_different_rules_is_refused(tmp_path: Path) -> None:
    judge = drawing_judge()
    run_shard(tmp_path / "source0", judge, "0/2")
    # Shard 1/2 of the same run, made by a version that split by id (its manifest without
    # the rule, as that version wrote it).
    stopped = asyncio.Event()
    stopped.set()
    old = tmp_path / "id1"
    run_shard(old, judge, "1/2", stop=stopped)
    recorded = manifest(old)
    del recorded["shard"]["by"]  # type: ignore[attr-defined]
    (old / "manifest.json").write_text(json.dumps(recorded))
    run_shard(old, judge, "1/2", resume=True)

    refused = summeval_merge(
        str(tmp_path / "source0"), str(old), "--out", str(tmp_path / "merged"), cwd=tmp_path
    )

    assert refused.returncode == 2
    assert "shards of different splits" in refused.stderr
    assert f"{tmp_path / 'source0'} (shard 0/2) was split by source" in refused.stderr
    assert f"{old} (shard 1/2) by id" in refused.stderr
    assert not (tmp_path / "merged").exists()


def test_a_merge_whose_shards_asked_one_source_different_questions_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # per_source shards made by a version that split every run by id: each shard drew its own
    # set for a source whose items lie in both, so its items were asked different sets.
    judge = drawing_judge()
    stopped = asyncio.Event()
    stopped.set()
    shards = [tmp_path / f"shard{i}" for i in (0, 1)]
    for i, run_dir in enumerate(shards):
        run_shard(run_dir, judge, f"{i}/2", stop=stopped)
        recorded = manifest(run_dir)
        del recorded["shard"]["by"]  # type: ignore[attr-defined]
        (run_dir / "manifest.json").write_text(json.dumps(recorded))
        run_shard(run_dir, judge, f"{i}/2", resume=True)
    split = {doc for doc in SOURCES if len({shard_of(f"{doc}-{n}", 2) for n in range(3)}) == 2}
    assert 0 < len(split) < len(SOURCES)
    assert manifest(shards[0])["shard"]["by"] == "id"  # type: ignore[index]

    completed = summeval_merge(
        *(str(run_dir) for run_dir in shards), "--out", str(tmp_path / "merged"), cwd=tmp_path
    )

    assert completed.returncode == 0, completed.stderr
    warning = (
        f"{len(split)} sources were asked different coverage questions in different shards "
        "(split by id)"
    )
    assert f"summeval-merge: warning: {tmp_path / 'merged'}: {warning}" in completed.stderr
    assert manifest(tmp_path / "merged")["question_conflicts"] == len(split)
    # From Python, the same count and the same warning, logged.
    with caplog.at_level("WARNING", logger="summeval_runner"):
        again = merge_runs(shards, tmp_path / "again")
    assert again.question_conflicts == len(split)
    assert warning in caplog.text
    # A comparison with the merged run says its coverage is not paired over those sources.
    compared = summeval_compare(
        str(tmp_path / "merged"), "--baseline", str(tmp_path / "again"), cwd=tmp_path
    )
    assert compared.returncode == 0, compared.stderr
    assert "merged from shards that asked" in compared.stderr


def test_a_merge_of_per_item_shards_counts_no_conflict(tmp_path: Path) -> None:
    # per_item: each item draws its own set, sharded or not; nothing for a merge to warn of.
    judge = drawing_judge()
    shards = [tmp_path / f"shard{i}" for i in (0, 1)]
    for i, run_dir in enumerate(shards):
        run_shard(run_dir, judge, f"{i}/2", questions="per_item")

    merged = merge_runs(shards, tmp_path / "merged")

    assert merged.question_conflicts == 0


def test_a_source_read_from_the_agents_output_cannot_be_split_by_source(tmp_path: Path) -> None:
    judge = drawing_judge()
    calls: list[Any] = []

    def agent(input: Any) -> str:
        calls.append(input)
        return "The bridge opened."

    options = {"source_extractor": lambda input, output: str(output)}
    data = [{"id": item["id"], "input": item["input"]} for item in SHARED_SOURCES]

    with pytest.raises(ConfigError) as refused:
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer(judge, options)],
                data=data,
                target=agent,
                shard="0/2",
                output_dir=tmp_path / "run",
                cache="off",
            )
        )

    message = str(refused.value)
    for named in ("shard='0/2'", "questions='per_source'", "source_extractor", "target"):
        assert named in message
    assert "questions='per_item'" in message
    assert "without a shard" in message
    assert (judge.requests, calls) == ([], [])
    assert not (tmp_path / "run").exists()
    # The remedy: per_item questions, split by id.
    asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer(judge, {**options, "questions": "per_item"})],
            data=data,
            target=agent,
            shard="0/2",
            output_dir=tmp_path / "per-item",
            cache="off",
        )
    )
    assert manifest(tmp_path / "per-item")["shard"]["by"] == "id"  # type: ignore[index]


def test_the_app_says_a_shard_was_split_by_source(tmp_path: Path) -> None:
    completed = run_app(tmp_path / "shard", "dataset.limit=4", "runner.shard=0/2", *QUIET)

    assert completed.returncode == 0, completed.stderr
    items = manifest(tmp_path / "shard")["shard"]["items"]  # type: ignore[index]
    assert f"shard 0/2 (split by source): {items} of the dataset's 4 items" in completed.stdout
