"""The documentation site builds with ``--strict`` and its reference pages hold every option,
column, exit code and public name the code has, found here independently of the hook that draws
the pages (``docs/hooks/reference.py``), so a page cannot silently fall behind the code."""

from __future__ import annotations

import dataclasses
import html
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

import summeval_runner
from summeval_runner._analysis import _agreement, _compare, _history
from summeval_runner._cli import _config, _exit_codes
from summeval_runner._rundir import _runs_table, _tables

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def _rows(page: Path) -> dict[str, list[str]]:
    """The first cell of each table row (its code text) -> the row's other cells, as text."""
    found: dict[str, list[str]] = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page.read_text(encoding="utf-8"), re.S):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        if cells:
            found.setdefault(cells[0], cells[1:])
    return found


def _leaves(node: Any, prefix: str) -> list[str]:
    if not isinstance(node, dict) or not node or prefix.endswith("against."):
        return [prefix.rstrip(".")]
    return [
        key
        for name, value in node.items()
        if name not in {"_target_", "defaults"}
        for key in _leaves(value, f"{prefix}{name}.")
    ]


def _fields(config: type, prefix: str) -> list[str]:
    keys = []
    for item in dataclasses.fields(config):
        factory = item.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            keys += _fields(factory, f"{prefix}{item.name}.")
        else:
            keys.append(f"{prefix}{item.name}")
    return keys


def _every_option() -> set[str]:
    """Every key a user can set: each group file's keys and each structured config's fields."""
    root = resources.files("summeval_runner._configs")
    keys: set[str] = set()
    for group in ("dataset", "target", "model", "scorer", "runner", "human"):
        for path in root.joinpath(group).iterdir():
            if path.name.endswith(".yaml"):
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
                keys |= {f"{group}.{key}" for key in _leaves(data, "") if key}
    for config in (_config.AppConfig, _config.AgreeConfig):
        keys |= {key for key in _fields(config, "") if not key.startswith(("model", "target"))}
    return keys


def test_every_option_of_every_config_group_is_in_the_reference_with_its_meaning(
    site: Path,
) -> None:
    rows = _rows(site / "reference" / "configs" / "index.html")
    options = _every_option()
    assert {"dataset.fields.input", "runner.max_cost", "model.price", "human.against"} <= options
    missing = sorted(key for key in options if key not in rows)
    assert not missing, f"options missing from docs/reference/configs.md: {missing}"
    undescribed = sorted(key for key in options if not rows[key][-1])
    assert not undescribed, f"options with no meaning (add a comment beside them): {undescribed}"


def _schemas() -> dict[str, pa.Schema]:
    """Every schema the run directory and the analysis declare (``*_SCHEMA``), found by looking,
    not by a list."""
    found = {}
    for module in (_tables, _runs_table, _history, _compare, _agreement):
        for name, value in vars(module).items():
            if name.endswith("_SCHEMA") and isinstance(value, pa.Schema):
                found[f"{module.__name__}.{name}"] = value
    return found


def test_every_column_of_every_table_is_in_the_reference_with_its_description(
    site: Path,
) -> None:
    page = (site / "reference" / "tables" / "index.html").read_text(encoding="utf-8")
    sections = re.split(r"<h3[^>]*>", page)[1:]
    tables = {
        html.unescape(re.sub(r"<[^>]+>", "", section.split("</h3>")[0])).strip(" ¶"): section
        for section in sections
    }
    schemas = _schemas()
    assert len(schemas) >= 10
    for name, schema in schemas.items():
        shown = [
            section
            for section in tables.values()
            if all(f"<code>{field.name}</code>" in section for field in schema)
        ]
        assert shown, f"{name}: no table of the reference has all its columns"
        for field in schema:
            description = (field.metadata or {}).get(b"description", b"").decode()
            assert description, f"{name}.{field.name} has no description in its schema"
            assert html.escape(description, quote=False) in shown[0] or description in (
                html.unescape(shown[0])
            )


def test_every_exit_code_is_in_the_reference(site: Path) -> None:
    rows = _rows(site / "reference" / "exit-codes" / "index.html")
    codes = {value: name for name, value in vars(_exit_codes).items() if name.startswith("EXIT_")}
    assert set(codes) == {0, 1, 2, 3, 4}
    for code in codes:
        assert rows[str(code)][0], f"exit code {code} has no meaning in the reference"


# An entity escaped twice: the reader sees "&#x27;" or "&lt;" as text instead of ' or <.
_SHOWN_ENTITY = re.compile(r"&amp;(?:#x?[0-9a-fA-F]+|[a-zA-Z]+);")


def test_no_page_shows_an_escaped_entity_as_text(site: Path) -> None:
    """Issue 42: the reference pages showed ``[&#x27;title&#x27;, ...]`` and
    ``list&lt;element: string&gt;``, and the strict build passed."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    shown = {
        str(page.relative_to(site)): _SHOWN_ENTITY.findall(page.read_text(encoding="utf-8"))
        for page in pages
    }
    assert {page: found for page, found in shown.items() if found} == {}
    # What the entities stood for is there, as text.
    configs = (site / "reference" / "configs" / "index.html").read_text(encoding="utf-8")
    assert "<code>{'alignment': {'ratings': ['label'], 'binary': True}}</code>" in configs
    tables = (site / "reference" / "tables" / "index.html").read_text(encoding="utf-8")
    assert "<code>list&lt;element: string&gt;</code>" in tables


def test_every_public_name_has_its_entry_in_the_api_reference(site: Path) -> None:
    page = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'id="summeval_runner\.(\w+)"', page))
    missing = sorted(set(summeval_runner.__all__) - documented - {"__version__"})
    assert not missing, f"public names missing from the API reference: {missing}"
    # The docstrings' examples are code, not text: a doctest's output is not taken for a link.
    assert 'class="gp">&gt;&gt;&gt; </span>' in page


def test_every_page_of_the_docs_folder_is_in_the_site_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)

    def pages(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [page for value in node.values() for page in pages(value)]
        return [page for value in node for page in pages(value)]

    listed = set(pages(config["nav"]))
    on_disk = {path.relative_to(ROOT / "docs").as_posix() for path in (ROOT / "docs").rglob("*.md")}
    assert on_disk - listed == set(), "pages no reader can reach from the navigation"


def test_the_judges_page_shows_the_readmes_table_of_judges(site: Path) -> None:
    """One table of judges, kept in the README and drawn into the site's judges page (a
    pymdownx snippet between markers), so the two cannot disagree."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("[start:providers] -->")[1].split("<!-- --8<-- [end:providers]")[0]
    providers = re.findall(r"^\| ([^|`]+?) \| `", table, flags=re.M)
    assert "Anthropic" in providers
    rows = _rows(site / "judges" / "index.html")
    missing = [name for name in providers if name not in rows]
    assert not missing, f"providers of the README's table missing from the judges page: {missing}"
