"""Merging shard runs (``runner.shard=I/N``) into one run directory.

The merged run is built the way a one-machine run is: the shards' journals are replayed into a
new journal and compacted under the merged run's id, so rows come out in dataset order, are
built by the same function, and the aggregates are computed from the item rows, never averaged
from the shards' aggregates. Its tables equal, row for row, those of the same run made in one
process.

A source's items all lie in one shard when the shards were split by source (``_shards``), so
the one set of questions it drew is the one all of them were asked. Shards split by id (runs
with ``questions="per_item"``, or recorded before splits by source) may each have asked a
source's items their own: the merge counts the sources whose items were asked different sets
in different shards (``question_conflicts``), says so, and keeps each set in
``questions.parquet``. Shards split by different rules are not parts of one split: refused.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from summeval_runner._errors import InputError
from summeval_runner._inputs._shards import Shard, ShardRule
from summeval_runner._rundir._journal import (
    JOURNAL,
    DigestSet,
    IdSet,
    RunWriter,
    journal_questions,
    journal_records,
    journaled_ids,
)
from summeval_runner._rundir._manifest import (
    MANIFEST_SCHEMA_VERSION,
    CacheUse,
    JudgeNoise,
    JudgeTokenTotals,
    JudgeTraffic,
    Manifest,
    MergedShard,
    Missing,
    PanelDisagreement,
    RunCost,
    TokenTotals,
    config_differences,
    merged_lessons,
    metadata_types,
    read_manifest,
    setup_differences,
    write_manifest,
)
from summeval_runner._rundir._paths import directory_problem
from summeval_runner._rundir._rows import ItemRecord
from summeval_runner._rundir._runs_table import write_runs_table
from summeval_runner._rundir._tables import score_means
from summeval_runner._scorers._outcome import RunCounts
from summeval_runner._scorers._questions import source_fingerprint
from summeval_runner._scorers._result import add_costs

logger = logging.getLogger("summeval_runner")

# Manifest fields that must agree for shards to be parts of one run.
_SAME = ("variant", "prompt_version")


@dataclass(frozen=True)
class ShardRun:
    """One shard's run directory, as read for a merge."""

    path: Path
    shard: Shard
    manifest: Manifest
    item_ids: IdSet

    @property
    def unfinished(self) -> int:
        return self.manifest.unfinished or 0

    @property
    def by(self) -> ShardRule:
        """What the shard's run split its items by (``id`` where it did not say)."""
        return self.manifest.shard.by if self.manifest.shard is not None else "id"


@dataclass(frozen=True)
class MergedRun:
    """What ``merge_runs`` wrote: the run directory, its tables, and what it lacks."""

    run_dir: Path
    run_id: str
    shard_count: int
    shards: tuple[str, ...]
    missing_shards: tuple[str, ...]
    counts: RunCounts
    # Items of the dataset in no shard given (missing shards, unfinished items).
    missing_items: int
    tables: dict[str, Path]
    # Sources whose items were asked different coverage questions in different shards: their
    # coverage is not measured on one question set (split by source, there are none).
    question_conflicts: int = 0
    # What the shards were split by (ShardRule).
    by: ShardRule = "id"

    @property
    def items(self) -> int:
        return self.counts.total

    @property
    def complete(self) -> bool:
        return not self.missing_shards and not self.missing_items


def _read_shard(path: Path) -> ShardRun:
    manifest = read_manifest(path)
    if manifest.schema_version != MANIFEST_SCHEMA_VERSION:
        raise InputError(
            f"{path} was written by another version of summeval_runner (run directory schema "
            f"{manifest.schema_version}, this version reads {MANIFEST_SCHEMA_VERSION}); merge "
            "it with the version that ran it"
        )
    if manifest.shard is None:
        raise InputError(
            f"{path} is not a shard: it was run without runner.shard, so it already holds "
            "every item it was given"
        )
    shard = Shard(manifest.shard.index, manifest.shard.count)
    if manifest.status == "running":
        raise InputError(
            f"{path} (shard {shard}) has not finished (status running): wait for it, or "
            f"resume it with runner.resume={path}"
        )
    if not (path / JOURNAL).is_file():
        raise InputError(f"{path} (shard {shard}) has no {JOURNAL}: copy the whole run directory")
    return ShardRun(path, shard, manifest, journaled_ids(path))


def _check_same_run(runs: list[ShardRun]) -> None:
    first = runs[0]
    for run in runs[1:]:
        if run.shard.count != first.shard.count:
            raise InputError(
                f"these are shards of different splits: {first.path} is shard {first.shard}, "
                f"{run.path} is shard {run.shard}"
            )
        if run.by != first.by:
            # Their items overlap and miss some: a source split and an id split do not agree.
            raise InputError(
                f"these are shards of different splits: {first.path} (shard {first.shard}) was "
                f"split by {first.by}, {run.path} (shard {run.shard}) by {run.by}; the shards "
                "of one run must be split alike: run the ones split by id again, in new "
                "directories, with this version, which splits a questions=per_source run by "
                "source (a resume keeps a shard's split; versions that record none split by id)"
            )
        differences = config_differences(first.manifest.config, run.manifest.config)
        differences += setup_differences(first.manifest.setup, run.manifest.setup)
        differences += [
            f"{name} was {getattr(first.manifest, name)!r}, now {getattr(run.manifest, name)!r}"
            for name in _SAME
            if getattr(first.manifest, name) != getattr(run.manifest, name)
        ]
        if _sha256(first.manifest) != _sha256(run.manifest):
            differences.append("the dataset file's content (sha256) differs")
        types = [metadata_types(r.manifest.dataset) for r in (first, run)]
        if types[0] != types[1]:
            # One items table holds one metadata struct: shards must agree on its fields.
            shown = [t.as_dict() if t is not None else "none recorded" for t in types]
            differences.append(f"the metadata fields' types were {shown[0]}, now {shown[1]}")
        if differences:
            raise InputError(
                f"{run.path} is not a shard of the same run as {first.path}: "
                + "; ".join(differences[:5])
            )


def _sha256(manifest: Manifest) -> str | None:
    return manifest.dataset.sha256 if manifest.dataset else None


def _check_disjoint(runs: list[ShardRun]) -> None:
    seen: dict[Shard, Path] = {}
    for run in runs:
        if run.shard in seen:
            raise InputError(
                f"shard {run.shard} is given twice: {seen[run.shard]} and {run.path}; "
                "merge each shard once"
            )
        seen[run.shard] = run.path
    for i, run in enumerate(runs):
        for other in runs[i + 1 :]:
            shared, first = run.item_ids.shared(other.item_ids)
            if shared:
                raise InputError(
                    f"{run.path} and {other.path} overlap: both hold item "
                    f"{first!r} ({shared} shared)"
                )


def _check_out_dir(out_dir: Path, runs: list[ShardRun]) -> None:
    if any(out_dir.resolve() == run.path.resolve() for run in runs):
        raise InputError(f"the merged run cannot be written into one of its shards ({out_dir})")
    problem = directory_problem(out_dir)
    if problem is not None:
        raise InputError(f"the merged run cannot be written into {out_dir}: {problem}")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise InputError(
            f"{out_dir} is not empty: the merged run needs a new directory, so that nothing "
            "already there is overwritten"
        )


def merge_runs(
    run_dirs: Sequence[Path | str],
    out_dir: Path | str,
    *,
    allow_missing: bool = False,
) -> MergedRun:
    """Merge the run directories of shards ``0/N`` .. ``N-1/N`` into one run in ``out_dir``.

    Refused (``InputError``, nothing written) when the runs are not shards of one config and
    dataset, when a shard is given twice or two shards hold the same item, when ``out_dir`` is
    not empty, and when a shard is missing or has unfinished items, unless ``allow_missing``:
    then what there is is merged, the manifest's status is ``partial`` and it lists what is
    missing.
    """
    if not run_dirs:
        raise InputError("merge needs the run directories of the shards, got none")
    runs = sorted((_read_shard(Path(path)) for path in run_dirs), key=lambda r: r.shard.index)
    _check_same_run(runs)
    _check_disjoint(runs)
    out = Path(out_dir)
    _check_out_dir(out, runs)
    count = runs[0].shard.count
    present = {run.shard.index for run in runs}
    missing = tuple(f"{i}/{count}" for i in range(count) if i not in present)
    unfinished = sum(run.unfinished for run in runs)
    if (missing or unfinished) and not allow_missing:
        parts = []
        if missing:
            parts.append(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing")
        if unfinished:
            where = ", ".join(f"{r.shard} ({r.unfinished})" for r in runs if r.unfinished)
            parts.append(f"{unfinished} unfinished items in shards {where}")
        raise InputError(
            f"the run is incomplete: {'; '.join(parts)} (of {count} shards). Run or resume "
            "them, or pass --allow-missing (allow_missing=True) to merge what there is"
        )
    run_id = uuid.uuid4().hex[:12]
    out.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its destination and renamed into place whole: a merge that fails half-way
    # (a damaged journal, a full disk) leaves no half-merged run behind.
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.merging-", dir=out.parent))
    try:
        writer = RunWriter(building)
        # Split by source, a source's items all lie in one shard: no two shards asked them
        # different sets, and a million sources are not tracked to find none.
        asked = _AskedQuestions(
            _sharing_scorers(runs[0].manifest.setup) if runs[0].by == "id" else frozenset()
        )
        # The sets written, as digests (16 bytes a set, not the set's questions).
        written = DigestSet()
        try:
            for part, run in enumerate(runs):
                # Each shard's question sets, each set once: shards that shared a response
                # cache asked the same ones. Different sets of one source are all kept (what
                # its items were asked), and counted below. Read line by line.
                for questions in journal_questions(run.path / JOURNAL):
                    seen = json.dumps([questions.judge, questions.key, questions.questions])
                    if written.add(seen):
                        writer.write_questions(questions)
                for record in journal_records(run.path / JOURNAL):
                    asked.add(part, record)
                    writer.write(record)
            compacted = writer.compact(
                run_id=run_id,
                variant=runs[0].manifest.variant,
                metadata=metadata_types(runs[0].manifest.dataset),
            )
        finally:
            writer.close()
        tables = compacted.tables
        totals = compacted.counts
        noise = compacted.noise.result(compacted.noise.trials)
        dataset = runs[0].manifest.dataset
        expected = (dataset.items if dataset else None) or 0
        merged = MergedRun(
            run_dir=out,
            run_id=run_id,
            shard_count=count,
            shards=tuple(str(run.shard) for run in runs),
            missing_shards=missing,
            counts=totals,
            missing_items=max(expected - totals.total, 0),
            tables={name: out / path.name for name, path in tables.items()},
            question_conflicts=asked.conflicts(),
            by=runs[0].by,
        )
        write_runs_table(
            building,
            _write_manifest(
                building,
                runs,
                merged,
                unfinished,
                noise,
                compacted.noise.panel(),
                compacted.unscorable_items,
                compacted.coverage_bases,
                compacted.verdicts_missing,
            ),
        )
        if out.exists():
            out.rmdir()  # checked empty above
        os.replace(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    if merged.question_conflicts:
        logger.warning("%s: %s", out, conflicts_warning(merged))
    return merged


@dataclass(frozen=True)
class _Asked:
    """What a source's items were asked, as far as a conflict needs: the first part and set
    (a hash of its questions) met, and whether another part, and another set, were met."""

    part: int
    questions: int
    other_part: bool = False
    other_questions: bool = False

    def met(self, part: int, questions: int) -> _Asked:
        return _Asked(
            self.part,
            self.questions,
            self.other_part or part != self.part,
            self.other_questions or questions != self.questions,
        )

    @property
    def conflict(self) -> bool:
        # Two parts and two sets: then some item of one part was asked another set than some
        # item of another (a per_item part's items may differ among themselves: not a merge's
        # doing, and not counted while the source lies in that part alone).
        return self.other_part and self.other_questions


class _AskedQuestions:
    """The coverage questions each source's items were asked, by part of a merge, for each
    scorer: a source asked different sets in different parts is a conflict. Items that were
    asked none (errors, unscorable, a judge that wrote no question) are not counted."""

    def __init__(self, sharing: frozenset[str]) -> None:
        # The scorers that share each source's questions (per_source): a per_item scorer's
        # items of one source differ by design, sharded or not, and are not counted.
        self._sharing = sharing
        self._sources: dict[tuple[str, str], _Asked] = {}

    def add(self, part: int, record: ItemRecord) -> None:
        for outcome in record.outcomes:
            result = outcome.summarization
            if result is None or result.source is None or not result.asked_questions:
                continue
            if outcome.scorer_id not in self._sharing:
                continue
            if result.coverage_basis != "source_questions":
                # The data's own key facts or questions (or a reference's, shared by reference,
                # not by source): not a set drawn for the source.
                continue
            key = (outcome.scorer_id, source_fingerprint(result.source))
            # A hash of the set: compared within this process only, so Python's salted hash
            # serves, at 8 bytes a source.
            questions = hash(result.asked_questions)
            known = self._sources.get(key)
            self._sources[key] = (
                _Asked(part, questions) if known is None else known.met(part, questions)
            )

    def conflicts(self) -> int:
        return sum(asked.conflict for asked in self._sources.values())


def _sharing_scorers(setup: Mapping[str, Any]) -> frozenset[str]:
    """The scorers of a run's setup that draw each source's questions once (per_source)."""
    scorers = setup.get("scorer", {})
    return frozenset(
        scorer_id
        for scorer_id, settings in (scorers.items() if isinstance(scorers, Mapping) else ())
        if isinstance(settings, Mapping) and settings.get("questions") == "per_source"
    )


def conflicts_warning(merged: MergedRun) -> str:
    """What a merge whose shards asked one source's items different questions tells its user."""
    count = merged.question_conflicts
    sources = f"{count} source{'s were' if count != 1 else ' was'}"
    return (
        f"{sources} asked different coverage questions in different shards (split by "
        f"{merged.by}): their items' coverage was not measured on one question set, so a "
        "paired coverage comparison over them does not hold (question_conflicts in the "
        "manifest; questions.parquet holds each set). Shards of a scorer.questions=per_source "
        "run split by source ask one set per source"
    )


def _cost(runs: list[ShardRun]) -> RunCost | None:
    """The shards' costs added up: unknown where any shard's is (or recorded none)."""
    costs = [run.manifest.cost for run in runs]
    if any(cost is None for cost in costs):
        return None
    known = [cost for cost in costs if cost is not None]
    return RunCost(
        judge=add_costs(cost.judge for cost in known),
        target=add_costs(cost.target for cost in known),
        total=add_costs(cost.total for cost in known),
        target_unreported=sum(cost.target_unreported for cost in known),
    )


def _sum(runs: list[ShardRun], count: str) -> int:
    return sum(getattr(run.manifest.judge or JudgeTraffic(), count) for run in runs)


def _write_manifest(
    building: Path,
    runs: list[ShardRun],
    merged: MergedRun,
    unfinished: int,
    noise: JudgeNoise | None,
    panel: PanelDisagreement | None = None,
    unscorable_items: tuple[str, ...] = (),
    coverage_bases: dict[str, int] | None = None,
    verdicts_missing: int | None = None,
) -> Manifest:
    first = runs[0].manifest
    config = dict(first.config)
    config["runner"] = {**(config.get("runner") or {}), "shard": None}
    finished = [run.manifest.finished_at for run in runs if run.manifest.finished_at]
    caches = [(run.manifest.judge or JudgeTraffic()).cache for run in runs]
    manifest = Manifest(
        run_id=merged.run_id,
        variant=first.variant,
        status="completed" if merged.complete else "partial",
        started_at=min(run.manifest.started_at for run in runs),
        finished_at=max(finished) if finished else None,
        merged_at=datetime.now(UTC),
        package_version=first.package_version,
        prompt_version=first.prompt_version,
        python_version=first.python_version,
        config=config,
        # What built the judge and scorers, as every shard recorded it (checked alike above): a
        # comparison reads it, and a merged run without it differed from its own shards.
        setup=first.setup,
        overrides=tuple(o for o in first.overrides if not o.startswith("runner.shard=")),
        dataset=first.dataset,
        merged_from=tuple(
            MergedShard(
                shard=str(run.shard),
                run_dir=str(run.path),
                run_id=run.manifest.run_id,
                status=run.manifest.status,
                items=len(run.item_ids),
                by=run.by,
            )
            for run in runs
        ),
        question_conflicts=merged.question_conflicts,
        missing=Missing(
            shards=merged.missing_shards,
            items=merged.missing_items,
            unfinished_in_shards=unfinished,
        ),
        # Work summed over the shards, which ran side by side: not the merged run's wall time.
        duration_s=round(sum(run.manifest.duration_s or 0.0 for run in runs), 3),
        counts=merged.counts,
        unscorable_items=unscorable_items,
        coverage_bases=coverage_bases,
        verdicts_missing=verdicts_missing,
        unfinished=merged.missing_items,
        hook_errors=sum(run.manifest.hook_errors for run in runs),
        means=score_means(building / merged.tables["aggregates"].name),
        judge_noise=noise,
        judge_panel=panel,
        judge=JudgeTraffic(
            name=first.judge.name if first.judge else None,
            requests=_sum(runs, "requests"),
            retries=_sum(runs, "retries"),
            throttled_429=_sum(runs, "throttled_429"),
            cache=CacheUse(
                hits=sum(cache.hits for cache in caches),
                stored=sum(cache.stored for cache in caches),
            ),
            learned=merged_lessons(
                *(run.manifest.judge.learned for run in runs if run.manifest.judge)
            ),
            price=first.judge.price if first.judge else None,
        ),
        # Every attempt's tokens, as each shard's manifest counts them (not only the kept
        # items' ones, which the tables hold).
        tokens=JudgeTokenTotals(
            input=sum((run.manifest.tokens or TokenTotals()).input for run in runs),
            output=sum((run.manifest.tokens or TokenTotals()).output for run in runs),
            reasoning=sum((run.manifest.tokens or JudgeTokenTotals()).reasoning for run in runs),
        ),
        target_tokens=TokenTotals(
            input=sum((run.manifest.target_tokens or TokenTotals()).input for run in runs),
            output=sum((run.manifest.target_tokens or TokenTotals()).output for run in runs),
        ),
        cost=_cost(runs),
        tables={name: path.name for name, path in merged.tables.items()},
    )
    write_manifest(building, manifest)
    return manifest
