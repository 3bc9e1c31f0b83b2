"""Overrides checked before Hydra composes the config: a misspelt key or config-group option is
one line naming the closest valid name and the choices, not Hydra's config-search-path dump and
its advice to append the key with ``+`` (which the app then refuses as an unknown setting).

Only what can be known without composing is checked: keys under the structured groups (their
dataclass fields) and options of config groups (the YAML files of the bundled configs and of
each ``--config-dir``). Anything else is left to Hydra and to ``_plan``'s checks.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, get_type_hints

from summeval_runner._cli._bundled import CONFIG_PATH

_CONFIGS_PACKAGE = CONFIG_PATH.removeprefix("pkg://")


# Arguments that put config groups' options where this check cannot list them (another primary
# config, a search path of Hydra's, a pkg:// source): group options are then left to Hydra.
_OTHER_SOURCES = ("--config-path", "-cp", "--config-name", "-cn", "hydra.searchpath")

# Top-level keys of another command's config, which share the config folder: a user who reaches
# for them is sent to that command.
_ELSEWHERE = {"human": "summeval-agree", "agreement": "summeval-agree"}


def _config_dirs(arguments: Sequence[str]) -> list[Path] | None:
    """The bundled configs' folder and each ``--config-dir`` (``-cd``) on the command line;
    ``None`` when options may come from elsewhere too (``_OTHER_SOURCES``, a ``--config-dir``
    that is not a folder on disk)."""
    root = resources.files(_CONFIGS_PACKAGE)
    if not isinstance(root, Path):
        return None
    found = [root]
    for index, argument in enumerate(arguments):
        if argument.lstrip("+").startswith(_OTHER_SOURCES):
            return None
        if argument.startswith("--config-dir="):
            found.append(Path(argument.partition("=")[2]))
        elif argument in ("--config-dir", "-cd") and index + 1 < len(arguments):
            found.append(Path(arguments[index + 1]))
    return found if all(folder.is_dir() for folder in found) else None


def _options(group: str, dirs: Sequence[Path]) -> list[str]:
    return sorted(
        {path.stem for folder in dirs for path in (folder / group).glob("*.yaml")}
        | {path.stem for folder in dirs for path in (folder / group).glob("*.yml")}
    )


def _suggestion(name: str, choices: Sequence[str]) -> str:
    """``did you mean x? `` for the closest of ``choices``; ``""`` when none is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


def _field_types(schema: type) -> dict[str, Any]:
    hints = get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def misspelt(arguments: Sequence[str], schema: type, program: str) -> str | None:
    """The first override of ``arguments`` that names no setting of ``schema`` (a dataclass of
    dataclasses) or no option of a config group, as ``<program>: error: ...``; else None.
    Overrides that add (``+``), delete (``~``) or force (``++``) are Hydra's to judge."""
    dirs = _config_dirs(arguments)
    top = _field_types(schema)
    for argument in arguments:
        if argument.startswith(("-", "+", "~")) or "=" not in argument:
            continue
        key = argument.partition("=")[0]
        if key.startswith("hydra") or "@" in key or "/" in key:
            continue
        parts = key.split(".")
        other = _ELSEWHERE.get(parts[0], program)
        if parts[0] not in top and other != program:
            return (
                f"{program}: error: {parts[0]} is {other}'s setting, not {program}'s: "
                f"{other} {argument} runs it (see {other} --help)"
            )
        if len(parts) == 1:
            if key not in top:
                return (
                    f"{program}: error: {key} is not a config group or setting; "
                    f"{_suggestion(key, list(top))}(the config has: {', '.join(top)})"
                )
            options = _options(key, dirs) if dirs is not None else []
            if options:  # a config group (a folder of options), not a plain setting
                value = argument.partition("=")[2]
                if value and "," not in value and value not in options and value != "null":
                    return (
                        f"{program}: error: {key}={value}: {key} has no option {value!r}; "
                        f"{_suggestion(value, options)}(the choices: {', '.join(options)})"
                    )
            continue
        node: Any = schema
        for depth, part in enumerate(parts):
            if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
                break  # a mapping of any keys (model, target): its own checks say
            fields = _field_types(node)
            if part not in fields:
                where = ".".join(parts[:depth]) or "the config"
                return (
                    f"{program}: error: {key} is not a setting; "
                    f"{_suggestion(part, list(fields))}({where} takes: {', '.join(fields)})"
                )
            node = fields[part]
    return None
