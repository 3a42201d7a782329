"""What an MCP server offers besides tools: :class:`MCPServer` and its SDK request handlers.

``MCPServer(agent, resources=..., prompts=...)`` bundles an agent with the resources and
prompts declared in :mod:`daimon.mcp._declare`; :func:`extra_handlers` gives the SDK's
``Server`` the handlers for them (resources with subscriptions, prompts, completions). A
server with neither registers none, so it declares neither capability.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

from collections.abc import Iterable
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError

from daimon.core.errors import BuilderError
from daimon.core.protocols import Promptable
from daimon.mcp._declare import Prompt, Resource
from daimon.tools import Tool

__all__ = ("MCPServer", "extra_handlers")


class MCPServer:
    """An agent (any promptable), or tools alone, with the resources and prompts to offer too.

    It is promptable itself (it runs the agent), so everything that serves an agent serves it:
    :func:`serve_mcp`, :func:`mcp_http_app`, :func:`create_mcp_server` and
    ``daimon mcp serve module:attr``. Given tools instead of an agent, it serves those tools
    (no ``ask_`` tool) and cannot be prompted.

    Raises:
        BuilderError: Two resources share a URI, or two prompts a name; tools without a name.
    """

    __slots__ = ("_name", "_subscribers", "agent", "instructions", "prompts", "resources", "tools")

    def __init__(
        self,
        agent_or_tools: Promptable | Iterable[Tool],
        *,
        name: str | None = None,
        resources: Iterable[Resource] = (),
        prompts: Iterable[Prompt] = (),
        instructions: str | None = None,
    ) -> None:
        if isinstance(agent_or_tools, Promptable):
            self.agent: Promptable | None = agent_or_tools
            self.tools: tuple[Tool, ...] = ()
        else:
            self.agent, self.tools = None, tuple(agent_or_tools)
            if not name:
                raise BuilderError("MCPServer(tools): give the server a name= (no agent names it)")
        self._name = name
        self.resources = tuple(resources)
        self.prompts = tuple(prompts)
        self.instructions = instructions
        # uri -> the subscribed connections, each with a session to send on; a connection
        # that closes drops its subscriptions (see _subscribe)
        self._subscribers: dict[str, dict[Any, Any]] = {}
        for what, keys in (
            ("resource URI", [r.uri for r in self.resources]),
            ("prompt name", [p.name for p in self.prompts]),
        ):
            twice = sorted({key for key in keys if keys.count(key) > 1})
            if twice:
                raise BuilderError(f"MCPServer: the {what} {twice[0]!r} is declared twice")

    async def notify_resource_updated(self, uri: str) -> int:
        """Tell every client subscribed to ``uri`` that it changed; how many were told.

        Clients subscribe with ``resources/subscribe`` (protocol 2025-11-25 and before) and are
        sent ``notifications/resources/updated``; a client that has gone is skipped.
        """
        told = 0
        subscribers = self._subscribers.get(uri)
        for connection, session in list(subscribers.items() if subscribers else ()):
            try:
                await session.send_resource_updated(uri)
            except Exception:  # a closed connection must not stop the others
                subscribers.pop(connection, None)  # type: ignore[union-attr]
                continue
            told += 1
        return told

    def _subscribe(self, uri: str, session: Any) -> None:
        connection = _connection(session)
        subscribers = self._subscribers.setdefault(uri, {})
        if connection not in subscribers:
            # the SDK unwinds a connection's exit stack when it closes, however it closes
            connection.exit_stack.callback(self._unsubscribe, uri, session)
        subscribers[connection] = session

    def _unsubscribe(self, uri: str, session: Any) -> None:
        subscribers = self._subscribers.get(uri)
        if subscribers is not None:
            subscribers.pop(_connection(session), None)
            if not subscribers:
                del self._subscribers[uri]

    @property
    def name(self) -> str:
        """The server's name: ``name``, else the agent's."""
        return self._name or self._the_agent().name

    def prompt(self, input: Any, /, **options: Any) -> Any:
        """Run the agent (:meth:`Promptable.prompt`)."""
        return self._the_agent().prompt(input, **options)

    def prompt_stream(self, input: Any, /, **options: Any) -> Any:
        """Run the agent, streaming (:meth:`Promptable.prompt_stream`)."""
        return self._the_agent().prompt_stream(input, **options)

    def _the_agent(self) -> Promptable:
        if self.agent is None:
            raise BuilderError(f"MCPServer {self._name!r} serves tools only: no agent to prompt")
        return self.agent


def _connection(session: Any) -> Any:
    """The connection (``mcp.server.connection.Connection``) a request's session belongs to.

    The SDK makes a session per request; a notification sent on any of them outside a request
    goes on the connection's own stream, so one session per connection is kept. The SDK does
    not expose a session's connection publicly (mcp 2.3), hence the private attribute; the
    tests fail if it goes.
    """
    return session._connection


def extra_handlers(server: MCPServer) -> dict[str, Any]:
    """The SDK ``Server`` handlers for the server's resources, prompts and completions."""
    return {
        **_resource_handlers(server),
        **_prompt_handlers(server.prompts),
        **_completion_handler(server),
    }


def _resource_handlers(server: MCPServer) -> dict[str, Any]:
    """The SDK handlers for the server's resources: none (no capability) when there are none."""
    resources = server.resources
    if not resources:
        return {}
    ordered = sorted(resources, key=lambda r: r.is_template)  # a static URI wins over a template
    static = [r.listed() for r in resources if not r.is_template]
    templates = [r.listed_template() for r in resources if r.is_template]

    async def list_resources(ctx: Any, params: Any) -> mcp_types.ListResourcesResult:
        return mcp_types.ListResourcesResult(resources=static)

    async def list_templates(ctx: Any, params: Any) -> mcp_types.ListResourceTemplatesResult:
        return mcp_types.ListResourceTemplatesResult(resource_templates=templates)

    def find(uri: str) -> tuple[Resource, dict[str, str]]:
        for declared in ordered:
            values = declared.match(uri)
            if values is not None:
                return declared, values
        raise MCPError(mcp_types.INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})

    async def read_resource(
        ctx: Any, params: mcp_types.ReadResourceRequestParams
    ) -> mcp_types.ReadResourceResult:
        declared, values = find(str(params.uri))
        return await declared.read(str(params.uri), values)

    async def subscribe(
        ctx: Any, params: mcp_types.SubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        find(str(params.uri))  # only a resource the server has
        server._subscribe(str(params.uri), ctx.session)
        return mcp_types.EmptyResult()

    async def unsubscribe(
        ctx: Any, params: mcp_types.UnsubscribeRequestParams
    ) -> mcp_types.EmptyResult:
        server._unsubscribe(str(params.uri), ctx.session)
        return mcp_types.EmptyResult()

    return {
        "on_list_resources": list_resources,
        "on_list_resource_templates": list_templates,
        "on_read_resource": read_resource,
        "on_subscribe_resource": subscribe,
        "on_unsubscribe_resource": unsubscribe,
    }


def _completion_handler(server: MCPServer) -> dict[str, Any]:
    """``completion/complete`` for prompt arguments and template placeholders (``Literal``)."""
    prompts = {p.name: p for p in server.prompts}
    templates = {r.uri: r for r in server.resources if r.is_template}
    if not prompts and not templates:
        return {}

    async def complete(
        ctx: Any, params: mcp_types.CompleteRequestParams
    ) -> mcp_types.CompleteResult:
        ref = params.ref
        if isinstance(ref, mcp_types.PromptReference):
            found: Prompt | Resource | None = prompts.get(ref.name)
            missing = f"Unknown prompt {ref.name!r}"
        else:
            found = templates.get(ref.uri)
            missing = f"Unknown resource template {ref.uri!r}"
        if found is None:
            raise MCPError(mcp_types.INVALID_PARAMS, missing)
        values = found.complete(params.argument.name, params.argument.value)
        return mcp_types.CompleteResult(
            completion=mcp_types.Completion(values=values, total=len(values), has_more=False)
        )

    return {"on_completion": complete}


def _prompt_handlers(prompts: tuple[Prompt, ...]) -> dict[str, Any]:
    """The SDK handlers for ``prompts``: none (no capability) when there are none."""
    if not prompts:
        return {}
    by_name = {p.name: p for p in prompts}
    listed = mcp_types.ListPromptsResult(prompts=[p.listed() for p in prompts])

    async def list_prompts(ctx: Any, params: Any) -> mcp_types.ListPromptsResult:
        return listed

    async def get_prompt(
        ctx: Any, params: mcp_types.GetPromptRequestParams
    ) -> mcp_types.GetPromptResult:
        found = by_name.get(params.name)
        if found is None:
            known = ", ".join(sorted(by_name))
            raise MCPError(
                mcp_types.INVALID_PARAMS, f"Unknown prompt {params.name!r}; the prompts: {known}"
            )
        return await found.get(dict(params.arguments or {}))

    return {"on_list_prompts": list_prompts, "on_get_prompt": get_prompt}
