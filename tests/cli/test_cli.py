"""The ``daimon`` command as a subprocess, on scripted agents (no model weights needed)."""

from __future__ import annotations

import importlib.util
import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from .conftest import CLI, cli_env, daimon_command, import_pexpect


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout


def test_run_streams_tool_calls_and_the_answer(cli: CLI) -> None:
    result = cli("run", "--agent", "agents:calculating", "What is 12.5 * 4 + 3?")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [
        '→ calculator(expression="12.5 * 4 + 3")',
        "← 53.0",
        "12.5 * 4 + 3 = 53.0",
    ]
    assert "agent: agents:calculating" in result.stderr
    assert "2 model call(s) · 1 tool call(s)" in result.stderr


def test_files_go_to_the_model_with_the_prompt(cli: CLI, tmp_path: Path) -> None:
    image, pdf = tmp_path / "cat.png", tmp_path / "report.pdf"
    image.write_bytes(b"\x89PNG")
    pdf.write_bytes(b"%PDF-1.7")
    result = cli(
        "run", "--agent", "agents:describing", "--file", str(image), "-f", str(pdf), "What?"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "What? | ImagePart image/png 4, DocumentPart application/pdf 8"


def test_a_file_that_cannot_be_read_or_typed_exits_2(cli: CLI, tmp_path: Path) -> None:
    missing = cli("run", "--agent", "agents:describing", "--file", str(tmp_path / "no.png"), "x")
    assert missing.returncode == 2
    assert "--file" in missing.stderr
    archive = tmp_path / "a.zip"
    archive.write_bytes(b"PK")
    unknown = cli("run", "--agent", "agents:describing", "--file", str(archive), "x")
    assert unknown.returncode == 2
    assert "cannot tell what kind of file" in unknown.stderr
    _no_traceback(unknown)


def test_an_agent_factory_works_too(cli: CLI) -> None:
    result = cli("run", "--agent", "agents:make_agent", "go")
    assert result.returncode == 0, result.stderr
    assert "← 53.0" in result.stdout


def test_json_prints_one_event_per_line(cli: CLI) -> None:
    result = cli("run", "--json", "--agent", "agents:calculating", "What is 12.5 * 4 + 3?")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [event["kind"] for event in events]
    assert kinds[0] == "tool_call_start"
    assert "tool_call_end" in kinds and "tool_result" in kinds and "text_delta" in kinds
    assert kinds[-1] == "done"
    end = next(e for e in events if e["kind"] == "tool_call_end")
    assert end["call"]["name"] == "calculator"
    assert end["call"]["arguments"] == {"expression": "12.5 * 4 + 3"}
    assert events[-1]["response"]["text"] == "12.5 * 4 + 3 = 53.0"


def test_the_prompt_can_come_from_stdin(cli: CLI) -> None:
    result = cli("run", "--agent", "agents:remembering", "-", input="from a pipe\n")
    assert result.returncode == 0, result.stderr
    assert "you said 'from a pipe\\n'" in result.stdout


def test_a_failed_run_exits_1(cli: CLI) -> None:
    result = cli("run", "--agent", "agents:failing", "hi")
    assert result.returncode == 1
    assert "error: the provider is down" in result.stderr
    _no_traceback(result)


def test_a_failed_run_in_json_mode_prints_an_error_event(cli: CLI) -> None:
    result = cli("run", "--json", "--agent", "agents:failing", "hi")
    assert result.returncode == 1
    last = json.loads(result.stdout.splitlines()[-1])
    assert last == {"message": "the provider is down", "error_type": "ModelError", "kind": "error"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tool", "no_such_module:fn"], "cannot import tool 'no_such_module:fn': no module"),
        (["--tool", "agents:missing"], "'agents' has no attribute 'missing'"),
        (["--tool", "agents"], "must look like 'package.module:name'"),
        (["--tool", "agents:not_an_agent"], "is a int, not a function or tool"),
        (["--agent", "agents:not_an_agent"], "is a int, not a daimon Agent"),
        (["--agent", "nowhere:agent"], "cannot import agent 'nowhere:agent'"),
        (["--agent", "agents:calculating", "--model", "x:y"], "cannot change an agent"),
        (["--agent", "missing.yaml"], "agent file not found: 'missing.yaml'"),
        (["--model", "nope:model"], "unknown model provider 'nope'"),
        (["--model", "no-colon"], "must look like '<provider>:<model>'"),
    ],
)
def test_usage_errors_exit_2_without_a_traceback(
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # In-process (the subprocess tests above cover the real command): quicker, same code path.
    from daimon.cli import main

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["run", *args, "hi"]) == 2
    captured = capsys.readouterr()
    assert message in " ".join(captured.err.split())
    assert "Traceback" not in captured.err


def test_unknown_option_and_empty_prompt_exit_2(cli: CLI) -> None:
    assert cli("run", "--bogus", "hi").returncode == 2
    empty = cli("run", "--agent", "agents:remembering", "  ")
    assert empty.returncode == 2
    assert "prompt is empty" in empty.stderr
    _no_traceback(empty)


def test_an_agent_file_with_an_unknown_field(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text("model: local:smollm2\nmodle: oops\n", encoding="utf-8")
    result = cli("run", "--agent", "agent.yaml", "hi")
    assert result.returncode == 2
    assert "agent file 'agent.yaml': unknown field modle" in result.stderr
    _no_traceback(result)


def test_an_agent_file_with_a_bad_nested_field(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "agent.toml").write_text("[limits]\nmax_iterations = 'ten'\n", encoding="utf-8")
    result = cli("run", "--agent", "agent.toml", "hi")
    assert result.returncode == 2
    assert "limits.max_iterations must be a positive integer, got 'ten'" in result.stderr
    _no_traceback(result)


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs the openai extra")
def test_an_agent_file_runs_and_a_provider_failure_exits_1(cli: CLI, tmp_path: Path) -> None:
    # Port 9 (discard) on loopback: nothing listens, so the provider call fails at once.
    (tmp_path / "agent.toml").write_text(
        'model = "openai-compatible:m@http://127.0.0.1:9/v1"\n'
        'system_prompt = "Be brief."\n'
        'tools = ["daimon.cli.demo:calculator"]\n'
        "[limits]\nmax_iterations = 2\n",
        encoding="utf-8",
    )
    result = cli("run", "--agent", "agent.toml", "hi")
    assert result.returncode == 1, result.stderr
    assert "model: openai-compatible:m@http://127.0.0.1:9/v1 (from agent.toml)" in result.stderr
    assert "could not reach" in result.stderr
    _no_traceback(result)


def test_ctrl_c_cancels_the_run_and_exits_130(tmp_path: Path) -> None:
    process = subprocess.Popen(
        daimon_command("run", "--agent", "agents:slow", "hi"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=tmp_path,
    )
    try:
        assert process.stderr is not None
        assert "agent: agents:slow" in process.stderr.readline()
        time.sleep(0.5)  # the run is now waiting on the model
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130
    assert time.monotonic() - started < 10
    assert "interrupted" in err
    assert "Traceback" not in err


def test_version_and_help(cli: CLI) -> None:
    version = cli("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("daimon ")
    help_ = cli("run", "--help")
    assert help_.returncode == 0
    assert "--tool" in help_.stdout and "--json" in help_.stdout


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("daimon")
    if not script.exists():
        pytest.skip("no daimon console script next to this interpreter")
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    assert result.stdout.startswith("daimon ")


# ---------------------------------------------------------------- daimon chat, in a terminal
def _spawn(tmp_path: Path, *args: str) -> Any:
    pexpect = import_pexpect()
    command = daimon_command("chat", *args)
    return pexpect.spawn(
        command[0],
        command[1:],
        env=cli_env(),
        cwd=str(tmp_path),
        encoding="utf-8",
        timeout=30,
        preexec_fn=_as_a_terminal_job,
    )


def _as_a_terminal_job() -> None:
    """Give the child Ctrl-C's default action, as a shell does for a job in the foreground.

    A test run started in the background of a non-interactive shell (``./scripts/test &``)
    inherits SIGINT ignored, and Python then leaves it ignored, so Ctrl-C at the chat prompt
    did nothing and the test hung until its timeout.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_chat_keeps_history_and_resets(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    child = _spawn(tmp_path, "--agent", "agents:remembering")
    child.expect_exact("you> ")
    child.sendline("hello")
    child.expect_exact("turn 1: you said 'hello'")
    child.expect_exact("you> ")
    child.sendline("again")
    child.expect_exact("turn 2: you said 'again'")
    child.expect_exact("you> ")
    child.sendline("/reset")
    child.expect_exact("conversation forgotten")
    child.expect_exact("you> ")
    child.sendline("third")
    child.expect_exact("turn 1: you said 'third'")
    child.expect_exact("you> ")
    child.sendline("/nope")
    child.expect_exact("unknown command /nope")
    child.expect_exact("you> ")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_ctrl_c_stops_an_answer_and_ctrl_d_leaves(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    child = _spawn(tmp_path, "--agent", "agents:slow")
    child.expect_exact("you> ")
    child.sendline("take your time")
    time.sleep(0.5)
    child.sendintr()
    child.expect_exact("interrupted")
    child.expect_exact("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_ctrl_c_at_the_prompt_exits_130(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    child = _spawn(tmp_path, "--agent", "agents:remembering")
    child.expect_exact("you> ")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert "Traceback" not in (child.before or "")


def test_chat_reads_stdin_and_prints_json_lines(cli: CLI) -> None:
    result = cli("chat", "--json", "--agent", "agents:remembering", input="hello\n/reset\nbye\n")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    answers = [e["response"]["text"] for e in events if e["kind"] == "done"]
    assert answers == ["turn 1: you said 'hello'", "turn 1: you said 'bye'"]


def test_options_override_an_agent_file(tmp_path: Path) -> None:
    from daimon.cli.app import _build_agent
    from daimon.cli.render import JsonRenderer

    (tmp_path / "agent.toml").write_text(
        'name = "filed"\nmodel = "openai-compatible:m@http://127.0.0.1:9/v1"\n'
        'system_prompt = "From the file."\ntools = ["daimon.cli.demo:calculator"]\n'
        "temperature = 0.5\n[memory]\ntype = 'sliding_window'\nmax_messages = 4\n"
        "[limits]\nmax_iterations = 3\nmax_tokens = 99\nmax_repeated_tool_calls = 2\n",
        encoding="utf-8",
    )
    notes = io.StringIO()
    agent = _build_agent(
        JsonRenderer(out=io.StringIO(), err=Console(file=notes)),
        model=None,
        system="From the command line.",
        tools=["daimon.cli.demo:evaluate"],
        agent_spec=str(tmp_path / "agent.toml"),
        demo_tool=True,
    )
    assert agent.name == "filed"
    assert agent.system_prompt == "From the command line."
    assert [spec.name for spec in agent.tools.specs] == ["calculator", "evaluate"]
    assert (agent.max_iterations, agent.max_tokens, agent.temperature) == (3, 99, 0.5)
    assert agent.max_repeated_tool_calls == 2
    assert agent.memory.max_messages == 4  # type: ignore[attr-defined]
    assert "(from " in notes.getvalue()


# ---------------------------------------------------------------- skills from an agent file
def _write_skill(folder: Path, name: str, description: str, body: str) -> None:
    (folder / name).mkdir(parents=True)
    text = f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
    (folder / name / "SKILL.md").write_text(text, encoding="utf-8")


def _openai_stream(*deltas: dict[str, Any], finish: str) -> list[Any]:
    """An OpenAI Chat Completions stream, as the API sends it: deltas, the finish, [DONE]."""
    from daimon.testing.models import SSE

    def chunk(delta: dict[str, Any], reason: str | None = None) -> SSE:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return SSE(
            data={
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": "m",
                "choices": [choice],
            }
        )

    return [*(chunk(d) for d in deltas), chunk({}, finish), SSE(data="[DONE]")]


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs the openai extra")
def test_an_agent_files_skills_load_on_demand(cli: CLI, tmp_path: Path) -> None:
    from daimon.testing.models import WireServer

    _write_skill(tmp_path / "config" / "skills", "haiku", "Writes haiku.", "Count 5-7-5 syllables.")
    _write_skill(tmp_path / "config" / "skills", "limerick", "Writes limericks.", "Rhyme AABBA.")
    load = {"index": 0, "id": "call_1", "type": "function"}
    load["function"] = {"name": "load_skill", "arguments": '{"name": "haiku"}'}
    with WireServer() as server:
        (tmp_path / "config" / "agent.yaml").write_text(
            f"model: openai-compatible:m@{server.url}/v1\nskills: [skills]\n", encoding="utf-8"
        )
        server.reply_sse(
            _openai_stream({"role": "assistant", "tool_calls": [load]}, finish="tool_calls")
        )
        server.reply_sse(_openai_stream({"content": "An old silent pond."}, finish="stop"))
        result = cli("run", "--agent", "config/agent.yaml", "a poem please")
        first, second = (request.body for request in server.requests)
    assert result.returncode == 0, result.stderr
    assert "An old silent pond." in result.stdout
    system = first["messages"][0]
    assert system["role"] == "system"
    assert "- haiku: Writes haiku.\n- limerick: Writes limericks." in system["content"]
    assert [t["function"]["name"] for t in first["tools"]] == ["load_skill", "read_skill_file"]
    assert "5-7-5" not in json.dumps(first) and "AABBA" not in json.dumps(first)
    loaded = second["messages"][-1]
    assert (loaded["role"], loaded["tool_call_id"]) == ("tool", "call_1")
    assert "Count 5-7-5 syllables." in loaded["content"]
    assert "AABBA" not in json.dumps(second)


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="needs the openai extra")
def test_a_malformed_skill_in_an_agent_file_exits_2(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "skills" / "bad").mkdir(parents=True)
    (tmp_path / "skills" / "bad" / "SKILL.md").write_text("---\nname: bad\n---\n", encoding="utf-8")
    (tmp_path / "agent.yaml").write_text(
        "model: openai-compatible:m@http://127.0.0.1:9/v1\nskills: skills\n", encoding="utf-8"
    )
    result = cli("run", "--agent", "agent.yaml", "hi")
    assert result.returncode == 2, result.stderr
    bad = tmp_path.resolve() / "skills" / "bad" / "SKILL.md"
    assert f"{bad}: the front matter has no 'description'" in result.stderr
    _no_traceback(result)
