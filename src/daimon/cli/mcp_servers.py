"""MCP servers for ``daimon run`` and ``daimon chat`` (``--mcp SERVER``), and terminal elicitation.

A SERVER is an ``http(s)://`` URL (streamable HTTP), a ``ws(s)://`` URL (WebSocket) or a stdio
command line (``"python my_server.py"``). The connections live as long as the command. When a
server's tool asks the user something (elicitation), ``daimon chat`` asks at the terminal, one
question per field of the form; ``daimon run`` without a terminal declines and says so.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.markup import escape

from daimon.cli.loading import ConfigError
from daimon.tools import Elicitation, Tool

if TYPE_CHECKING:
    from daimon.mcp import MCPClient

__all__ = ("ask_at_terminal", "connect_servers", "declining", "mcp_client")

_Action = Literal["accept", "decline", "cancel"]
_ACTIONS: dict[str, _Action] = {"a": "accept", "accept": "accept", "d": "decline"}
_ACTIONS |= {"decline": "decline", "c": "cancel", "cancel": "cancel"}
_YES = ("y", "yes", "true", "1")
_NO = ("n", "no", "false", "0")


class _Cancelled(Exception):
    """The user left the form (Ctrl-C or end of input)."""


def mcp_client(spec: str, on_elicit: Callable[..., Any]) -> MCPClient:
    """The client a ``--mcp`` value names; :class:`ConfigError` when it names nothing."""
    from daimon.mcp import MCPClient

    spec = spec.strip()
    if spec.startswith(("http://", "https://")):
        return MCPClient.http(spec, on_elicit=on_elicit)
    if spec.startswith(("ws://", "wss://")):
        return MCPClient.websocket(spec, on_elicit=on_elicit)
    try:
        argv = shlex.split(spec)
    except ValueError as exc:
        raise ConfigError(f"--mcp {spec!r}: not a command line: {exc}") from None
    if not argv:
        raise ConfigError("--mcp needs a URL or a command line, got an empty value")
    return MCPClient.stdio(argv[0], argv[1:], name=spec, on_elicit=on_elicit)


async def connect_servers(
    specs: Sequence[str], on_elicit: Callable[..., Any], stack: AsyncExitStack
) -> list[Tool]:
    """Connect every server (closed with ``stack``) and return all their tools.

    Raises:
        MCPError: A server could not be started or reached.
    """
    tools: list[Tool] = []
    for spec in specs:
        client = await stack.enter_async_context(mcp_client(spec, on_elicit))
        tools.extend(await client.tools())
    return tools


def declining(console: Console) -> Callable[[str, Mapping[str, Any]], Elicitation]:
    """An elicitation handler that declines, with a note on ``console`` (no terminal to ask)."""

    def decline(message: str, schema: Mapping[str, Any]) -> Elicitation:
        console.print(
            f"[yellow]declined an MCP server's question (no terminal to ask): "
            f"{escape(message)}[/yellow]"
        )
        return Elicitation("decline")

    return decline


def ask_at_terminal(console: Console) -> Callable[[str, Mapping[str, Any]], Any]:
    """An elicitation handler asking the user on ``console``, one question per form field."""

    def ask(message: str, schema: Mapping[str, Any]) -> Elicitation:
        # Asked on the event loop's (main) thread: the tool call waits for the answer anyway,
        # and input() keeps readline's line editing there. Ctrl-C leaves the form at once (the
        # loop's own SIGINT handler only runs once input() returns), and still stops the turn.
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return _ask_form(console, message, schema)
        finally:
            signal.signal(signal.SIGINT, previous)

    return ask


def _ask_form(console: Console, message: str, schema: Mapping[str, Any]) -> Elicitation:
    console.print(f"[bold magenta]? an MCP server asks:[/bold magenta] {escape(message)}")
    try:
        action = _choose_action(console)
        if action != "accept":
            return Elicitation(action)
        properties = schema.get("properties")
        required = set(schema.get("required") or ())
        content: dict[str, Any] = {}
        for key, spec in properties.items() if isinstance(properties, Mapping) else ():
            value = _ask_field(console, key, spec if isinstance(spec, Mapping) else {}, required)
            if value is not None:
                content[key] = value
    except _Cancelled:
        console.print("[yellow]cancelled[/yellow]")
        return Elicitation("cancel")
    return Elicitation("accept", content)


def _read(console: Console, prompt: str) -> str:
    try:
        return console.input(prompt).strip()
    except (EOFError, KeyboardInterrupt):
        raise _Cancelled from None


def _choose_action(console: Console) -> _Action:
    while True:
        text = _read(console, "  answer it? (a)ccept / (d)ecline / (c)ancel \\[a]: ")
        action = _ACTIONS.get(text.lower() or "a")
        if action is not None:
            return action
        console.print("  [red]type a, d or c[/red]")


def _choices(spec: Mapping[str, Any]) -> list[tuple[Any, str]]:
    """The allowed values and their labels (``enum``, or ``oneOf``/``anyOf`` of ``const``)."""
    if isinstance(spec.get("enum"), list):
        names = spec.get("enumNames")
        labels = names if isinstance(names, list) and len(names) == len(spec["enum"]) else None
        return [(v, str(labels[i]) if labels else str(v)) for i, v in enumerate(spec["enum"])]
    options = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(options, list):
        return [(o["const"], str(o.get("title", o["const"]))) for o in options if "const" in o]
    return []


def _ask_field(console: Console, key: str, spec: Mapping[str, Any], required: set[str]) -> Any:
    """One field's answer; ``None`` when left empty with no default and not required."""
    label = str(spec.get("title") or key)
    kind = spec.get("type", "string")
    choices = _choices(spec)
    default = spec.get("default")
    hint = ""
    if choices:
        listed = ", ".join(f"{i}) {escape(text)}" for i, (_, text) in enumerate(choices, 1))
        console.print(f"  {escape(label)}: {listed}")
    if kind == "boolean":
        hint = " \\[y/n]"
    if default is not None:
        hint += f" (default: {escape(_shown(default))})"
    if spec.get("description"):
        console.print(f"  [dim]{escape(str(spec['description']))}[/dim]")
    while True:
        text = _read(console, f"  {escape(label)}{hint}: ")
        if not text:
            if default is not None:
                return default
            if key not in required:
                return None
            console.print("  [red]an answer is required[/red]")
            continue
        try:
            return _parse(text, kind, choices)
        except ValueError as exc:
            console.print(f"  [red]{escape(str(exc))}[/red]")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "y" if value else "n"
    return str(value)


def _parse(text: str, kind: Any, choices: list[tuple[Any, str]]) -> Any:
    if choices:
        return _pick(text, choices)
    if kind == "boolean":
        if text.lower() in _YES:
            return True
        if text.lower() in _NO:
            return False
        raise ValueError("answer y or n")
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    if kind == "number":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    return text


def _pick(text: str, choices: list[tuple[Any, str]]) -> Any:
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1][0]
    for value, label in choices:
        if text in (str(value), label):
            return value
    raise ValueError(f"pick 1 to {len(choices)}, or type one of the choices")
