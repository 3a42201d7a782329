"""The caller a tool may talk to while it runs: log, progress, sampling, elicitation.

A tool served over MCP is called by an MCP client, which can show log messages and progress,
answer with its own model (sampling) or ask its user (elicitation). :class:`RunClient` is that
back-channel as daimon sees it; the MCP server (``daimon.mcp``) fills it in for each call.
Tools reach it only through :class:`~daimon.tools.RunContext` (``ctx.log``,
``ctx.report_progress``, ``ctx.sample``, ``ctx.elicit``), so the same tool runs anywhere: with
no client, log messages go to Python logging, progress goes nowhere, and sampling or
elicitation raise :class:`~daimon.core.errors.NoClientError`.

The client of the MCP call in progress is also held in a context variable, so the tools of an
agent run started by an MCP tool call (``ask_<agent>``) reach the same client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

__all__ = ("Elicitation", "LogLevel", "RunClient", "current_client", "log_locally")

LogLevel: TypeAlias = Literal[
    "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"
]
"""The MCP (RFC 5424) log levels, least severe first."""

LOG_LEVELS: tuple[LogLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

_PY_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}

_logger = logging.getLogger("daimon.tools")


@dataclass(frozen=True, slots=True)
class Elicitation:
    """What the user answered to :meth:`RunContext.elicit <daimon.tools.RunContext.elicit>`.

    ``action`` is ``"accept"`` (``content`` holds the values), ``"decline"`` or ``"cancel"``.
    """

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None = None

    @property
    def accepted(self) -> bool:
        """Whether the user accepted (and so ``content`` holds the answer)."""
        return self.action == "accept"


@runtime_checkable
class RunClient(Protocol):
    """The caller's back-channel during one tool call (an MCP client, for MCP servers)."""

    async def log(self, level: LogLevel, data: Any, logger: str | None) -> None:
        """Send a log message to the caller (dropped below the level the caller set)."""
        ...

    async def report_progress(
        self, progress: float, total: float | None, message: str | None
    ) -> None:
        """Report progress on this call (nothing when the caller asked for none)."""
        ...

    async def sample(
        self, prompt: str, *, system: str | None, max_tokens: int, temperature: float | None
    ) -> str:
        """Ask the caller's model; its answer's text. Raises ``NoClientError`` if it cannot."""
        ...

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Elicitation:
        """Ask the caller's user to fill in ``schema``. Raises ``NoClientError`` if it cannot."""
        ...


current_client: ContextVar[RunClient | None] = ContextVar("daimon_run_client", default=None)
"""The client of the MCP tool call in progress, for runs nested in it (set by daimon.mcp)."""


def log_locally(tool: str, level: LogLevel, data: Any, logger: str | None) -> None:
    """A tool's log message with no client to send it to: to Python logging."""
    target = _logger if logger is None else _logger.getChild(logger)
    target.log(_PY_LEVELS.get(level, logging.INFO), "%s: %s", tool or "tool", data)
