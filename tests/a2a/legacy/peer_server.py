"""An A2A 0.3 agent written with the official a2a-sdk 0.3 alone, in its own virtualenv.

    python peer_server.py <port>

Serves JSON-RPC on 127.0.0.1:<port> (the card says protocol 0.3.0) until killed. It streams its
answer as artifact chunks: ``legacy says: <text>``. Messages ``fail`` fail the task.
"""

from __future__ import annotations

import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TextPart
from a2a.utils import new_agent_text_message, new_task


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task
        if task is None:
            assert context.message is not None
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        if text == "fail":
            await updater.failed(new_agent_text_message("legacy no can do"))
            return
        chunks = ["legacy ", "says: ", text]
        for index, chunk in enumerate(chunks):
            await updater.add_artifact(
                [Part(root=TextPart(text=chunk))],
                artifact_id="answer",
                append=index > 0,
                last_chunk=index == len(chunks) - 1,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main(port: int) -> None:
    card = AgentCard(
        name="Legacy Agent",
        description="Written with a2a-sdk 0.3.",
        url=f"http://127.0.0.1:{port}/",
        version="0.3",
        protocol_version="0.3.0",
        preferred_transport="JSONRPC",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=Executor(), task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(int(sys.argv[1]))
