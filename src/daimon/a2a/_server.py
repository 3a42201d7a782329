"""Serving a daimon agent as an A2A agent, with the official SDK's server pieces.

The agent card is at ``/.well-known/agent-card.json``; JSON-RPC (``SendMessage``,
``SendStreamingMessage`` over SSE, ``GetTask``, ``CancelTask``, ...) at ``/``. The SDK's
``DefaultRequestHandler`` and ``InMemoryTaskStore`` keep the tasks.

Each message is a new run of the agent on the message's text. While it runs, the agent's text
streams as ``working`` status updates (each carrying the new text); the final answer is the
task's ``answer`` artifact, and the task ends ``completed``, ``failed`` (with the error as its
status message) or ``canceled``.

The HTTP gate is the same as for MCP: loopback by default, a bearer token required off loopback
(every route but the agent card, which is public so that clients can discover how to
authenticate), ``Host`` and ``Origin`` checked against DNS rebinding.
"""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
from collections.abc import Iterable
from typing import Any

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import AgentCard, Part, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.types import ASGIApp

from daimon._http_guard import Guard, check_exposure, hosts_for
from daimon.a2a._convert import agent_card_for
from daimon.agent import Agent
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, DaimonError, RunCancelled
from daimon.core.events import Done, TextDelta
from daimon.core.lifecycle import serve_until_cancelled
from daimon.core.results import AgentResponse

__all__ = ("DaimonAgentExecutor", "a2a_app", "agent_card", "serve_a2a")

_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
_TEXT_DELTA = {"daimon": "text_delta"}


class DaimonAgentExecutor(AgentExecutor):
    """Runs a daimon agent for the A2A SDK's request handler: one run per message."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the agent on the message's text, publishing the task's progress and answer."""
        task = context.current_task
        if task is None:
            if context.message is None:
                raise ValueError("an A2A request without a message")
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        cancel = CancelToken()
        try:
            response = await self._run(context.get_user_input(), cancel, updater)
        except asyncio.CancelledError:
            cancel.cancel("the A2A task was cancelled")  # reaches sub-agents sharing the token
            raise
        except RunCancelled:
            await updater.cancel()
            return
        except Exception as exc:  # the client reads why in the failed status
            await updater.failed(updater.new_agent_message([Part(text=_failure(exc))]))
            return
        if response.paused:
            names = ", ".join(sorted({r.call.name for r in response.pending_approvals}))
            reason = f"Error: the agent needs a person's approval to run {names}"
            await updater.failed(updater.new_agent_message([Part(text=reason)]))
            return
        await updater.add_artifact([Part(text=response.text)], name="answer", last_chunk=True)
        await updater.complete()

    async def _run(self, text: str, cancel: CancelToken, updater: TaskUpdater) -> AgentResponse:
        response: AgentResponse | None = None
        async for event in self.agent.prompt_stream(text, cancel=cancel):
            if type(event) is TextDelta and event.text:
                message = updater.new_agent_message([Part(text=event.text)], _TEXT_DELTA)
                await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
            elif type(event) is Done:
                response = event.response
        if response is None:  # pragma: no cover - an agent stream always ends with Done
            raise DaimonError("the agent run ended without a response")
        return response

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled (the SDK has already cancelled the running ``execute``)."""
        if context.task_id is None or context.context_id is None:
            return
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def _failure(exc: Exception) -> str:
    # daimon's own errors are written to be read; anything else may carry internals.
    if isinstance(exc, DaimonError):
        return f"Error: {type(exc).__name__}: {exc}"
    return f"Error: the agent failed ({type(exc).__name__})"


def agent_card(
    agent: Agent,
    *,
    url: str,
    description: str | None = None,
    version: str | None = None,
    bearer: bool = False,
) -> AgentCard:
    """The A2A agent card for ``agent`` served at ``url``.

    Args:
        agent: The agent.
        url: Where its JSON-RPC endpoint is, as clients reach it.
        description: What it does (a generic sentence by default).
        version: The agent's version (daimon's by default).
        bearer: Announce that requests need a bearer token.
    """
    tools = [spec for spec, t in zip(agent.tools.specs, agent.tools, strict=True) if _public(t)]
    return agent_card_for(
        name=agent.name,
        description=description or f"The {agent.name} agent, built with daimon.",
        url=url,
        version=version or _version(),
        tools=tools,
        bearer=bearer,
    )


def _public(tool: Any) -> bool:
    return not getattr(tool, "requires_approval", False)


def a2a_app(
    agent: Agent,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    url: str | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    description: str | None = None,
    task_store: TaskStore | None = None,
) -> ASGIApp:
    """The A2A server for ``agent``, as an ASGI app (Starlette).

    Args:
        agent: The agent to serve.
        host: The address it will be bound to; decides the defaults of the gate.
        port: The port it will listen on (for the card's URL).
        url: Where clients reach it, for the agent card (``http://host:port/`` by default;
            required on a wildcard bind such as 0.0.0.0).
        token: The bearer token every request but the card's must carry. Required unless
            ``host`` is a loopback address.
        allowed_hosts: More host names the ``Host`` header may name (see ``daimon.mcp``).
        allowed_origins: More origins allowed to call from a browser.
        description: What the agent does, for the card.
        task_store: Where tasks are kept (in memory by default).

    Raises:
        BuilderError: Off loopback without a token, an empty token, or a wildcard bind without
            ``url``.
    """
    check_exposure(host, token, "A2A")
    if url is None:
        if host.lower() in _WILDCARDS:
            raise BuilderError(
                f"an A2A server bound to {host!r} needs url=: the address clients reach it at, "
                "for its agent card"
            )
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        url = f"http://{shown}:{port}/"
    card = agent_card(agent, url=url, description=description, bearer=token is not None)
    handler = DefaultRequestHandler(
        DaimonAgentExecutor(agent), task_store or InMemoryTaskStore(), card
    )
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    return Guard(
        app,
        token=token,
        hosts=hosts_for(host, allowed_hosts),
        origins=allowed_origins,
        public_paths=(AGENT_CARD_WELL_KNOWN_PATH,),
    )


async def serve_a2a(
    agent: Agent,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    url: str | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    description: str | None = None,
) -> None:
    """Serve ``agent`` as an A2A agent with uvicorn until stopped (SIGINT, SIGTERM, cancel).

    See :func:`a2a_app` for the arguments.

    Raises:
        BuilderError: It would serve off loopback without a token (it refuses to start).
    """
    import uvicorn

    app = a2a_app(
        agent,
        host=host,
        port=port,
        url=url,
        token=token,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        description=description,
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    await serve_until_cancelled(uvicorn.Server(config))


def _version() -> str:
    from daimon import __version__

    return __version__
