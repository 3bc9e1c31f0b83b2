"""Names made of a run's overrides: a sweep job's directory (``job_dir_name``, and Hydra's
``${summeval.job_dir:...}`` resolver), a run's label (``label_name``, ``readable_label``), long
values shortened to a readable prefix and a hash (``short_value``), and the keys a sweep fixes
(``fixed_keys``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from summeval_runner._cli._bundled import default_choices
from summeval_runner._cli._rundir import keep_hydra_files
from summeval_runner._secrets import redact

# A value longer than this is shown as a readable prefix and a hash, in directory names and
# labels alike: a prompt text or a path would otherwise make a name longer than a file system
# takes (NAME_MAX, 255 bytes) and a label nobody reads.
LONG_VALUE = 48
_PREFIX = 24
# The longest name made of several overrides, in bytes; a longer one is cut and hashed whole.
_LONGEST_NAME = 160
_HASH = 8


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_HASH]


def short_value(value: str) -> str:
    """``value`` as it is, or, when longer than ``LONG_VALUE`` characters: its first 24
    characters (of a path, its last names within 24) in letters, digits and ``.-_`` (any other
    run of characters made ``_``), ``~`` and the first 8 hex digits of its SHA-256:
    ``Summarize_the_text_in_on~6150b441``.

    >>> short_value("0.5")
    '0.5'
    >>> short_value("'" + "Summarize the text, briefly. " * 4 + "'")
    'Summarize_the_text_brie~800671d5'
    >>> short_value("/data/benchmarks/news/2026/november/articles-cleaned.jsonl")
    'articles-cleaned.jsonl~e0d6bc77'
    """
    if len(value) <= LONG_VALUE:
        return value
    text = value.strip("'\"")
    shown = text[:_PREFIX]
    if re.search(r"[/\\]", text) and not re.search(r"\s", text):
        # A path says most at its end: its last whole names, the file's at least.
        tail = re.split(r"[/\\]", text[-_PREFIX:], maxsplit=1)
        shown = tail[-1] or text[-_PREFIX:]
    readable = re.sub(r"[^\w.\-]+", "_", shown).strip("_")
    return f"{readable}~{_digest(value)}"


_ESCAPED = re.compile(r"\\(.)")


def _unescaped(line: str) -> str:
    """An override as typed: a sweep's jobs get theirs from Hydra with the grammar's special
    characters escaped (``http\\://host``); a quoted value stays as it is."""
    key, sep, value = line.partition("=")
    if not sep or value[:1] in ("'", '"'):
        return line
    return key + sep + _ESCAPED.sub(r"\1", value)


def _name_parts(overrides: Sequence[str]) -> list[str]:
    """Each override redacted, unescaped, sorted, as ``key=value`` with a long value shortened."""
    lines = sorted(_unescaped(str(line)) for line in redact(list(overrides)))
    return [
        f"{key}{sep}{short_value(value)}"
        for key, sep, value in (line.partition("=") for line in lines)
    ]


def variant_name(overrides: Sequence[str]) -> str:
    """The name a job's overrides make, for its directory and its label: redacted (no
    credential), sorted, each ``key=value`` with a long value shortened (``short_value``), joined
    by ``,``; a name still longer than 160 bytes is cut there, with the whole's hash after ``~``.
    Empty for no overrides."""
    name = ",".join(_name_parts(overrides))
    encoded = name.encode("utf-8")
    if len(encoded) <= _LONGEST_NAME:
        return name
    cut = encoded[: _LONGEST_NAME - _HASH - 1].decode("utf-8", errors="ignore")
    return f"{cut}~{_digest(name)}"


# A label is read in tables, comparisons, the report's columns and a plot's legend: a name of
# overrides longer than this is cut, with the whole's hash after "~" so that it stays unique.
LONGEST_LABEL = 64


def label_name(overrides: Sequence[str]) -> str:
    """``variant_name`` for a label: as it is up to ``LONGEST_LABEL`` characters; longer, the
    overrides that fit whole (in order, those that would not fit left out), then ``,...~`` and
    the first 8 hex digits of the whole name's SHA-256: at most 64 characters, and two names that
    differ get two labels.

    >>> label_name(["target.k=1"])
    'target.k=1'
    >>> label_name(["dataset.limit=5", "dataset.path=" + "d" * 40, "target.k=1"])
    'dataset.limit=5,target.k=1,...~4102fd95'
    """
    return _fitted(_name_parts(overrides))


def _fitted(parts: Sequence[str]) -> str:
    """``parts`` joined by ``,``, cut to ``LONGEST_LABEL`` as ``label_name`` says."""
    name = ",".join(parts)
    if len(name) <= LONGEST_LABEL:
        return name
    tail = f",...~{_digest(name)}"
    kept: list[str] = []
    for part in parts:
        if len(",".join([*kept, part])) + len(tail) <= LONGEST_LABEL:
            kept.append(part)
    if not kept:  # not one override fits: the name's start
        return f"{name[: LONGEST_LABEL - len(tail)]}{tail}"
    return ",".join(kept) + tail


# How a dataset file is read, not which file: a run's label leaves them out (its dataset hash,
# which the comparison checks, still tells two readings apart).
_READING = ("dataset.fields", "dataset.format", "dataset.ignore_outputs")
_SHORTENED = re.compile(rf"~[0-9a-f]{{{_HASH}}}$")


def readable_label(overrides: Sequence[str]) -> str:
    """A single run's label in a person's words, from what its command line changes: the
    dataset option's name or its file's stem, the target (``llm_summarizer/small-model``), the judge
    (``openai/gpt-4.1``), then any other
    setting as ``key=value``; options picked as they are by default and settings that say how
    the file is read are left out. Redacted and cut as ``label_name``; ``""`` for none.

    >>> readable_label(["dataset.path=/data/mine.csv", "dataset.fields.input=article",
    ...                 "model=openai", "model.name=gpt-4.1", "target=precomputed"])
    'mine,precomputed,openai/gpt-4.1'
    >>> readable_label(["model=offline", "target.k=1", "dataset.limit=5"])
    'dataset.limit=5,target.k=1'
    >>> readable_label(["dataset=news", "target=my_agent"])
    'news,my_agent'
    >>> readable_label(["dataset.path=~/data/mine.csv"])
    'mine'
    >>> readable_label(["dataset.path=/data/benchmarks/news/2026/november/articles-cleaned.jsonl"])
    'articles-cleaned'
    """
    dataset: list[str] = []
    target: list[str] = []
    judge: list[str] = []
    rest: list[str] = []
    for part in _name_parts(overrides):
        key, _, value = part.partition("=")
        key = key.lstrip("+")
        bare = value.strip("'\"")
        if key.startswith(_READING) or default_choices().get(key) == bare:
            continue
        if key == "dataset":  # an option of one's own (--config-dir): its name
            dataset.insert(0, bare)
        elif key == "dataset.path":
            # A long path is shortened to its end and a hash (short_value): the file's stem.
            dataset.append(Path(_SHORTENED.sub("", bare)).stem or bare)
        elif key in ("target", "target.name"):
            target.insert(0 if key == "target" else len(target), bare)
        elif key in ("model", "model.name"):
            judge.insert(0 if key == "model" else len(judge), bare)
        else:
            rest.append(part)
    named = [*dataset, *("/".join(part) for part in (target, judge) if part)]
    return _fitted([*named, *rest])


def override_key(line: str) -> str:
    """An override's key or config group, without its ``+``, ``++`` or ``~``."""
    return line.partition("=")[0].lstrip("+~")


def fixed_keys(sweep_overrides: Sequence[str]) -> frozenset[str]:
    """The keys a sweep's command line sets to one value for every job (``dataset.limit=5`` in
    ``-m target.k=1,2 dataset.limit=5``): those that tell no job from another."""
    parsed = OverridesParser.create().parse_overrides([str(line) for line in sweep_overrides])
    return frozenset(str(o.key_or_group) for o in parsed if not o.is_sweep_override())


# A shard's "i/n": runner.shard takes no other form, so "i_n" names no other value of it.
_SHARD = re.compile(r"(?:^|(?<=,))runner\.shard=(\d+)/(\d+)(?=,|$)")


def path_safe(name: str) -> str:
    """A directory name with no path separator: ``runner.shard=0/2`` becomes ``runner.shard=0_2``;
    any other name with ``/`` or ``\\`` in it gets ``_`` for each and the whole's hash after
    ``~``, so that two values that differ only there (``a/b``, ``a_b``) name two directories.

    Sweep directories are named after their overrides, and a value with "/" in it (a shard, a
    dataset path) would otherwise nest one run inside folders named after half of it.

    >>> path_safe("runner.shard=0/2,scorer.scale=5")
    'runner.shard=0_2,scorer.scale=5'
    >>> path_safe('target.prompt="Summarize a/b"')
    'target.prompt="Summarize a_b"~d60901b2'
    """
    shards = _SHARD.sub(r"runner.shard=\1_\2", name)
    safe = shards.replace("/", "_").replace("\\", "_")
    return safe if safe == shards else f"{safe}~{_digest(name)}"


def named_overrides(overrides: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """The overrides a sweep job's directory is named after: all but those whose key is in
    ``exclude`` (``hydra.job.config.override_dirname.exclude_keys``), as Hydra decides it."""
    parsed = OverridesParser.create().parse_overrides([str(line) for line in overrides])
    excluded = {str(key) for key in exclude}
    return [str(o.input_line) for o in parsed if o.key_or_group not in excluded]


def job_dir_name(overrides: Sequence[str], exclude: Sequence[str]) -> str:
    """A sweep job's directory, under the sweep's: its overrides' ``variant_name``, path-safe
    (``hydra.sweep.subdir``; ``<sweep>/merged/`` names its merged shards the same way)."""
    return path_safe(variant_name(named_overrides(overrides, exclude)))


def _job_dir(overrides: Sequence[str], exclude: Sequence[str], sweep_dir: Any = None) -> str:
    """``hydra.sweep.subdir``: the job's directory name. Hydra resolves it right before it
    writes the job's ``.hydra/`` files there, so it is also where a run already in that
    directory gets its files kept, to be put back if this job is refused."""
    name = job_dir_name(list(overrides), list(exclude))
    if sweep_dir is not None:
        keep_hydra_files(Path(str(sweep_dir)) / name)
    return name


# Registered on import, not in main(): a launcher's worker process (joblib, Ray, Submitit) names
# the job's directory itself, without running main(). Replaced idempotently.
OmegaConf.register_new_resolver("summeval.job_dir", _job_dir, replace=True)
