"""Human ratings in: a file of sources, summaries and people's ratings, read and checked whole.

``summeval-agree`` and ``judge_agreement`` judge every rated summary and hold each of the
judge's dimensions against a rating. Every problem is found before any judge call and named
with the file, the row and the field, as datasets' are:
``ratings.csv row 7: field 'consistency' (human.against.alignment) must be a number, got 'high'``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from summeval_runner._errors import DatasetError, InputError, RatingsError
from summeval_runner._inputs._datasets import (
    IdAllocator,
    _rows,
    detect_format,
    file_sha256,
)
from summeval_runner._judges._protocol import COVERAGE_BASES, CoverageBasis
from summeval_runner._scorers._reference import coverage_reference

Dimension = Literal["alignment", "coverage", "score"]
DIMENSIONS: tuple[Dimension, ...] = get_args(Dimension)


@dataclass(frozen=True)
class HumanTarget:
    """What one of the judge's dimensions is held against: a rating column, or the mean of
    several (``score`` against the mean of consistency and relevance); on a scale, or a binary
    label (1: people call the summary good on that dimension, 0: not)."""

    dimension: Dimension
    ratings: tuple[str, ...]
    binary: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "ratings", tuple(self.ratings))
        if self.dimension not in DIMENSIONS:
            raise RatingsError(
                f"human.against: {self.dimension!r} is not a dimension of the judge "
                f"(it has: {', '.join(DIMENSIONS)})"
            )
        if not self.ratings or not all(isinstance(r, str) and r for r in self.ratings):
            raise RatingsError(
                f"human.against.{self.dimension}.ratings must name one rating column or more, "
                f"got {list(self.ratings)!r}"
            )
        if self.binary and len(self.ratings) > 1:
            raise RatingsError(
                f"human.against.{self.dimension}: a binary label is one column, got "
                f"{list(self.ratings)!r}"
            )

    @property
    def label(self) -> str:
        """The rating as a table shows it: ``consistency``, ``mean(consistency, relevance)``."""
        if len(self.ratings) == 1:
            return self.ratings[0]
        return f"mean({', '.join(self.ratings)})"


# SummEval's ratings, as its expert annotations name them (../shared/data/README.md).
SUMMEVAL_TARGETS = (
    HumanTarget("alignment", ("consistency",)),
    HumanTarget("coverage", ("relevance",)),
    HumanTarget("score", ("consistency", "relevance")),
)


@dataclass(frozen=True)
class RatedSummary:
    """One row of a ratings file: a summary of a source, and what people rated it."""

    id: str
    source: str
    summary: str
    group: str | None
    system: str | None
    # Each rating a target names, as a number (a binary label as 0.0 or 1.0).
    ratings: Mapping[str, float]
    row: int
    # What the summary's coverage is measured on, when not the source's questions: the row's
    # key facts, questions or reference summary, as an item's ground truth ({kind: value}).
    ground_truth: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class HumanRatings:
    """A ratings file (JSONL, CSV or Parquet) and how to read it.

    ``source`` and ``summary`` name the fields of the texts; ``group`` the field shared by the
    summaries of one source (summary-level correlations are computed within each group, and
    the bootstrap resamples groups): ``None`` when every source has one summary. ``system`` the
    field naming the system that wrote each summary, for system-level correlations. ``id`` a
    field of unique row ids (else ids are generated from the texts). ``targets``: what each
    dimension is held against; SummEval's by default.

    ``basis`` is what coverage is measured on (SPEC §1.7): ``source_questions`` (drawn by the
    judge from the source), or each row's ``key_facts``, ``questions`` or ``reference`` summary,
    from the field of that name (REALSumm's rows hold the human key facts and the reference).
    Each basis is one agreement run; two runs on the same ratings compare as judges do
    (``baseline``), paired on the same draws.
    """

    path: Path
    source: str = "source"
    summary: str = "summary"
    group: str | None = "doc_id"
    system: str | None = None
    id: str | None = None
    targets: tuple[HumanTarget, ...] = SUMMEVAL_TARGETS
    format: str = "auto"
    limit: int | None = None
    key_facts: str | None = None
    questions: str | None = None
    reference: str | None = None
    basis: CoverageBasis = "source_questions"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        if self.basis not in COVERAGE_BASES:
            raise RatingsError(
                f"human.basis must be one of {', '.join(COVERAGE_BASES)}, got {self.basis!r}"
            )
        if self.basis != "source_questions" and self.basis_field is None:
            raise RatingsError(
                f"human.basis={self.basis} measures coverage on each row's {self.basis}: name "
                f"the field that holds them (human.fields.{self.basis}=...)"
            )
        object.__setattr__(self, "targets", tuple(self.targets))
        if not self.targets:
            raise RatingsError("human.against: hold at least one dimension against a rating")
        seen = Counter(t.dimension for t in self.targets)
        twice = [d for d, n in seen.items() if n > 1]
        if twice:
            raise RatingsError(f"human.against: {twice[0]} is held against two ratings")
        for target in self.targets:
            for rating in target.ratings:
                kinds = {t.binary for t in self.targets if rating in t.ratings}
                if len(kinds) > 1:
                    raise RatingsError(
                        f"human.against: {rating!r} is a binary label for one dimension and a "
                        "scale for another"
                    )
        if self.limit is not None and self.limit < 2:
            raise RatingsError(f"human.limit must be >= 2 or null, got {self.limit}")

    @property
    def basis_field(self) -> str | None:
        """The field the basis reads (None for the source's questions, or a field not named)."""
        if self.basis == "source_questions":
            return None
        field: str | None = getattr(self, self.basis)
        return field

    def sha256(self) -> str:
        """The SHA-256 of the file's bytes: two agreements pair only on the same ratings."""
        return file_sha256(self.path)

    def read(self) -> tuple[RatedSummary, ...]:
        """Every row, checked: ``RatingsError`` naming the file, row and field at the first
        problem."""
        path = self.path
        if path.is_dir():
            raise RatingsError(
                f"human.path: {path} is a directory; name a JSONL, CSV or Parquet file"
            )
        if not path.is_file():
            raise RatingsError(f"human.path: no such file: {path}")
        try:
            kind = detect_format(path, self.format)
        except DatasetError as error:  # worded for datasets: name the ratings' own setting
            raise RatingsError(str(error).replace("dataset.format", "human.format")) from None
        binary = {r for t in self.targets if t.binary for r in t.ratings}
        setting = {
            r: f"human.against.{t.dimension}" for t in reversed(self.targets) for r in t.ratings
        }
        ids = IdAllocator(" (human.fields.id)")
        rows: list[RatedSummary] = []
        for number, row in _rows(path, kind):
            where = f"{path} row {number}"
            if not isinstance(row, Mapping):
                raise RatingsError(f"{where}: a row must be an object with fields, got {row!r:.60}")
            source = _text(row, self.source, "human.fields.source", where)
            summary = _text(row, self.summary, "human.fields.summary", where)
            group = _label(row, self.group, "human.fields.group", where)
            system = _label(row, self.system, "human.fields.system", where)
            ratings = {
                name: _rating(row, name, setting[name], name in binary, where) for name in setting
            }
            raw_id = _label(row, self.id, "human.fields.id", where)
            item_id = ids.assign(raw_id, source, summary, where=where, position=number)
            truth = self._ground_truth(row, where)
            rows.append(
                RatedSummary(item_id, source, summary, group, system, ratings, number, truth)
            )
            if self.limit is not None and len(rows) >= self.limit:
                break
        if len(rows) < 2:
            raise RatingsError(
                f"{path}: {len(rows)} rated summar{'y' if len(rows) == 1 else 'ies'}; "
                "agreement needs two at least"
            )
        self._check_groups(rows)
        return tuple(rows)

    def _ground_truth(self, row: Mapping[str, Any], where: str) -> dict[str, Any] | None:
        """The row's key facts, questions or reference as a ground truth, checked as the
        scorer reads it; None when coverage is measured on the source's questions."""
        name = self.basis_field
        if name is None:
            return None
        truth: dict[str, Any] = {self.basis: row.get(name)}
        try:
            coverage_reference(truth, where=f"{where}: field {name!r} (human.fields.{self.basis})")
        except InputError as error:
            raise RatingsError(str(error)) from None
        return truth

    def _check_groups(self, rows: list[RatedSummary]) -> None:
        if self.group is None:
            return
        sizes = Counter(row.group for row in rows)
        alone = next((row for row in rows if sizes[row.group] == 1), None)
        if alone is not None:
            cut = ""
            if self.limit is not None and alone is rows[-1]:
                cut = (
                    f" (human.limit={self.limit} stops the reading here, after the group's "
                    "first row: a limit that ends on a whole group keeps it)"
                )
            raise RatingsError(
                f"{self.path} row {alone.row}: field {self.group!r} (human.fields.group) is "
                f"{alone.group!r}, a group of one summary{cut}: summary-level agreement ranks "
                "the summaries of each source, so each group needs two or more. Set "
                "human.fields.group=null when each source has one summary"
            )


def _text(row: Mapping[str, Any], name: str, setting: str, where: str) -> str:
    if name not in row or row[name] is None:
        raise RatingsError(
            f"{where}: no field {name!r} ({setting}); the row has {sorted(map(str, row))}"
        )
    value = row[name]
    if not isinstance(value, str):
        shown = repr(value)
        raise RatingsError(
            f"{where}: field {name!r} ({setting}) must be text, got "
            f"{type(value).__name__} {shown[:60]}"
        )
    return value


def _label(row: Mapping[str, Any], name: str | None, setting: str, where: str) -> str | None:
    if name is None:
        return None
    value = row.get(name)
    if value is None or value == "":
        hint = "" if setting == "human.fields.id" else f" (or {setting}=null if the file has none)"
        raise RatingsError(
            f"{where}: no value in field {name!r} ({setting}); the row has "
            f"{sorted(map(str, row))}: name the field that holds it{hint}"
        )
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RatingsError(
            f"{where}: field {name!r} ({setting}) must be a string or an integer, got "
            f"{type(value).__name__} {value!r:.60}"
        )
    return str(value)


def _rating(row: Mapping[str, Any], name: str, setting: str, binary: bool, where: str) -> float:
    if name not in row or row[name] is None or row[name] == "":
        raise RatingsError(
            f"{where}: no rating in field {name!r} ({setting}); the row has {sorted(map(str, row))}"
        )
    raw = row[name]
    value: float | None = None
    if isinstance(raw, bool):
        value = float(raw) if binary else None
    elif isinstance(raw, int | float):
        value = float(raw)
    elif isinstance(raw, str):
        # A CSV cell is text: "3.67" is the number a spreadsheet shows.
        text = raw.strip()
        if binary and text.lower() in ("true", "false"):
            value = float(text.lower() == "true")
        else:
            try:
                value = float(text)
            except ValueError:
                value = None
    if value is None or not math.isfinite(value):
        expected = "a binary label, 0 or 1" if binary else "a number"
        raise RatingsError(
            f"{where}: field {name!r} ({setting}) must be {expected}, got "
            f"{type(raw).__name__} {raw!r:.60}"
        )
    if binary and value not in (0.0, 1.0):
        raise RatingsError(
            f"{where}: field {name!r} ({setting}) is a binary label and must be 0 or 1, got "
            f"{raw!r:.60}"
        )
    return value
