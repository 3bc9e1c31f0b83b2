"""The README and every page of the documentation site, and the code blocks they hold.

The README is a landing page; what it held moved to ``docs/``. Tests that check a passage (a
command, an example, a sample output) find it by a phrase it holds, on whichever page it is, so
a passage keeps its test when it moves between pages, and a phrase two pages share is refused
rather than one of them checked silently.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", flags=re.S | re.M)


def page_paths() -> list[Path]:
    """README.md, then every Markdown page under docs/, in a fixed order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


PAGES: dict[str, str] = {
    path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in page_paths()
}
README = PAGES["README.md"]


def page_blocks(page: str) -> list[tuple[str, str]]:
    """A page's fenced blocks, in order: (language, body); the language is "" when unnamed."""
    return BLOCK.findall(PAGES[page])


def blocks(language: str) -> list[str]:
    """Every block of that language, on every page."""
    return [body for page in PAGES for lang, body in page_blocks(page) if lang == language]


def block(language: str, text: str) -> str:
    """The one block of that language, on any page, that holds ``text``."""
    found = [
        (page, body)
        for page in PAGES
        for lang, body in page_blocks(page)
        if lang == language and text in body
    ]
    assert len(found) == 1, (
        f"{len(found)} {language} blocks hold {text!r}: {[page for page, _ in found]}"
    )
    return found[0][1]
