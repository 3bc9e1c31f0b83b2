"""A panel of judges (``model=panel``, ``create_summarization_scorer([...])``): every judge runs
the three steps on every item, the first judge draws the questions every judge answers, an
item's figures are the mean (or median) of the judges', every verdict row names its judge, and
the run reports how much the judges disagreed."""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from summeval_runner import (
    ConfigError,
    FakeJudge,
    JudgeOutputError,
    JudgePanel,
    JudgeRequest,
    OfflineJudge,
    create_summarization_scorer,
    estimate_evals,
    merge_runs,
    run_evals,
    write_report,
)
from tests.app import ENV, FAST_RETRIES, run_app, table
from tests.chat_server import ChatServer
from tests.documents import write_dataset
from tests.test_azure_judge import API_VERSION, AZURE_KEY
from tests.test_secrets import assert_nowhere

ITEMS = 20
PRICE = "{input: 0.4, output: 1.6}"


def openai_entry(server: ChatServer, name: str = "gpt-4.1-mini", price: bool = True) -> str:
    """A panel entry for an OpenAI judge at the loopback server, as a Hydra mapping."""
    priced = f", price: {PRICE}" if price else ""
    return f"{{name: openai/{name}, base_url: '{server.base_url}'{priced}}}"


def panel_run(dataset: Path, *entries: str, overrides: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (
        "model=panel",
        f"model.judges=[{','.join(entries)}]",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *FAST_RETRIES,
        *overrides,
    )


def manifest_of(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def judges_figures(run_dir: Path, scale: float = 1.0) -> pd.DataFrame:
    """Each judge's own alignment, coverage and score per item, computed from the verdict
    tables alone (read with pyarrow): supported / claims, answered / asked, the lower."""
    claims = pq.read_table(run_dir / "alignment.parquet").to_pandas()
    answers = pq.read_table(run_dir / "coverage.parquet").to_pandas()
    coverage = answers.groupby(["item_id", "judge"])["answered"].mean().rename("coverage")
    alignment = claims.groupby(["item_id", "judge"])["supported"].mean().rename("alignment")
    figures = pd.concat([coverage, alignment], axis=1).fillna({"alignment": 0.0})
    figures["score"] = figures[["alignment", "coverage"]].min(axis=1) * scale
    return figures.reset_index()


def test_a_panel_of_two_judges_scores_every_item_and_every_table_names_the_judge(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    run_dir = tmp_path / "run"

    done = run_app(
        run_dir,
        *panel_run(dataset, openai_entry(chat_server), "offline", overrides=("runner.cache=off",)),
        env=ENV,
    )

    assert done.returncode == 0, done.stderr
    items = table(run_dir, "items")
    assert len(items) == ITEMS
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {"panel(mean): openai/gpt-4.1-mini, offline"}
    # Three judge calls per evaluation, per judge: the server got three an item, and each
    # item's row counts both judges' calls.
    assert len(chat_server.requests) == 3 * ITEMS
    assert Counter(r.step for r in chat_server.requests) == {
        "preprocess": ITEMS,
        "analyze": ITEMS,
        "reason": ITEMS,
    }
    assert (items["judge_calls"] == 6).all()
    for name in ("alignment", "coverage"):
        verdicts = pq.read_table(run_dir / f"{name}.parquet")
        assert verdicts.schema.field("judge").nullable is False
        rows = verdicts.to_pandas()
        assert set(rows["judge"]) == {"openai/gpt-4.1-mini", "offline"}
        # Every item has verdicts of both judges.
        assert (rows.groupby("item_id")["judge"].nunique() == 2).all()

    # The item's figures are the mean of the judges' own, as the verdict tables give them.
    figures = judges_figures(run_dir)
    mean = figures.groupby("item_id")[["alignment", "coverage", "score"]].mean()
    by_item = items.set_index("item_id")
    for column, figure in (
        ("alignment_score", "alignment"),
        ("coverage_score", "coverage"),
        ("score", "score"),
    ):
        assert by_item[column].to_numpy() == pytest.approx(mean.loc[by_item.index, figure])
    # The judges disagree: the panel is not one judge twice.
    spreads = figures.groupby("item_id")["score"].agg(lambda s: s.max() - s.min())
    assert spreads.max() > 0

    # One question set per item, drawn by the first judge, answered by both: the same ids
    # (positions) and texts for each judge.
    answers = table(run_dir, "coverage")
    for _, rows in answers.groupby("item_id"):
        asked = {
            judge: list(zip(part["position"], part["question"], strict=True))
            for judge, part in rows.sort_values("position").groupby("judge")
        }
        assert asked["openai/gpt-4.1-mini"] == asked["offline"]
        assert asked["offline"]
    assert (
        items["questions"] == answers.groupby("item_id").size().loc[items["item_id"]].to_numpy() / 2
    ).all()
    drawn = [r for r in chat_server.requests if r.step == "preprocess"]
    assert len(drawn) == ITEMS  # the OpenAI judge drew: full preprocess calls, no claims-only
    questions = table(run_dir, "questions")
    assert set(questions["judge"]) == {"openai/gpt-4.1-mini"}

    # The judges' disagreement, as the tables give it, in the manifest and the summary.
    written = manifest_of(run_dir)
    assert written["judge"]["name"] == "panel(mean): openai/gpt-4.1-mini, offline"
    panel = written["judge_panel"]
    assert panel["judges"] == ["openai/gpt-4.1-mini", "offline"]
    assert panel["aggregate"] == "mean"
    assert panel["items"] == ITEMS
    assert panel["score_spread_mean"] == pytest.approx(spreads.mean())
    assert panel["score_spread_max"] == pytest.approx(spreads.max())
    split = answers.groupby(["item_id", "position"])["answered"].nunique()
    assert panel["questions_compared"] == len(split)
    assert panel["questions_split"] == int((split > 1).sum())
    own = figures.groupby("judge")["score"].mean()
    assert panel["judge_means"] == pytest.approx(own.to_dict())
    assert (
        f"panel of 2 judges (mean): score spread {spreads.mean():.3f} per item "
        f"(at most {spreads.max():.3f}) over {ITEMS} items; questions answered differently "
        f"{int((split > 1).sum())} of {len(split)}"
    ) in done.stdout
    # The report shows it too.
    report = write_report([run_dir], tmp_path / "report.html")
    assert "panel of 2 judges (mean): score spread" in report.read_text(encoding="utf-8")


def test_the_median_of_three_judges_is_each_items_middle_judge(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    run_dir = tmp_path / "run"
    entries = (openai_entry(chat_server), "offline", openai_entry(chat_server, "gpt-4.1"))

    done = run_app(
        run_dir, *panel_run(dataset, *entries, overrides=("model.aggregate=median",)), env=ENV
    )

    assert done.returncode == 0, done.stderr
    items = table(run_dir, "items").set_index("item_id")
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {"panel(median): openai/gpt-4.1-mini, offline, openai/gpt-4.1"}
    figures = judges_figures(run_dir)
    assert figures.groupby("item_id")["judge"].nunique().eq(3).all()
    median = figures.groupby("item_id")[["alignment", "coverage", "score"]].median()
    mean = figures.groupby("item_id")["score"].mean()
    assert items["score"].to_numpy() == pytest.approx(median.loc[items.index, "score"])
    assert items["alignment_score"].to_numpy() == pytest.approx(
        median.loc[items.index, "alignment"]
    )
    assert items["coverage_score"].to_numpy() == pytest.approx(median.loc[items.index, "coverage"])
    # Not the mean: the offline judge, the odd one out, does not move the median.
    assert ((items["score"] - mean.loc[items.index]).abs() > 1e-9).any()
    aggregates = table(run_dir, "aggregates").set_index("metric")
    assert aggregates.loc["score", "mean"] == pytest.approx(median["score"].mean())
    assert manifest_of(run_dir)["judge_panel"]["aggregate"] == "median"
    # A median panel is not its judges' mean panel: the manifest names the aggregate.
    assert manifest_of(run_dir)["judge"]["name"].startswith("panel(median): ")


def test_the_cache_keeps_each_judges_replies_and_a_rerun_sends_nothing(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    entries = (openai_entry(chat_server), openai_entry(chat_server, "gpt-4.1"))
    overrides = panel_run(dataset, *entries, overrides=(f"runner.cache_path={tmp_path / 'c'}",))

    first = run_app(tmp_path / "first", *overrides, env=ENV)

    assert first.returncode == 0, first.stderr
    by_model = Counter((r.body["model"], r.step) for r in chat_server.requests)
    # The second judge's analyze requests are the first's but for the model: kept apart in the
    # cache (keyed per judge), each judge asked every item.
    assert by_model[("gpt-4.1-mini", "analyze")] == ITEMS
    assert by_model[("gpt-4.1", "analyze")] == ITEMS
    assert by_model[("gpt-4.1-mini", "preprocess")] == ITEMS
    assert by_model[("gpt-4.1", "claims")] == ITEMS
    sent = len(chat_server.requests)
    chat_server.requests.clear()

    again = run_app(tmp_path / "again", *overrides, env=ENV)

    assert again.returncode == 0, again.stderr
    assert chat_server.requests == []
    # Every request of both judges answered by the cache (the first run's own hits: identical
    # reason requests of two items).
    assert manifest_of(tmp_path / "again")["judge"]["cache"]["hits"] == 6 * ITEMS
    assert manifest_of(tmp_path / "first")["judge"]["cache"]["hits"] + sent == 6 * ITEMS
    pd.testing.assert_series_equal(
        table(tmp_path / "again", "items")["score"], table(tmp_path / "first", "items")["score"]
    )


def test_the_estimate_counts_each_judge_at_its_own_price(
    tmp_path: Path, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV["OPENAI_API_KEY"])
    dataset = write_dataset(tmp_path / "docs.jsonl", ITEMS)
    data = [
        {"id": row["id"], "input": row["input"], "output": row["input"].split(". ")[0] + "."}
        for row in map(json.loads, dataset.read_text(encoding="utf-8").splitlines())
    ]
    openai = {"provider": "openai", "name": "gpt-4.1-mini", "base_url": chat_server.base_url}
    priced = openai | {"price": {"input": 0.4, "output": 1.6}}
    alone = asyncio.run(
        estimate_evals(scorers=[create_summarization_scorer(priced)], data=data, cache="off")
    )
    panel = asyncio.run(
        estimate_evals(
            scorers=[create_summarization_scorer([priced, "offline"])], data=data, cache="off"
        )
    )

    assert set(panel.judges) == {"openai/gpt-4.1-mini", "offline"}
    mine = panel.judges["openai/gpt-4.1-mini"]
    # The first judge's part is what it would send alone; the second's three calls an item too.
    assert (mine.requests, mine.input_tokens, mine.output_tokens) == (
        alone.requests,
        alone.input_tokens,
        alone.output_tokens,
    )
    assert mine.cost == pytest.approx(alone.judge_cost)
    assert panel.judges["offline"].requests == 3 * ITEMS
    assert panel.requests == 6 * ITEMS
    assert panel.judge_cost == pytest.approx(alone.judge_cost)  # the offline judge is free
    assert panel.steps["claims"].requests == ITEMS
    assert chat_server.requests == []

    # A judge of unknown price makes the panel's cost unknown.
    unknown = asyncio.run(
        estimate_evals(
            scorers=[create_summarization_scorer([openai | {"name": "no-price-known"}, "offline"])],
            data=data,
            cache="off",
        )
    )
    assert unknown.judge_cost is None

    # The app prints each judge's part.
    shown = run_app(
        tmp_path / "estimate",
        *panel_run(
            dataset, openai_entry(chat_server), "offline", overrides=("runner.estimate=true",)
        ),
        env=ENV,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"openai/gpt-4.1-mini: {3 * ITEMS:,} to send" in shown.stdout
    assert f"offline: {3 * ITEMS:,} to send" in shown.stdout
    assert "each judge at its own price" in shown.stdout
    assert chat_server.requests == []


def test_a_token_budget_counts_every_judge_of_the_panel(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    common = ("runner.cache=off", "runner.max_items_in_flight=1")
    alone = run_app(
        tmp_path / "alone",
        "model=openai",
        f"model.base_url={chat_server.base_url}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        "runner.progress=false",
        *common,
        env=ENV,
    )
    assert alone.returncode == 0, alone.stderr
    one_judge = sum(manifest_of(tmp_path / "alone")["tokens"].values())
    # Enough for one judge's run, not for two judges'.
    budget = int(one_judge * 1.3)
    entries = (openai_entry(chat_server), openai_entry(chat_server, "gpt-4.1"))

    stopped = run_app(
        tmp_path / "panel",
        *panel_run(dataset, *entries, overrides=(*common, f"runner.max_tokens={budget}")),
        env=ENV,
    )

    assert stopped.returncode == 4, stopped.stderr
    run = manifest_of(tmp_path / "panel")
    assert run["status"] == "interrupted"
    assert 0 < run["counts"]["total"] < 6
    assert sum(run["tokens"].values()) <= budget


def test_a_budget_in_dollars_needs_every_judges_price(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 4)
    unpriced = f"{{name: openai/judge-without-price, base_url: '{chat_server.base_url}'}}"

    refused = run_app(
        tmp_path / "run",
        *panel_run(dataset, "offline", unpriced, overrides=("runner.max_cost=1",)),
        env=ENV,
    )

    assert refused.returncode == 2
    assert "openai/judge-without-price has none" in refused.stderr
    assert chat_server.requests == []


@pytest.mark.parametrize(
    ("judges", "extra", "said"),
    [
        ("[offline]", (), "a panel needs at least two judges, got 1: offline"),
        ("[]", (), "a panel needs at least two judges, got 0"),
        ("[offline,nope/x]", (), "judges[1] ('nope/x'): unknown judge provider 'nope'"),
        ("[offline,openai/]", (), "judges[1] ('openai/'): an openai judge needs a model name"),
        ("[offline,offline]", (), "judges[1] is named 'offline', as judges[0] is"),
        (
            "[offline,{name: openai/gpt-4.1-mini, temprature: 0}]",
            (),
            "judges[1] ({name: 'openai/gpt-4.1-mini', ...}):",
        ),
        ("[offline,{base_url: x}]", (), "judges[1] ({...}): a judge's settings need its model"),
        ("[offline,openai/gpt-4.1-mini]", ("model.aggregate=mode",), "aggregate must be one of"),
        ("[offline,openai/gpt-4.1-mini]", ("+model.weights=[1,2]",), "has no setting 'weights'"),
    ],
)
def test_a_bad_panel_is_exit_2_naming_the_entry_before_any_call(
    tmp_path: Path, chat_server: ChatServer, judges: str, extra: tuple[str, ...], said: str
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 3)

    refused = run_app(
        tmp_path / "run",
        "model=panel",
        f"model.judges={judges}",
        f"dataset.path={dataset}",
        "dataset.fields.metadata=[]",
        *extra,
        env=ENV | {"OPENAI_BASE_URL": chat_server.base_url},
    )

    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert said in refused.stderr
    assert "model: " in refused.stderr
    assert chat_server.requests == []
    assert not (tmp_path / "run" / "items.parquet").exists()


def scripted_judge(name: str, *, supported: bool, answered: tuple[bool, ...]) -> FakeJudge:
    """A fake judge named ``name`` whose claim is (un)supported and whose answers are
    ``answered``, drawing the questions q0?, q1?... when asked to."""

    def preprocess(request: JudgeRequest) -> dict[str, Any]:
        claims = [{"claim": f"{name}'s claim", "supported": supported, "reason": "r"}]
        if request.schema_name == "summarization_claims":
            return {"alignment": claims}
        return {"alignment": claims, "questions": [f"q{i}?" for i in range(len(answered))]}

    def analyze(request: JudgeRequest) -> dict[str, Any]:
        # One verdict per question asked (a reply of another count is asked again): ``answered``
        # in order, then "not answered" for the questions past it.
        asked = len(request.payload.questions)  # type: ignore[union-attr]
        verdicts = [answered[i] if i < len(answered) else False for i in range(asked)]
        return {"coverage": [{"answered": a, "reason": "r"} for a in verdicts]}

    judge = FakeJudge(preprocess=preprocess, analyze=analyze)
    judge.name = name  # type: ignore[misc]
    return judge


def test_in_python_a_panel_is_a_list_of_judges_and_its_result_holds_each_judges() -> None:
    first = scripted_judge("first", supported=True, answered=(True, True, False, False))
    second = scripted_judge("second", supported=True, answered=(True, False, False, False))
    third = scripted_judge("third", supported=False, answered=(True, True, True, True))
    scorer = create_summarization_scorer(
        JudgePanel((first, second, third), aggregate="median"), {"questions": "per_item"}
    )

    result = scorer.run_sync(input="The source. It says things.", output="A summary.")

    assert result.status == "scored"
    assert [m.judge for m in result.panel] == ["first", "second", "third"]
    assert [m.score for m in result.panel] == [0.5, 0.25, 0.0]
    assert [m.coverage_score for m in result.panel] == [0.5, 0.25, 1.0]
    assert result.score == 0.25
    assert result.alignment_score == 1.0
    assert result.coverage_score == 0.5
    # The first judge drew; the others were asked the same questions, with claims-only calls.
    assert [r.schema_name for r in first.requests_for("preprocess")] == ["summarization_preprocess"]
    for other in (second, third):
        assert [r.schema_name for r in other.requests_for("preprocess")] == ["summarization_claims"]
        assert other.requests_for("analyze")[0].payload.questions == ("q0?", "q1?", "q2?", "q3?")
    assert [len(judge.requests) for judge in (first, second, third)] == [3, 3, 3]
    assert result.usage.calls == 9
    assert "[second: 0.250]" in result.reason
    assert type(result).model_validate_json(result.model_dump_json()) == result


def test_a_judge_that_fails_makes_the_item_an_error_naming_it() -> None:
    good = scripted_judge("good", supported=True, answered=(True,))
    bad = FakeJudge(
        preprocess={"alignment": []},
        analyze=JudgeOutputError("no", step="analyze", raw_reply="x", attempts=1),
    )
    scorer = create_summarization_scorer([good, bad])

    result = scorer.run_sync(input="The source.", output="A summary.")

    assert result.status == "error"
    assert result.score is None
    assert result.error is not None
    assert result.error.step == "analyze"
    assert "The panel's judge fake failed" in result.reason
    assert [m.status for m in result.panel] == ["scored", "error"]


def test_the_scorer_stays_stateless_under_concurrent_items_and_a_run_reports_disagreement() -> None:
    sources = [f"Source number {i}. It has a second sentence about {i}." for i in range(12)]
    data = [
        {"id": f"d{i}", "input": s, "output": s.split(". ")[0] + "."} for i, s in enumerate(sources)
    ]
    scorer = create_summarization_scorer(
        [OfflineJudge(), scripted_judge("fake", supported=True, answered=(True, False))]
    )

    together = asyncio.run(run_evals(scorers=[scorer], data=data, max_items_in_flight=12))
    one_by_one = asyncio.run(run_evals(scorers=[scorer], data=data, max_items_in_flight=1))

    scores = [item.score("summarization-scorer") for item in together.items]
    assert scores == [item.score("summarization-scorer") for item in one_by_one.items]
    assert together.counts.scored == 12
    panel = together.judge_panel
    assert panel is not None
    assert panel.judges == ("offline", "fake")
    assert panel.items == 12
    spreads = [
        max(m.score for m in item.results["summarization-scorer"].panel)
        - min(m.score for m in item.results["summarization-scorer"].panel)
        for item in together.items
    ]
    assert panel.score_spread_mean == pytest.approx(statistics.fmean(spreads))
    assert panel.questions_split_share is not None


def test_a_panel_needs_judges_not_a_string() -> None:
    with pytest.raises(ConfigError, match="must be a list of model strings"):
        create_summarization_scorer({"provider": "panel", "judges": "offline"})
    with pytest.raises(ConfigError, match="cannot be a panel"):
        create_summarization_scorer(["offline", {"provider": "panel", "judges": []}])


def test_a_panel_of_an_openai_and_an_azure_judge_sends_each_its_own_way_and_writes_no_key(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    chat_server.azure_deployments = {"judge-deployment"}
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    azure = (
        f"{{name: azure/judge-deployment, base_url: '{chat_server.azure_endpoint}', "
        f"api_version: {API_VERSION}}}"
    )

    done = run_app(
        tmp_path / "run",
        *panel_run(dataset, openai_entry(chat_server), azure, overrides=("runner.cache=off",)),
        env=ENV | {"AZURE_OPENAI_API_KEY": AZURE_KEY},
    )

    assert done.returncode == 0, done.stderr
    items = table(tmp_path / "run", "items")
    assert (items["status"] == "scored").all()
    assert set(items["judge"]) == {"panel(mean): openai/gpt-4.1-mini, azure/judge-deployment"}
    paths = Counter(request.path.split("?")[0] for request in chat_server.requests)
    assert paths == {
        "/v1/chat/completions": 3 * 6,
        "/openai/deployments/judge-deployment/chat/completions": 3 * 6,
    }
    azure_requests = [r for r in chat_server.requests if r.path.startswith("/openai/")]
    assert all(r.headers["api-key"] == AZURE_KEY for r in azure_requests)
    assert {r.step for r in azure_requests} == {"claims", "analyze", "reason"}
    verdicts = table(tmp_path / "run", "coverage")
    assert set(verdicts["judge"]) == {"openai/gpt-4.1-mini", "azure/judge-deployment"}
    assert_nowhere([AZURE_KEY, ENV["OPENAI_API_KEY"]], tmp_path / "run", done.stdout, done.stderr)


def test_a_panel_run_stopped_by_its_budget_resumes_to_the_tables_of_an_unstopped_run(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    dataset = write_dataset(tmp_path / "docs.jsonl", 6)
    entries = (openai_entry(chat_server), "offline")
    common = ("runner.max_items_in_flight=1", f"runner.cache_path={tmp_path / 'c'}")
    whole = run_app(tmp_path / "whole", *panel_run(dataset, *entries, overrides=common), env=ENV)
    assert whole.returncode == 0, whole.stderr
    budget = sum(manifest_of(tmp_path / "whole")["tokens"].values()) // 2
    run_dir = tmp_path / "run"
    fresh = ("runner.max_items_in_flight=1", "runner.cache=off")

    stopped = run_app(
        run_dir,
        *panel_run(dataset, *entries, overrides=(*fresh, f"runner.max_tokens={budget}")),
        env=ENV,
    )
    assert stopped.returncode == 4, stopped.stderr
    resumed = run_app(
        run_dir,
        *panel_run(dataset, *entries, overrides=(*fresh, f"runner.resume={run_dir}")),
        env=ENV,
    )

    assert resumed.returncode == 0, resumed.stderr
    for name in ("items", "alignment", "coverage"):
        columns = ["item_id", "judge", "score"] if name == "items" else None
        got = table(run_dir, name).drop(columns=["run_id"], errors="ignore")
        want = table(tmp_path / "whole", name).drop(columns=["run_id"], errors="ignore")
        keys = ["item_id", "judge", *(["position"] if name != "items" else [])]
        got, want = (
            got.sort_values(keys).reset_index(drop=True),
            want.sort_values(keys).reset_index(drop=True),
        )
        shown = columns or [
            "item_id",
            "judge",
            "position",
            "supported" if name == "alignment" else "answered",
        ]
        pd.testing.assert_frame_equal(got[shown], want[shown])
    assert manifest_of(run_dir)["judge_panel"] == manifest_of(tmp_path / "whole")["judge_panel"]


def panel_data(count: int) -> list[dict[str, Any]]:
    sources = [f"Source number {i}. It has a second sentence about {i}." for i in range(count)]
    return [
        {"id": f"d{i}", "input": s, "output": s.split(". ")[0] + "."} for i, s in enumerate(sources)
    ]


def offline_and_fake() -> list[Any]:
    return [OfflineJudge(), scripted_judge("fake", supported=True, answered=(True, False))]


def test_shards_of_a_panel_merge_to_the_figures_of_one_run(tmp_path: Path) -> None:
    data = panel_data(10)
    whole = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer(offline_and_fake())],
            data=data,
            output_dir=tmp_path / "whole",
        )
    )
    for index in range(2):
        asyncio.run(
            run_evals(
                scorers=[create_summarization_scorer(offline_and_fake())],
                data=data,
                output_dir=tmp_path / f"shard{index}",
                shard=f"{index}/2",
            )
        )

    merged = merge_runs([tmp_path / "shard0", tmp_path / "shard1"], tmp_path / "merged")

    assert merged.counts.scored == 10
    assert (
        manifest_of(tmp_path / "merged")["judge_panel"]
        == manifest_of(tmp_path / "whole")["judge_panel"]
    )
    assert whole.judge_panel is not None
    assert whole.judge_panel.items == 10
    for name in ("alignment", "coverage"):
        rows = pd.read_parquet(merged.tables[name])
        assert set(rows["judge"]) == {"offline", "fake"}
        want = table(tmp_path / "whole", name)
        assert len(rows) == len(want)


def test_trials_and_transcripts_of_a_panel_keep_each_judge_apart(tmp_path: Path) -> None:
    result = asyncio.run(
        run_evals(
            scorers=[create_summarization_scorer(offline_and_fake())],
            data=panel_data(3),
            output_dir=tmp_path / "run",
            trials=2,
            transcripts=True,
        )
    )

    assert result.counts.scored == 3
    assert result.judge_noise is not None
    assert result.judge_noise.trials == 2
    assert result.judge_panel is not None
    assert result.judge_panel.items == 3 * 2  # every trial of every item
    items = table(tmp_path / "run", "items")
    assert sorted(items["trial"]) == [0, 0, 0, 1, 1, 1]
    transcripts = table(tmp_path / "run", "transcripts")
    per_judge = transcripts.groupby(["item_id", "trial", "judge"])["request"].apply(list)
    # Each judge's three requests in each trial, numbered from 0.
    assert len(per_judge) == 3 * 2 * 2
    assert all(requests == [0, 1, 2] for requests in per_judge)
    assert set(transcripts["judge"]) == {"offline", "fake"}
