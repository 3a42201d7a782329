"""The official a2a-sdk 0.3 client, run in its own virtualenv (scripts/a2a-legacy-setup).

    python peer_client.py <base URL> <JSONRPC|HTTP+JSON> <token>

Reads the agent card, sends one message streaming and one blocking over the given transport,
reads the task back, asks for a task that does not exist and cancels a finished one; prints what
it saw as one JSON object. Runs against a daimon A2A server in tests/a2a/test_legacy_peer.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientHTTPError, A2AClientJSONRPCError
from a2a.types import (
    Message,
    Part,
    Role,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskQueryParams,
    TextPart,
)


def _message(text: str) -> Message:
    return Message(
        role=Role.user, parts=[Part(root=TextPart(text=text))], message_id=uuid.uuid4().hex
    )


def _error(exc: Exception) -> Any:
    if isinstance(exc, A2AClientJSONRPCError):
        return exc.error.code
    if isinstance(exc, A2AClientHTTPError):
        return exc.status_code
    return f"{type(exc).__name__}: {exc}"


async def _send(client: Any, text: str) -> tuple[list[str], Any]:
    chunks: list[str] = []
    task = None
    async for event in client.send_message(_message(text)):
        if isinstance(event, Message):
            return [p.root.text for p in event.parts], None
        task, update = event
        if isinstance(update, TaskArtifactUpdateEvent):
            chunks.extend(p.root.text for p in update.artifact.parts)
    return chunks, task


async def main(base: str, transport: str, token: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        seen["card"] = {"url": card.url, "transport": card.preferred_transport}
        for streaming in (True, False):
            config = ClientConfig(
                streaming=streaming, httpx_client=http, supported_transports=[transport]
            )
            client = ClientFactory(config).create(card)
            chunks, task = await _send(client, "one two three")
            label = "streamed" if streaming else "blocking"
            seen[label] = {
                "chunks": chunks,
                "state": task.status.state.value,
                "artifacts": [[p.root.text for p in a.parts] for a in task.artifacts or []],
            }
            got = await client.get_task(TaskQueryParams(id=task.id))
            seen[label]["history"] = [
                [m.role.value, [p.root.text for p in m.parts]] for m in got.history or []
            ]
            seen[label]["stored"] = [[p.root.text for p in a.parts] for a in got.artifacts or []]
        try:
            await client.get_task(TaskQueryParams(id="no-such-task"))
            seen["not_found"] = None
        except Exception as exc:
            seen["not_found"] = _error(exc)
        try:
            await client.cancel_task(TaskIdParams(id=task.id))
            seen["not_cancelable"] = None
        except Exception as exc:
            seen["not_cancelable"] = _error(exc)
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
