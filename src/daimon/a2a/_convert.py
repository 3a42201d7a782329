"""Reading A2A's protobuf messages as text, and describing a daimon agent as an agent card."""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import json
import re
from collections.abc import Iterable, Sequence

from a2a.helpers import get_data_parts
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
)
from a2a.utils.constants import (
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_CURRENT,
    TransportProtocol,
)

from daimon.core.tools import ToolSpec

__all__ = (
    "TEXT_DELTA_METADATA",
    "agent_card_for",
    "artifacts_text",
    "interfaces_for",
    "is_text_delta",
    "message_text",
    "parts_text",
    "task_text",
    "tool_name",
)

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_TEXT = ("text/plain",)

TEXT_DELTA_METADATA = {"daimon": "text_delta"}
"""The metadata of a ``working`` status message that carries a piece of the answer.

A daimon server streams its agent's text this way; a ``working`` message without it is
progress (``"Looking it up..."``), not answer text.
"""


def tool_name(name: str) -> str:
    """``name`` as a tool name every model provider accepts."""
    return _NAME_CHARS.sub("_", name)[:64] or "remote_agent"


def parts_text(parts: Iterable[Part]) -> str:
    """The text of message or artifact parts; data as JSON, files described."""
    pieces: list[str] = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            pieces.append(part.text)
        elif kind == "data":
            (value,) = get_data_parts([part])
            pieces.append(json.dumps(value, ensure_ascii=False, default=str))
        elif kind == "url":
            pieces.append(f"[file: {part.url}]")
        elif kind == "raw":
            label = part.filename or part.media_type or "bytes"
            pieces.append(f"[file {label}: {len(part.raw)} bytes]")
    return "".join(pieces)


def artifacts_text(artifacts: Iterable[Artifact]) -> str:
    """All artifacts' text, one artifact per paragraph."""
    return "\n\n".join(t for t in (parts_text(a.parts) for a in artifacts) if t)


def task_text(task: Task) -> str:
    """A task's answer: its artifacts, else the message of its last status."""
    text = artifacts_text(task.artifacts)
    if text or not task.status.HasField("message"):
        return text
    return parts_text(task.status.message.parts)


def message_text(message: Message) -> str:
    """A message's text."""
    return parts_text(message.parts)


def is_text_delta(message: Message) -> bool:
    """Whether ``message`` is a piece of a daimon agent's streamed answer (see above)."""
    ((key, value),) = TEXT_DELTA_METADATA.items()
    marker = message.metadata.fields.get(key) if message.HasField("metadata") else None
    return marker is not None and marker.string_value == value


def interfaces_for(
    url: str, *, grpc_url: str | None = None, legacy: bool = True
) -> list[AgentInterface]:
    """The interfaces a daimon server offers, best first: each binding at 1.0, then at 0.3.

    JSON-RPC is at ``url``, HTTP+JSON (REST) under it, gRPC at ``grpc_url`` (an absolute URL
    such as ``grpc://host:port``) when given. A 1.0 client picks the 1.0 entry of a binding it
    speaks; a 0.3 client reads the card's 0.3 fields (``url``, ``preferredTransport``,
    ``additionalInterfaces``), which the SDK fills from the 0.3 entries.
    """
    bindings = [(TransportProtocol.JSONRPC, url), (TransportProtocol.HTTP_JSON, url)]
    if grpc_url is not None:
        bindings.append((TransportProtocol.GRPC, grpc_url))
    versions = [PROTOCOL_VERSION_CURRENT, *([PROTOCOL_VERSION_0_3] if legacy else [])]
    return [
        AgentInterface(url=where, protocol_binding=binding.value, protocol_version=version)
        for version in versions
        for binding, where in bindings
    ]


def agent_card_for(
    *,
    name: str,
    description: str,
    interfaces: Iterable[AgentInterface],
    version: str,
    tools: Iterable[ToolSpec],
    bearer: bool,
    input_modes: Sequence[str] = _TEXT,
    push: bool = True,
) -> AgentCard:
    """The card of a served daimon agent: its interfaces, what it takes, text out, streaming.

    The authenticated extended card is declared with ``bearer`` only: the spec has that
    operation require authentication.
    """
    skills = [
        AgentSkill(
            id=name,
            name=name,
            description=description,
            tags=["agent"],
            input_modes=list(input_modes),
            output_modes=list(_TEXT),
        ),
        *(
            AgentSkill(id=f"tool:{t.name}", name=t.name, description=t.description, tags=["tool"])
            for t in tools
        ),
    ]
    card = AgentCard(
        name=name,
        description=description,
        version=version,
        supported_interfaces=list(interfaces),
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=push, extended_agent_card=bearer
        ),
        default_input_modes=list(input_modes),
        default_output_modes=list(_TEXT),
        skills=skills,
    )
    if bearer:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={"bearer": StringList(list=[])})
        )
    return card
