"""Skills on an agent: names and descriptions up front, instructions and files on demand."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daimon import (
    Agent,
    BuilderError,
    ChatRequest,
    ChatResponse,
    DuplicateToolError,
    Message,
    Role,
    Skill,
    SkillError,
    Skills,
    ToolCall,
    ToolResult,
    tool,
)
from daimon.core.codec import dumps
from daimon.models import ScriptedModel
from daimon.skills import as_skills

WriteSkill = Callable[..., Path]

GUIDE = "Step 1: open the file. Step 2: read it."
PDF_BODY = "# PDF\n\nFollow references/pdf-guide.md to extract text."


def load(name: str, call_id: str = "c1") -> ChatResponse:
    return ChatResponse.tool_use(ToolCall(id=call_id, name="load_skill", arguments={"name": name}))


def read(skill: str, path: str, call_id: str = "c2") -> ChatResponse:
    call = ToolCall(id=call_id, name="read_skill_file", arguments={"skill": skill, "path": path})
    return ChatResponse.tool_use(call)


def tool_messages(request: ChatRequest) -> list[Message]:
    return [m for m in request.messages if m.role is Role.TOOL]


def system_text(request: ChatRequest) -> str:
    first = request.messages[0]
    assert first.role is Role.SYSTEM
    return first.text


@pytest.fixture
def skills_dir(write_skill: WriteSkill, tmp_path: Path) -> Path:
    write_skill(
        "pdf-tools",
        "Extracts text from PDFs. Use when the user mentions a PDF.",
        PDF_BODY,
        files={"references/pdf-guide.md": GUIDE, "assets/logo.png": b"\x89PNG\r\n\x1a\n\xff\xfe"},
    )
    write_skill("haiku", "Writes haiku. Use for short poems.", "Five, seven, five syllables.")
    return tmp_path / "skills"


# ------------------------------------------------------------------------ loading the set


def test_a_folder_of_skills_loads_in_name_order(skills_dir: Path) -> None:
    skills = Skills.from_dir(skills_dir)
    assert skills.names == ("haiku", "pdf-tools")
    assert len(skills) == 2 and "haiku" in skills and "nope" not in skills
    found = skills.get("pdf-tools")
    assert isinstance(found, Skill) and found.files == (
        "assets/logo.png",
        "references/pdf-guide.md",
    )
    assert repr(skills) == "Skills(['haiku', 'pdf-tools'])"


def test_one_skills_own_folder_and_several_folders(write_skill: WriteSkill, tmp_path: Path) -> None:
    one = write_skill("alpha", root=tmp_path / "a")
    write_skill("beta", root=tmp_path / "b")
    write_skill("gamma", root=tmp_path / "b")
    assert Skills.from_dir(one).names == ("alpha",)
    assert Skills.from_dir(one, tmp_path / "b").names == ("alpha", "beta", "gamma")


def test_a_folder_may_start_with_the_home_folder(
    skills_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Skills.from_dir("~/skills").names == ("haiku", "pdf-tools")
    assert Skill.from_dir("~/skills/haiku").path == (skills_dir / "haiku").resolve()


def test_folders_without_skill_md_and_hidden_folders_are_passed_over(
    write_skill: WriteSkill, tmp_path: Path
) -> None:
    write_skill("kept")
    (tmp_path / "skills" / "notes").mkdir()
    (tmp_path / "skills" / ".draft").mkdir()
    (tmp_path / "skills" / ".draft" / "SKILL.md").write_text("not even front matter")
    write_skill("nested", root=tmp_path / "skills" / "group")  # group/nested: one level too deep
    assert Skills.from_dir(tmp_path / "skills").names == ("kept",)


def test_duplicate_names_name_both_files(write_skill: WriteSkill, tmp_path: Path) -> None:
    first = write_skill("same", root=tmp_path / "a")
    second = write_skill("same", root=tmp_path / "b")
    with pytest.raises(SkillError, match="duplicate skill name 'same'") as caught:
        Skills.from_dir(tmp_path / "a", tmp_path / "b")
    assert caught.value.path == str(second.resolve() / "SKILL.md")
    assert str(first.resolve()) in str(caught.value)


def test_a_missing_or_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SkillError, match="the skills folder does not exist"):
        Skills.from_dir(tmp_path / "missing")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(SkillError, match="the skills folder is not a folder"):
        Skills.from_dir(tmp_path / "file.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SkillError, match="holds no skills"):
        Skills.from_dir(tmp_path / "empty")


def test_a_malformed_skill_fails_the_whole_load(write_skill: WriteSkill, tmp_path: Path) -> None:
    write_skill("good")
    bad = tmp_path / "skills" / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: bad\n---\n")
    with pytest.raises(SkillError, match="has no 'description'") as caught:
        Skills.from_dir(tmp_path / "skills")
    assert caught.value.path.endswith(os.path.join("bad", "SKILL.md"))


def test_the_constructors_checks() -> None:
    with pytest.raises(BuilderError, match="max_file_bytes"):
        Skills(max_file_bytes=0)
    with pytest.raises(BuilderError, match="Skills holds Skill objects, not str"):
        Skills(["a"])  # type: ignore[list-item]


def test_what_agent_skills_accepts(skills_dir: Path, write_skill: WriteSkill) -> None:
    assert as_skills(str(skills_dir)).names == ("haiku", "pdf-tools")  # type: ignore[union-attr]
    assert as_skills([skills_dir]).names == ("haiku", "pdf-tools")  # type: ignore[union-attr]
    single = Skill.from_dir(skills_dir / "haiku")
    assert as_skills([single]).names == ("haiku",)  # type: ignore[union-attr]
    assert as_skills([]) is None
    assert as_skills(Skills()) is None
    with pytest.raises(BuilderError, match="skills must be Skills, a folder or a list of folders"):
        as_skills(3)
    with pytest.raises(BuilderError, match="skills lists folders and Skill objects, not int"):
        as_skills([3])


def test_the_instructions_list_each_skill_on_one_line(skills_dir: Path) -> None:
    text = Skills.from_dir(skills_dir).instructions
    assert text.endswith(
        "Skills:\n- haiku: Writes haiku. Use for short poems.\n"
        "- pdf-tools: Extracts text from PDFs. Use when the user mentions a PDF."
    )
    assert "load_skill" in text and "read_skill_file" in text


# --------------------------------------------------------------------------- on an agent


async def test_the_first_request_holds_names_and_descriptions_only(skills_dir: Path) -> None:
    model = ScriptedModel(["Hello."])
    agent = Agent(model, system_prompt="You help.", skills=Skills.from_dir(skills_dir))
    await agent.prompt("hi")
    first = model.requests[0]
    system = system_text(first)
    assert system.startswith("You help.\n\nYou have skills:")
    assert "- haiku: Writes haiku. Use for short poems." in system
    assert "- pdf-tools: Extracts text from PDFs." in system
    assert [spec.name for spec in first.tools] == ["load_skill", "read_skill_file"]
    sent = dumps(first)
    for unsent in (PDF_BODY, "Five, seven, five", GUIDE, "references/pdf-guide.md"):
        assert unsent not in sent


async def test_the_instructions_arrive_when_the_model_loads_the_skill(skills_dir: Path) -> None:
    model = ScriptedModel(
        [load("pdf-tools"), read("pdf-tools", "references/pdf-guide.md"), "Done."]
    )
    agent = Agent(model, skills=[skills_dir])
    response = await agent.prompt("extract the text of report.pdf")
    assert response.text == "Done."
    loaded = tool_messages(model.requests[1])[-1]
    assert not loaded.is_error
    assert loaded.text.startswith(PDF_BODY)
    assert "Files of skill 'pdf-tools'" in loaded.text
    assert "- assets/logo.png\n- references/pdf-guide.md" in loaded.text
    file = tool_messages(model.requests[2])[-1]
    assert (file.text, file.is_error) == (GUIDE, False)
    assert "Five, seven, five" not in dumps(model.requests[2])  # the other skill stays unloaded


async def test_a_skill_without_files_or_body(write_skill: WriteSkill, tmp_path: Path) -> None:
    write_skill("bare", "Nothing more to say.")
    model = ScriptedModel([load("bare"), "ok"])
    await Agent(model, skills=tmp_path / "skills").prompt("go")
    text = tool_messages(model.requests[1])[-1].text
    assert text == "(This skill has no instructions beyond its description.)"


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("../haiku/SKILL.md", "leads outside the skill's folder: refused"),
        ("references/../../haiku/SKILL.md", "leads outside the skill's folder: refused"),
        ("..\\haiku\\SKILL.md", "leads outside the skill's folder: refused"),
        ("/etc/passwd", "is absolute: give a path relative to the skill's folder"),
        ("C:\\Windows\\win.ini", "is absolute: give a path relative to the skill's folder"),
        ("\\\\server\\share\\x", "is absolute: give a path relative to the skill's folder"),
        (".env", "is a hidden file: refused"),
        ("references/.secret", "is a hidden file: refused"),
        ("", "is not a file path"),
        ("a\x00b", "is not a file path"),
        (
            "missing.md",
            "has no file 'missing.md'. Its files: assets/logo.png, references/pdf-guide.md",
        ),
        ("references", "has no file 'references'"),
        ("assets/logo.png", "is not a UTF-8 text file"),
    ],
)
async def test_a_file_the_tool_will_not_read_is_an_error_the_model_reads(
    skills_dir: Path, path: str, error: str
) -> None:
    (skills_dir / "pdf-tools" / ".env").write_text("KEY=1")
    model = ScriptedModel([read("pdf-tools", path), "I could not read it."])
    response = await Agent(model, skills=skills_dir).prompt("read it")
    assert response.text == "I could not read it."  # the run went on
    result = tool_messages(model.requests[1])[-1]
    assert result.is_error
    assert error in result.text
    assert "KEY=1" not in result.text


async def test_a_symbolic_link_out_of_the_folder_is_refused(
    skills_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "private.txt"
    outside.write_text("private data")
    (skills_dir / "pdf-tools" / "link.txt").symlink_to(outside)
    (skills_dir / "pdf-tools" / "inside.md").symlink_to(skills_dir / "pdf-tools" / "references")
    model = ScriptedModel(
        [read("pdf-tools", "link.txt"), read("pdf-tools", "inside.md/pdf-guide.md", "c3"), "ok"]
    )
    await Agent(model, skills=skills_dir).prompt("read it")
    refused = tool_messages(model.requests[1])[-1]
    assert refused.is_error and "leads outside the skill's folder" in refused.text
    assert "private data" not in dumps(model.requests[-1])
    assert Skills.from_dir(skills_dir).get("pdf-tools").files == (  # type: ignore[union-attr]
        "assets/logo.png",
        "references/pdf-guide.md",  # link.txt is not listed; inside.md is a folder's link
    )
    followed = tool_messages(model.requests[2])[-1]  # a link that stays inside is fine
    assert (followed.text, followed.is_error) == (GUIDE, False)


async def test_a_file_over_the_limit_is_not_read(write_skill: WriteSkill, tmp_path: Path) -> None:
    write_skill("big", files={"big.txt": "x" * 101, "small.txt": "y" * 100})
    skills = Skills.from_dir(tmp_path / "skills", max_file_bytes=100)
    model = ScriptedModel([read("big", "big.txt"), read("big", "small.txt", "c3"), "ok"])
    await Agent(model, skills=skills).prompt("read")
    big = tool_messages(model.requests[1])[-1]
    assert big.is_error and "'big.txt' is 101 bytes; files over 100 bytes are not read" in big.text
    assert tool_messages(model.requests[2])[-1].text == "y" * 100


async def test_an_unknown_skill_lists_the_real_ones(skills_dir: Path) -> None:
    model = ScriptedModel([load("pdf"), read("nope", "x.md", "c2"), "ok"])
    await Agent(model, skills=skills_dir).prompt("go")
    for request in model.requests[1:]:
        result = tool_messages(request)[-1]
        assert result.is_error
        assert "there is no skill" in result.text and "haiku, pdf-tools" in result.text


async def test_the_skills_follow_a_system_prompt_function_and_precede_run_instructions(
    skills_dir: Path,
) -> None:
    model = ScriptedModel(["ok", "ok"])
    agent = Agent(
        model, system_prompt=lambda state: f"Agent {state.agent_name}.", skills=skills_dir
    )
    await agent.prompt("hi", instructions="Be brief.")
    system = system_text(model.requests[0])
    assert system.startswith("Agent agent.\n\nYou have skills:")
    assert system.endswith("\n\nBe brief.")
    await Agent(model, skills=skills_dir).prompt("hi")  # no system prompt: the list alone
    assert system_text(model.requests[1]).startswith("You have skills:")


async def test_a_streamed_run_loads_skills_too(skills_dir: Path) -> None:
    model = ScriptedModel([load("haiku"), "An old silent pond."])
    events = [e async for e in Agent(model, skills=skills_dir).prompt_stream("a poem")]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.name for r in results] == ["load_skill"]
    assert results[0].output.content == "Five, seven, five syllables."


async def test_a_supervisor_passes_skills_to_its_agent(skills_dir: Path) -> None:
    from daimon import Supervisor

    model = ScriptedModel([load("haiku"), "A poem."])
    worker = Agent(ScriptedModel([]), name="worker")
    supervisor = Supervisor(model, {"worker": worker}, skills=skills_dir)
    assert (await supervisor.prompt("a poem")).text == "A poem."
    system = system_text(model.requests[0])
    assert "Your agents:\n- worker" in system
    assert system.endswith(
        "- pdf-tools: Extracts text from PDFs. Use when the user mentions a PDF."
    )
    assert tool_messages(model.requests[1])[-1].text == "Five, seven, five syllables."


def test_replace_keeps_the_skills_and_one_of_each_tool(skills_dir: Path) -> None:
    @tool
    def other() -> str:
        """Another tool."""
        return "x"

    agent = Agent(ScriptedModel([]), skills=skills_dir)
    copy = agent.replace(name="copy")
    assert copy.skills is agent.skills
    assert copy.tools.names == ("load_skill", "read_skill_file")
    handed = agent.replace(tools=[*agent.tools, other])  # as HandoffNetwork adds its tools
    assert handed.tools.names == ("load_skill", "read_skill_file", "other")
    plain = handed.replace(skills=None)
    assert plain.skills is None and plain.tools.names == ("other",)
    assert plain.replace(skills=skills_dir).tools.names == (
        "other",
        "load_skill",
        "read_skill_file",
    )


def test_a_tool_named_like_a_skill_tool_is_a_duplicate(skills_dir: Path) -> None:
    @tool
    def load_skill(name: str) -> str:
        """Mine."""
        return name

    with pytest.raises(DuplicateToolError, match="load_skill"):
        Agent(ScriptedModel([]), tools=[load_skill], skills=skills_dir)


async def test_no_skills_means_no_tools_and_no_system_message() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model, skills=[])
    assert agent.skills is None and len(agent.tools) == 0
    await agent.prompt("hi")
    assert model.requests[0].messages[0].role is Role.USER
    assert model.requests[0].tools == ()


def test_a_bad_skill_fails_the_agents_construction(tmp_path: Path) -> None:
    (tmp_path / "s" / "x").mkdir(parents=True)
    (tmp_path / "s" / "x" / "SKILL.md").write_text("no front matter")
    with pytest.raises(SkillError, match=r"SKILL\.md: must start with YAML front matter"):
        Agent(ScriptedModel([]), skills=tmp_path / "s")


# ------------------------------------------------------------------------------ the cost


def _request_bytes(request: ChatRequest) -> int:
    """What a provider is sent, near enough: the messages' text and the tools' schemas."""
    payload: dict[str, Any] = {
        "messages": [{"role": m.role.value, "content": m.text} for m in request.messages],
        "tools": [
            {"name": s.name, "description": s.description, "parameters": s.parameters}
            for s in request.tools
        ],
    }
    return len(json.dumps(payload).encode())


async def test_fifty_unused_skills_cost_their_names_and_descriptions_only(
    write_skill: WriteSkill, tmp_path: Path
) -> None:
    described = 0
    for i in range(50):
        name, description = f"skill-{i:02d}", f"Does task number {i} well. Use it for task {i}."
        body = f"SECRET-BODY-{i} " + "Long instructions. " * 250  # ~4.8 KB each, 240 KB in all
        write_skill(name, description, body, files={"references/big.md": "R" * 10_000})
        described += len(name) + len(description)
    bare, skilled = ScriptedModel(["ok"]), ScriptedModel(["ok"])
    await Agent(bare, system_prompt="You help.").prompt("hi")
    await Agent(skilled, system_prompt="You help.", skills=tmp_path / "skills").prompt("hi")
    added = _request_bytes(skilled.requests[0]) - _request_bytes(bare.requests[0])
    # Each skill costs its line ("- name: description\n", JSON-escaped); the rest is fixed: the
    # preamble and the two tools' definitions, about 1 KB whatever the number of skills.
    per_line = 4 + 2  # "- ", ": ", and "\n" written as two characters in JSON
    assert described < added < described + 50 * per_line + 1100, added
    sent = dumps(skilled.requests[0])
    assert "SECRET-BODY" not in sent and "Long instructions" not in sent and "RRRR" not in sent
