"""How the ``daimon`` command shows a run: rich text for people, JSON lines for programs.

Answers and tool calls go to standard output; notes (which model, timings), spinners and errors
go to standard error, so ``daimon run ... > answer.txt`` keeps only the answer.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from rich.console import Console
from rich.markup import escape

from daimon.core.codec import to_data
from daimon.core.events import (
    Done,
    ErrorEvent,
    RateLimitWait,
    StreamEvent,
    TextDelta,
    ToolCallEnd,
    ToolResult,
)
from daimon.core.messages import ToolCall

__all__ = ("JsonRenderer", "Renderer", "TerminalRenderer", "format_call")

_RESULT_PREVIEW = 300


class Renderer(Protocol):
    """Where the command's output goes."""

    def note(self, message: str) -> None:
        """Say something about the run (not part of the answer)."""
        ...

    @contextmanager
    def waiting(self, message: str) -> Iterator[None]:
        """Show that something slow is happening (a spinner)."""
        ...

    def start(self) -> None:
        """A run begins."""
        ...

    def event(self, event: StreamEvent) -> None:
        """Show one event of the run."""
        ...

    def error(self, message: str, error_type: str) -> None:
        """Report a failure."""
        ...

    def interrupted(self) -> None:
        """The run was cancelled by the user."""
        ...


def format_call(call: ToolCall) -> str:
    """``name(arg=value, ...)``, values as JSON; raw text when the arguments were not JSON."""
    if isinstance(call.arguments, str):
        return f"{call.name}({call.arguments})"
    args = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in call.arguments.items()
    )
    return f"{call.name}({args})"


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _RESULT_PREVIEW else text[: _RESULT_PREVIEW - 1] + "…"


class TerminalRenderer:
    """Streams the answer as it is written; tool calls and results on lines of their own."""

    def __init__(self, out: Console | None = None, err: Console | None = None) -> None:
        self.out = out or Console(highlight=False, soft_wrap=True)
        self.err = err or Console(stderr=True, highlight=False, soft_wrap=True)
        self._mid_line = False
        self._started = 0.0
        self._text_seen = False

    def note(self, message: str) -> None:
        """Say something about the run on standard error."""
        self.err.print(f"[dim]{escape(message)}[/dim]")

    @contextmanager
    def waiting(self, message: str) -> Iterator[None]:
        """A spinner on standard error while the block runs."""
        with self.err.status(escape(message), spinner="dots"):
            yield

    def start(self) -> None:
        """A run begins."""
        self._mid_line = False
        self._text_seen = False
        self._started = time.perf_counter()

    def _line_start(self) -> None:
        if self._mid_line:
            self.out.print()
            self._mid_line = False

    def event(self, event: StreamEvent) -> None:
        """Show one event of the run."""
        if isinstance(event, TextDelta):
            if not self._text_seen:
                text = event.text.lstrip()
                if not text:
                    return
                self._text_seen = True
            else:
                text = event.text
            self.out.print(text, end="", markup=False, highlight=False)
            self._mid_line = not text.endswith("\n")
        elif isinstance(event, ToolCallEnd):
            self._line_start()
            self.out.print(f"[cyan]→ {escape(format_call(event.call))}[/cyan]")
            self._text_seen = False
        elif isinstance(event, ToolResult):
            self._line_start()
            preview = escape(_preview(event.output.content))
            if event.is_error:
                self.out.print(f"[red]✗ {event.name}: {preview}[/red]")
            else:
                self.out.print(f"[green]← {preview}[/green]")
        elif isinstance(event, RateLimitWait):
            self.note(f"waited {event.waited:.1f} s for the rate limits of {event.key}")
        elif isinstance(event, Done):
            if not self._text_seen:
                self._line_start()
                self.out.print("[dim](no answer)[/dim]", end="")
                self._mid_line = True
            self._line_start()
            response = event.response
            if response is not None:
                seconds = time.perf_counter() - self._started
                usage = response.usage
                calls = sum(len(m.tool_calls) for m in response.messages)
                self.note(
                    f"{response.iterations} model call(s) · {calls} tool call(s) · "
                    f"{usage.input_tokens} in / {usage.output_tokens} out tokens · "
                    f"{seconds:.1f} s"
                )

    def error(self, message: str, error_type: str) -> None:
        """Report a failure on standard error."""
        self._line_start()
        self.err.print(f"[bold red]error:[/bold red] {escape(message)}")

    def interrupted(self) -> None:
        """Say that the run was cancelled."""
        """Report a failure."""
        self._line_start()
        self.err.print("[yellow]interrupted[/yellow]")


class JsonRenderer:
    """One JSON object per line on standard output: every event, encoded by daimon's codec."""

    def __init__(self, out: Any = None, err: Console | None = None) -> None:
        self._out = out or sys.stdout
        self.err = err or Console(stderr=True, highlight=False, soft_wrap=True)

    def _emit(self, data: Any) -> None:
        self._out.write(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._out.flush()

    def note(self, message: str) -> None:
        """Say something about the run on standard error."""
        self.err.print(escape(message), style="dim")

    @contextmanager
    def waiting(self, message: str) -> Iterator[None]:
        """Nothing: JSON output shows no spinner."""
        yield

    def start(self) -> None:
        """A run begins."""

    def event(self, event: StreamEvent) -> None:
        """Print the event as one JSON line."""
        self._emit(to_data(event))

    def error(self, message: str, error_type: str) -> None:
        """Print an error event, and the message on standard error."""
        self._emit(to_data(ErrorEvent(message=message, error_type=error_type)))
        self.err.print(f"error: {escape(message)}")

    def interrupted(self) -> None:
        """Print an error event for the cancelled run."""
        self._emit(to_data(ErrorEvent(message="interrupted", error_type="RunCancelled")))
