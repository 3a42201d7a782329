"""What :class:`~daimon.mcp.MCPClient` answers when a server asks it something.

A server's tool may ask its client's model (``sampling/createMessage``), ask its client's user
(``elicitation/create``, form mode) and send log messages. The client answers sampling with a
daimon :class:`~daimon.core.protocols.Model` and elicitation with a user's callback, each only
when given (a client without one does not declare the capability, so servers do not ask).
Log messages go to a callback, else to Python logging (``daimon.mcp.server``).
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import mcp_types

from daimon.core.chat import ChatRequest
from daimon.core.errors import BuilderError
from daimon.core.messages import Message
from daimon.core.protocols import Model
from daimon.mcp._convert import MCPRoot
from daimon.tools import Elicitation
from daimon.tools._client import LOG_LEVELS

__all__ = (
    "ElicitHandler",
    "LogHandler",
    "RootLike",
    "RootsHandler",
    "as_roots",
    "elicitation_callback",
    "logging_callback",
    "roots_callback",
    "sampling_callback",
)

ElicitHandler: TypeAlias = Callable[
    [str, Mapping[str, Any]],
    Awaitable[Elicitation | Mapping[str, Any]] | Elicitation | Mapping[str, Any],
]
"""Asks the user: given the server's message and the form's JSON Schema, the user's answer
(an :class:`~daimon.tools.Elicitation`, or the values alone to accept)."""

LogHandler: TypeAlias = Callable[[str, Any, str | None], Awaitable[None] | None]
"""Called with each log message of the server: its level, data and logger name."""

RootLike: TypeAlias = "MCPRoot | str | os.PathLike[str]"
"""A root: an :class:`MCPRoot`, a ``file://`` URI, or a local path (made absolute)."""

RootsHandler: TypeAlias = Callable[[], Awaitable[Sequence[RootLike]] | Sequence[RootLike]]
"""Answers a server's ``roots/list``: the roots as they are now."""

_server_log = logging.getLogger("daimon.mcp.server")
_client_log = logging.getLogger("daimon.mcp")
_PY_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO}


def sampling_callback(model: Model) -> Any:
    """The SDK sampling callback answering with ``model`` (text in, text out)."""

    async def answer(
        context: Any, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        messages = [Message.system(params.system_prompt)] if params.system_prompt else []
        for sampled in params.messages:
            text = _text_of(sampled.content)
            messages.append(Message.user(text) if sampled.role == "user" else _assistant(text))
        request = ChatRequest(
            messages=messages, max_tokens=params.max_tokens, temperature=params.temperature
        )
        try:
            response = await model.generate(request)
        except Exception as exc:  # the server reads the failure; the client keeps serving
            message = f"the model failed: {type(exc).__name__}: {exc}"
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=message)
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=response.message.text),
            model=response.model or model.model_name,
            stop_reason="maxTokens" if response.stop_reason == "max_tokens" else "endTurn",
        )

    return answer


def elicitation_callback(handler: ElicitHandler) -> Any:
    """The SDK elicitation callback asking ``handler`` (form mode; URL mode is declined)."""

    async def answer(
        context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        if not isinstance(params, mcp_types.ElicitRequestFormParams):
            return mcp_types.ElicitResult(action="decline")
        schema = params.requested_schema
        try:
            outcome: Any = handler(params.message, schema)
            if inspect.isawaitable(outcome):
                outcome = await outcome
        except Exception as exc:
            message = f"the elicitation handler failed: {type(exc).__name__}: {exc}"
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=message)
        answer = outcome if isinstance(outcome, Elicitation) else Elicitation("accept", outcome)
        if not answer.accepted:
            return mcp_types.ElicitResult(action=answer.action)
        return mcp_types.ElicitResult(action="accept", content=with_defaults(answer, schema))

    return answer


def with_defaults(answer: Elicitation, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The accepted values, with the schema's defaults for any left out (SEP-1034)."""
    content = dict(answer.content or {})
    properties = schema.get("properties")
    for key, spec in properties.items() if isinstance(properties, Mapping) else ():
        if key not in content and isinstance(spec, Mapping) and "default" in spec:
            content[key] = spec["default"]
    return content


def logging_callback(handler: LogHandler | None, name: str, least: str | None) -> Any:
    """The SDK logging callback: ``handler``, else Python logging.

    Messages below ``least`` are dropped here too: a server need not honour the level.
    """
    floor = LOG_LEVELS.index(least) if least in LOG_LEVELS else 0

    async def deliver(params: mcp_types.LoggingMessageNotificationParams) -> None:
        if params.level in LOG_LEVELS and LOG_LEVELS.index(params.level) < floor:
            return
        if handler is None:
            level = _PY_LEVELS.get(params.level, logging.WARNING)
            if params.level in ("error", "critical", "alert", "emergency"):
                level = logging.ERROR
            _server_log.log(level, "MCP server %r: %s", name, params.data)
            return
        outcome = handler(params.level, params.data, params.logger)
        if inspect.isawaitable(outcome):
            await outcome

    return deliver


def _assistant(text: str) -> Message:
    return Message.assistant(text)


def _text_of(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    return "".join(getattr(block, "text", "") for block in blocks)


def as_roots(items: Iterable[RootLike]) -> list[MCPRoot]:
    """Roots from what a user gives: ``MCPRoot``, ``file://`` URIs, or paths.

    Raises:
        BuilderError: An item is a URI of another scheme, or neither a root nor a path.
    """
    if isinstance(items, str | os.PathLike):
        raise BuilderError(f"roots is a list of roots, got one: {items!r}")
    roots: list[MCPRoot] = []
    for item in items:
        if isinstance(item, MCPRoot):
            root = item
        elif isinstance(item, os.PathLike) or (isinstance(item, str) and "://" not in item):
            path = Path(item).expanduser().absolute()
            root = MCPRoot(uri=path.as_uri(), name=path.name or None)
        elif isinstance(item, str):
            root = MCPRoot(uri=item)
        else:
            raise BuilderError(f"a root is an MCPRoot, a file:// URI or a path, got {item!r}")
        if not root.uri.startswith("file://"):
            raise BuilderError(
                f"a root must be a file:// URI (the protocol's rule), got {root.uri!r}"
            )
        roots.append(root)
    return roots


def roots_callback(source: Callable[[], Any], client_name: str) -> Any:
    """The SDK roots callback: answers ``roots/list`` with what ``source`` gives now."""

    async def answer(context: Any) -> mcp_types.ListRootsResult | mcp_types.ErrorData:
        try:
            listed = source()
            if inspect.isawaitable(listed):
                listed = await listed
            roots = as_roots(listed)
        except Exception as exc:  # the server gets an error, the client keeps going
            _client_log.warning("MCP client %r: answering roots/list failed: %r", client_name, exc)
            return mcp_types.ErrorData(
                code=mcp_types.INTERNAL_ERROR, message=f"listing the roots failed: {exc}"
            )
        return mcp_types.ListRootsResult(
            roots=[mcp_types.Root(uri=root.uri, name=root.name) for root in roots]  # type: ignore[arg-type]
        )

    return answer
