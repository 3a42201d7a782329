"""The MCP client of a tool call, as the tool's :class:`~daimon.tools.RunClient`.

:class:`MCPCaller` wraps the SDK's request context of one ``tools/call``: ``ctx.log`` becomes
``notifications/message`` (filtered by the level the client set with ``logging/setLevel``),
``ctx.report_progress`` becomes ``notifications/progress`` for the caller's progress token,
``ctx.sample`` a ``sampling/createMessage`` request and ``ctx.elicit`` an ``elicitation/create``
request, all on the call's own stream. :class:`LogLevels` keeps each connection's level.

Logging and sampling are deprecated by protocol 2026-07-28 (SEP-2577); the SDK warns on each
use, which is the protocol's business, not the tool author's, so those warnings are silenced
here. On 2026-07-28 connections the SDK itself drops log messages the request did not opt in to.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import warnings
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

import mcp_types
from mcp.shared.exceptions import MCPDeprecationWarning, NoBackChannelError

from daimon.core.errors import NoClientError
from daimon.tools import Elicitation
from daimon.tools._client import LOG_LEVELS, LogLevel

__all__ = ("LogLevels", "MCPCaller")

_T = TypeVar("_T")
_SAMPLING = mcp_types.ClientCapabilities(sampling=mcp_types.SamplingCapability())
_ELICITATION = mcp_types.ClientCapabilities(elicitation=mcp_types.ElicitationCapability())


def _quietly(make: Any, *args: Any, **kwargs: Any) -> Awaitable[_T]:
    """Call an SDK method marked deprecated by the protocol without its warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return make(*args, **kwargs)  # type: ignore[no-any-return]


class LogLevels:
    """The least severe level each connection wants (``logging/setLevel``); all by default."""

    __slots__ = ("_levels",)

    def __init__(self) -> None:
        self._levels: dict[Any, int] = {}

    def set(self, session: Any, level: str) -> None:
        """Record ``level`` for the session's connection (forgotten when it closes)."""
        connection = session._connection  # see daimon.mcp._served._connection
        if connection not in self._levels:
            connection.exit_stack.callback(self._levels.pop, connection, None)
        self._levels[connection] = LOG_LEVELS.index(level)

    async def set_level(
        self, ctx: Any, params: mcp_types.SetLevelRequestParams
    ) -> mcp_types.EmptyResult:
        """The SDK handler of ``logging/setLevel``."""
        self.set(ctx.session, params.level)
        return mcp_types.EmptyResult()

    def allows(self, session: Any, level: str) -> bool:
        """Whether a message at ``level`` goes to the session's connection."""
        wanted = self._levels.get(session._connection, 0)
        return level in LOG_LEVELS and LOG_LEVELS.index(level) >= wanted


class MCPCaller:
    """One ``tools/call``'s client, as the tool's run client (see the module docstring)."""

    __slots__ = ("_ctx", "_levels")

    def __init__(self, ctx: Any, levels: LogLevels) -> None:
        self._ctx = ctx
        self._levels = levels

    async def log(self, level: LogLevel, data: Any, logger: str | None) -> None:
        """Send ``notifications/message`` unless the client's level is above ``level``."""
        session = self._ctx.session
        if not self._levels.allows(session, level):
            return
        await _quietly(
            session.send_log_message,
            level,
            data,
            logger,
            related_request_id=self._ctx.request_id,
        )

    async def report_progress(
        self, progress: float, total: float | None, message: str | None
    ) -> None:
        """Send ``notifications/progress`` for the call's progress token (if it has one)."""
        await self._ctx.session.report_progress(progress, total, message)

    async def sample(
        self, prompt: str, *, system: str | None, max_tokens: int, temperature: float | None
    ) -> str:
        """``sampling/createMessage`` with ``prompt`` as the user's message; the answer's text."""
        session = self._ctx.session
        if not session.check_client_capability(_SAMPLING):
            raise NoClientError("sampling", "the MCP client does not offer sampling")
        message = mcp_types.SamplingMessage(
            role="user", content=mcp_types.TextContent(type="text", text=prompt)
        )
        try:
            result: Any = await _quietly(
                session.create_message,
                [message],
                max_tokens=max_tokens,
                system_prompt=system,
                temperature=temperature,
                related_request_id=self._ctx.request_id,
            )
        except NoBackChannelError as exc:
            raise NoClientError("sampling", str(exc)) from exc
        return _text_of(result.content)

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Elicitation:
        """``elicitation/create`` (form mode) for ``schema``; the user's answer."""
        session = self._ctx.session
        if not session.check_client_capability(_ELICITATION):
            raise NoClientError("input", "the MCP client does not offer elicitation")
        try:
            result = await session.elicit_form(
                message, dict(schema), related_request_id=self._ctx.request_id
            )
        except NoBackChannelError as exc:
            raise NoClientError("input", str(exc)) from exc
        return Elicitation(action=result.action, content=result.content)


def _text_of(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    return "".join(getattr(block, "text", "") for block in blocks)
