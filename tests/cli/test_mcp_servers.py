"""``daimon run`` and ``daimon chat`` with ``--mcp``: a stdio server (the official SDK's) whose
tool asks the user a form, answered (or declined) at the terminal."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from .conftest import CLI, HERE, cli_env, daimon_command, import_pexpect

SERVER = shlex.join([sys.executable, str(HERE / "elicit_server.py")])


def _chat(tmp_path: Path, *args: str) -> Any:
    pexpect = import_pexpect()
    command = daimon_command("chat", "--agent", "agents:booking", "--mcp", SERVER, *args)
    return pexpect.spawn(
        command[0],
        command[1:],
        env=cli_env(),
        cwd=str(tmp_path),
        encoding="utf-8",
        timeout=20,
        preexec_fn=_as_a_terminal_job,
    )


def _as_a_terminal_job() -> None:
    """Ctrl-C's default action in the child, as a shell gives a job in the foreground."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_chat_asks_the_servers_form_at_the_terminal(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    child = _chat(tmp_path)
    child.expect("MCP tools: book")
    child.expect("you> ")
    child.sendline("book me a room")
    child.expect(r"an MCP server asks:\S* Booking details")
    child.expect(r"\(a\)ccept / \(d\)ecline / \(c\)ancel \[a\]: ")
    child.sendline("")  # the default: accept
    child.expect("Who the room is for")
    child.expect("Name: ")
    child.sendline("")  # required, no default: asked again
    child.expect("an answer is required")
    child.sendline("Ada")
    child.expect(r"Nights \(default: 2\): ")
    child.sendline("three")
    child.expect("not a whole number")
    child.sendline("3")
    child.expect(r"Breakfast \[y/n\]: ")
    child.sendline("y")
    child.expect(r"1\) single, 2\) double, 3\) suite")
    child.expect(r"Room \(default: double\): ")
    child.sendline("")  # the default
    child.expect("booked: Ada 3 nights breakfast=True room=double")
    child.expect("you> ")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_chat_declining_the_form_tells_the_tool(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    child = _chat(tmp_path)
    child.expect("you> ")
    child.sendline("book me a room")
    child.expect(r"\(a\)ccept / \(d\)ecline / \(c\)ancel \[a\]: ")
    child.sendline("d")
    child.expect(r"booked: no booking \(decline\)")
    child.expect("you> ")
    child.sendline("c")  # a chat turn again: the next form is cancelled instead
    child.expect(r"\(a\)ccept / \(d\)ecline / \(c\)ancel \[a\]: ")
    child.sendline("c")
    child.expect(r"booked: no booking \(cancel\)")
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_in_the_form_cancels_it_and_stops_the_answer(tmp_path: Path) -> None:
    pexpect = import_pexpect()
    child = _chat(tmp_path)
    child.expect("you> ")
    child.sendline("book me a room")
    child.expect(r"\(c\)ancel \[a\]: ")
    child.sendline("a")
    child.expect("Name: ")
    child.sendcontrol("c")
    child.expect("cancelled")
    child.expect("interrupted")
    child.expect("you> ")  # the chat goes on
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_run_without_a_terminal_declines_with_a_note(cli: CLI) -> None:
    result = cli("run", "book", "--agent", "agents:booking", "--mcp", SERVER, input="")
    assert result.returncode == 0, result.stderr
    assert "booked: no booking (decline)" in result.stdout
    assert "declined an MCP server's question (no terminal to ask): Booking details?" in (
        result.stderr
    )


def test_an_unreachable_server_exits_2(cli: CLI, tmp_path: Path) -> None:
    missing = shlex.join([sys.executable, str(tmp_path / "no_such_server.py")])
    for server in ("http://127.0.0.1:9/mcp", missing):
        result = cli("run", "hi", "--agent", "agents:booking", "--mcp", server)
        assert result.returncode == 2, result.stderr
        assert "could not connect to MCP server" in result.stderr
        assert "booked" not in result.stdout


def test_mcp_tools_join_the_agents_own(cli: CLI) -> None:
    result = cli("run", "go", "--agent", "agents:calculating", "--mcp", SERVER, input="")
    assert result.returncode == 0, result.stderr
    assert "MCP tools: book" in result.stderr
    assert "12.5 * 4 + 3 = 53" in result.stdout
