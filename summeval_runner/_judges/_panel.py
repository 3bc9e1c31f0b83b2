"""A panel of judges: several judges score every evaluation, and its figures are theirs combined.

One judge is one opinion; a panel of judges of different families agrees with people more than
one large judge does (Verga et al. 2024, "Replacing Judges with Juries"). Every judge of a
panel runs the scorer's three steps on every evaluation; the coverage questions are drawn once,
by the first judge, and every judge answers the same ones, so their coverage figures measure
the same thing. An evaluation's alignment, coverage and score are each the mean (or the median)
of the judges' own.

A panel is not a judge: it has no ``complete`` of its own. The scorer runs its judges one by one
(``SummarizationScorer``), and the runner wraps each of them in the run's limits, cache and
budget as it wraps a lone judge, so each judge is counted on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from summeval_runner._errors import ConfigError
from summeval_runner._judges._protocol import Judge, cache_identity_of, judge_name
from summeval_runner._judges._resolve import resolve_judge

Aggregate = Literal["mean", "median"]
AGGREGATES: tuple[str, ...] = get_args(Aggregate)
# The keys of a panel's mapping (model=panel): the rest belongs to its judges.
_PANEL_KEYS = ("provider", "judges", "aggregate")


@dataclass(frozen=True)
class JudgePanel:
    """Judges that each score every evaluation; ``aggregate`` (``"mean"`` or ``"median"``) says
    how an evaluation's figures are combined from theirs. The first judge draws the coverage
    questions that every judge answers. Judges must differ by name (their ``name``, as every
    table names them), and a panel has at least two.

    >>> from summeval_runner import FakeJudge, OfflineJudge
    >>> JudgePanel((OfflineJudge(), FakeJudge())).name
    'panel(mean): offline, fake'
    >>> JudgePanel((OfflineJudge(),))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: a panel needs at least two judges, got 1: ...
    """

    judges: tuple[Judge, ...]
    aggregate: Aggregate = "mean"

    def __post_init__(self) -> None:
        judges: object = self.judges
        if isinstance(judges, str | bytes | Mapping) or not isinstance(judges, Sequence):
            raise ConfigError(
                f"a panel's judges must be a list of judges, got {type(judges).__name__}"
            )
        object.__setattr__(self, "judges", tuple(judges))
        if self.aggregate not in AGGREGATES:
            raise ConfigError(
                f"a panel's aggregate must be one of {', '.join(AGGREGATES)}, "
                f"got {self.aggregate!r}"
            )
        for position, judge in enumerate(self.judges):
            if isinstance(judge, JudgePanel) or not isinstance(judge, Judge):
                raise ConfigError(
                    f"judges[{position}] must be a judge (an object with an async "
                    f"complete(request) method), got {type(judge).__name__}"
                )
        names = self.names
        if len(names) < 2:
            raise ConfigError(
                f"a panel needs at least two judges, got {len(names)}"
                + (f": {', '.join(names)}" if names else "")
            )
        for position, name in enumerate(names):
            first = names.index(name)
            if first != position:
                raise ConfigError(
                    f"judges[{position}] is named {name!r}, as judges[{first}] is: every table "
                    "names the judge of each verdict, so a panel's judges must differ by name"
                )

    @property
    def names(self) -> tuple[str, ...]:
        """Each judge's name, in the panel's order (the first draws the questions)."""
        return tuple(judge_name(judge) for judge in self.judges)

    @property
    def name(self) -> str:
        """The panel's name, as the items table's ``judge`` column and the manifest show it."""
        return f"panel({self.aggregate}): {', '.join(self.names)}"

    def with_judges(self, judges: Sequence[Judge]) -> JudgePanel:
        """The same panel with each judge replaced (the runner wraps each in its limits)."""
        if len(judges) != len(self.judges):
            raise ValueError(f"a panel of {len(self.judges)} judges got {len(judges)} to wrap")
        return replace(self, judges=tuple(judges))

    def cache_identity(self) -> dict[str, Any]:
        """What decides the panel's verdicts: each judge's identity (its cache identity, else
        its name) and the aggregate. A resume or a merge must find it the same."""
        identities = []
        for judge in self.judges:
            identity = cache_identity_of(judge)
            identities.append(
                dict(identity) if isinstance(identity, Mapping) else {"judge": judge_name(judge)}
            )
        return {"panel": identities, "aggregate": self.aggregate}


def judges_of(judge: Judge | JudgePanel) -> tuple[Judge, ...]:
    """The judges that make a scorer's calls: a panel's, or the judge alone."""
    return judge.judges if isinstance(judge, JudgePanel) else (judge,)


def resolve_model(model: Any) -> Judge | JudgePanel:
    """``create_summarization_scorer``'s ``model``: a judge (``resolve_judge``), or a panel: a
    list of judges, a ``JudgePanel``, or a mapping ``{provider: panel, judges: [...],
    aggregate: mean}`` (``model=panel``).

    >>> resolve_model(["offline", {"name": "offline", "support_recall": 0.7}]).names
    ('offline', 'offline(support_recall=0.7)')
    >>> resolve_model(["offline", "offline"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    summeval_runner._errors.ConfigError: judges[1] is named 'offline', as judges[0] is: ...
    """
    if isinstance(model, JudgePanel):
        return model
    if isinstance(model, list | tuple):
        return resolve_panel(model)
    if isinstance(model, Mapping) and model.get("provider") == "panel":
        unknown = sorted(set(map(str, model)) - set(_PANEL_KEYS))
        if unknown:
            raise ConfigError(
                f"a panel has no setting {unknown[0]!r} (it takes: judges, aggregate; each "
                "judge's settings go in its entry of judges)"
            )
        aggregate = model.get("aggregate", "mean")
        return resolve_panel(model.get("judges"), "mean" if aggregate is None else aggregate)
    return resolve_judge(model)


def resolve_panel(entries: Any, aggregate: Any = "mean") -> JudgePanel:
    """A panel of ``entries``, each a model string (``"openai/gpt-4.1-mini"``, ``"offline"``), a
    mapping of one judge's settings (``{name: openai/gpt-4.1-mini, base_url: ..., price:
    ...}``, or with ``provider`` and ``name`` apart) or a judge; a bad entry is a
    ``ConfigError`` that names it (``judges[1]``)."""
    if isinstance(entries, str | bytes | Mapping) or not isinstance(entries, Sequence):
        raise ConfigError(
            "a panel's judges must be a list of model strings or judge settings "
            f"('model.judges=[openai/gpt-4.1-mini,offline]'), got {entries!r}"
        )
    judges = []
    for position, entry in enumerate(entries):
        try:
            judges.append(_member(entry))
        except ConfigError as error:
            raise ConfigError(f"judges[{position}] ({_shown(entry)}): {error}") from None
    if aggregate not in AGGREGATES:
        raise ConfigError(
            f"a panel's aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}"
        )
    return JudgePanel(tuple(judges), aggregate)


def _member(entry: Any) -> Judge:
    if isinstance(entry, JudgePanel) or (
        isinstance(entry, Mapping) and entry.get("provider") == "panel"
    ):
        raise ConfigError("a panel's judge cannot be a panel")
    if isinstance(entry, Mapping) and "provider" not in entry:
        settings = {str(key): value for key, value in entry.items()}
        name = settings.pop("name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(
                "a judge's settings need its model string as name ('openai/gpt-4.1-mini', "
                f"'offline'), or a provider; got name {name!r}"
            )
        provider, _, model = name.partition("/")
        return resolve_judge(
            {"provider": provider, **settings, **({"name": model} if model else {})}
        )
    if entry is None:
        raise ConfigError("a judge is a model string or a mapping of its settings, got null")
    return resolve_judge(entry)


def _shown(entry: Any) -> str:
    # The entry as the user wrote it, less any setting that could hold a credential.
    if isinstance(entry, Mapping):
        name = entry.get("name")
        return f"{{name: {name!r}, ...}}" if name is not None else "{...}"
    return repr(entry) if isinstance(entry, str) else type(entry).__name__
