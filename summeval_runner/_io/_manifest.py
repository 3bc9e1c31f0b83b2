"""The run manifest: what produced a run's tables, with every secret redacted."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from summeval_runner._errors import InputError

REDACTED = "***"
MANIFEST = "manifest.json"
# Keys whose values are secrets. "api_key_env" names a variable and is kept: it is not the key.
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization)$", re.IGNORECASE)
_SECRET_VARIABLE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def redact(value: Any) -> Any:
    """``value`` with the value of every secret-looking key replaced by ``***``."""
    if isinstance(value, Mapping):
        return {
            key: REDACTED if _SECRET_KEY.search(str(key)) and item else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


def environment_secrets() -> tuple[str, ...]:
    """The values of environment variables whose names say they hold a secret."""
    return tuple(
        value
        for name, value in os.environ.items()
        if _SECRET_VARIABLE.search(name) and len(value) >= 8
    )


def scrub(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """Remove the values of secret environment variables from text about to reach the disk.

    A key can arrive in an error message or a config value under an innocent name; this is the
    last line of defence after ``redact``.
    """
    for secret in environment_secrets() if secrets is None else secrets:
        text = text.replace(secret, REDACTED)
    return text


# What decides an item's result: runs that differ here do not measure the same thing.
RESULT_SECTIONS = ("dataset", "target", "model", "scorer")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= _flatten(item, f"{prefix}{key}.")
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


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
            if old.get(key) != new.get(key):
                where = f"{section}.{key}" if key else section
                differences.append(f"{where} was {old.get(key)!r}, now {new.get(key)!r}")
    return differences


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """A run directory's manifest; ``InputError`` naming the directory if it has none."""
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError(f"{run_dir} is not a run directory (it has no {MANIFEST})")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InputError(f"{path} cannot be read: {error}") from None
    return manifest


def write_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """Write the manifest atomically: readers see the old file or the new one, never half."""
    text = scrub(json.dumps(redact(manifest), indent=2, ensure_ascii=False, default=str))
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text + "\n", encoding="utf-8")
    os.replace(partial, path)
