"""One skill: a folder holding a ``SKILL.md`` (YAML front matter, then Markdown instructions).

The front matter follows the Agent Skills specification (agentskills.io): ``name`` (1-64
lowercase letters, digits and single hyphens, not at either end, equal to the folder's name) and
``description`` (1-1024 characters) are required; ``license``, ``compatibility`` (at most 500
characters), ``metadata`` (string keys to string values) and ``allowed-tools`` (a space-separated
string or a list) are optional. Other fields are kept in :attr:`Skill.extra` rather than refused:
clients such as Claude Code add their own, and a skill written for them should still load.
"""

from __future__ import annotations

import datetime
import os
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from daimon.core.errors import SkillError
from daimon.core.optional import require

__all__ = ("MAX_DESCRIPTION", "MAX_NAME", "SKILL_FILE", "Skill", "find_skill_file")

SKILL_FILE = "SKILL.md"
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
_MAX_LISTED_FILES = 1000
"""A folder with more files than this is not a skill but a mistake (a repository, say)."""

_SPEC_FIELDS = frozenset(
    {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Skill:
    """A skill, read and checked: what the model is told of it, and what it can load."""

    name: str
    """The name the model loads it by."""
    description: str
    """What it does and when to use it: the one part the model always sees."""
    instructions: str
    """The Markdown body of ``SKILL.md``, sent to the model when it loads the skill."""
    path: Path
    """The skill's folder; the files the model reads are confined to it."""
    files: tuple[str, ...] = ()
    """The folder's other files, as paths relative to it (``references/guide.md``), sorted."""
    license: str | None = None
    compatibility: str | None = None
    """Environment requirements, as the author wrote them."""
    metadata: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """The author's own key-value pairs."""
    allowed_tools: tuple[str, ...] = ()
    """Tools the author pre-approves (experimental in the spec); daimon approves nothing by it."""
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, repr=False)
    """Front-matter fields outside the specification, as parsed."""

    @classmethod
    def from_dir(cls, folder: str | os.PathLike[str]) -> Skill:
        """Read the skill in ``folder`` (which holds its ``SKILL.md``).

        Raises:
            SkillError: No ``SKILL.md``, front matter that does not parse, or a field that
                breaks the specification; the message names the file.
            MissingDependencyError: PyYAML is not installed (the ``skills`` extra).
        """
        root = Path(folder).expanduser().resolve()
        file = find_skill_file(root)
        if file is None:
            raise SkillError(str(root), f"not a skill folder: it has no {SKILL_FILE}")
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SkillError(str(file), f"cannot be read: {exc}") from None
        header, body = _split(text, str(file))
        fields = _front_matter(header, str(file))
        return _build(fields, body, root, file)


def find_skill_file(folder: Path) -> Path | None:
    """The folder's ``SKILL.md`` (``skill.md`` is accepted too), or ``None``."""
    for name in (SKILL_FILE, SKILL_FILE.lower()):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def _split(text: str, source: str) -> tuple[str, str]:
    """The front matter's YAML and the Markdown body after it."""
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        raise SkillError(source, "must start with YAML front matter: a '---' line first")
    for index in range(1, len(lines)):
        if lines[index].rstrip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :]).strip()
    raise SkillError(source, "the front matter is never closed: no second '---' line")


def _front_matter(header: str, source: str) -> dict[str, Any]:
    yaml = require("yaml", extra="skills")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(header, Loader=loader)  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        raise SkillError(source, f"the front matter is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise SkillError(source, f"the front matter must be a mapping of fields, not {kind}")
    return {str(key): value for key, value in data.items()}


def _build(fields: dict[str, Any], body: str, root: Path, file: Path) -> Skill:
    source = str(file)
    name = _name(fields.get("name"), root, source)
    description = _text(fields, "description", MAX_DESCRIPTION, source, required=True)
    assert description is not None  # required
    return Skill(
        name=name,
        description=description.strip(),
        instructions=body,
        path=root,
        files=_listing(root, file),
        license=_text(fields, "license", None, source),
        compatibility=_text(fields, "compatibility", MAX_COMPATIBILITY, source),
        metadata=_metadata(fields.get("metadata"), source),
        allowed_tools=_allowed_tools(fields.get("allowed-tools"), source),
        extra=MappingProxyType({k: v for k, v in fields.items() if k not in _SPEC_FIELDS}),
    )


def _name(value: object, root: Path, source: str) -> str:
    if value is None:
        raise SkillError(source, "the front matter has no 'name'")
    if not isinstance(value, str) or not value.strip():
        raise SkillError(source, f"'name' must be a non-empty string, got {value!r}")
    name = unicodedata.normalize("NFKC", value.strip())
    problem = _name_problem(name)
    if problem:
        raise SkillError(source, f"'name' {name!r} {problem}")
    folder = unicodedata.normalize("NFKC", root.name)
    if folder != name:
        raise SkillError(source, f"'name' {name!r} must be the name of its folder, {folder!r}")
    return name


def _name_problem(name: str) -> str | None:
    """What is wrong with a skill name, by the specification; ``None`` when nothing is."""
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long; the most is {MAX_NAME}"
    if name != name.lower():
        return "must be lowercase"
    if not all(char.isalnum() or char == "-" for char in name):
        return "may hold only letters, digits and hyphens"
    if name.startswith("-") or name.endswith("-"):
        return "must not start or end with a hyphen"
    if "--" in name:
        return "must not hold two hyphens in a row"
    return None


def _text(
    fields: Mapping[str, Any],
    key: str,
    limit: int | None,
    source: str,
    *,
    required: bool = False,
) -> str | None:
    value = fields.get(key)
    if value is None:
        if required:
            raise SkillError(source, f"the front matter has no {key!r}")
        return None
    if not isinstance(value, str) or not value.strip():
        raise SkillError(source, f"{key!r} must be a non-empty string, got {value!r}")
    if limit is not None and len(value) > limit:
        raise SkillError(source, f"{key!r} is {len(value)} characters long; the most is {limit}")
    return value


def _metadata(value: object, source: str) -> Mapping[str, str]:
    if value is None:
        return _EMPTY
    if not isinstance(value, dict):
        raise SkillError(source, f"'metadata' must be a mapping, got {type(value).__name__}")
    plain: dict[str, str] = {}
    for key, item in value.items():
        # YAML reads `version: 1.0` as a float and `date: 2025-01-01` as a date: kept as text.
        if not isinstance(item, (str, int, float, bool, datetime.date)):
            raise SkillError(
                source, f"'metadata.{key}' must be a string, got {type(item).__name__}"
            )
        plain[str(key)] = str(item)
    return MappingProxyType(plain)


def _allowed_tools(value: object, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise SkillError(source, "'allowed-tools' must be a space-separated string or a list of them")


def _listing(root: Path, skill_file: Path) -> tuple[str, ...]:
    """The folder's files but ``SKILL.md``, relative and sorted; hidden ones are left out."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = Path(folder, name)
            if name.startswith(".") or path == skill_file:
                continue
            if not path.resolve().is_relative_to(root):  # a link out: read_skill_file refuses it
                continue
            found.append(path.relative_to(root).as_posix())
            if len(found) > _MAX_LISTED_FILES:
                raise SkillError(
                    str(root), f"holds more than {_MAX_LISTED_FILES} files: is it a skill?"
                )
    return tuple(sorted(found))
