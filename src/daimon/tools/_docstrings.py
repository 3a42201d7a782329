"""Descriptions for tools and their parameters, read from docstrings.

Google, NumPy and reST (Sphinx) styles are all understood, through ``docstring_parser``
(imported on first use, so ``import daimon`` stays fast).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

__all__ = ("ParsedDoc", "parse_class_doc", "parse_doc")


@dataclass(frozen=True, slots=True)
class ParsedDoc:
    """What a docstring says: the description, and one description per parameter or field."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict[str, str])


_EMPTY = ParsedDoc()


def parse_doc(text: str | None) -> ParsedDoc:
    """Parse a function's docstring; the description leaves out Args/Returns/Raises sections."""
    if not text or not text.strip():
        return _EMPTY
    import docstring_parser

    try:
        parsed = docstring_parser.parse(inspect.cleandoc(text))
    except docstring_parser.ParseError:
        return ParsedDoc(description=inspect.cleandoc(text))
    return _to_parsed(parsed)


def parse_class_doc(cls: type[Any]) -> ParsedDoc:
    """Parse a class's docstring plus the attribute docstrings in its source, when available."""
    doc = cls.__doc__
    if doc and doc.startswith(cls.__name__ + "("):
        doc = None  # the signature @dataclass writes when a class has no docstring
    import docstring_parser
    from docstring_parser.attrdoc import add_attribute_docstrings

    try:
        parsed = docstring_parser.parse(inspect.cleandoc(doc) if doc else "")
        add_attribute_docstrings(cls, parsed)
    except Exception:  # no source, odd syntax: fall back to the docstring alone
        return parse_doc(doc)
    return _to_parsed(parsed)


def _to_parsed(parsed: Any) -> ParsedDoc:
    params = {
        p.arg_name.lstrip("*"): " ".join(p.description.split())
        for p in parsed.params
        if p.description
    }
    return ParsedDoc(description=(parsed.description or "").strip(), params=params)
