"""The site and the README speak to users: no page reads as a diary of the project's work.

Every page in the site's navigation (with the files it includes by snippet, such as
CHANGELOG.md) and README.md is scanned for words that only mean something in the project's own
work history: numbered work sessions, numbered tickets, follow-ups, stops. Product terms that
share a word ("MCP session", ``session_id``, "AG-UI sessions", "a follow-up question") are not
matched. A failure lists every offending line with its file and number.
"""

from __future__ import annotations

import re
from pathlib import Path

from .markdown import ROOT

HISTORY_WORDS = re.compile(
    r"\b[Ss]essions? \d"  # "Session 7", "sessions 4 and 5"
    r"|\b[Tt]his session\b"
    r"|\bsession's (?:start|tree|machine)\b"
    r"|\b[Ii]ssues? \d"  # "issue 18", "issues 2 and 12"
    r"|\b[Ff]ollow-up\b(?! question)"
    r"|\b[Ss]tops? \d"
    r"|\bthis (?:branch|kind's machine)\b"
)
"""Phrases of the work history; none of them is a product term."""

_NAV_PAGE = re.compile(r":\s*([\w/.-]+\.md)\s*$", re.M)
_SNIPPET = re.compile(r'^--8<--\s+"([^"]+)"\s*$', re.M)


def site_pages() -> list[Path]:
    """Every page in mkdocs.yml's navigation, the files those pages include, and README.md."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [ROOT / "docs" / name for name in _NAV_PAGE.findall(config)]
    included = [
        ROOT / name for page in pages for name in _SNIPPET.findall(page.read_text(encoding="utf-8"))
    ]
    return [*pages, *included, ROOT / "README.md"]


def history_lines(path: Path) -> list[str]:
    """``file:line: text`` for each line of ``path`` that speaks of the work history."""
    name = path.relative_to(ROOT).as_posix()
    return [
        f"{name}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY_WORDS.search(line)
    ]


def test_the_patterns_catch_history_and_spare_product_terms() -> None:
    for history in (
        "Session 7 left one bar",
        "(issue 18)",
        "issues 2 and 12",
        "third follow-up",
        "at stop 3",
        "this session added",
        "on this kind's machine",
    ):
        assert HISTORY_WORDS.search(history), history
    for product in (
        "an MCP session",
        "`session_id`",
        "AG-UI sessions",
        "the session's totals",
        "Memory and sessions",
        "a follow-up question",
        "issue a token",
    ):
        assert not HISTORY_WORDS.search(product), product


def test_no_page_speaks_of_the_work_history() -> None:
    pages = site_pages()
    assert len(pages) > 40 and ROOT / "CHANGELOG.md" in pages
    found = [line for page in pages for line in history_lines(page)]
    assert not found, f"{len(found)} lines speak of the work history:\n" + "\n".join(found)
