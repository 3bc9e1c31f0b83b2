"""The run manifest: what produced a run's tables, with every secret redacted.

One typed, frozen model (``Manifest``) describes every run directory, whether a run or a merge
of shards wrote it; ``write_manifest`` and ``read_manifest`` are the only ways it reaches or
leaves the disk. ``schema_version`` says which layout of the run directory (manifest and
journal) wrote it: 1 for runs written before the journal held item records, 2 since.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator

from summeval_runner._errors import InputError
from summeval_runner._inputs._metadata import MetadataKind, MetadataTypes
from summeval_runner._inputs._shards import ShardRule
from summeval_runner._scorers._outcome import RunCounts
from summeval_runner._secrets import redact, redact_urls, scrub

MANIFEST = "manifest.json"
MANIFEST_SCHEMA_VERSION = 4
RunStatus = Literal["running", "completed", "interrupted", "aborted", "failed", "partial"]
# What decides an item's result: runs that differ here do not measure the same thing.
RESULT_SECTIONS = ("dataset", "target", "model", "scorer")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= _flatten(item, f"{prefix}{key}.")
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


# Settings of the result-deciding sections that do not decide a result. Where the dataset file
# lies is not what it holds: its content is compared by its SHA-256 (``Manifest.dataset``), so
# the same file at another path (another machine, another install of the bundled sample) is the
# same dataset. What a model's tokens cost changes no verdict: a price corrected on resume, or
# changed between nights, still compares.
NOT_DECIDING = frozenset({"dataset.path", "model.price", "target.price"})


def deciding_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config's sections that decide the results, less what does not (``NOT_DECIDING``:
    the same file at another path is the same dataset; a price changes no verdict)."""
    kept = {section: config.get(section) for section in RESULT_SECTIONS}
    for setting in NOT_DECIDING:
        section, _, key = setting.partition(".")
        value = kept.get(section)
        if isinstance(value, Mapping):
            kept[section] = {k: v for k, v in value.items() if k != key}
    return kept


def _deciding(setting: str) -> bool:
    return not any(
        setting == skipped or setting.startswith(f"{skipped}.") for skipped in NOT_DECIDING
    )


def config_differences(
    before: Mapping[str, Any], now: Mapping[str, Any], sections: tuple[str, ...] = RESULT_SECTIONS
) -> list[str]:
    """Each setting of ``sections`` that differs, as "model.name was 'a', now 'b'".

    >>> config_differences({"scorer": {"scale": 1.0}}, {"scorer": {"scale": 5.0}})
    ['scorer.scale was 1.0, now 5.0']
    """
    differences = []
    for section in sections:
        old, new = _flatten(before.get(section)), _flatten(now.get(section))
        for key in sorted(set(old) | set(new)):
            if not _deciding(f"{section}.{key}"):
                continue
            if old.get(key) != new.get(key):
                where = f"{section}.{key}" if key else section
                differences.append(f"{where} was {old.get(key)!r}, now {new.get(key)!r}")
    return differences


def _utc(moment: datetime) -> datetime:
    # Runs write UTC with its offset; a time written without one (by hand, by another tool) is
    # read as UTC, so that every manifest's times compare with every other's.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


Timestamp = Annotated[datetime, AfterValidator(_utc)]


class _Part(BaseModel):
    # Frozen values; unknown keys (written by a newer version) are ignored rather than refused.
    model_config = ConfigDict(frozen=True, extra="ignore")


class DatasetInfo(_Part):
    """The dataset a run read: its file (when it was one), its items, its content's hash, the
    hash of its inputs, and whether its ids were the data's own or generated from the items'
    content (``None``: not recorded).

    ``sha256`` is the file's bytes (of a list: its ids, inputs and outputs in order): a resume
    over changed data is refused by it. ``inputs_sha256`` is what the documents summarized are,
    whatever the rows' order and their precomputed outputs (the systems under test): the SHA-256
    of the sorted SHA-256s of each item's input as canonical JSON (``inputs_fingerprint``).
    Runs whose inputs are the same compare; none for a stream, whose rows are not read ahead.
    ``metadata_types`` is each metadata field's kind as read from every row (``_metadata``):
    the type of its field in ``items.parquet``'s ``metadata`` struct, the same in every part of
    a resumed run and every shard of a merge (``None``: a stream, or a run that did not say).
    """

    path: str | None = None
    items: int | None = None
    sha256: str | None = None
    inputs_sha256: str | None = None
    ids: Literal["given", "generated"] | None = None
    metadata_types: dict[str, MetadataKind] | None = None


def metadata_types(dataset: DatasetInfo | None) -> MetadataTypes | None:
    """The kinds of a run's metadata fields, as its manifest recorded them (``None``: a stream,
    or a run that recorded none)."""
    if dataset is None or dataset.metadata_types is None:
        return None
    return MetadataTypes.of(dataset.metadata_types)


def input_sha256(value: Any) -> str:
    """The SHA-256 of one item's input as canonical JSON (keys sorted, text as is)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def inputs_fingerprint(digests: Iterable[str]) -> str:
    """``DatasetInfo.inputs_sha256`` from each item's ``input_sha256``: sorted first, so the
    same rows in another order have the same fingerprint."""
    return hashlib.sha256("\n".join(sorted(digests)).encode("ascii")).hexdigest()


class InputsFingerprint:
    """``inputs_fingerprint`` of a dataset read item by item, in 32 bytes an item (a million
    items' digests take 32 MB, not the 120 MB their hex strings would).

    >>> running = InputsFingerprint()
    >>> for value in ("b", "a"):
    ...     running.add(value)
    >>> running.hexdigest() == inputs_fingerprint(input_sha256(v) for v in ("a", "b"))
    True
    """

    def __init__(self) -> None:
        self._digests = bytearray()

    def add(self, value: Any) -> None:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
        self._digests += hashlib.sha256(text.encode("utf-8")).digest()

    def hexdigest(self) -> str:
        # Raw digests sort as their hex strings do; joined as hex, line by line, as above.
        ordered = np.sort(np.frombuffer(bytes(self._digests), dtype="V32")).tobytes()
        total = hashlib.sha256()
        for start in range(0, len(ordered), 32):
            if start:
                total.update(b"\n")
            total.update(ordered[start : start + 32].hex().encode("ascii"))
        return total.hexdigest()


class ShardInfo(_Part):
    """Which shard of the dataset a run scored (``runner.shard=index/count``), its items, and
    what the split was by (``_shards``): the item's id, or its source's fingerprint."""

    index: int
    count: int
    items: int | None = None
    # A shard written before the rule was recorded was split by id: its resume and its merge
    # read it so.
    by: ShardRule = "id"


class Resumption(_Part):
    """One continuation of an interrupted run."""

    at: Timestamp
    items_kept: int
    items_to_score: int | None = None
    overrides: tuple[str, ...] = ()


class CacheUse(_Part):
    mode: str | None = None
    path: str | None = None
    hits: int = 0
    stored: int = 0


class LearnedParameter(_Part):
    """A request parameter the judge's model refused (an HTTP 400 naming it), and what the run
    sent from then on: ``dropped`` (the model's default stands) or ``renamed`` to
    ``renamed_to``. ``refused``: the requests refused for it, not counted in ``requests`` (one,
    or one per request in flight when the first refusals came; a resumed part learns again, at
    one request more)."""

    model: str
    param: str
    action: Literal["dropped", "renamed"]
    renamed_to: str | None = None
    code: str
    message: str
    refused: int = 1


class PriceUsed(_Part):
    """The price a run's judge replies were counted at (US dollars per million tokens), and
    where it came from: ``given`` (``model.price``) or the price table that ships in the
    ``genai-prices`` package (``genai-prices 0.2.3``), which knows the model as ``model``."""

    input: float
    output: float
    batch: float = 0.5
    source: str
    model: str | None = None


class JudgeTraffic(_Part):
    """What a run asked of its judges: requests sent (retries included), retries, 429s, and
    what the response cache answered; in every part of a resumed run, a killed one included
    (each part journals them as they happen). ``learned``: parameters the model refused and the
    run stopped sending (``_judges._learned``), as the parts that ended wrote them. ``price``:
    what the judge's tokens were counted at (``None``: not known, or judges of several)."""

    name: str | None = None
    requests: int = 0
    retries: int = 0
    throttled_429: int = 0
    cache: CacheUse = CacheUse()
    learned: tuple[LearnedParameter, ...] = ()
    price: PriceUsed | None = None


def merged_lessons(
    *parts: Iterable[LearnedParameter],
) -> tuple[LearnedParameter, ...]:
    """The lessons of several parts of a run, one per model and parameter, their refusals
    added up."""
    merged: dict[tuple[str, str], LearnedParameter] = {}
    for lessons in parts:
        for lesson in lessons:
            key = (lesson.model, lesson.param)
            known = merged.get(key)
            merged[key] = (
                lesson
                if known is None
                else known.model_copy(update={"refused": known.refused + lesson.refused})
            )
    return tuple(merged.values())


class TokenTotals(_Part):
    """The tokens of every reply the judges sent, in every part of a run: re-asks, retried and
    failed items, and items in flight when a process was killed included; a cache hit costs
    none. (``items.parquet`` holds each kept item's own, cache hits included.)"""

    input: int = 0
    output: int = 0


class JudgeTokenTotals(TokenTotals):
    """The judges' ``TokenTotals``, and ``reasoning``: a reasoning model's reasoning tokens, of
    ``output`` (billed as output tokens), shown apart."""

    reasoning: int = 0


class RunCost(_Part):
    """What a run's calls cost, in US dollars, in every part of it (a resumed run's earlier
    parts, killed ones included): the judge's replies at its price (a reply from the response
    cache costs nothing; the Batch API's at its share of the price) and the agent's calls as it
    reported them (``report_target_usage``; a run without an agent spends 0 on one). ``None``
    where any call's cost is not known (no price given); ``total`` then too.

    ``target_unreported``: the agent's calls counted at $0 because the agent reported no usage
    and has no price setting (a Python agent of one's own that calls no model). A budget in
    dollars still refuses such an agent (it cannot tell it from one that pays for its calls)."""

    judge: float | None = 0.0
    target: float | None = 0.0
    total: float | None = 0.0
    currency: str = "USD"
    target_unreported: int = 0


class JudgeNoise(_Part):
    """How much the judge disagreed with itself over an item's repeated judgments
    (``RunOptions.trials``), for the summarization scorer.

    ``items``: items with two or more scored trials. ``score_std_mean`` and ``score_std_max``:
    the mean and the largest, over those items, of the sample standard deviation of an item's
    scores across its trials. ``claims_compared``: claims (matched by their text within an
    item) judged in two or more trials, and ``claims_changed`` those whose verdict was not the
    same in all of them; ``questions_compared`` and ``questions_changed`` likewise for the
    coverage questions (matched by text; shared questions are the same text in every trial).
    """

    trials: int
    items: int = 0
    score_std_mean: float | None = None
    score_std_max: float | None = None
    claims_compared: int = 0
    claims_changed: int = 0
    questions_compared: int = 0
    questions_changed: int = 0

    @property
    def claims_changed_share(self) -> float | None:
        return self.claims_changed / self.claims_compared if self.claims_compared else None

    @property
    def questions_changed_share(self) -> float | None:
        return self.questions_changed / self.questions_compared if self.questions_compared else None


class PanelDisagreement(_Part):
    """How much the judges of a panel (``JudgePanel``) disagreed, for the summarization scorer.

    ``judges``: the panel's judges, in its order (the first drew the questions); ``aggregate``:
    how an item's figures were combined from theirs. ``items``: items (each trial apart) that
    every judge scored. ``score_spread_mean`` and ``score_spread_max``: the mean and the
    largest, over those items, of the spread of an item's scores across the judges (highest
    less lowest). ``judge_means``: each judge's mean score over those items.
    ``questions_compared``: the coverage questions those items were asked (every judge answered
    the same ones), and ``questions_split`` those the judges did not all answer alike. Claims
    are not compared: each judge finds its own.
    """

    judges: tuple[str, ...]
    aggregate: str
    items: int = 0
    score_spread_mean: float | None = None
    score_spread_max: float | None = None
    judge_means: dict[str, float | None] = {}
    questions_compared: int = 0
    questions_split: int = 0

    @property
    def questions_split_share(self) -> float | None:
        return self.questions_split / self.questions_compared if self.questions_compared else None

    def describe(self) -> str:
        """The figures in a line, as the run's summary and the report show them."""
        spread = "n/a" if self.score_spread_mean is None else f"{self.score_spread_mean:.3f}"
        top = "" if self.score_spread_max is None else f" (at most {self.score_spread_max:.3f})"
        share = self.questions_split_share
        means = ", ".join(
            f"{judge} {'n/a' if mean is None else f'{mean:.3f}'}"
            for judge, mean in self.judge_means.items()
        )
        return (
            f"panel of {len(self.judges)} judges ({self.aggregate}): score spread {spread} per "
            f"item{top} over {self.items} items; questions answered differently "
            f"{self.questions_split} of {self.questions_compared}"
            + (f" ({share:.1%})" if share is not None else "")
            + f"; mean score per judge: {means}"
        )


class Resources(_Part):
    """What this part of the run cost the machine (a resumed run's earlier parts excluded)."""

    cpu_s: float
    peak_rss_mb: float | None = None


class MergedShard(_Part):
    shard: str
    run_dir: str
    run_id: str | None = None
    status: str | None = None
    items: int
    by: ShardRule = "id"


class Missing(_Part):
    """What a partial merge lacks: shards never given, and the dataset's items in none."""

    shards: tuple[str, ...] = ()
    items: int = 0
    unfinished_in_shards: int = 0


class Manifest(_Part):
    """What produced a run directory's tables, and what came of it.

    Written when a run starts (status ``running``, with the config, so that a run killed at any
    moment can be resumed) and again when it ends; a merge of shards writes one too
    (``merged_from``). ``status`` is ``completed``; ``interrupted`` (resumable: stopped by a
    signal or a caller, or the judge unreachable for ``outage_timeout_s``); ``aborted`` (the
    judge refused the key or the quota is spent); ``failed`` (a finished item could not be
    recorded: resumable once the cause is fixed); or, for a merge that lacks shards,
    ``partial``. ``stopped_because`` says what stopped a run that did not complete. ``counts``
    are the finished items; ``unfinished`` those not finished.
    """

    schema_version: int = MANIFEST_SCHEMA_VERSION
    run_id: str
    variant: str
    status: RunStatus
    started_at: Timestamp
    finished_at: Timestamp | None = None
    package_version: str | None = None
    prompt_version: str | None = None
    python_version: str | None = None
    host: str | None = None
    pid: int | None = None
    # What decides the results as run_evals saw them: target, judges, scorer settings, how the
    # dataset file is read. Compared whole when the run is resumed or its shards merged.
    setup: dict[str, Any] = {}
    # What the caller recorded: the app's resolved config (its dataset, target, model and
    # scorer sections are compared too).
    config: dict[str, Any] = {}
    overrides: tuple[str, ...] = ()
    dataset: DatasetInfo | None = None
    shard: ShardInfo | None = None
    resumptions: tuple[Resumption, ...] = ()
    stopped_because: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    counts: RunCounts | None = None
    # The first unscorable items (a blank source: the data's failure, left out of the means),
    # by id in dataset order; counts.unscorable counts them all.
    unscorable_items: tuple[str, ...] = ()
    # Items per coverage basis (SPEC §1.7): source_questions (drawn by the judge from the
    # source), key_facts, questions (the items' own) or reference (key facts drawn from the
    # item's reference summary). None: a run recorded before it was (source questions only).
    coverage_bases: dict[str, int] | None = None
    # Items whose judge left coverage verdicts out even after its re-asks: their missing
    # verdicts count as unanswered (SPEC §1.3; verdict_missing in coverage.parquet), or whose
    # judge found no claim in a summary that is not blank (alignment 0, SPEC §1.3; claims 0 in
    # items.parquet). None: a run recorded before it was counted.
    verdicts_missing: int | None = None
    unfinished: int | None = None
    hook_errors: int = 0
    means: dict[str, float | None] = {}
    judge: JudgeTraffic | None = None
    tokens: JudgeTokenTotals | None = None
    # The agent's tokens as it reported them, and what the run's calls cost.
    target_tokens: TokenTotals | None = None
    cost: RunCost | None = None
    # With RunOptions.trials > 1: how much the judge's repeated judgments of an item disagreed.
    judge_noise: JudgeNoise | None = None
    # With a panel of judges: how much its judges disagreed.
    judge_panel: PanelDisagreement | None = None
    resources: Resources | None = None
    tables: dict[str, str] = {}
    merged_at: Timestamp | None = None
    merged_from: tuple[MergedShard, ...] | None = None
    missing: Missing | None = None
    # A merge's: sources whose items were asked different coverage questions in different
    # shards (merge_runs); None for a run that is not a merge.
    question_conflicts: int | None = None

    @property
    def coverage_basis(self) -> str | None:
        """What the run's items' coverage was measured on, in one word: their basis, ``mixed``
        when they differ, ``None`` when no item was judged. A run recorded before the bases
        were (no ``coverage_bases``) measured every item on questions drawn from the source."""
        if self.coverage_bases is None:
            judged = self.counts is not None and self.counts.total > 0
            return "source_questions" if judged else None
        present = [basis for basis, items in self.coverage_bases.items() if items]
        if not present:
            return None
        return present[0] if len(present) == 1 else "mixed"

    @property
    def selected_items(self) -> int | None:
        """The items the run was to finish: its shard's, or the dataset's (None if unknown)."""
        if self.shard is not None:
            return self.shard.items
        return self.dataset.items if self.dataset is not None else None

    def unfinished_of(self, finished: int) -> int:
        """The items left unfinished, as recorded when the run ended; for a run that never
        ended (killed: still ``running``), those of its selection beyond the ``finished`` ones
        its tables hold."""
        if self.unfinished is not None:
            return self.unfinished
        return max(0, (self.selected_items or 0) - finished)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        # Manifests written before the schema was versioned are version 1.
        if isinstance(data, dict) and "schema_version" not in data:
            data = {**data, "schema_version": 1}
        return data


def setup_differences(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Each setting of a run's ``setup`` that differs, as "setup.scorer.x.scale was 1.0, now 2.0".

    >>> setup_differences({"target": {"k": 3}}, {"target": {"k": 1}})
    ['setup.target.k was 3, now 1']
    """
    return config_differences({"setup": before}, {"setup": now}, sections=("setup",))


def read_manifest(run_dir: Path) -> Manifest:
    """A run directory's manifest; ``InputError`` naming the directory if it has none, or the
    field that is wrong if it cannot be read as one."""
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError(f"{run_dir} is not a run directory (it has no {MANIFEST})")
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except OSError as error:
        raise InputError(f"{path} cannot be read: {error}") from None
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(map(str, first["loc"])) or "the file"
        raise InputError(f"{path} is not a run manifest ({field}: {first['msg']})") from None


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    """Write the manifest atomically: readers see the old file or the new one, never half.

    Secret-looking config values are redacted, the credentials of every URL removed and every
    known secret scrubbed (``_secrets``), wherever in the manifest they appear.
    """
    path = run_dir / MANIFEST
    values = manifest.model_dump(mode="json")
    text = scrub(redact_urls(json.dumps(redact(values), indent=2, ensure_ascii=False)))
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(text + "\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        # A full disk: no empty or half-written file left beside the manifest, which stays.
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
