"""What an item's coverage is measured against, read from its ``ground_truth`` (SPEC §1.7).

The seed's ``groundTruth`` is handed to every scorer; the summarization scorer reads it as the
team's own reference for coverage:

- nothing (``None``): questions drawn from the source, as without it;
- a string: a reference summary, whose key facts the judge draws;
- a list of strings: key facts the summary must state;
- a mapping with one key that names its kind: ``{"key_facts": [...]}``, ``{"questions": [...]}``
  or ``{"reference": "..."}``. Key facts and questions may also be one string of lines (a CSV
  cell), one per non-blank line.

Any other shape is an ``InputError`` naming the item's place and what was found: read as
nothing, the item would be measured on the source's questions while the user believes it was
measured on theirs.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from summeval_runner._errors import InputError
from summeval_runner._judges._protocol import CoverageBasis

# The kinds a mapping may name, and the basis each gives.
GIVEN_KINDS: tuple[CoverageBasis, ...] = ("key_facts", "questions", "reference")


@dataclass(frozen=True)
class CoverageReference:
    """An item's own reference for coverage: its ``basis`` and what it holds, ``items`` (the
    key facts or questions, in order) or ``text`` (a reference summary)."""

    basis: CoverageBasis
    items: tuple[str, ...] = ()
    text: str | None = None


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _lines(value: Any, kind: str, where: str) -> tuple[str, ...]:
    """Key facts or questions: a list of strings, or one string of lines."""
    if isinstance(value, str):
        text = value.strip()
        if "\n" not in text and text.startswith("[") and text.endswith("]"):
            # A list written as text (a CSV exported from pandas: "['a', 'b']"): read as one
            # key fact, the item would be measured on a string of brackets and quotes.
            raise InputError(
                f"{where}: {kind} is a list written as text ({_shown(value)}); in a text field "
                "give one per line, or a list in JSONL or Parquet"
            )
        found: Sequence[Any] = value.splitlines()
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        found = value
    else:
        # Arrow hands a list column to Python as a list, pandas as a numpy array.
        tolist = getattr(value, "tolist", None)
        if not callable(tolist):
            raise InputError(
                f"{where}: {kind} must be a list of strings or one string of lines, "
                f"got {_shown(value)}"
            )
        found = tolist()
    for position, entry in enumerate(found):
        if not isinstance(entry, str):
            raise InputError(
                f"{where}: {kind} entry {position} must be a string, got {_shown(entry)}"
            )
    kept = tuple(" ".join(entry.split()) for entry in found if entry.strip())
    if not kept:
        raise InputError(
            f"{where}: {kind} is empty: give at least one, or no ground truth for this item "
            "(its coverage is then measured on questions drawn from the source)"
        )
    return kept


def coverage_reference(ground_truth: Any, where: str = "ground_truth") -> CoverageReference | None:
    """The coverage reference ``ground_truth`` gives, ``None`` for none; ``InputError`` naming
    ``where`` for a shape that is not one of the module's."""
    if ground_truth is None:
        return None
    if isinstance(ground_truth, str):
        return _reference(ground_truth, where)
    if isinstance(ground_truth, Mapping):
        kinds = sorted(map(str, ground_truth))
        if len(kinds) != 1 or kinds[0] not in GIVEN_KINDS:
            raise InputError(
                f"{where}: a mapping must have exactly one key, one of "
                f"{', '.join(GIVEN_KINDS)}; got keys {kinds}"
            )
        kind = kinds[0]
        value = ground_truth[kind]
        if kind == "reference":
            if not isinstance(value, str):
                raise InputError(f"{where}: reference must be a string, got {_shown(value)}")
            return _reference(value, where)
        basis: CoverageBasis = "key_facts" if kind == "key_facts" else "questions"
        return CoverageReference(basis, items=_lines(value, kind, where))
    if isinstance(ground_truth, bytes | bytearray | int | float | bool):
        raise InputError(
            f"{where}: expected a reference summary (a string), key facts (a list of strings) "
            f"or a mapping naming its kind (key_facts, questions, reference), got "
            f"{_shown(ground_truth)}"
        )
    return CoverageReference("key_facts", items=_lines(ground_truth, "key_facts", where))


def _reference(text: str, where: str) -> CoverageReference:
    if not text.strip():
        raise InputError(
            f"{where}: the reference summary is blank: give its text, or no ground truth for "
            "this item (its coverage is then measured on questions drawn from the source)"
        )
    return CoverageReference("reference", text=text)


def takes_ground_truth(scorer: Any) -> bool:
    """Whether a scorer's ``run`` takes ``ground_truth`` (the seed's ``groundTruth``): the
    summarization scorer's does; one of a user's own may not, and is called as before."""
    try:
        parameters = inspect.signature(scorer.run).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "ground_truth" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )
