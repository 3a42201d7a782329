"""daimon.a2a: Google's Agent-to-Agent protocol, both ways.

:func:`serve_a2a` serves an agent as an A2A agent (agent card, send, stream, get and cancel
task) with the official SDK's server pieces; :class:`RemoteA2AAgent` is a remote A2A agent,
usable as a tool or prompted like an agent.

Needs the ``a2a`` extra (``pip install "daimon-agents[a2a]"``). The namespace is lazy: importing
``daimon.a2a`` loads nothing, and the SDK loads with the first name used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports
from daimon.core.optional import require

if TYPE_CHECKING:
    from daimon.a2a._client import RemoteA2AAgent
    from daimon.a2a._server import DaimonAgentExecutor, a2a_app, agent_card, serve_a2a

__all__ = ("DaimonAgentExecutor", "RemoteA2AAgent", "a2a_app", "agent_card", "serve_a2a")

_LAZY = {
    "DaimonAgentExecutor": "daimon.a2a._server",
    "RemoteA2AAgent": "daimon.a2a._client",
    "a2a_app": "daimon.a2a._server",
    "agent_card": "daimon.a2a._server",
    "serve_a2a": "daimon.a2a._server",
}


def _require_a2a(module: str) -> None:
    require("a2a", extra="a2a")


__getattr__, __dir__ = lazy_exports(globals(), _LAZY, before_load=_require_a2a)
