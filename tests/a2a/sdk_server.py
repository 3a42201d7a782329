"""An A2A agent written with the official SDK only, for daimon's RemoteA2AAgent to talk to.

It says it is working (a ``working`` status with the text ``PROGRESS``), then streams its
answer as artifact chunks (``append``), the way the SDK's samples do. Messages ``slow`` wait
for a cancel; ``fail`` fail; ``reply`` answer with a plain message (no task).
"""

from __future__ import annotations

import asyncio

from a2a.helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Role
from starlette.applications import Starlette

PROGRESS = "working on it"


class Executor(AgentExecutor):
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if text == "reply":
            await event_queue.enqueue_event(new_text_message("a plain reply", role=Role.ROLE_AGENT))
            return
        assert context.message is not None
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work(updater.new_agent_message([Part(text=PROGRESS)]))
        if text == "fail":
            await updater.failed(updater.new_agent_message([Part(text="no can do")]))
            return
        if text == "slow":
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        chunks = ["sdk ", "says: ", text]
        for index, chunk in enumerate(chunks):
            await updater.add_artifact(
                [Part(text=chunk)],
                artifact_id="answer",
                append=index > 0,
                last_chunk=index == len(chunks) - 1,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build(port: int, executor: Executor | None = None, version: str = "1.0") -> Starlette:
    """The agent's app; at ``version`` "0.3" its card and routes are A2A 0.3's (the SDK's
    compatibility layer), its card naming JSON-RPC and HTTP+JSON."""
    card = AgentCard(
        name="SDK Agent",
        description="Written with the a2a-sdk alone.",
        version="1.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/", protocol_binding=binding, protocol_version=version
            )
            for binding in ("JSONRPC", "HTTP+JSON")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(executor or Executor(), InMemoryTaskStore(), card)
    legacy = version != "1.0"
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=legacy),
        *create_rest_routes(handler, enable_v0_3_compat=legacy),
    ]
    return Starlette(routes=routes)
