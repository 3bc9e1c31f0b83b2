"""A sweep's folder (``summeval-run -m``): its jobs' run directories in job order, each variant's
shards merged under ``<sweep>/merged/``, ``variants.json``, and the runs that stand for its
variants when the sweep is compared.

A job's directory is named after its overrides (``_names.job_dir_name``: long values shortened
to a prefix and a hash); ``variants.json`` maps each directory to the job's full overrides and
its label, so a name that hides a 300-character prompt still leads back to it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from summeval_runner._cli._names import job_dir_name
from summeval_runner._errors import SummevalError
from summeval_runner._rundir._manifest import MANIFEST, Manifest, read_manifest
from summeval_runner._rundir._merge import merge_runs

logger = logging.getLogger("summeval_runner")
MERGED = "merged"
VARIANTS = "variants.json"
MULTIRUN = "multirun.yaml"
_LAST = 1 << 30


def is_sweep(folder: Path) -> bool:
    """Whether ``folder`` is a sweep's folder (Hydra's ``multirun.yaml``, or our
    ``variants.json``), not a run directory."""
    return (
        folder.is_dir()
        and not (folder / MANIFEST).exists()
        and ((folder / MULTIRUN).is_file() or (folder / VARIANTS).is_file())
    )


def job_number(run_dir: Path) -> int:
    """The job's place in its sweep (``hydra.job.num``); jobs without one go last."""
    hydra_file = run_dir / ".hydra" / "hydra.yaml"
    if not hydra_file.exists():
        return _LAST
    number = OmegaConf.select(OmegaConf.load(hydra_file), "hydra.job.num", default=None)
    return int(number) if number is not None else _LAST


def exclude_keys(sweep_dir: Path) -> list[str]:
    """The overrides the sweep's directory names leave out, as its ``multirun.yaml`` says."""
    path = sweep_dir / MULTIRUN
    if not path.is_file():
        return []
    keys = OmegaConf.select(
        OmegaConf.load(path), "hydra.job.config.override_dirname.exclude_keys", default=None
    )
    return [str(key) for key in keys] if keys is not None else []


def _shard_group(manifest: Manifest) -> tuple[str, ...] | None:
    """A shard's overrides without its shard (what its variant is); ``None`` for other runs."""
    if manifest.shard is None:
        return None
    return tuple(sorted(o for o in manifest.overrides if not o.startswith("runner.shard=")))


@dataclass(frozen=True)
class Variant:
    """One variant of a sweep: the run that stands for it (the job's run; for shards, their
    merged run, ``None`` until they are merged), its shards, and its directory's name."""

    name: str
    run_dir: Path | None
    overrides: tuple[str, ...]
    shards: tuple[Path, ...] = ()


def _jobs(sweep_dir: Path) -> list[tuple[Path, Manifest]]:
    """Every job's run directory with a manifest, in job order (merged runs left out)."""
    found = []
    for path in sweep_dir.rglob(MANIFEST):
        if MERGED in path.relative_to(sweep_dir).parts[:1]:
            continue
        try:
            found.append((path.parent, read_manifest(path.parent)))
        except SummevalError as error:
            logger.warning("left out of the sweep: %s", error)
    return sorted(found, key=lambda job: (job_number(job[0]), str(job[0])))


def _merged(sweep_dir: Path) -> dict[tuple[str, ...], Path]:
    """The sweep's merged runs, by the overrides of the shards they merge."""
    merged: dict[tuple[str, ...], Path] = {}
    for path in sorted((sweep_dir / MERGED).glob(f"*/{MANIFEST}")):
        try:
            manifest = read_manifest(path.parent)
        except SummevalError:
            continue
        if manifest.merged_from is not None:
            merged[tuple(sorted(manifest.overrides))] = path.parent
    return merged


def variants(sweep_dir: Path) -> list[Variant]:
    """The sweep's variants in job order: each unsharded job's run, and for each variant run
    in shards, its merged run (found by its overrides) in the place of its first shard."""
    merged = _merged(sweep_dir)
    found: list[Variant] = []
    shards: dict[tuple[str, ...], list[Path]] = {}
    for run_dir, manifest in _jobs(sweep_dir):
        group = _shard_group(manifest)
        if group is None:
            name = run_dir.relative_to(sweep_dir).as_posix()
            found.append(Variant(name, run_dir, manifest.overrides))
        elif group in shards:
            shards[group].append(run_dir)
        else:
            shards[group] = [run_dir]
            found.append(Variant("", merged.get(group), group))  # its place in job order
    exclude = exclude_keys(sweep_dir)
    return [
        variant
        if variant.name
        else Variant(
            (
                variant.run_dir.relative_to(sweep_dir).as_posix()
                if variant.run_dir is not None
                else f"{MERGED}/{job_dir_name(variant.overrides, exclude) or 'default'}"
            ),
            variant.run_dir,
            variant.overrides,
            tuple(shards[variant.overrides]),
        )
        for variant in found
    ]


def merge_shards(sweep_dir: Path) -> None:
    """Merge each variant's shards into ``<sweep>/merged/<its overrides, named as the jobs'
    directories are, less the shard>``; a merge that is refused is logged, and that variant left
    without a merged run."""
    for variant in variants(sweep_dir):
        if not variant.shards or variant.run_dir is not None:
            continue
        out = sweep_dir / variant.name
        try:
            merge_runs(variant.shards, out)  # warns of question conflicts itself
        except SummevalError as error:
            logger.error("the shards of %s were not merged: %s", ",".join(variant.overrides), error)
            continue
        print(f"sweep shards merged: {out}")


def write_variants(sweep_dir: Path, found: Sequence[Variant]) -> Path:
    """``<sweep>/variants.json``: each directory of the sweep (jobs, then merged runs) mapped to
    its full overrides, its label and its status; a shard to the merged run it went into."""
    entries: dict[str, dict[str, Any]] = {}
    for variant in found:
        for shard in variant.shards:
            manifest = read_manifest(shard)
            entries[shard.relative_to(sweep_dir).as_posix()] = {
                "job": job_number(shard),
                "label": manifest.variant,
                "overrides": list(manifest.overrides),
                "status": manifest.status,
                "shard": f"{manifest.shard.index}/{manifest.shard.count}"
                if manifest.shard
                else None,
                "merged_into": variant.name if variant.run_dir is not None else None,
            }
        if variant.run_dir is None:
            continue
        manifest = read_manifest(variant.run_dir)
        entry: dict[str, Any] = {
            "label": manifest.variant,
            "overrides": list(manifest.overrides),
            "status": manifest.status,
        }
        if variant.shards:
            entry["merged_from"] = [
                shard.relative_to(sweep_dir).as_posix() for shard in variant.shards
            ]
        else:
            entry = {"job": job_number(variant.run_dir), **entry}
        entries[variant.name] = entry
    path = sweep_dir / VARIANTS
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(entries, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path
