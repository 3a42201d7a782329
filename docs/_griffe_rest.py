"""A griffe extension for the API reference: reST idioms in docstrings become Markdown.

daimon's docstrings are written for ``help()`` and editors, with a few reST idioms that
mkdocstrings (which renders Markdown) would show as raw text. When the reference is built (the
source keeps them), this turns:

- a Sphinx role, ``:class:`Agent```, into a code span, ```Agent``` (``~pkg.Name``: ```Name```);
- a simple two-column table (rows of ``====`` above and below) into a list, one item a row;
- a literal-block marker, ``text::`` or a lone ``::``, into ``text:`` (the indented block under
  it is a Markdown code block already).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
_BORDER = re.compile(r"^(\s*)(=+)(\s+)(=+)\s*$")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _table_rows(lines: list[str], split: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for line in lines:
        key, value = line[:split].strip(), line[split:].strip()
        if key or not rows:
            rows.append((key, value))
        else:
            rows[-1] = (rows[-1][0], f"{rows[-1][1]} {value}")
    return rows


def _tables(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        border = _BORDER.match(lines[index])
        end = index + 1
        while border and end < len(lines) and not _BORDER.match(lines[end]):
            end += 1
        if not border or end == len(lines):
            out.append(lines[index])
            index += 1
            continue
        split = len(border.group(1)) + len(border.group(2)) + len(border.group(3))
        out += [f"- {key}: {value}" for key, value in _table_rows(lines[index + 1 : end], split)]
        index = end + 1
    return "\n".join(out)


def _markdown(text: str) -> str:
    text = _ROLE.sub(_code, text)
    text = _tables(text)
    text = re.sub(r"(?m)^\s*::\s*$\n?", "", text)
    return re.sub(r"(?m)(\S)::$", r"\1:", text)


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = _markdown(obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]


class ReSTIdioms(griffe.Extension):
    """Rewrites every docstring of a loaded package once."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite the package's docstrings (griffe calls this when the package is loaded)."""
        _rewrite(pkg)
