"""JSON for the wire: daimon values through :mod:`daimon.core.codec`, written compactly."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from daimon.core import codec
from daimon.core.chat import Usage
from daimon.core.errors import SerializationError
from daimon.core.events import Done, StreamEvent
from daimon.core.results import AgentResponse

if TYPE_CHECKING:
    from daimon.orchestration import NodeAgentEvent, NodeEvent

__all__ = (
    "dump_json",
    "event_body",
    "event_data",
    "jsonable",
    "node_event_body",
    "prompt_body",
    "usage_body",
)


def dump_json(value: Any) -> bytes:
    """Compact UTF-8 JSON; strings that UTF-8 cannot hold (lone surrogates) are escaped."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
            "utf-8"
        )
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode("ascii")


def jsonable(value: Any) -> Any:
    """A JSON value for a run's typed output: daimon's codec, else pydantic's, else its text."""
    try:
        return codec.to_data(value)
    except SerializationError:
        pass
    from pydantic_core import to_jsonable_python

    try:
        return to_jsonable_python(value)
    except Exception:  # not representable: say what it was rather than fail the answer
        return repr(value)


def usage_body(usage: Usage) -> dict[str, int]:
    """Token counts (cached: read from the prompt cache; cache-write: written to it), and total."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "requests": usage.requests,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def prompt_body(agent: str, response: AgentResponse) -> dict[str, Any]:
    """The ``POST /prompt`` answer for a finished (or paused) run."""
    return {
        "text": response.text,
        "agent": agent,
        "run_id": response.run_id,
        "session_id": response.session_id,
        "iterations": response.iterations,
        "usage": usage_body(response.usage),
        "cost": response.cost,
        "output": None if response.output is None else jsonable(response.output),
        "pending_approvals": [
            {
                "id": a.id,
                "tool": a.call.name,
                "arguments": a.call.arguments,
                "in_doubt": a.in_doubt,
            }
            for a in response.pending_approvals
        ],
    }


def event_data(event: StreamEvent) -> bytes:
    """A stream event as JSON: :func:`event_body`, compactly written."""
    return dump_json(event_body(event))


def event_body(event: StreamEvent) -> Any:
    """A stream event as a JSON value (``codec.to_data``).

    A typed output that the codec cannot hold is written as :func:`jsonable` makes it.
    """
    try:
        return codec.to_data(event)
    except SerializationError:
        if isinstance(event, Done) and event.response is not None:
            return _done_body(event, event.response)
        raise


def _done_body(event: Done, response: AgentResponse) -> Any:
    bare = dataclasses.replace(event, response=dataclasses.replace(response, output=None))
    data = codec.to_data(bare)
    data["response"]["output"] = jsonable(response.output)
    return data


def node_event_body(event: NodeEvent | NodeAgentEvent) -> dict[str, Any]:
    """A flow's node event for the wire.

    ``kind`` and ``node``, then ``step``, ``seconds``, ``error_type`` and ``message`` as the kind
    has them (a failure's message as :class:`~daimon.orchestration.NodeError` words it). A
    ``node_event`` (an event of the node's agent) has ``step`` and ``event``: the agent's stream
    event as an agent's own stream sends it (:func:`event_body`).
    """
    body: dict[str, Any] = {"kind": event.kind, "node": event.node}
    if event.kind == "node_skipped":
        return body
    body["step"] = event.step
    if event.kind == "node_event":
        body["event"] = event_body(event.event)
        return body
    if event.kind == "node_started":
        return body
    body["seconds"] = event.seconds
    if event.kind == "node_failed":
        from daimon.orchestration import NodeError

        body["error_type"] = type(event.error).__name__
        body["message"] = str(NodeError(event.node, event.error))
    return body
