"""The items a run draws: each checked as ``summeval-run`` checks a dataset's rows, with its
dataset position, and what is known of them before the run starts.

An input or a precomputed output that the summarization scorer reads is checked with the
scorer's own reading rule (``check_readable``), so no item the check lets through fails, or
reads as blank, later for its shape. A sharded run draws only its shard's items, chosen by id
or by source (``shard_rule``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from summeval_runner._errors import ConfigError, DatasetError, InputError
from summeval_runner._inputs._datasets import (
    OUTPUT_NAMES,
    DatasetFile,
    IdAllocator,
    Item,
)
from summeval_runner._inputs._metadata import MetadataReader
from summeval_runner._inputs._shards import Shard, ShardRule
from summeval_runner._messages import check_readable
from summeval_runner._rundir._manifest import (
    DatasetInfo,
    InputsFingerprint,
    input_sha256,
    inputs_fingerprint,
)
from summeval_runner._scorers._questions import source_fingerprint
from summeval_runner._scorers._reference import coverage_reference
from summeval_runner._scorers._summarization import SummarizationScorer

logger = logging.getLogger("summeval_runner")


def shown(value: Any) -> str:
    """A value as an error message shows it: its type and the start of its repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


@dataclass(frozen=True)
class Reads:
    """Which payloads of an item the scorers read as text or chat messages."""

    input: bool
    output: bool
    # The summarization scorer reads an item's ground truth as its coverage reference.
    ground_truth: bool = False
    # The fewest questions a summarization scorer draws: a longer list of given key facts or
    # questions is asked whole, and said so once (given_beyond).
    max_questions: int | None = None

    @classmethod
    def of(cls, scorers: Sequence[object], has_target: bool) -> Reads:
        """The summarization scorer reads the output, and the input unless it is given its
        source another way (``source``, ``source_extractor``). A target computes the outputs,
        so then only the input is the data's. Other scorers read what they read: their items
        are only checked to be text or messages."""
        summarizers = [s for s in scorers if isinstance(s, SummarizationScorer)]
        return cls(
            input=any(
                s.options.source is None and s.options.source_extractor is None for s in summarizers
            ),
            output=bool(summarizers) and not has_target,
            ground_truth=bool(summarizers),
            max_questions=min((s.options.max_questions for s in summarizers), default=None),
        )

    def given_beyond(self, item: Item) -> bool:
        """Whether the item gives more key facts or questions than ``max_questions``."""
        if not self.ground_truth or self.max_questions is None or item.ground_truth is None:
            return False
        reference = coverage_reference(item.ground_truth)
        return reference is not None and len(reference.items) > self.max_questions


_NAMES = {"input": "'input'", "output": "'output'"}


def _unwritable(value: Any) -> str | None:
    """The first character of ``value`` (text, or text nested in lists and mappings) that UTF-8
    cannot encode, as ``\\udXXX at character N``; None when all of it can be written."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            return f"{value[error.start]!r} at character {error.start}"
        return None
    if isinstance(value, Mapping):
        return next(
            (bad for part in (*value.keys(), *value.values()) if (bad := _unwritable(part))),
            None,
        )
    if isinstance(value, list | tuple):
        return next((bad for part in value if (bad := _unwritable(part))), None)
    return None


def _as_item(
    raw: Mapping[str, Any] | Item,
    index: int,
    ids: IdAllocator | None,
    has_target: bool,
    reads: Reads,
    where: str | None = None,
    names: Mapping[str, str] = _NAMES,
) -> Item:
    """The item at ``index``, checked; ``where`` and ``names`` say how errors name its place and
    its fields (a dataset's row and columns; by default ``data item <index>``). ``ids`` gives
    each item its unique id; ``None`` for a dataset file's items, whose reader gave them."""
    error = InputError if where is None else DatasetError
    where = where or f"data item {index}"
    if isinstance(raw, Item):
        item = (
            raw
            if ids is None
            else replace(raw, id=ids.assign(raw.id, raw.input, where=where, position=index))
        )
    elif isinstance(raw, Mapping):
        assert ids is not None
        if "input" not in raw:
            raise InputError(f"{where}: no 'input'; got keys {sorted(map(str, raw))}")
        # An output only counts in the id when it is the data's (no target computes it).
        output = raw.get("output")
        item = Item(
            id=ids.assign(
                raw.get("id"),
                raw["input"],
                output if not has_target else None,
                where=where,
                position=index,
            ),
            input=raw["input"],
            output=output,
            ground_truth=raw.get("ground_truth"),
            metadata=dict(raw.get("metadata") or {}),
        )
    else:
        raise InputError(f"{where}: expected a mapping, got {type(raw).__name__}")
    for name in ("input", "output"):
        value = getattr(item, name)
        if value is not None and not isinstance(value, str | list | Mapping):
            raise error(f"{where}: {names[name]} must be text or chat messages, got {shown(value)}")
    if not has_target and item.output is None:
        raise InputError(f"{where}: no 'output', and no target to produce one")
    if has_target and item.output is not None:
        # Scored, the agent's output would silently stand in for the one the data carries.
        raise ConfigError(
            f"{where}: {names['output']} is given, and a target (the agent under test) "
            "produces the outputs: its outputs would be scored and this one ignored; pass "
            "target=None to score the outputs the data holds, or leave 'output' out of the "
            "items to score the agent's"
        )
    for name, value in (
        ("id", item.id),
        ("input", item.input),
        ("output", item.output),
        ("ground_truth", item.ground_truth),
        ("metadata", item.metadata),
    ):
        bad = _unwritable(value)
        if bad is not None:
            # Found here, not when the finished item's record cannot be written: by then its
            # judge calls are paid for, and every resume would pay for them again.
            label = names.get(name, f"'{name}'")
            raise error(
                f"{where}: {label} holds text that cannot be written as UTF-8 "
                f"(a lone surrogate, {bad}); fix the data's escapes"
            )
    for name, read in (("input", reads.input), ("output", reads.output)):
        if read:
            try:
                check_readable(getattr(item, name), what=names[name])
            except InputError as unreadable:
                raise error(f"{where}: the scorer cannot read this {name}: {unreadable}") from None
    if reads.ground_truth:
        # What coverage is measured against (SPEC §1.7): a shape the scorer cannot read is
        # refused here, not as each item is scored.
        label = names.get("ground_truth", "'ground_truth'")
        try:
            coverage_reference(item.ground_truth, where=f"{where}: {label}")
        except InputError as unreadable:
            raise error(str(unreadable)) from None
    return item


def shard_rule(
    scorers: Sequence[object],
    has_target: bool,
    shard: Shard | None,
    recorded: ShardRule | None = None,
) -> ShardRule | None:
    """What a sharded run splits its items by (``None``: not sharded): ``recorded``, the rule
    of the run being resumed, so that a resumed shard holds the same items; else by source
    when a summarization scorer shares each source's questions (``questions="per_source"``),
    so that one shard draws a source's questions and asks them of all its items; else by id.

    ``ConfigError``, before any judge call, when a split by source cannot be made before the
    run: a source read from the agent's output (``source_extractor`` with a target), or
    scorers that read an item's source differently."""
    if shard is None:
        return None
    by: ShardRule = recorded or ("source" if _sharing(scorers) else "id")
    if by == "source":
        _source_reader(scorers, has_target, shard)
    return by


def _sharing(scorers: Sequence[object]) -> list[SummarizationScorer]:
    """The summarization scorers that draw each source's questions once and share them."""
    return [
        s
        for s in scorers
        if isinstance(s, SummarizationScorer) and s.options.questions == "per_source"
    ]


def _source_reader(
    scorers: Sequence[object], has_target: bool, shard: Shard
) -> SummarizationScorer:
    """The scorer whose reading of an item's source chooses its shard, checked to be one that
    can be read before the run and the same for every scorer that shares questions."""
    sharing = _sharing(scorers)
    if not sharing:
        # Only a resume gets here (the run was split by source, its scorers now share no
        # questions): its config check would refuse it too, less plainly.
        raise ConfigError(
            f"resume: the run being resumed (shard {shard}) was split by source, for "
            "questions='per_source', and its scorers now draw questions per item; resume it "
            "with the same scorer settings"
        )
    reader = sharing[0]
    if has_target and reader.options.source_extractor is not None:
        raise ConfigError(
            f"shard={str(shard)!r} with questions='per_source' splits the items by their "
            "source, which must be known before the run, and source_extractor with a target "
            "reads it from the agent's output: use questions='per_item' "
            "(scorer.questions=per_item), or run without a shard"
        )
    # By identity: an extractor need not be hashable, and two equal-looking ones may differ.
    readings = {(s.options.source, id(s.options.source_extractor)) for s in sharing}
    if len(readings) > 1:
        raise ConfigError(
            f"shard={str(shard)!r} splits the items by their source, and the scorers with "
            f"questions='per_source' read sources differently ({len(readings)} different "
            "source/source_extractor settings), so no split keeps each one's sources whole: "
            "give them the same source settings, questions='per_item' to all but one, or "
            "run without a shard"
        )
    return reader


def _in_shard(
    scorers: Sequence[object], has_target: bool, shard: Shard | None, by: ShardRule
) -> Callable[[Item], bool]:
    """Whether an item is the shard's (every item is when there is none): chosen under ``by``
    by its id, or by its source's fingerprint (the one its questions are shared under)."""
    if shard is None:
        return lambda item: True
    if by == "id":
        return lambda item: shard.holds(item.id)
    reader = _source_reader(scorers, has_target, shard)

    def by_source(item: Item) -> bool:
        try:
            source = reader.source_of(item.input, item.output)
        except Exception:
            # A source that cannot be read (a source_extractor that raises on this item) fails
            # the item when it is scored, with this same error, before any question is drawn:
            # it has no questions to share, and its id places it as well as anything.
            return shard.holds(item.id)
        return shard.holds(source_fingerprint(source))

    return by_source


@dataclass(frozen=True)
class Items:
    """The items a run draws, each with its dataset position, and what is known in advance."""

    draw: Callable[[], Iterator[tuple[int, Item]]]
    # Items the run is to finish (the shard's, when sharded); None when not known in advance.
    selected: int | None
    dataset: DatasetInfo | None


def _say_given_beyond(count: int, reads: Reads) -> None:
    """One warning for the items whose given key facts or questions outnumber max_questions:
    every one is asked (dropping the data's own would measure the item on less than it says)."""
    if count:
        logger.warning(
            "%d item%s give%s more key facts or questions than max_questions=%s: every one is "
            "asked (max_questions bounds only what the judge draws)",
            count,
            "s" if count > 1 else "",
            "" if count > 1 else "s",
            reads.max_questions,
        )


def prepare(
    data: Iterable[Mapping[str, Any] | Item],
    scorers: Sequence[object],
    has_target: bool,
    shard: Shard | None,
    total: int | None,
    by: ShardRule = "id",
) -> Items:
    """Check what can be checked before any work: a list or a dataset file whole, each row of
    a file read once to check it and again as items start; other iterables item by item.
    A shard's items are those whose key under ``by`` (``shard_rule``) falls in it."""
    reads = Reads.of(scorers, has_target)
    wanted = _in_shard(scorers, has_target, shard, by)

    def chosen(entries: Iterator[tuple[int, Item]]) -> Iterator[tuple[int, Item]]:
        return ((p, item) for p, item in entries if wanted(item))

    if isinstance(data, DatasetFile):
        output_field = _check_outputs(data, has_target)
        fields = replace(data.fields, output=output_field)
        names = {
            "input": f"field {fields.input!r} (dataset.fields.input)",
            "output": f"field {fields.output!r} (dataset.fields.output)",
        }
        named = fields.coverage_field()
        if named is not None:
            names["ground_truth"] = f"field {named[0]!r} ({named[1]})"

        def checked() -> Iterator[tuple[int, Item]]:
            # The file's reader gives each row its unique id (and refuses a duplicate).
            for p, (where, raw) in enumerate(data.rows()):
                yield p, _as_item(raw, p, None, has_target, reads, where, names)

        count = selected = 0
        first: Item | None = None
        inputs = InputsFingerprint()
        # Every row's metadata, a shard's or not: every shard of the run types it alike.
        metadata = MetadataReader(fields.metadata)
        beyond = 0
        for _, item in checked():
            if first is None:
                first = item
            count += 1
            beyond += reads.given_beyond(item)
            selected += wanted(item)
            inputs.add(item.input)
            metadata.add(item.metadata)
        if first is None:
            raise DatasetError(f"{data.path}: the dataset has no rows")
        _say_given_beyond(beyond, reads)
        info = DatasetInfo(
            path=str(data.path),
            items=count,
            sha256=data.sha256(),
            inputs_sha256=inputs.hexdigest(),
            ids=_file_ids(data, first),
            metadata_types=metadata.types().as_dict(),
        )
        return Items(lambda: chosen(checked()), selected, info)
    if isinstance(data, Sequence):
        ids = IdAllocator(place="data item {}")
        items = [_as_item(raw, index, ids, has_target, reads) for index, raw in enumerate(data)]
        _say_given_beyond(sum(map(reads.given_beyond, items)), reads)
        generated = any(isinstance(raw, Mapping) and raw.get("id") is None for raw in data)
        metadata = MetadataReader()
        for item in items:
            metadata.add(item.metadata)
        info = DatasetInfo(
            items=len(items),
            sha256=_fingerprint(items),
            inputs_sha256=inputs_fingerprint(input_sha256(item.input) for item in items),
            ids="generated" if generated else "given",
            metadata_types=metadata.types().as_dict(),
        )
        return Items(lambda: chosen(enumerate(items)), sum(map(wanted, items)), info)
    stream = iter(data)

    def read_stream() -> Iterator[tuple[int, Item]]:
        ids = IdAllocator(place="data item {}")
        return chosen((p, _as_item(raw, p, ids, has_target, reads)) for p, raw in enumerate(stream))

    return Items(read_stream, total, None)


def _check_outputs(data: DatasetFile, has_target: bool) -> str | None:
    """The field of the data's summaries (``DatasetFile.output_field``), checked against the
    target: one rule for Python and ``summeval-run``. ``ConfigError`` when the data holds
    summaries and an agent is set (one of the two would be silently ignored), and when there is
    neither (nothing to score); both before any call."""
    found = data.output_field()
    named = data.fields.output is not None
    if has_target and found is not None:
        which = "named by dataset.fields.output" if named else "found by its name"
        raise ConfigError(
            f"{data.path} holds summaries in its field {found!r} ({which}), and an agent "
            "(target) is set to write them: the agent's would be scored and these ignored. "
            "To score the file's summaries: target=precomputed (run_evals: target=None). To "
            "score the agent's: dataset.ignore_outputs=true (Python: DatasetFile(..., "
            "ignore_outputs=True))"
        )
    if not has_target and found is None and (columns := data.columns()):
        raise ConfigError(
            f"{data.path}: no summaries to score and no target to write them: its first row "
            f"has no {' or '.join(repr(n) for n in OUTPUT_NAMES)} field and "
            f"dataset.fields.output names none (the row's fields: {columns}). Name the field "
            "that holds the summaries (dataset.fields.output=<field>), or pick an agent "
            "(target=<name>)"
            + (
                "; dataset.ignore_outputs=true is set, so none is read"
                if data.ignore_outputs
                else ""
            )
        )
    return found


def _file_ids(data: DatasetFile, first: Item) -> Literal["given", "generated"]:
    """Whether a file's ids are its own or generated from its rows' content (a comparison of
    runs over changed data warns of the latter, since a changed row gets another id)."""
    if data.fields.id is None:
        return "generated"
    # The id field may be absent from the file (then every row lacks it): the first row read
    # as if there were no id field gets the id it was given only if that id was generated.
    unnamed = replace(data, fields=replace(data.fields, id=None), limit=1)
    return "generated" if next(iter(unnamed)).id == first.id else "given"


def _fingerprint(items: Sequence[Item]) -> str:
    """A SHA-256 of the items' ids, inputs and outputs: a resume of a run over a changed list is
    refused as one over a changed file is."""
    digest = hashlib.sha256()
    for item in items:
        entry = [item.id, item.input, item.output]
        digest.update(json.dumps(entry, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()
