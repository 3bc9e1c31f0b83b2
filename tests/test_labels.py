"""Labels a person can read (issue 32): a sweep's automatic label holds what its jobs vary, not
every override; a run's leaves out its prices; every label is short, and unique within its
sweep; the report's runs table fits a 1400-pixel window; runs of one day get labels of their
own under a trend's axis."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from summeval_runner import write_report
from summeval_runner._cli._names import LONGEST_LABEL
from summeval_runner._cli._plan import HydraJob, variant_label
from summeval_runner._report._plots import trends_section
from tests.app import SAMPLE, openai_run, run_app, run_sweep
from tests.browser import browser
from tests.chat_server import ChatServer
from tests.documents import copy_sample

QUIET = ("runner.progress=false", "runner.cache=off")
# A dataset path as benchmarks keep them: deep, and longer than a label can show.
DEEP = "benchmarks/news-summarization/2026/november/cleaned-and-deduplicated"


def labels(sweep: Path) -> list[str]:
    entries = json.loads((sweep / "variants.json").read_text("utf-8"))
    return [entry["label"] for entry in entries.values()]


@pytest.fixture(scope="module")
def long_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of the lead-k baseline over k, with options fixed for every job on its command
    line: a long dataset path, a dataset limit and the scorer's questions. Made once for the
    module (no cache: QUIET); the tests only read it."""
    folder = tmp_path_factory.mktemp("labels")
    data = folder / DEEP / "sample_articles_with_their_reference_summaries.jsonl"
    data.parent.mkdir(parents=True)
    copy_sample(data)
    sweep = folder / "sweep"
    completed = run_sweep(
        sweep,
        f"dataset.path={data}",
        "dataset.limit=3",
        "scorer.max_questions=5",
        "+model.support_recall=0.8",
        "target.k=1,3",
        *QUIET,
    )
    assert completed.returncode == 0, completed.stderr
    return sweep


def test_a_sweeps_labels_hold_what_its_jobs_vary_not_what_it_fixes(long_sweep: Path) -> None:
    assert labels(long_sweep) == ["target.k=1", "target.k=3"]
    comparison = pd.read_parquet(long_sweep / "comparison.parquet")
    assert set(comparison["variant"]) == {"target.k=1", "target.k=3"}
    # The directories are still named after every override, as variants.json maps them.
    entries = json.loads((long_sweep / "variants.json").read_text("utf-8"))
    assert all("dataset.limit=3" in name and "target.k=" in name for name in entries)


def test_the_report_of_a_sweep_with_long_overrides_fits_a_1400_pixel_window(
    long_sweep: Path, tmp_path: Path
) -> None:
    # Labels as long as runner.variant may make them, and run directories of long names.
    runs = []
    for k in (1, 3):
        label = f"dataset.limit=3,model.price={{input:0.15,output:0.60}},scorer.k={k}," * 3
        run_dir = tmp_path / f"{'deep-folder-name-' * 6}{k}"
        assert (
            run_app(run_dir, f"runner.variant='{label}'", "dataset.limit=3", *QUIET).returncode == 0
        )
        runs.append(run_dir)
    long_labels = write_report(runs[1:], tmp_path / "long.html", baseline=runs[0])

    with browser(width=1400, height=900) as chromium:
        for report in (long_sweep / "report.html", long_labels):
            page = chromium.open(report.as_uri())
            page.wait_for("document.documentElement.dataset.viewer === 'ready'")
            widths = page.evaluate(
                "[document.querySelector('table.runs').scrollWidth,"
                " document.querySelector('#runs .wide').scrollWidth,"
                " document.documentElement.scrollWidth, window.innerWidth]"
            )
            assert widths[3] == 1400
            assert widths[0] <= 1400, (report.name, widths)  # the runs table
            assert widths[1] <= 1400, (report.name, widths)  # its scrolling box scrolls not
            if report.name == "report.html":  # labels of the sweep's own making: all the page
                assert widths[2] <= 1400, widths
            page.close()


def job(overrides: list[str], fixed: set[str] | None) -> HydraJob:
    return HydraJob(
        Path("."),
        tuple(overrides),
        multirun=fixed is not None,
        fixed=None if fixed is None else frozenset(fixed),
    )


def test_labels_stay_short_and_unique_over_many_long_variants() -> None:
    # Prompts of 300 characters that differ only at their end, paths that share their folder,
    # and a fixed mapping: 27 jobs.
    prompts = [f'"{"Summarize the text, keeping every number. " * 7}{end}"' for end in "abc"]
    paths = [f"/data/{DEEP}/articles-{part}.jsonl" for part in ("one", "two", "three")]
    fixed = {"model", "model.price", "dataset.limit"}
    found = {}
    for prompt, path, k in itertools.product(prompts, paths, (1, 2, 3)):
        overrides = [
            "model=openai",
            "model.price={input:0.15,output:0.60}",
            "dataset.limit=5",
            f"target.prompt={prompt}",
            f"dataset.path={path}",
            f"target.k={k}",
            "runner.cache=off",
        ]
        unnamed = variant_label(OmegaConf.create({"variant": None}), job(overrides, fixed))
        named = variant_label(OmegaConf.create({"variant": "prompts"}), job(overrides, fixed))
        assert len(unnamed) <= LONGEST_LABEL
        assert named == f"prompts: {unnamed}"
        assert "model" not in unnamed
        assert "limit" not in unnamed
        found[unnamed] = (prompt, path, k)
    assert len(found) == 27  # no two variants share a label


def test_a_runs_label_leaves_out_its_price_and_is_short(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    run_dir = tmp_path / "night"
    data = tmp_path / DEEP / "articles.jsonl"
    data.parent.mkdir(parents=True)
    copy_sample(data)

    completed = run_app(
        run_dir,
        *openai_run(chat_server.base_url, data, "model.price={input:0.15,output:0.60}"),
        "dataset.limit=1",
        env={"OPENAI_API_KEY": "sk-test-0123456789"},
    )

    assert completed.returncode == 0, completed.stderr
    (label,) = set(pd.read_parquet(run_dir / "runs.parquet")["variant"])
    assert "price" not in label
    # The file's stem and the judge, then the overrides that fit, and the whole's hash; the
    # field map says how the file is read, not which file, and is left out.
    assert re.fullmatch(r"articles,openai,dataset\.limit=1,\.\.\.~[0-9a-f]{8}", label)
    assert len(label) <= LONGEST_LABEL
    # The price still costs the run, where cost is recorded.
    assert pd.read_parquet(run_dir / "runs.parquet")["cost_usd"].iloc[0] > 0


def test_a_single_run_keeps_its_overrides_as_its_label(tmp_path: Path) -> None:
    completed = run_app(tmp_path / "run", "dataset.limit=2", "target.k=2", *QUIET)

    assert completed.returncode == 0, completed.stderr
    (label,) = set(pd.read_parquet(tmp_path / "run" / "items.parquet")["variant"])
    assert label == "dataset.limit=2,target.k=2"


def test_a_single_runs_label_is_in_a_persons_words(tmp_path: Path) -> None:
    """Issue 42: a user's own CSV was labelled ``dataset.fields.id=id,dataset.…~92408d13``."""
    mine = tmp_path / "mine.csv"
    rows = pd.read_json(SAMPLE, lines=True).head(3)
    rows.assign(summary=rows.text.str.split(". ").str[0]).rename(columns={"text": "article"})[
        ["id", "article", "summary"]
    ].to_csv(mine, index=False)

    completed = run_app(
        tmp_path / "run", f"dataset.path={mine}", "dataset.fields.input=article",
        "dataset.fields.output=summary", "dataset.fields.id=id", "target=precomputed",
        "model=offline", "scorer.max_questions=5", *QUIET,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr
    (label,) = set(pd.read_parquet(tmp_path / "run" / "items.parquet")["variant"])
    assert label == "mine,precomputed,scorer.max_questions=5"


def test_runs_of_one_day_get_labels_of_their_own_under_the_trend(tmp_path: Path) -> None:
    rows = []
    for index, moment in enumerate(
        ["2026-11-30T03:00:00", "2026-11-30T09:30:00", "2026-11-30T15:45:00", "2026-12-01T03:00"]
    ):
        for dimension in ("score", "alignment", "coverage"):
            rows.append({
                "run_id": f"run-{index}", "variant": "nightly", "run_dir": f"outputs/{index}",
                "status": "completed", "started_at": pd.Timestamp(moment, tz="UTC"),
                "dimension": dimension, "n": 10, "mean": 0.5, "ci95_low": 0.4,
                "ci95_high": 0.6, "mean_diff": None, "regression": False,
            })  # fmt: skip
    html = trends_section(pd.DataFrame(rows))
    report = tmp_path / "trend.html"
    report.write_text(f"<!doctype html><html><body>{html}</body></html>", encoding="utf-8")

    with browser(width=1400, height=900) as chromium:
        page = chromium.open(report.as_uri())
        shown = page.evaluate(
            "[...document.querySelector('svg.trend').querySelectorAll('text')]"
            ".filter((t) => /^20\\d\\d-/.test(t.textContent)).map((t) => t.textContent)"
        )
        page.close()

    assert shown == [
        "2026-11-3003:00",
        "2026-11-3009:30",
        "2026-11-3015:45",
        "2026-12-01",
    ]
    assert len(set(shown)) == len(shown)


def test_a_sweep_of_shards_under_a_launcher_is_labelled_by_the_run_not_the_launcher() -> None:
    overrides = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "runner.shard=0/4"]
    fixed = {"hydra/launcher", "hydra.launcher.n_jobs"}

    unnamed = variant_label(OmegaConf.create({"variant": None}), job(overrides, fixed))
    named = variant_label(OmegaConf.create({"variant": "nightly"}), job(overrides, fixed))
    with_data = variant_label(
        OmegaConf.create({"variant": None}), job([*overrides, "dataset=news"], {*fixed, "dataset"})
    )

    assert (unnamed, named, with_data) == ("default", "nightly", "dataset=news")


def test_runs_that_differ_only_in_their_trials_have_two_labels() -> None:
    def label(overrides: list[str], fixed: set[str] | None) -> str:
        return variant_label(OmegaConf.create({"variant": None}), job(overrides, fixed))

    # Two single runs, and a sweep over the trials (-m runner.trials=1,3 target.k=2).
    alone = [label(["target.k=2", *trials], None) for trials in ([], ["runner.trials=3"])]
    swept = [label(["target.k=2", f"runner.trials={n}"], {"target.k"}) for n in (1, 3)]

    assert alone == ["target.k=2", "runner.trials=3,target.k=2"]
    # The default's trials are not named; a job that varies nothing else keeps its own label.
    assert swept == ["target.k=2", "runner.trials=3"]
    # The runner's other settings still change no label.
    assert label(["target.k=2", "runner.max_items_in_flight=4"], None) == "target.k=2"
