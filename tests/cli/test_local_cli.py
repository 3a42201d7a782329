"""The ``daimon`` command on the real local model (SmolLM2 on llama.cpp), with no API key.

Structure only, never wording: the model calls the calculator, the tool runs, an answer follows.
Skips without llama-cpp-python and the weights; FAILS without them when ``CI`` is set.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import CLI, cli_env, daimon_command, import_pexpect

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("local_model")]

QUESTION = "What is 12.5 * 4 + 3?"


def test_the_readme_command_calls_the_tool_and_answers(cli: CLI) -> None:
    result = cli("run", QUESTION)
    assert result.returncode == 0, result.stderr
    assert "model: local:smollm2 (no provider API key in the environment)" in result.stderr
    assert "tools: calculator (built-in demo tool" in result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[0].startswith("→ calculator(expression=")
    assert lines[1].startswith(("← ", "✗ calculator"))
    assert lines[-1] and not lines[-1].startswith(("→", "←", "✗")), "no answer after the tool"
    assert "Traceback" not in result.stderr


def test_json_events_from_the_local_model(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "agent.yaml").write_text(
        "model: local:smollm2\n"
        "system_prompt: You are a calculator. Use the calculator tool.\n"
        "tools: [daimon.cli.demo:calculator]\n"
        "limits: {max_iterations: 3, max_tokens: 48}\n",
        encoding="utf-8",
    )
    result = cli("run", "--json", "--agent", "agent.yaml", QUESTION)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["kind"] == "done"
    assert events[-1]["response"]["text"].strip()
    for event in events:
        if event["kind"] == "tool_call_end":
            assert event["call"]["name"] == "calculator"
            assert isinstance(event["call"]["arguments"], dict)


def test_a_missing_gguf_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from daimon.cli import main

    assert main(["run", "--model", f"local:{tmp_path / 'missing.gguf'}", "hi"]) == 2
    err = capsys.readouterr().err
    assert "GGUF model file not found" in err
    assert "Traceback" not in err


def test_a_file_that_is_not_gguf(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from daimon.cli import main

    bad = tmp_path / "model.gguf"
    bad.write_text("not a model", encoding="utf-8")
    assert main(["run", "--model", f"local:{bad}", "hi"]) == 2
    err = capsys.readouterr().err
    assert "not a GGUF model file" in err
    assert "Traceback" not in err


def test_a_corrupt_gguf_file(cli: CLI, tmp_path: Path) -> None:
    from daimon.models.local import bundled_model_path

    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(bundled_model_path().read_bytes()[:4096])
    result = cli("run", "--model", f"local:{corrupt}", "hi")
    assert result.returncode == 2
    assert "could not load" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_chat_with_the_local_model_in_a_terminal(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    command = daimon_command("chat", "--tool", "daimon.cli.demo:calculator")
    child = pexpect.spawn(
        command[0], command[1:], env=cli_env(), cwd=str(tmp_path), encoding="utf-8", timeout=240
    )
    child.expect_exact("you> ")
    started = time.monotonic()
    child.sendline(QUESTION)
    child.expect_exact("you> ")  # the answer was streamed, and the chat asks again
    answer = child.before or ""
    assert "error" not in answer.lower()
    assert answer.strip(), "nothing was printed"
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert time.monotonic() - started < 240


def test_ctrl_c_stops_the_local_model_mid_answer(tmp_path: Path) -> None:
    process = subprocess.Popen(
        daimon_command("run", "--model", "local:smollm2", "Write a long story about a dragon."),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        cwd=tmp_path,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.read(1), "no answer started"  # the model is generating now
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert time.monotonic() - started < 30
    assert "interrupted" in err
    assert "Traceback" not in err
