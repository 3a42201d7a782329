"""daimon.skills: agent skills in the ``SKILL.md`` format, loaded on demand.

A skill is a folder with a ``SKILL.md``: YAML front matter (``name``, ``description``), then
Markdown instructions, and any files beside it. An agent given skills is told each one's name and
description; it loads a skill's instructions and files through tools only when a task needs them::

    agent = Agent(model, skills=Skills.from_dir("skills/"))   # or skills=["skills/"]

Reading ``SKILL.md`` needs PyYAML (``pip install "daimon-agents[skills]"``).
"""

from daimon.core.errors import SkillError
from daimon.skills._skill import Skill
from daimon.skills._skills import LOAD_TOOL, READ_TOOL, Skills, SkillSource, as_skills

__all__ = ("LOAD_TOOL", "READ_TOOL", "Skill", "SkillError", "SkillSource", "Skills", "as_skills")
