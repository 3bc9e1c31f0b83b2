"""Draws the reference pages from the code at build time, so that they cannot go stale.

A page holds a marker, ``<!-- reference:NAME -->``, that this mkdocs hook replaces:

- ``configs``: every option of every config group, from the package's Hydra configs (each key,
  its default, and the comment written above or beside it in the YAML file) and, for the
  ``runner`` group, from the structured config (``RunnerConfig``) and the options' docstrings
  (``RunOptions``, ``RetryPolicy``);
- ``tables``: every column of every table a run writes, from the Parquet schemas' own
  descriptions;
- ``exit-codes``: ``summeval-run``'s exit codes, from ``_cli/_exit_codes.py``.

``tests/test_docs_site.py`` builds the site and checks each option and column appears.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from markdown import Markdown
from markdown.extensions import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority

_MARKER = re.compile(r"<!-- reference:([a-z-]+) -->")
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?P<rest>.*)$")
# Config groups a user picks from; hydra/ holds the help and launcher files.
_SKIPPED_KEYS = {"_target_", "defaults"}


@dataclasses.dataclass(frozen=True)
class ConfigOption:
    """One option of one config group's file: ``model=openai`` ``model.timeout_s``."""

    group: str
    choice: str
    key: str
    default: Any
    description: str


def _inline_comment(rest: str) -> str:
    # A value's own comment follows " #"; a "#" inside quotes is part of the value.
    if '"' in rest or "'" in rest:
        return ""
    _, sep, comment = rest.partition(" #")
    return comment.strip() if sep else ""


def file_header(text: str) -> str:
    """The comment a config file opens with: what the choice is (not its first key's)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def _commented_keys(text: str) -> Iterator[tuple[str, str]]:
    """Each key path of a simple YAML mapping with the comment written above or beside it."""
    stack: list[tuple[int, str]] = []
    comments: list[str] = []
    block_indent: int | None = None
    lines = text.splitlines()
    # The file's opening comment describes the choice (file_header), not its first key.
    header = 0
    while header < len(lines) and lines[header].startswith("#"):
        header += 1
    for line in lines[header:]:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if block_indent is not None:
            if stripped and indent <= block_indent:
                block_indent = None
            else:
                continue
        if not stripped:
            comments = []
            continue
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if match is None:
            comments = []
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([name for _, name in stack] + [match["key"]])
        rest = match["rest"]
        yield path, " ".join([*comments, _inline_comment(rest)]).strip()
        comments = []
        value = rest.split(" #")[0].strip()
        if value in {"", ">", ">-", "|", "|-"}:
            if value:
                block_indent = indent
            else:
                stack.append((indent, match["key"]))


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data[part]
    return data


def _docstring_bullets(*owners: type) -> dict[str, str]:
    """``name`` -> the bullet of a class docstring that first names it: ``- ``name``: ...``."""
    found: dict[str, str] = {}
    for owner in owners:
        text = re.sub(r"\n\s*\n", "\n\n", owner.__doc__ or "")
        for bullet in re.findall(r"^\s*- (.+?)(?=^\s*- |\n\n|\Z)", text, re.M | re.S):
            flat = " ".join(bullet.split())
            for name in re.findall(r"``(\w+)``", flat):
                found.setdefault(name, flat)
    return found


def _dataclass_comments(source: str) -> dict[tuple[str, str], str]:
    """(class, field) -> the comment written above or beside the field in ``source``."""
    found: dict[tuple[str, str], str] = {}
    owner = ""
    comments: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if line.startswith("class "):
            owner = line[len("class ") :].split("(")[0].split(":")[0]
            comments = []
        elif stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
        elif match := re.match(r"^    (\w+): [^=]+(?:=.*)?$", line):
            found[(owner, match[1])] = " ".join([*comments, _inline_comment(line)]).strip()
            comments = []
        else:
            comments = []
    return found


def _structured_descriptions() -> dict[str, str]:
    """``group.key`` -> a description from the structured configs and the options' docstrings."""
    from summeval_runner._cli import _config
    from summeval_runner._runner._options import RunOptions
    from summeval_runner._runner._retry import RetryPolicy

    comments = _dataclass_comments(Path(_config.__file__).read_text(encoding="utf-8"))
    bullets = _docstring_bullets(RunOptions)
    retry = " ".join((RetryPolicy.__doc__ or "").split("\n\n")[1].split())
    listing = resources.files("summeval_runner._configs").joinpath("runner/default.yaml")
    # The runner group's file lists its options on comment lines: the app's own (resume,
    # estimate) are described there, and nowhere in RunOptions.
    listed: dict[str, str] = {}
    for line in listing.read_text(encoding="utf-8").splitlines():
        match = re.match(r"#\s+([\w.]+(?:, [\w.]+)*)\s{2,}(.+)$", line)
        if match:
            for name in match[1].split(", "):
                listed[name] = match[2].strip()
    found: dict[str, str] = {}

    def walk(config: type, prefix: str) -> None:
        for item in dataclasses.fields(config):
            key = f"{prefix}{item.name}"
            kind = item.default_factory if item.default_factory is not dataclasses.MISSING else None
            if isinstance(kind, type) and dataclasses.is_dataclass(kind):
                walk(kind, f"{key}.")
            text = comments.get((config.__name__, item.name), "")
            if prefix.startswith("runner."):
                name = key[len("runner.") :]
                text = text or listed.get(name) or bullets.get(item.name, "")
                if name.startswith("retry."):
                    text = text or retry
            found.setdefault(key, text)

    walk(_config.AppConfig, "")
    walk(_config.AgreeConfig, "")
    return found


# The groups of each command, in the order a user meets them, and the config that holds them.
_COMMANDS = (
    ("summeval-run", "config", ("dataset", "target", "model", "scorer", "runner")),
    ("summeval-agree", "agree", ("human", "agreement")),
)


def config_options() -> list[ConfigOption]:
    """Every option of every config group, as the package ships them: the keys of the config
    Hydra composes for each of the group's choices."""
    from hydra import compose, initialize_config_module
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from summeval_runner._cli._config import register_configs

    register_configs(ConfigStore.instance())
    described = _structured_descriptions()
    root = resources.files("summeval_runner._configs")
    options: list[ConfigOption] = []
    GlobalHydra.instance().clear()
    with initialize_config_module("summeval_runner._configs", version_base=None):
        for _, config_name, groups in _COMMANDS:
            for group in groups:
                directory = root.joinpath(group)
                files = directory.iterdir() if directory.is_dir() else []
                choices = sorted(p.name[: -len(".yaml")] for p in files if p.name.endswith(".yaml"))
                for choice in choices or [""]:
                    overrides = [f"{group}={choice}"] if choice else []
                    if config_name == "agree" and group != "human":
                        overrides.append("human=summeval")
                    composed = compose(config_name, overrides)
                    node = OmegaConf.to_container(composed[group], resolve=False)
                    commented = (
                        dict(
                            _commented_keys(
                                directory.joinpath(f"{choice}.yaml").read_text(encoding="utf-8")
                            )
                        )
                        if choice
                        else {}
                    )
                    for key, value in _leaves(node, ""):
                        description = commented.get(key) or described.get(f"{group}.{key}", "")
                        options.append(ConfigOption(group, choice, key, value, description))
    GlobalHydra.instance().clear()
    return options


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if not isinstance(node, dict):
        yield prefix.rstrip("."), node
        return
    for key, value in node.items():
        if key in _SKIPPED_KEYS:
            continue
        if isinstance(value, dict) and value and key != "against":
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _cell(text: str) -> str:
    """Text for a table cell: HTML-escaped (a ``<`` is shown, never read as a tag)."""
    return html.escape(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """A code span for a table cell. Markdown escapes a code span's text itself: escaped here
    too, ``'`` would be shown as ``&#x27;`` (issue 42)."""
    text = text.replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def _shown(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, str) and len(value) > 60:
        value = value[:57] + "..."
    return _code(str(value))


def _configs_page() -> str:
    out: list[str] = []
    current: tuple[str, str] | None = None
    root = resources.files("summeval_runner._configs")
    for option in config_options():
        if (option.group, option.choice) != current:
            current = (option.group, option.choice)
            choice = f"={option.choice}" if option.choice else ""
            out += ["", f"### `{option.group}{choice}`", ""]
            if option.choice:
                text = root.joinpath(option.group, f"{option.choice}.yaml").read_text("utf-8")
                out += [_cell(file_header(text)), ""] if file_header(text) else []
            out += ["| option | default | meaning |", "| --- | --- | --- |"]
        out.append(
            f"| `{option.group}.{option.key}` | {_shown(option.default)} | "
            f"{_cell(option.description)} |"
        )
    return "\n".join(out) + "\n"


def _tables_page() -> str:
    from summeval_runner._rundir._parquet import descriptions

    out = []
    for file_name, schema in table_schemas().items():
        out += ["", f"### `{file_name}`", "", "| column | type | meaning |", "| --- | --- | --- |"]
        for field in schema:
            meaning = descriptions(schema)[field.name]
            out.append(f"| `{field.name}` | {_code(str(field.type))} | {_cell(meaning)} |")
    return "\n".join(out) + "\n"


def table_schemas() -> dict[str, Any]:
    """Each table a run, a comparison or an agreement writes, by its file name."""
    from summeval_runner._analysis import _agreement, _compare, _history
    from summeval_runner._rundir import _runs_table, _tables

    return {
        "items.parquet": _tables.ITEMS_SCHEMA,
        "alignment.parquet": _tables.ALIGNMENT_SCHEMA,
        "coverage.parquet": _tables.COVERAGE_SCHEMA,
        "aggregates.parquet": _tables.AGGREGATES_SCHEMA,
        "questions.parquet": _tables.QUESTIONS_SCHEMA,
        "transcripts.parquet": _tables.TRANSCRIPTS_SCHEMA,
        "runs.parquet": _runs_table.RUNS_SCHEMA,
        "trend.parquet": _history.TREND_SCHEMA,
        "comparison.parquet": _compare.COMPARISON_SCHEMA,
        "agreement.parquet": _agreement.AGREEMENT_SCHEMA,
    }


def exit_codes() -> list[tuple[int, str, str]]:
    """``summeval-run``'s exit codes: (code, constant, meaning), from the module's own lines."""
    from summeval_runner._cli import _exit_codes

    source = Path(_exit_codes.__file__).read_text(encoding="utf-8")
    return [
        (int(code), name, meaning.strip())
        for name, code, meaning in re.findall(r"^(EXIT_\w+) = (\d+)\s*#(.*)$", source, re.M)
    ]


def _exit_codes_page() -> str:
    rows = ["| code | meaning |", "| --- | --- |"]
    rows += [f"| `{code}` | {_cell(meaning)} |" for code, _, meaning in exit_codes()]
    return "\n".join(rows) + "\n"


_PAGES = {"configs": _configs_page, "tables": _tables_page, "exit-codes": _exit_codes_page}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: each marker replaced by the reference it names."""
    return _MARKER.sub(lambda match: _PAGES[match[1]](), markdown)


class _DoctestFences(Preprocessor):
    """The docstrings' examples (``>>>`` lines and their output) as Python console code blocks:
    read as Markdown, their output (``['preprocess', 'analyze']``) would be taken for links."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fenced = False
        for line in lines:
            example = line.lstrip().startswith(">>>")
            if example and not fenced:
                out += ["", "```pycon"]
                fenced = True
            elif fenced and not line.strip():
                out += ["```", ""]
                fenced = False
            out.append(line.strip() if fenced else line)
        return out + (["```"] if fenced else [])


class _DoctestExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:
        md.preprocessors.register(_DoctestFences(md), "doctest_fences", 40)


@event_priority(100)  # before mkdocstrings reads the extensions
def on_config(config: Any, **_: Any) -> Any:
    """mkdocs' hook: docstrings' examples fenced as code (``_DoctestFences``)."""
    config.markdown_extensions.append(_DoctestExtension())
    return config
