"""Agent files, import paths and the default model choice of the ``daimon`` command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from daimon.cli.loading import (
    DEFAULT_LOCAL_MODEL,
    ConfigError,
    MemoryConfig,
    choose_model,
    import_object,
    is_agent_file,
    load_agent_file,
    load_promptable,
    load_tool,
)
from daimon.memory import SlidingWindowMemory, TokenWindowMemory

YAML = """\
name: calc
model: openai:gpt-4o-mini
system_prompt: You compute.
temperature: 0
tools: [daimon.cli.demo:calculator]
memory: {type: token_window, max_tokens: 1000}
limits: {max_iterations: 3, max_tokens: 200, max_repeated_tool_calls: 5}
model_settings: {top_p: 0.5}
"""

TOML = """\
name = "calc"
model = "openai:gpt-4o-mini"
system_prompt = "You compute."
temperature = 0
tools = ["daimon.cli.demo:calculator"]
model_settings = { top_p = 0.5 }

[memory]
type = "token_window"
max_tokens = 1000

[limits]
max_iterations = 3
max_tokens = 200
max_repeated_tool_calls = 5
"""


@pytest.mark.parametrize(("name", "text"), [("agent.yaml", YAML), ("agent.toml", TOML)])
def test_yaml_and_toml_files_read_the_same(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    config = load_agent_file(path)
    assert config.name == "calc"
    assert config.model == "openai:gpt-4o-mini"
    assert config.system_prompt == "You compute."
    assert config.temperature == 0.0
    assert config.tools == ("daimon.cli.demo:calculator",)
    assert config.memory == MemoryConfig(type="token_window", max_tokens=1000)
    assert config.max_iterations == 3
    assert config.max_tokens == 200
    assert config.max_repeated_tool_calls == 5
    assert dict(config.model_settings) == {"top_p": 0.5}


def test_an_empty_table_gives_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("", encoding="utf-8")
    config = load_agent_file(path)
    assert (config.model, config.tools, config.memory, config.max_iterations) == (
        None,
        (),
        None,
        10,
    )
    assert config.max_repeated_tool_calls == 3


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("agent.yaml", "limits: {max_repeated_tool_calls: false}\n"),
        ("agent.toml", "[limits]\nmax_repeated_tool_calls = false\n"),
    ],
)
def test_false_turns_the_repeated_call_guard_off(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert load_agent_file(path).max_repeated_tool_calls is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modle: x\n", "unknown field modle (known fields: name, model,"),
        ("limits: {max_iteration: 3}\n", "unknown field limits.max_iteration"),
        ("memory: {kind: sqlite}\n", "unknown field memory.kind"),
        ("limits: {max_iterations: 0}\n", "limits.max_iterations must be a positive integer"),
        ("limits: {max_tokens: true}\n", "limits.max_tokens must be a positive integer"),
        (
            "limits: {max_repeated_tool_calls: 0}\n",
            "limits.max_repeated_tool_calls must be a positive integer",
        ),
        ("limits: 3\n", "limits must be a table of fields, got int"),
        ("memory: {type: postgres}\n", "memory.type must be one of sliding_window, token_window"),
        ("memory: {max_messages: -1}\n", "memory.max_messages must be a positive integer"),
        ("model: 42\n", "model must be a non-empty string, got int"),
        ("model: ''\n", "model must be a non-empty string, got ''"),
        ("system_prompt: [a]\n", "system_prompt must be a non-empty string, got a list"),
        ("temperature: hot\n", "temperature must be a non-negative number, got 'hot'"),
        ("temperature: -1\n", "temperature must be a non-negative number, got -1"),
        ("tools: daimon.cli.demo:calculator\n", "tools must be a list of import paths"),
        ("tools: [calculator]\n", "tools[0] 'calculator' must look like 'package.module:function'"),
        ("model_settings: [1]\n", "model_settings must be a table, got a list"),
        ("- just\n- a list\n", "the file must be a table of fields, got a list"),
        ("model: [unclosed\n", "is not valid YAML"),
        ("skills: 3\n", "skills must be a folder or a list of folders"),
        ("skills: [skills/, 3]\n", "skills must be a folder or a list of folders"),
        ("skills: ['']\n", "skills must be a folder or a list of folders"),
    ],
)
def test_bad_fields_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_agent_file(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("agent.yaml", "skills: [skills, /abs/more]\n"),
        ("agent.toml", 'skills = ["skills", "/abs/more"]\n'),
    ],
)
def test_skill_folders_are_relative_to_the_agent_file(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / "config" / name
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    config = load_agent_file(path)
    assert config.skills == (str(tmp_path / "config" / "skills"), "/abs/more")


def test_one_skill_folder_may_be_a_string(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("skills: my-skills\n", encoding="utf-8")
    assert load_agent_file(path).skills == (str(tmp_path / "my-skills"),)
    path.write_text("name: x\n", encoding="utf-8")
    assert load_agent_file(path).skills == ()


def test_bad_toml_and_bad_paths(tmp_path: Path) -> None:
    bad = tmp_path / "agent.toml"
    bad.write_text("model = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_agent_file(bad)
    with pytest.raises(ConfigError, match="agent file not found"):
        load_agent_file(tmp_path / "missing.yaml")
    other = tmp_path / "agent.json"
    other.write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"must end in \.yaml, \.yml or \.toml"):
        load_agent_file(other)


def test_memory_configs_build_memories(tmp_path: Path) -> None:
    window = MemoryConfig(type="sliding_window", max_messages=7).build()
    assert isinstance(window, SlidingWindowMemory) and window.max_messages == 7
    assert isinstance(MemoryConfig(type="token_window").build(), TokenWindowMemory)
    if importlib.util.find_spec("aiosqlite") is not None:
        sqlite = MemoryConfig(type="sqlite", path=str(tmp_path / "chat.db")).build()
        assert type(sqlite).__name__ == "SQLiteMemory"


def test_is_agent_file(tmp_path: Path) -> None:
    assert is_agent_file("agent.yaml") and is_agent_file("x/agent.TOML")
    assert not is_agent_file("package.module:agent")
    plain = tmp_path / "agentfile"
    plain.write_text("", encoding="utf-8")
    assert is_agent_file(str(plain))


def test_import_paths() -> None:
    from daimon.cli.demo import calculator

    assert import_object("daimon.cli.demo:calculator", "tool") is calculator
    assert load_tool("daimon.cli.demo:calculator") is calculator
    assert import_object("daimon.cli.demo:calculator.name", "value") == "calculator"
    with pytest.raises(ConfigError, match=r"no module named 'daimon\.nowhere'"):
        import_object("daimon.nowhere:x", "tool")
    with pytest.raises(ConfigError, match="has no attribute 'nothing'"):
        import_object("daimon.cli.demo:nothing", "tool")
    with pytest.raises(ConfigError, match="is a str, not a function or tool"):
        load_tool("daimon.cli.loading:DEFAULT_LOCAL_MODEL")


def test_anything_promptable_loads_from_an_import_path(
    monkeypatch: pytest.MonkeyPatch, two_inputs: None
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from daimon.multiagent import Supervisor
    from daimon.orchestration import PromptableFlow

    team = load_promptable("agents:team")
    assert isinstance(team, Supervisor) and team.name == "team"
    assert load_promptable("agents:make_team").name == "made-team"  # a factory's
    flow = load_promptable("agents:shout")  # a bare workflow gets the defaults
    assert isinstance(flow, PromptableFlow) and flow.name == "shout"
    assert load_promptable("agents:calculating").name == "calculating"
    with pytest.raises(ConfigError, match="is a int, not a daimon Agent"):
        load_promptable("agents:not_an_agent")
    with pytest.raises(ConfigError, match=r"2 input fields \(a, b\)"):
        load_promptable("daimon_test_two_inputs:two")


@pytest.fixture
def two_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "daimon_test_two_inputs.py").write_text(
        "from daimon.orchestration import WorkflowBuilder, workflow_node\n"
        "two = (WorkflowBuilder('two', inputs={'a': str, 'b': str})\n"
        "       .add(workflow_node(output='c')(lambda a, b: a + b), name='join').build())\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_a_module_that_fails_to_import_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_tools.py").write_text("raise RuntimeError('boom')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="RuntimeError: boom"):
        import_object("broken_tools:fn", "tool")


@pytest.mark.parametrize(
    ("env", "model", "reason"),
    [
        ({}, DEFAULT_LOCAL_MODEL, "no provider API key in the environment"),
        ({"OPENAI_API_KEY": ""}, DEFAULT_LOCAL_MODEL, "no provider API key in the environment"),
        ({"OPENAI_API_KEY": "k"}, "openai:gpt-4o-mini", "OPENAI_API_KEY is set"),
        ({"ANTHROPIC_API_KEY": "k"}, "anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY is set"),
        (
            {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"},
            "openai:gpt-4o-mini",
            "OPENAI_API_KEY is set",
        ),
        ({"DAIMON_MODEL": "local:/m.gguf", "OPENAI_API_KEY": "k"}, "local:/m.gguf", "DAIMON_MODEL"),
    ],
)
def test_choose_model(env: dict[str, str], model: str, reason: str) -> None:
    chosen, why = choose_model(env)
    assert chosen == model
    assert reason in why
