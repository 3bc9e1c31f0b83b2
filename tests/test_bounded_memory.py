"""What keeps a resume, a merge and a comparison of a million items in bounded memory gives the
same answers as what it replaced: ``IdSet`` as a ``frozenset`` of the ids, the journal's
question sets read line by line or bounded to a bank's capacity as read whole, and a
comparison of runs read without their texts as one of runs read whole.

``bench/million.py`` measures the memory; these tests hold the results.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from summeval_runner import compare_runs, create_summarization_scorer, run_evals
from summeval_runner._analysis._compare import (
    _WORST_ITEMS,
    COMPARED_COLUMNS,
    compare_loaded,
    load_run,
    load_runs,
)
from summeval_runner._rundir._journal import (
    JOURNAL,
    DigestSet,
    IdSet,
    RunWriter,
    journal_questions,
    journaled_questions,
)
from summeval_runner._scorers._questions import QuestionBank, QuestionKey, QuestionSet
from summeval_runner._scorers._result import METRICS
from summeval_runner._stats import paired_bootstrap_ci, paired_permutation_p

SENTENCES = [
    "The council approved the new bridge on Monday.",
    "Construction will begin in the spring and last two years.",
    "The bridge will carry four lanes of traffic and a cycle path.",
    "Residents raised concerns about noise during the works.",
    "The mayor said the project would create two hundred jobs.",
    "Funding comes from the regional transport budget.",
]


def items(count: int, *, lead: int) -> list[dict[str, str]]:
    """``count`` items, each its own source (so its own question set), summarised by its first
    ``lead`` sentences."""
    made = []
    for index in range(count):
        sentences = [f"Report {index} was filed.", *SENTENCES[index % 3 :]]
        made.append(
            {
                "id": f"item-{index:03d}",
                "input": " ".join(sentences),
                "output": " ".join(sentences[:lead]),
            }
        )
    return made


def run(run_dir: Path, data: list[dict[str, str]]) -> Path:
    scorer = create_summarization_scorer("offline", {"questions": "per_source"})
    asyncio.run(run_evals(scorers=[scorer], data=data, output_dir=run_dir, cache="off"))
    return run_dir


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("bounded")
    return run(base / "a", items(12, lead=2)), run(base / "b", items(12, lead=3))


def test_an_id_set_holds_what_a_frozenset_of_the_ids_holds() -> None:
    generator = random.Random(7)
    alphabet = ["a", "b", "é", "中", "\U0001f600", "-", "0"]
    ids = {"", "a", "ab", "b", *("".join(generator.choices(alphabet, k=5)) for _ in range(300))}
    others = {"ab", "zz", *("".join(generator.choices(alphabet, k=5)) for _ in range(300))}
    held, other = IdSet(ids), IdSet(others)

    assert len(held) == len(ids)
    assert list(held) == sorted(ids)
    assert all(item in held for item in ids)
    assert [item in held for item in sorted(others - ids)] == [False] * len(others - ids)
    assert 3 not in held
    shared = ids & others
    assert held.shared(other) == (len(shared), min(shared))
    assert IdSet(()).shared(held) == (0, None)


def test_a_digest_set_tells_new_texts_from_met_ones_past_its_first_table() -> None:
    met = DigestSet()
    texts = [f"judge\nkey-{i}" for i in range(5000)]  # grows its table twice

    assert all(met.add(text) for text in texts)
    assert not any(met.add(text) for text in texts)
    assert met.add("judge\nkey-5000")


def test_the_question_sets_read_line_by_line_are_those_read_whole(
    two_runs: tuple[Path, Path],
) -> None:
    run_dir = two_runs[0]
    whole = journaled_questions(run_dir)

    assert len(whole) == 12  # one set per source
    assert list(journal_questions(run_dir / JOURNAL)) == list(whole)


def test_a_resume_reads_the_sets_a_bank_of_its_capacity_would_keep(
    two_runs: tuple[Path, Path],
) -> None:
    run_dir = two_runs[0]
    whole = journaled_questions(run_dir)
    writer = RunWriter(run_dir, resume=True)
    try:
        bounded = writer.contents(questions_kept=5).questions
        none = writer.contents(questions_kept=0).questions
        statuses = writer.contents(questions_kept=5).statuses
    finally:
        writer.close()

    assert bounded == whole[-5:]
    assert none == ()
    assert len(statuses) == 12

    def seeded(lines: tuple[object, ...]) -> dict[QuestionKey, QuestionSet]:
        bank = QuestionBank(capacity=5)
        bank.seed(
            {
                QuestionKey(line.source_sha256, line.max_questions, line.prompt_version): (
                    QuestionSet(line.questions, line.drawn_with)
                )
                for line in lines  # type: ignore[attr-defined]
            }
        )
        return dict(bank.known())

    # What the resumed run's bank holds is the same either way.
    assert seeded(bounded) == seeded(whole)


def test_a_comparison_of_runs_read_without_their_texts_is_the_same(
    two_runs: tuple[Path, Path],
) -> None:
    a, b = two_runs
    whole = load_run(a)
    lean = load_run(a, compared_only=True)

    assert {"source", "summary", "reason"} <= set(whole.items.columns)
    assert set(lean.items.columns) == {*COMPARED_COLUMNS, "trials"}
    assert (lean.items["status"] == "scored").all()
    for column in ("item_id", "status", "score", "alignment_score", "coverage_score", "scale"):
        assert lean.items[column].tolist() == whole.items[column].tolist(), column
    read_whole = compare_loaded(*load_runs([a, b], a))
    comparison = compare_runs([a, b], baseline=a)  # reads no texts

    assert comparison["n_paired"].dropna().tolist() == [12, 12, 12]
    assert (comparison["mean_diff"].dropna() != 0).any()  # lead-3 covers more than lead-2
    pd.testing.assert_frame_equal(comparison, read_whole)


def test_a_comparison_pairs_items_as_a_join_of_their_ids_would(tmp_path: Path) -> None:
    """The items matched in blocks of ids, in the order of the ids, give the figures of a plain
    join by id: runs in other orders, each with items the other lacks, an unscorable item, and
    ids of several scripts (ordered by their UTF-8 bytes, as the bootstrap draws them)."""
    names = [
        "zeta",
        "Émile",
        "alpha",
        "中文",
        "beta",
        "\U0001f600",
        "Zulu",
        "éclair",
        "a-1",
        "a-10",
    ]
    made = items(len(names) + 2, lead=2)
    for index, item in enumerate(made):
        item["id"] = names[index % len(names)] + f"-{index}"
    rich = [dict(item, output=" ".join(item["input"].split(". ")[:3])) for item in made]
    here = [rich[i] for i in (5, 0, 9, 3, 11, 1, 7, 2, 10, 4)]  # lacks 6 and 8
    there = [made[i] for i in (8, 2, 6, 0, 4, 10, 1, 3, 5, 9)]  # lacks 7 and 11
    there[1] = dict(there[1], input=" ")  # unscorable (a blank source): paired on no dimension
    base_dir, run_dir = run(tmp_path / "base", there), run(tmp_path / "run", here)

    # Different items: different inputs, compared all the same.
    comparison = compare_runs([base_dir, run_dir], baseline=base_dir, allow_mismatch=True)

    def scored(path: Path, column: str) -> dict[str, float]:
        table = pd.read_parquet(path / "items.parquet")
        table = table[table["status"] == "scored"]
        return dict(zip(table["item_id"], table[column], strict=True))

    assert len(comparison) == 6
    for dimension, column in METRICS.items():
        row = comparison[(comparison["dimension"] == dimension) & comparison["n_paired"].notna()]
        ours, theirs = scored(run_dir, column), scored(base_dir, column)
        shared = sorted(set(ours) & set(theirs), key=lambda item: item.encode("utf-8"))
        diffs = np.array([ours[item] - theirs[item] for item in shared])
        worst = [shared[i] for i in np.argsort(diffs, kind="stable") if diffs[i] < 0]
        low, high = paired_bootstrap_ci(diffs, seed=0)

        assert row["n_paired"].item() == len(shared) == 7
        assert row["mean_diff"].item() == pytest.approx(diffs.mean(), abs=1e-15)
        assert (row["diff_ci95_low"].item(), row["diff_ci95_high"].item()) == (low, high)
        assert row["p_value"].item() == paired_permutation_p(diffs, seed=0)
        assert row["worst_items"].item().tolist() == worst[:_WORST_ITEMS]
        assert row["items_only_here"].item().tolist() == sorted(
            ({item["id"] for item in here} - {item["id"] for item in there}),
            key=lambda item: item.encode("utf-8"),
        )
        assert row["items_only_in_baseline"].item().tolist() == sorted(
            ({item["id"] for item in there} - {item["id"] for item in here}),
            key=lambda item: item.encode("utf-8"),
        )
