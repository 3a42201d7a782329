"""Skills: the set an agent can load on demand, and the two tools the model loads them with."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, TypeAlias

from daimon.core.errors import BuilderError, SkillError
from daimon.core.tools import ToolOutput
from daimon.kit.checks import check_positive
from daimon.skills._skill import SKILL_FILE, Skill, find_skill_file
from daimon.tools import RunContext, Tool

__all__ = ("LOAD_TOOL", "READ_TOOL", "SkillSource", "Skills", "as_skills")

LOAD_TOOL = "load_skill"
READ_TOOL = "read_skill_file"
_MAX_FILES_SHOWN = 100
_DEFAULT_MAX_FILE_BYTES = 256 * 1024

SkillSource: TypeAlias = (
    "Skills | str | os.PathLike[str] | Iterable[str | os.PathLike[str] | Skill]"
)
"""What ``Agent(skills=...)`` takes: a :class:`Skills`, a folder, or folders and skills."""

_PREAMBLE = (
    "You have skills: instructions for particular tasks, loaded when needed. When a task "
    f"matches a skill's description, first call {LOAD_TOOL} with the skill's name and follow "
    f"what it says; read the files it mentions with {READ_TOOL}.\n\nSkills:\n"
)


class Skills:
    """Skills an agent can load on demand: until it does, each costs only its name and description.

    The agent's instructions list every skill's name and description; the model calls
    ``load_skill`` to read a skill's instructions (and the list of its files), and
    ``read_skill_file`` to read one of those files, which must lie inside the skill's folder.

    Args:
        skills: The skills, in the order the model is told of them.
        max_file_bytes: The largest file ``read_skill_file`` returns (larger ones are an error
            the model reads).

    Raises:
        SkillError: Two skills share a name.
    """

    __slots__ = ("_by_name", "_instructions", "_tools", "max_file_bytes")

    def __init__(
        self, skills: Iterable[Skill] = (), *, max_file_bytes: int = _DEFAULT_MAX_FILE_BYTES
    ) -> None:
        by_name: dict[str, Skill] = {}
        for skill in skills:
            if not isinstance(skill, Skill):
                raise BuilderError(f"Skills holds Skill objects, not {type(skill).__name__}")
            first = by_name.get(skill.name)
            if first is not None:
                raise SkillError(
                    str(skill.path / SKILL_FILE),
                    f"duplicate skill name {skill.name!r}: {first.path} has it too",
                )
            by_name[skill.name] = skill
        check_positive("max_file_bytes", max_file_bytes)
        self.max_file_bytes = max_file_bytes
        self._by_name = by_name
        self._instructions: str | None = None
        self._tools: tuple[Tool, ...] = (_LoadSkill(self), _ReadSkillFile(self))

    @classmethod
    def from_dir(
        cls,
        path: str | os.PathLike[str],
        /,
        *more: str | os.PathLike[str],
        max_file_bytes: int = _DEFAULT_MAX_FILE_BYTES,
    ) -> Skills:
        """The skills in one or more folders.

        Each folder is either one skill (it holds a ``SKILL.md``) or a folder of skills (each
        folder directly inside it that holds a ``SKILL.md``, in name order).

        Raises:
            SkillError: A folder is missing or holds no skill, a ``SKILL.md`` is malformed, or
                two skills share a name; the message names the file.
            MissingDependencyError: PyYAML is not installed (the ``skills`` extra).
        """
        found: list[Skill] = []
        for folder in (path, *more):
            found.extend(_scan(folder))
        return cls(found, max_file_bytes=max_file_bytes)

    def __iter__(self) -> Iterator[Skill]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __repr__(self) -> str:
        return f"Skills({list(self._by_name)!r})"

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, or ``None``."""
        return self._by_name.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The skills' names, in order."""
        return tuple(self._by_name)

    @property
    def instructions(self) -> str:
        """What the agent's system prompt gains: how to load skills, and each name and description.

        The same skills give the same text, byte for byte, so a cached prompt prefix stays valid.
        """
        if self._instructions is None:
            lines = (f"- {s.name}: {' '.join(s.description.split())}" for s in self)
            self._instructions = _PREAMBLE + "\n".join(lines)
        return self._instructions

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools that load skills: ``load_skill`` and ``read_skill_file``.

        The same objects on every read, so an agent given them twice (by ``replace``, say) keeps
        one of each.
        """
        return self._tools

    def unknown(self, name: object) -> ToolOutput:
        """The error the model reads for a skill name that is not one of these."""
        return ToolOutput.error(
            f"Error: there is no skill {name!r}. The skills are: {', '.join(self.names)}."
        )


def as_skills(value: object) -> Skills | None:
    """``Agent(skills=...)``'s value as :class:`Skills`; ``None`` when it names none.

    Raises:
        BuilderError: It is not skills, a folder, or an iterable of folders and skills.
        SkillError: A folder or ``SKILL.md`` is bad (see :meth:`Skills.from_dir`).
    """
    if isinstance(value, Skills):
        return value if len(value) else None
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if not isinstance(value, Iterable):
        raise BuilderError(
            f"skills must be Skills, a folder or a list of folders, not {type(value).__name__}"
        )
    found: list[Skill] = []
    for item in value:
        if isinstance(item, Skill):
            found.append(item)
        elif isinstance(item, (str, os.PathLike)):
            found.extend(_scan(item))
        else:
            raise BuilderError(f"skills lists folders and Skill objects, not {type(item).__name__}")
    return Skills(found) if found else None


def _scan(folder: str | os.PathLike[str]) -> list[Skill]:
    """The skills of a folder: itself, if it is one, else each skill folder directly inside it."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        problem = "is not a folder" if root.exists() else "does not exist"
        raise SkillError(os.fspath(folder), f"the skills folder {problem}")
    if find_skill_file(root) is not None:
        return [Skill.from_dir(root)]
    children = sorted(
        child
        for child in root.iterdir()
        if child.is_dir() and not child.name.startswith(".") and find_skill_file(child)
    )
    if not children:
        raise SkillError(
            os.fspath(folder), f"holds no skills: no {SKILL_FILE} in it or in a folder inside it"
        )
    return [Skill.from_dir(child) for child in children]


# ------------------------------------------------------------------------------- the tools


class _LoadSkill:
    """``load_skill(name)``: a skill's instructions and the list of its files."""

    name = LOAD_TOOL
    description = (
        "Load a skill by name: returns its instructions, to follow for the task, and the files "
        "it holds."
    )
    parameters_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The skill's name."}},
        "required": ["name"],
        "additionalProperties": False,
    }

    def __init__(self, skills: Skills) -> None:
        self._skills = skills

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """The skill's instructions, then its files."""
        name = arguments["name"]
        skill = self._skills.get(name)
        if skill is None:
            return self._skills.unknown(name)
        text = skill.instructions or "(This skill has no instructions beyond its description.)"
        if skill.files:
            shown = skill.files[:_MAX_FILES_SHOWN]
            listing = "\n".join(f"- {path}" for path in shown)
            more = len(skill.files) - len(shown)
            if more:
                listing += f"\n- ... and {more} more"
            text += (
                f"\n\n---\nFiles of skill {skill.name!r} (read one with {READ_TOOL}, "
                f"giving its path as listed):\n{listing}"
            )
        return ToolOutput.text(text)


class _ReadSkillFile:
    """``read_skill_file(skill, path)``: one text file of a skill, from inside its folder only."""

    name = READ_TOOL
    description = (
        "Read a file of a skill: a path relative to the skill's folder, as its instructions or "
        f"{LOAD_TOOL} list it (references/guide.md)."
    )
    parameters_schema: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "skill": {"type": "string", "description": "The skill's name."},
            "path": {"type": "string", "description": "The file's path inside the skill."},
        },
        "required": ["skill", "path"],
        "additionalProperties": False,
    }

    def __init__(self, skills: Skills) -> None:
        self._skills = skills

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """The file's text, or an error the model reads."""
        skill = self._skills.get(arguments["skill"])
        if skill is None:
            return self._skills.unknown(arguments["skill"])
        path: str = arguments["path"]
        refused = _refusal(path)
        if refused is not None:
            return ToolOutput.error(f"Error: {path!r} {refused}.")
        return await asyncio.to_thread(_read, skill, path, self._skills.max_file_bytes)


def _refusal(path: str) -> str | None:
    """Why ``path`` is refused before the file system is asked; ``None`` when it is not."""
    if not path.strip() or "\x00" in path:
        return "is not a file path"
    if path.startswith("/") or PureWindowsPath(path).anchor:
        return "is absolute: give a path relative to the skill's folder"
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        return "leads outside the skill's folder: refused"
    if any(part.startswith(".") and part != "." for part in parts):
        return "is a hidden file: refused"
    return None


def _read(skill: Skill, path: str, limit: int) -> ToolOutput:
    """Read ``path`` inside ``skill``'s folder (in a worker thread: it blocks)."""
    target = (skill.path / path.replace("\\", "/")).resolve()
    if not target.is_relative_to(skill.path):  # a symbolic link out of the folder
        return ToolOutput.error(f"Error: {path!r} leads outside the skill's folder: refused.")
    if not target.is_file():
        return ToolOutput.error(
            f"Error: skill {skill.name!r} has no file {path!r}. Its files: "
            f"{', '.join(skill.files[:_MAX_FILES_SHOWN]) or 'none'}."
        )
    size = target.stat().st_size
    if size > limit:
        return ToolOutput.error(
            f"Error: {path!r} is {size} bytes; files over {limit} bytes are not read."
        )
    try:
        return ToolOutput.text(target.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        return ToolOutput.error(f"Error: {path!r} is not a UTF-8 text file; it cannot be read.")
    except OSError as exc:
        return ToolOutput.error(f"Error: {path!r} cannot be read: {exc.strerror or exc}.")
