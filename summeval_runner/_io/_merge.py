"""Merging shard runs (``runner.shard=I/N``) into one run directory.

The merged run is built the way a one-machine run is: the shards' journals are replayed into a
new journal (every row relabelled with the merged run's id) and compacted, so rows come out in
dataset order and the aggregates are computed from the item rows, never averaged from the
shards' aggregates. Its tables equal, row for row, those of the same run made in one process.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from summeval_runner._errors import InputError
from summeval_runner._io._compare import SCORER_ID
from summeval_runner._io._manifest import (
    MANIFEST,
    config_differences,
    read_manifest,
    write_manifest,
)
from summeval_runner._io._shards import Shard
from summeval_runner._io._tables import (
    JOURNAL,
    RunWriter,
    journaled_ids,
    score_totals,
    token_totals,
)

# Manifest fields that must agree for shards to be parts of one run.
_SAME = ("variant", "prompt_version")


@dataclass(frozen=True)
class ShardRun:
    """One shard's run directory, as read for a merge."""

    path: Path
    shard: Shard
    manifest: dict[str, Any]
    item_ids: frozenset[str]

    @property
    def unfinished(self) -> int:
        return int(self.manifest.get("unfinished") or 0)


@dataclass(frozen=True)
class MergedRun:
    """What ``merge_runs`` wrote: the run directory, its tables, and what it lacks."""

    run_dir: Path
    run_id: str
    shard_count: int
    shards: tuple[str, ...]
    missing_shards: tuple[str, ...]
    # Item counts: total, scored, unscorable, errors.
    counts: dict[str, int]
    # Items of the dataset in no shard given (missing shards, unfinished items).
    missing_items: int
    tables: dict[str, Path]

    @property
    def items(self) -> int:
        return self.counts["total"]

    @property
    def complete(self) -> bool:
        return not self.missing_shards and not self.missing_items


def _read_shard(path: Path) -> ShardRun:
    manifest = read_manifest(path)
    shard = Shard.from_manifest(manifest.get("shard"))
    if shard is None:
        raise InputError(
            f"{path} is not a shard: it was run without runner.shard, so it already holds "
            "every item it was given"
        )
    status = manifest.get("status")
    if status == "running":
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
        differences = config_differences(first.manifest["config"], run.manifest["config"])
        differences += [
            f"{name} was {first.manifest.get(name)!r}, now {run.manifest.get(name)!r}"
            for name in _SAME
            if first.manifest.get(name) != run.manifest.get(name)
        ]
        sha = (first.manifest.get("dataset") or {}).get("sha256")
        if sha != (run.manifest.get("dataset") or {}).get("sha256"):
            differences.append("the dataset file's content (sha256) differs")
        if differences:
            raise InputError(
                f"{run.path} is not a shard of the same run as {first.path}: "
                + "; ".join(differences[:5])
            )


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
            shared = run.item_ids & other.item_ids
            if shared:
                raise InputError(
                    f"{run.path} and {other.path} overlap: both hold item "
                    f"{sorted(shared)[0]!r} ({len(shared)} shared)"
                )


def _check_out_dir(out_dir: Path, runs: list[ShardRun]) -> None:
    if any(out_dir.resolve() == run.path.resolve() for run in runs):
        raise InputError(f"the merged run cannot be written into one of its shards ({out_dir})")
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
        try:
            for run in runs:
                _replay(run, writer, run_id)
        finally:
            writer.close()
        tables = writer.finish()
        totals, mean = score_totals(tables["aggregates"], SCORER_ID)
        expected = int((runs[0].manifest.get("dataset") or {}).get("items") or 0)
        merged = MergedRun(
            run_dir=out,
            run_id=run_id,
            shard_count=count,
            shards=tuple(str(run.shard) for run in runs),
            missing_shards=missing,
            counts=totals,
            missing_items=max(expected - totals["total"], 0),
            tables={name: out / path.name for name, path in tables.items()},
        )
        _write_manifest(building, runs, merged, unfinished, mean)
        if out.exists():
            out.rmdir()  # checked empty above
        os.replace(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return merged


def _replay(run: ShardRun, writer: RunWriter, run_id: str) -> None:
    """Copy a shard's journal entries into the merged journal under the merged run's id."""
    with (run.path / JOURNAL).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.endswith("\n"):
                break  # cut short by a crash: never acknowledged, as on resume
            try:
                entry = json.loads(line)
            except ValueError as error:
                raise InputError(
                    f"{run.path / JOURNAL} line {number}: not valid JSON ({error})"
                ) from None
            rows = {name: entry[name] for name in ("items", "alignment", "coverage")}
            for table in rows.values():
                for row in table:
                    row["run_id"] = run_id
            writer.write(entry["position"], entry["item_id"], rows)


def _sum(runs: list[ShardRun], *path: str) -> int:
    total = 0
    for run in runs:
        value: Any = run.manifest
        for key in path:
            value = (value or {}).get(key)
        total += int(value or 0)
    return total


def _write_manifest(
    building: Path, runs: list[ShardRun], merged: MergedRun, unfinished: int, mean: float | None
) -> None:
    first = runs[0].manifest
    config = json.loads(json.dumps(first.get("config") or {}))
    (config.get("runner") or {})["shard"] = None
    started = min(str(run.manifest.get("started_at") or "") for run in runs)
    finished = max(str(run.manifest.get("finished_at") or "") for run in runs)
    judge = first.get("judge") or {}
    manifest = {
        "run_id": merged.run_id,
        "variant": first.get("variant"),
        "status": "completed" if merged.complete else "partial",
        "started_at": started,
        "finished_at": finished,
        "merged_at": datetime.now(timezone.utc).isoformat(),
        "package_version": first.get("package_version"),
        "prompt_version": first.get("prompt_version"),
        "python_version": first.get("python_version"),
        "config": config,
        "overrides": [o for o in first.get("overrides") or [] if not o.startswith("runner.shard=")],
        "dataset": first.get("dataset"),
        "shard": None,
        "merged_from": [
            {
                "shard": str(run.shard),
                "run_dir": str(run.path),
                "run_id": run.manifest.get("run_id"),
                "status": run.manifest.get("status"),
                "items": len(run.item_ids),
            }
            for run in runs
        ],
        "missing": {
            "shards": list(merged.missing_shards),
            "items": merged.missing_items,
            "unfinished_in_shards": unfinished,
        },
        # Work summed over the shards, which ran side by side: not the merged run's wall time.
        "duration_s": round(sum(float(r.manifest.get("duration_s") or 0.0) for r in runs), 3),
        "counts": merged.counts,
        "unfinished": merged.missing_items,
        "means": {SCORER_ID: mean},
        "judge": {
            "name": judge.get("name"),
            "requests": _sum(runs, "judge", "requests"),
            "retries": _sum(runs, "judge", "retries"),
            "throttled_429": _sum(runs, "judge", "throttled_429"),
            "cache": {
                "hits": _sum(runs, "judge", "cache", "hits"),
                "stored": _sum(runs, "judge", "cache", "stored"),
            },
        },
        "tokens": token_totals(building / merged.tables["items"].name),
        "tables": {name: path.name for name, path in merged.tables.items()},
    }
    write_manifest(building / MANIFEST, manifest)
