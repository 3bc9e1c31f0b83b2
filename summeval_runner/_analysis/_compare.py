"""Comparing runs: means with intervals, paired differences against a baseline.

Runs are compared item by item: against the baseline, only items scored in both runs count
(matched by item id), and the difference of their means gets a paired bootstrap interval and a
paired sign-flip permutation test. Items that one run has and the other lacks are listed.

Only runs that measure alike are compared: the same judge, scale, prompt version, coverage basis
and dataset (``mismatches``); runs that differ there are refused unless the caller allows it.
What the gate finds in a comparison is ``_findings``; the runs of a config over time,
``_history``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from summeval_runner._errors import InputError, RunsDiffer
from summeval_runner._memory import hand_back_memory
from summeval_runner._rundir._manifest import MANIFEST, Manifest, read_manifest
from summeval_runner._rundir._parquet import described, typed_frame, write_typed
from summeval_runner._rundir._tables import ITEMS_SCHEMA, one_row_per_item
from summeval_runner._scorers._outcome import RunCounts
from summeval_runner._scorers._result import COUNTED, METRICS, SUMMARIZATION_SCORER_ID, Status
from summeval_runner._stats import mean_interval, paired_bootstrap_ci, paired_permutation_p

_WORST_ITEMS = 5
_STRINGS = pa.list_(pa.string())
COMPARISON_SCHEMA = pa.schema(
    [
        described(
            "variant", pa.string(), "the run's label, told apart from the others'", nullable=False
        ),
        described("run_dir", pa.string(), "the run directory", nullable=False),
        described("run_id", pa.string(), "the run's id (its manifest's run_id)", nullable=False),
        described(
            "status",
            pa.string(),
            "the run's manifest status: completed, interrupted, aborted, failed, partial, running",
            nullable=False,
        ),
        described("items", pa.int64(), "the run's finished items", nullable=False),
        described("scored", pa.int64(), "items scored (judged)", nullable=False),
        described(
            "blank_summaries",
            pa.int64(),
            "items whose summary is blank: 0 in every figure (the mean, the pairing, the gate)",
            nullable=False,
        ),
        described(
            "unscorable",
            pa.int64(),
            "items unscorable (a blank source): left out of the figures",
            nullable=False,
        ),
        described("errors", pa.int64(), "items that ended in error", nullable=False),
        described("unfinished", pa.int64(), "items the run did not finish", nullable=False),
        described(
            "flagged",
            pa.int64(),
            "items that tripped a manipulation check (items.parquet's flags); null for a run "
            "made before the checks (no flags column)",
        ),
        described(
            "ids_from_summaries",
            pa.bool_(),
            "the run's ids were generated from each item's input and its precomputed summary "
            "(no id column, no target): an item whose summary changed between runs has another "
            "id in each, and is not paired",
            nullable=False,
        ),
        described("dimension", pa.string(), "score, alignment or coverage", nullable=False),
        described(
            "n",
            pa.int64(),
            "items that count (scored, blank summaries) with a value of the dimension",
            nullable=False,
        ),
        described(
            "mean", pa.float64(), "the dimension's mean over the scored items and blank summaries"
        ),
        described("ci95_low", pa.float64(), "lower end of the mean's 95% t-interval"),
        described("ci95_high", pa.float64(), "upper end of the mean's 95% t-interval"),
        described("baseline", pa.string(), "the baseline's label; null for the baseline itself"),
        described(
            "n_paired",
            pa.int64(),
            "items scored in both this run and the baseline; null: not compared",
        ),
        described(
            "mean_diff", pa.float64(), "mean difference from the baseline over the paired items"
        ),
        described("diff_ci95_low", pa.float64(), "lower end of the paired bootstrap 95% interval"),
        described("diff_ci95_high", pa.float64(), "upper end of the paired bootstrap 95% interval"),
        described("p_value", pa.float64(), "paired sign-flip permutation test's p-value"),
        described("significant", pa.bool_(), "p_value < alpha; null where nothing was compared"),
        described("better", pa.int64(), "paired items above the baseline"),
        described("worse", pa.int64(), "paired items below the baseline"),
        described("tied", pa.int64(), "paired items equal to the baseline"),
        described(
            "items_only_here",
            _STRINGS,
            "ids of items this run has and the baseline lacks",
            nullable=False,
        ),
        described(
            "items_only_in_baseline",
            _STRINGS,
            "ids of items the baseline has and this run lacks",
            nullable=False,
        ),
        described(
            "worst_items",
            _STRINGS,
            "the paired items that dropped most, worst first",
            nullable=False,
        ),
    ]
)
COMPARISON_COLUMNS = COMPARISON_SCHEMA.names


@dataclass(frozen=True)
class ComparedRow:
    """One row of a comparison (a run, a dimension) as a typed value: nulls as ``None``, lists
    as tuples. The gate's findings and its writers read these, built once from the table
    (``compared_rows``), never the table's columns by name."""

    variant: str
    run_dir: str
    run_id: str
    status: str
    items: int
    scored: int
    blank_summaries: int
    unscorable: int
    errors: int
    unfinished: int
    flagged: int | None
    ids_from_summaries: bool
    dimension: str
    n: int
    mean: float | None
    ci95_low: float | None
    ci95_high: float | None
    baseline: str | None
    n_paired: int | None
    mean_diff: float | None
    diff_ci95_low: float | None
    diff_ci95_high: float | None
    p_value: float | None
    significant: bool | None
    better: int | None
    worse: int | None
    tied: int | None
    items_only_here: tuple[str, ...]
    items_only_in_baseline: tuple[str, ...]
    worst_items: tuple[str, ...]

    @property
    def paired(self) -> bool:
        """Whether this run was paired with the baseline on at least one item."""
        return self.mean_diff is not None


# What a comparison written before a column holds there: blank summaries were not counted
# (none), the manipulation checks did not exist (not known), ids were not made from summaries.
_BEFORE_COLUMN: dict[str, Any] = {
    "blank_summaries": 0,
    "flagged": None,
    "ids_from_summaries": False,
}


def _typed(kind: pa.DataType, value: Any) -> Any:
    if isinstance(value, list | tuple | np.ndarray):
        return tuple(str(each) for each in value)
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if pa.types.is_integer(kind):
        return int(value)
    if pa.types.is_floating(kind):
        return float(value)
    if pa.types.is_boolean(kind):
        return bool(value)
    return str(value)


def compared_rows(comparison: pd.DataFrame) -> list[ComparedRow]:
    """``comparison``'s rows as ``ComparedRow``s, in its order."""
    kinds = {field.name: field.type for field in COMPARISON_SCHEMA}
    return [
        ComparedRow(
            **{
                name: _typed(kind, record.get(name, _BEFORE_COLUMN.get(name)))
                for name, kind in kinds.items()
            }
        )
        for record in comparison.to_dict("records")
    ]


def runs_of(rows: Sequence[ComparedRow]) -> list[ComparedRow]:
    """Each compared run's first row (its counts and status are on every row of it)."""
    seen: set[tuple[str, str]] = set()
    first = []
    for row in rows:
        if (row.variant, row.run_dir) not in seen:
            seen.add((row.variant, row.run_dir))
            first.append(row)
    return first


@dataclass(frozen=True)
class Run:
    """A finished run directory: its label, its manifest and its per-item scores."""

    path: Path
    run_id: str
    variant: str
    started_at: datetime
    manifest: Manifest
    items: pd.DataFrame  # one row per item of the summarization scorer


def _where(path: Path, runs: list[Run]) -> str:
    """The shortest tail of ``path`` that tells it from the other runs' directories."""
    names = [r.path.name for r in runs]
    return path.name if names.count(path.name) == 1 else f"{path.parent.name}/{path.name}"


def named(variant: str, run_dir: str) -> str:
    """A run as the gate's lines name it: its label and its directory, once. A label told
    apart by its directory's tail (``nightly (day3)``) drops that tail for the full path."""
    tail = variant.rsplit(" (", 1)
    if len(tail) == 2 and tail[1].endswith(")") and run_dir.endswith(tail[1][:-1]):
        variant = tail[0]
    return f"{variant} ({run_dir})"


def labelled(runs: list[Run]) -> list[Run]:
    """The runs, each with a label no other has: its variant, and where two runs share one
    (two nightly runs of "default"), its directory too."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.variant] = counts.get(run.variant, 0) + 1
    return [
        run
        if counts[run.variant] == 1
        else replace(run, variant=f"{run.variant} ({_where(run.path, runs)})")
        for run in runs
    ]


# What a comparison reads of a run's items. The other columns (texts, error details, usage,
# flag spans) are the report's: a million items' take most of a gigabyte a run, the sources alone
# a gigabyte. ``flags`` stays to count the flagged items; its lists stay in Arrow, not one
# Python object an item.
COMPARED_COLUMNS = ("item_id", "trial", "status", *METRICS.values(), "scale", "flags")


def load_run(path: Path | str, *, items_required: bool = True, compared_only: bool = False) -> Run:
    """Read a run directory's manifest and ``items.parquet``; ``InputError`` if it is not one.

    Without ``items_required``, a run that wrote no tables (running, killed, or stopped before
    it could write them) is read with no items: its manifest says what became of it. With
    ``compared_only``, the items hold only ``COMPARED_COLUMNS`` (what a comparison reads, not
    what a report shows), so that comparing two million-item runs stays in bounded memory.
    """
    path = Path(path)
    items_path = path / "items.parquet"
    if not (path / MANIFEST).exists() or (items_required and not items_path.exists()):
        raise InputError(
            f"{path} is not a finished run directory: it needs {MANIFEST} and items.parquet"
        )
    manifest = read_manifest(path)
    if items_path.exists() and compared_only:
        items = _compared_items(items_path)
    elif items_path.exists():
        # The summarization scorer's rows only, filtered as they are read: no copy of the
        # whole table is made to be filtered.
        items = pq.read_table(
            items_path, filters=[("scorer_id", "==", SUMMARIZATION_SCORER_ID)]
        ).to_pandas()
        # What reading took beyond the frame is handed back before the next run is read.
        hand_back_memory()
    else:
        items = ITEMS_SCHEMA.empty_table().to_pandas()
        items = items[items["scorer_id"] == SUMMARIZATION_SCORER_ID]
    # An item judged in several trials is compared by its mean over them.
    items = one_row_per_item(items)
    items = items.set_index("item_id", drop=False)
    return Run(
        path=path,
        run_id=manifest.run_id,
        variant=manifest.variant,
        started_at=manifest.started_at,
        manifest=manifest,
        items=items,
    )


def _compared_items(items_path: Path) -> pd.DataFrame:
    """The summarization scorer's rows of ``items.parquet``, ``COMPARED_COLUMNS`` only, read a
    batch of rows at a time and filtered as they come, then made into pandas a column at a time,
    each column's Arrow chunks let go as it is made: no column is read whole to be filtered, and
    no table of the run's rows is held beside its frame. Comparing two million-item runs peaked
    at 612 MB (an RSS sampler's figure) when each table was read whole and converted at once."""
    # Three statuses (and a scorer or two) a million times: a category each, not a string.
    with pq.ParquetFile(items_path, read_dictionary=["status", "scorer_id"]) as file:
        stored = file.schema_arrow
        columns = [name for name in stored.names if name in COMPARED_COLUMNS]
        chunks: dict[str, list[pa.Array]] = {name: [] for name in columns}
        for batch in file.iter_batches(columns=[*columns, "scorer_id"]):
            kept = batch.filter(pc.equal(batch.column("scorer_id"), SUMMARIZATION_SCORER_ID))
            for name in columns:
                chunks[name].append(kept.column(name))
    schema = pa.schema([stored.field(name) for name in columns], metadata=stored.metadata)
    # The types pandas gives these columns (nullable integers named in the schema's metadata).
    kinds = schema.empty_table().to_pandas(types_mapper=_arrow_lists).dtypes
    frame: dict[str, Any] = {}
    for name in columns:
        array = pa.chunked_array(chunks.pop(name), type=schema.field(name).type)
        kind = kinds[name]
        # Arrow-backed types take the chunks as they are; the others are copied into numpy.
        from_arrow = getattr(kind, "__from_arrow__", None)
        frame[name] = from_arrow(array) if from_arrow is not None else array.to_pandas()
        del array
        # What the column's chunks held is handed back before the next is made.
        hand_back_memory()
    items: pd.DataFrame = pd.DataFrame(frame, copy=False)
    return items


def _arrow_lists(kind: pa.DataType) -> pd.ArrowDtype | None:
    return pd.ArrowDtype(kind) if pa.types.is_list(kind) else None


def run_counts(run: Run) -> dict[str, int]:
    """The run's items (of the summarization scorer) and how many were scored, blank summaries,
    unscorable or errors; and the items it left unfinished (``Manifest.unfinished_of``: for a
    killed run still marked running, its selection beyond the items its tables hold). The
    comparison, the gate and the report all read them here."""
    tally = cast(dict[Status, int], run.items["status"].value_counts().to_dict())
    counts = RunCounts.tallied(tally)
    return {
        "items": counts.total,
        "scored": counts.scored,
        "blank_summaries": counts.blank_summaries,
        "unscorable": counts.unscorable,
        "errors": counts.errors,
        "unfinished": run.manifest.unfinished_of(counts.total),
    }


def flagged_items(run: Run) -> int | None:
    """The run's items (of the summarization scorer) with a manipulation flag, or ``None`` for
    a run whose items table predates the checks (it has no ``flags`` column)."""
    if "flags" not in run.items.columns:
        return None
    flags = run.items["flags"]
    if isinstance(flags.dtype, pd.ArrowDtype):
        return int((flags.list.len().fillna(0) > 0).sum())
    return int(sum(1 for each in flags if each is not None and len(each)))


def _judge(run: Run) -> Any:
    identity = run.manifest.setup.get("model", {}).get(SUMMARIZATION_SCORER_ID)
    if isinstance(identity, Mapping):
        # Where the judge is served is not which judge it is: the same model through another
        # endpoint (a proxy, another port) judges alike. The URL may also hold credentials.
        return {key: value for key, value in identity.items() if key != "base_url"}
    # Runs recorded before the setup was: the judge's name is all there is.
    return run.manifest.judge.name if run.manifest.judge is not None else None


def run_scale(run: Run) -> float | None:
    """The run's scale: its scorer's setting in the manifest, else the largest of its items'."""
    settings = run.manifest.setup.get("scorer", {}).get(SUMMARIZATION_SCORER_ID)
    if isinstance(settings, Mapping) and settings.get("scale") is not None:
        return float(settings["scale"])
    scales = run.items["scale"].dropna()
    return float(scales.max()) if len(scales) else None


def _dataset(run: Run) -> str | None:
    """The dataset's fingerprint as recorded: its file's SHA-256."""
    return run.manifest.dataset.sha256 if run.manifest.dataset is not None else None


def _inputs(run: Run) -> str | None:
    """The SHA-256 of the dataset's inputs, whatever their order and outputs; None for runs
    that did not record it (a stream, an older run)."""
    return run.manifest.dataset.inputs_sha256 if run.manifest.dataset is not None else None


def _same_dataset(run: Run, reference: Run) -> tuple[bool, str, str]:
    """Whether two runs read the same dataset, and each one's fingerprint as shown.

    The documents summarized make the dataset: two runs whose inputs are the same compare,
    whatever the rows' order and whatever precomputed outputs (the systems under test) the
    files hold. Runs that did not both record their inputs' hash compare by file bytes.
    """
    ours, theirs = _inputs(run), _inputs(reference)
    if ours is not None and theirs is not None:
        return ours == theirs, f"inputs sha256 {ours[:12]}", f"inputs sha256 {theirs[:12]}"
    ours, theirs = _dataset(run), _dataset(reference)
    return ours == theirs, _shown("dataset", ours, None), _shown("dataset", theirs, None)


def _prompt_version(run: Run) -> str | None:
    return run.manifest.prompt_version


def _questions(run: Run) -> str | None:
    """How the run's coverage questions were drawn: once per source, or by each item. Runs
    recorded before the setting was have drawn them per item."""
    settings = run.manifest.setup.get("scorer", {}).get(SUMMARIZATION_SCORER_ID)
    if not isinstance(settings, Mapping):
        return None
    return str(settings.get("questions", "per_item"))


def _coverage_basis(run: Run) -> str | None:
    """What the run's coverage was measured on (SPEC §1.7): questions drawn from the source, or
    the data's key facts, questions or reference summaries; each basis with its items when they
    differ. A pairing across bases sets a coverage measured on one against one measured on
    another."""
    bases = run.manifest.coverage_bases
    if bases is not None and run.manifest.coverage_basis == "mixed":
        return ", ".join(f"{basis} {items}" for basis, items in bases.items() if items)
    return run.manifest.coverage_basis


# What decides an item's score besides the summary: runs that differ here measure differently
# (and the dataset, by ``_same_dataset``).
_DECIDING: dict[str, Callable[[Run], Any]] = {
    "judge": _judge,
    "scale": run_scale,
    "prompt version": _prompt_version,
    # Variants asked the same questions and variants that each drew their own measure coverage
    # differently: a per_item run's coverage carries the noise of its own question choice.
    "questions": _questions,
    "coverage basis": _coverage_basis,
}


def _shown(setting: str, value: Any, keys: list[str] | None) -> str:
    if value is None:
        return "none recorded"
    if setting == "dataset":
        return f"sha256 {str(value)[:12]}"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={value.get(key)!r}" for key in keys or sorted(value))
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Mismatch:
    """A setting that decides scores (judge, scale, prompt version, questions, coverage basis,
    dataset) and differs between a run and the run it is compared with."""

    setting: str
    variant: str
    value: str
    reference: str
    reference_value: str

    def describe(self) -> str:
        return (
            f"{self.setting}: {self.variant} has {self.value}, "
            f"{self.reference} has {self.reference_value}"
        )


def mismatches(runs: Sequence[Run], base: Run | None) -> list[Mismatch]:
    """Each setting that decides scores and differs between a run and the baseline (or, with
    no baseline, the first run)."""
    reference = base if base is not None else (runs[0] if runs else None)
    found: list[Mismatch] = []
    for run in runs:
        if reference is None or run is reference:
            continue
        reference_label = reference.variant if base is None else f"the baseline {base.variant}"
        for setting, read in _DECIDING.items():
            ours, theirs = read(run), read(reference)
            if ours == theirs:
                continue
            if (ours is None and run.items.empty) or (theirs is None and reference.items.empty):
                # A run that wrote no tables and recorded no setting (an older run's scale is
                # read from its items): nothing says it differs; its status gates it.
                continue
            keys = None
            if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
                keys = sorted(
                    k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)
                )
            found.append(
                Mismatch(
                    setting,
                    run.variant,
                    _shown(setting, ours, keys),
                    reference_label,
                    _shown(setting, theirs, keys),
                )
            )
        same, ours_shown, theirs_shown = _same_dataset(run, reference)
        if not same:
            found.append(
                Mismatch("dataset", run.variant, ours_shown, reference_label, theirs_shown)
            )
    return found


def _ids(run: Run) -> str | None:
    """ "given" or "generated" (from the items' content), or None when the run did not say."""
    dataset = run.manifest.dataset
    if dataset is not None and dataset.ids is not None:
        return dataset.ids
    fields = run.manifest.setup.get("data", {}).get("fields")
    if isinstance(fields, Mapping) and "id" in fields and fields["id"] is None:
        return "generated"
    return None


@dataclass(frozen=True)
class ContentPairing:
    """A run and the baseline whose ids were both generated from content, with items that did
    not pair: a row whose input (or precomputed output) differs between them has another id in
    each, so it is not paired."""

    variant: str
    baseline: str
    paired: int
    only_here: int
    only_in_baseline: int

    def describe(self) -> str:
        return (
            f"{self.variant} and the baseline {self.baseline} have no id column: items were "
            f"paired by ids derived from their content (the input, and a precomputed output), "
            f"so a row whose content differs between them is not paired ({self.paired} items "
            f"paired; {self.only_here} only in {self.variant}, "
            f"{self.only_in_baseline} only in {self.baseline}); give the data an id column "
            f"to pair its rows by it"
        )


def content_pairings(runs: Sequence[Run], base: Run | None) -> list[ContentPairing]:
    """The runs paired with the baseline by ids generated from content, where some items did
    not pair (rows in another order pair: their ids are the same)."""
    if base is None or _ids(base) != "generated":
        return []
    found = []
    for run in runs:
        if run is base or _ids(run) != "generated":
            continue
        paired, only_here, only_in_baseline = content_pairing_counts(run, base)
        if only_here == only_in_baseline == 0:
            continue
        found.append(ContentPairing(run.variant, base.variant, paired, only_here, only_in_baseline))
    return found


def ids_from_summaries(run: Run) -> bool:
    """Whether the run's ids were generated from its items' inputs and precomputed summaries
    (``generated_id``): two runs of such data pair only the items whose summary is the same in
    both, so the items a change of the system under test touched are the ones left unpaired."""
    return _ids(run) == "generated" and run.manifest.setup.get("target", ...) is None


def _scored_mask(run: Run, column: str) -> npt.NDArray[np.bool_]:
    """Which of the run's items count (scored, or a blank summary's 0) and have a value of
    ``column``."""
    scored: npt.NDArray[np.bool_] = run.items["status"].isin(COUNTED).to_numpy(dtype=bool)
    present: npt.NDArray[np.bool_] = run.items[column].notna().to_numpy(dtype=bool)
    return scored & present


def scored_values(run: Run, column: str) -> npt.NDArray[np.float64]:
    """The run's values of ``column`` over its scored items, in its items' order: a mask of
    arrays, not of the frame (which would copy every column and the index of ids first)."""
    values = _row_values(run, column)
    scored: npt.NDArray[np.float64] = values[~np.isnan(values)]
    return scored


def load_runs(
    run_dirs: Sequence[Path | str],
    baseline: Path | str | None = None,
    *,
    compared_only: bool = False,
) -> tuple[list[Run], Run | None]:
    """The runs to compare, each labelled apart, the baseline first; and the baseline, if any.

    ``baseline`` is a run directory (compared too, if not among ``run_dirs``), or the label of
    one of the runs: its variant, or the label that tells it from another run of the same
    variant. A directory that exists wins over a label of the same spelling. ``InputError``
    for a label that is no run's, listing the labels there are. With ``compared_only``, the
    runs' items hold only what a comparison reads (``load_run``).
    """
    if not run_dirs:
        raise InputError("compare needs at least one run directory, got none")
    runs = [load_run(path, compared_only=compared_only) for path in run_dirs]
    if baseline is None:
        return labelled(runs), None
    if not Path(baseline).is_dir():
        labels = labelled(runs)
        return labels, _by_label(str(baseline), runs, labels)
    where = Path(baseline).resolve()
    if all(run.path.resolve() != where for run in runs):
        runs = [load_run(baseline, compared_only=compared_only), *runs]
    runs = labelled(runs)
    return runs, next(run for run in runs if run.path.resolve() == where)


def _by_label(label: str, runs: list[Run], labels: list[Run]) -> Run:
    """The run whose label, or whose variant when no other run shares it, is ``label``."""
    for run, shown in zip(runs, labels, strict=True):
        if label == shown.variant or (label == run.variant and shown.variant == run.variant):
            return shown
    shared = [
        shown.variant for run, shown in zip(runs, labels, strict=True) if run.variant == label
    ]
    if shared:
        raise InputError(
            f"baseline {label!r} is the variant of {len(shared)} runs; name one by its label "
            f"({', '.join(repr(s) for s in shared)}) or its directory"
        )
    raise InputError(
        f"baseline {label!r} is neither a run directory nor the label of a compared run; "
        f"the labels are: {', '.join(repr(shown.variant) for shown in labels)}"
    )


def compare_runs(
    run_dirs: Sequence[Path | str],
    baseline: Path | str | None = None,
    *,
    seed: int = 0,
    alpha: float = 0.05,
    allow_mismatch: bool = False,
) -> pd.DataFrame:
    """One row per run and dimension (score, alignment, coverage): the run's items and how
    many were scored, unscorable or errors; its mean with a 95% interval; and against the
    baseline (when given, and for the other runs) the paired comparison on the items both
    scored: mean difference, paired bootstrap 95% interval, permutation p-value, items better /
    worse / tied, the items only one of them has, and the items that dropped most.

    Runs whose judge, scale, prompt version, coverage basis or dataset (the SHA-256 of its
    inputs, whatever their order and outputs; of its file for runs that did not record it)
    differ from the baseline's (or the first run's) raise ``InputError`` naming each difference,
    unless ``allow_mismatch``. Each run's manifest ``status`` and ``unfinished`` items are in
    its rows.
    """
    runs, base = load_runs(run_dirs, baseline, compared_only=True)
    return compare_loaded(runs, base, seed=seed, alpha=alpha, allow_mismatch=allow_mismatch)


def compare_loaded(
    runs: list[Run],
    base: Run | None,
    *,
    seed: int = 0,
    alpha: float = 0.05,
    allow_mismatch: bool = False,
) -> pd.DataFrame:
    """``compare_runs`` on runs already read by ``load_runs``."""
    if not allow_mismatch:
        found = mismatches(runs, base)
        if found:
            raise RunsDiffer(found)
    rows: list[dict[str, Any]] = []
    for run in runs:
        counts = run_counts(run)
        pairing = _Pairing.of(run, base) if base is not None and run is not base else None
        for dimension, column in METRICS.items():
            values = scored_values(run, column)
            upper = run_scale(run) if dimension == "score" else 1.0
            # The array itself, not a list of it: a million Python floats would be 32 MB more.
            mean, low, high = mean_interval(values, upper=upper)
            row: dict[str, Any] = dict.fromkeys(COMPARISON_COLUMNS)
            row |= {
                "variant": run.variant,
                "run_dir": str(run.path),
                "run_id": run.run_id,
                "status": run.manifest.status,
                "flagged": flagged_items(run),
                "ids_from_summaries": ids_from_summaries(run),
                **counts,
                "dimension": dimension,
                "n": len(values),
                "mean": mean,
                "ci95_low": low,
                "ci95_high": high,
                "items_only_here": [],
                "items_only_in_baseline": [],
                "worst_items": [],
            }
            if base is not None and pairing is not None:
                row |= _paired(run, base, column, pairing, seed=seed, alpha=alpha)
            rows.append(row)
    return typed_frame(rows, COMPARISON_SCHEMA)


def write_comparison(comparison: pd.DataFrame, path: Path) -> Path:
    """``comparison.parquet``: the comparison with its explicit schema (counts int64, flags
    bool, lists of ids list<string>, each column described), read back by pandas as it was."""
    return write_typed(comparison, COMPARISON_SCHEMA, path)


@dataclass(frozen=True)
class _Pairing:
    """A run's items matched to the baseline's by id: the run's rows in the order of their ids
    (UTF-8 bytes sort as code points do), and for each the baseline's row of the same id. Integers,
    not sets of Python strings, and no table of the ids of both runs: two million-item runs pair
    in tens of megabytes. The differences come in the ids' order, whatever the runs' rows' order,
    which is what the seeded bootstrap draws from."""

    here: pa.ChunkedArray  # the run's ids, in its rows' order
    there: pa.ChunkedArray  # the baseline's ids, in its rows' order
    order: npt.NDArray[np.int64]  # the run's rows, in the order of their ids
    match: npt.NDArray[np.int64]  # for each of those rows, the baseline's row of its id; -1: none

    @classmethod
    def of(cls, run: Run, base: Run) -> _Pairing:
        here, there = _arrow_ids(run), _arrow_ids(base)
        if here.type != there.type:
            # Strings of either width, or an empty run's ids (no type): one type for both. Not
            # done where they agree: a million ids cast are 22 MB copied.
            here, there = here.cast(pa.large_string()), there.cast(pa.large_string())
        order = pc.sort_indices(here).to_numpy().astype(np.int64)
        return cls(here, there, order, _matched(here, there, order))

    @property
    def paired(self) -> int:
        return int((self.match >= 0).sum())

    def only_here(self) -> list[str]:
        """The ids of the run's items that the baseline lacks, sorted."""
        rows = self.order[self.match < 0]
        # None is the usual answer: taking none from a million chunked ids would still join them.
        return list(self.here.take(pa.array(rows)).to_pylist()) if len(rows) else []

    def only_in_baseline(self) -> list[str]:
        """The ids of the baseline's items that the run lacks, sorted."""
        unmatched = np.ones(len(self.there), dtype=bool)
        unmatched[self.match[self.match >= 0]] = False
        rows = np.flatnonzero(unmatched)
        if not len(rows):
            return []
        ids = self.there.take(pa.array(rows))
        return list(ids.take(pc.sort_indices(ids)).to_pylist())

    def values(
        self, run: Run, base: Run, column: str
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """The run's and the baseline's values of ``column`` for the run's items in the order of
        their ids; NaN where an item was not scored (or the baseline has no such item)."""
        ours = _row_values(run, column)[self.order]
        theirs = np.full(len(self.order), np.nan)
        matched = self.match >= 0
        theirs[matched] = _row_values(base, column)[self.match[matched]]
        return ours, theirs

    def id_at(self, index: int) -> str:
        """The id of the run's ``index``-th item in the order of their ids."""
        value: str = self.here[int(self.order[index])].as_py()
        return value


def _arrow_ids(run: Run) -> pa.ChunkedArray:
    """The run's item ids, as the Arrow strings they are held in (no copy where they are)."""
    values = run.items.index.array
    # Arrow's protocol gives the chunks pandas holds; ``pa.array`` would join them in a copy.
    held = values.__arrow_array__() if hasattr(values, "__arrow_array__") else pa.array(values)
    return held if isinstance(held, pa.ChunkedArray) else pa.chunked_array([held])


# Ids looked up at once when a run's items are matched to the baseline's: a block of the run's
# ids in their order, against the baseline's ids in the same range of the order.
_MATCH_BLOCK = 1 << 16


def _matched(
    here: pa.ChunkedArray, there: pa.ChunkedArray, order: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """For each of the run's rows in ``order`` (its ids sorted), the baseline's row of the same
    id; -1 where none. A merge of the two sorted id lists: the run's ids a block at a time, each
    looked up among the baseline's ids that sort between the block's first and last (found by
    bisection in the baseline's order), so the work grows with the runs' lengths, not their
    product (the ids compared by hashing were 1.0 s for two million-item runs, 85 s for ten
    million by extrapolation), and memory is a block's. Ids sort as UTF-8 bytes do, which is
    the order of their code points. A run's ids are distinct (datasets refuse a repeated id)."""
    match = np.full(len(order), -1, dtype=np.int64)
    if not len(order) or not len(there):
        return match
    theirs = pc.sort_indices(there).to_numpy().astype(np.int64)

    positions = range(len(theirs))

    def their_id(position: int) -> str:
        value: str = there[int(theirs[position])].as_py()
        return value

    start = 0
    for first in range(0, len(order), _MATCH_BLOCK):
        rows = order[first : first + _MATCH_BLOCK]
        block = here.take(pa.array(rows))
        # The baseline's ids from the block's first to its last, by bisection in their order.
        start = bisect.bisect_left(positions, block[0].as_py(), lo=start, key=their_id)
        end = bisect.bisect_right(positions, block[-1].as_py(), lo=start, key=their_id)
        # The baseline's ids in the block's range, a block's worth at a time (a run whose ids
        # are few and far between, against a long baseline, spans much of it in one block).
        for window in range(start, end, _MATCH_BLOCK):
            their_rows = theirs[window : min(end, window + _MATCH_BLOCK)]
            found = pc.index_in(block, value_set=there.take(pa.array(their_rows)))
            at = found.fill_null(-1).to_numpy()
            hit = at >= 0
            match[first : first + len(rows)][hit] = their_rows[at[hit]]
        start = end
    return match


def _row_values(run: Run, column: str) -> npt.NDArray[np.float64]:
    """The run's values of ``column`` in its rows' order; NaN where the item was not scored."""
    values = run.items[column].to_numpy(dtype=float, na_value=np.nan)
    placed: npt.NDArray[np.float64] = np.where(_scored_mask(run, column), values, np.nan)
    return placed


def content_pairing_counts(run: Run, base: Run) -> tuple[int, int, int]:
    """Items paired, only in the run, only in the baseline."""
    paired = _Pairing.of(run, base).paired
    return paired, len(run.items) - paired, len(base.items) - paired


def _paired(
    run: Run, base: Run, column: str, pairing: _Pairing, *, seed: int, alpha: float
) -> dict[str, Any]:
    ours, theirs = pairing.values(run, base, column)
    shared = np.flatnonzero(~np.isnan(ours) & ~np.isnan(theirs))  # in the ids' order
    result: dict[str, Any] = {
        "baseline": base.variant,
        "n_paired": len(shared),
        "items_only_here": pairing.only_here(),
        "items_only_in_baseline": pairing.only_in_baseline(),
    }
    if not len(shared):
        return result
    diffs = ours[shared] - theirs[shared]
    del ours, theirs
    mean_diff = float(diffs.mean())
    low, high = paired_bootstrap_ci(diffs, seed=seed) if len(diffs) > 1 else (None, None)
    p_value = paired_permutation_p(diffs, seed=seed) if len(diffs) > 1 else 1.0
    order = np.argsort(diffs, kind="stable")
    worst = [pairing.id_at(int(shared[i])) for i in order[:_WORST_ITEMS] if diffs[i] < 0]
    return result | {
        "mean_diff": mean_diff,
        "diff_ci95_low": low,
        "diff_ci95_high": high,
        "p_value": p_value,
        "significant": bool(p_value < alpha),
        "better": int((diffs > 1e-12).sum()),
        "worse": int((diffs < -1e-12).sum()),
        "tied": int((np.abs(diffs) <= 1e-12).sum()),
        "worst_items": worst,
    }
