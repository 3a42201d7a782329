"""Skill folders written into a test's temporary folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

WriteSkill = Callable[..., Path]


def skill_text(name: str, description: str, body: str = "", extra: str = "") -> str:
    """A ``SKILL.md`` with the given front matter (``extra``: more YAML lines) and body."""
    return f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}"


@pytest.fixture
def write_skill(tmp_path: Path) -> WriteSkill:
    """``write_skill(name, description, body="", *, extra="", files={}, root=tmp_path/"skills")``
    writes ``root/name/SKILL.md`` (and ``files``, by relative path) and returns the folder."""

    def write(
        name: str,
        description: str = "A skill for tests.",
        body: str = "",
        *,
        extra: str = "",
        files: Mapping[str, str | bytes] | None = None,
        root: Path | None = None,
    ) -> Path:
        folder = (root or tmp_path / "skills") / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(skill_text(name, description, body, extra), "utf-8")
        for relative, content in (files or {}).items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        return folder

    return write
