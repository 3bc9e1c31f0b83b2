"""What decides a run's results, as ``run_evals`` sees them: recorded in every run's manifest
(``setup``) and compared when the run is resumed or merged, whatever ``config`` the caller
recorded beside it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from typing import Any

from summeval_runner._inputs._datasets import DatasetFile
from summeval_runner._judges._protocol import cache_identity_of

_SCALARS = (str, int, float, bool, type(None))


def callable_name(value: Any) -> str:
    """Where a function or class is defined, or an object's class: ``mymodule.summarize``."""
    kind = value if inspect.isfunction(value) or inspect.isclass(value) else type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _settings(value: Any) -> dict[str, Any]:
    """A callable's name, and for an object its public settings that are plain values (the
    lead-k agent's ``k``, a summarizer's model and prompt)."""
    described: dict[str, Any] = {"type": callable_name(value)}
    if not (inspect.isfunction(value) or inspect.isclass(value) or inspect.ismethod(value)):
        for key, item in sorted(vars(value).items() if hasattr(value, "__dict__") else ()):
            if key.startswith("_"):
                continue
            if isinstance(item, _SCALARS) or (
                isinstance(item, list | tuple) and all(isinstance(i, _SCALARS) for i in item)
            ):
                described[key] = list(item) if isinstance(item, tuple) else item
    return described


def describe_setup(
    scorers: Sequence[Any],
    target: Callable[[Any], Any] | None,
    data: Iterable[Any],
    trials: int = 1,
) -> dict[str, Any]:
    """The target, each scorer's judge and settings, the trials each item is judged in, and
    how a dataset file is read: what a resume or a merge must find the same."""
    model: dict[str, Any] = {}
    scorer: dict[str, Any] = {}
    for each in scorers:
        judge = getattr(each, "judge", None)
        if judge is not None:
            identity = cache_identity_of(judge)
            model[each.id] = identity if identity is not None else {"type": callable_name(judge)}
        settings: dict[str, Any] = {"type": callable_name(each)}
        options = getattr(each, "options", None)
        for key in ("max_questions", "scale", "max_reasks", "source", "questions"):
            if hasattr(options, key):
                settings[key] = getattr(options, key)
        extractor = getattr(options, "source_extractor", None)
        if extractor is not None:
            settings["source_extractor"] = callable_name(extractor)
        scorer[each.id] = settings
    setup: dict[str, Any] = {
        "target": _settings(target) if target is not None else None,
        "model": model,
        "scorer": scorer,
        # An item's score is its trials' mean: parts judged in other numbers of trials would
        # not measure alike.
        "trials": trials,
    }
    if isinstance(data, DatasetFile):
        fields = asdict(data.fields)
        fields["metadata"] = list(fields["metadata"])
        # The field read as the summaries, found (``output`` or ``summary``) when none is named.
        fields["output"] = data.output_field()
        setup["data"] = {"fields": fields, "format": data.format, "limit": data.limit}
    return setup
