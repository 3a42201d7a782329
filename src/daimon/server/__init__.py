"""Serve agents over HTTP (extra ``server``: ``pip install "daimon-agents[server]"``).

::

    from daimon.server import serve

    serve(agent)  # http://127.0.0.1:8000, loopback only
    serve({"support": support, "sales": sales}, host="0.0.0.0", token=secret, settings=...)

Routes (all JSON unless said; every error is ``{"error": {"type", "message"}}``):

==============================  =========================================================
``POST /prompt``                run an agent: ``{"input", "session_id"?, "agent"?}`` ->
                                text, usage, cost, iterations, run and session ids
``POST /prompt/stream``         the same, as server-sent events: ``event: <kind>`` with the
                                event's JSON, ``: ping`` while idle, ``done`` or ``error`` last
``GET /sessions``               an agent's conversations, by id (``?agent=``, ``?limit=``)
``GET/DELETE /sessions/{id}``   a conversation's messages; forget it (``?agent=`` to choose)
``GET /agents``                 the served agents (and flows, with their drawings)
``GET /health``, ``GET /ready``  liveness (no token needed), readiness
``GET /openapi.json``           the OpenAPI document
``POST /v1/chat/completions``   OpenAI Chat Completions (streamed or not); model = agent name
``POST /v1/responses``          the OpenAI Responses API (streamed, background, or not);
                                ``GET``/``DELETE /v1/responses/{id}``, ``.../{id}/cancel``
``GET /v1/models[/{id}]``       one model per agent; one of them
``POST /agui[/{name}]``         AG-UI 1.0: a ``RunAgentInput`` in, AG-UI events out (SSE);
                                approvals are interrupts the client resumes
``GET /``, ``GET /ui/<file>``   the web playground and run inspector (only with ``ui=True``,
                                which ``daimon serve`` sets; the files load without a token)
==============================  =========================================================

Anything promptable (:class:`daimon.core.Promptable`) is served like an agent: a ``Supervisor``,
a ``HandoffNetwork``, a graph, DAG or workflow (bare, or through :class:`ServedFlow` to choose how
text becomes its input: ``serve({"research": ServedFlow(graph)})``). A flow's ``/prompt/stream``
sends ``node_started``/``node_finished``/``node_failed``/``node_skipped`` events as its nodes run,
and it answers ``/v1/chat/completions`` with one user message only (it keeps no conversation).

Secure by default: it binds 127.0.0.1 and refuses any other address without a bearer token;
``Host`` and ``Origin`` are checked against allowlists on every request; bodies over
``max_body_bytes`` get 413 before they are read; runs are cancelled past ``request_timeout``;
CORS is off unless ``cors_origins`` is set. A client that disconnects cancels its run (unlike the
MCP server, where only an explicit cancellation does).

The namespace is lazy: ``ServerSettings`` and ``ServedFlow`` need no web library, and
``create_app`` and ``serve`` import FastAPI and uvicorn on first use, naming the extra when they
are missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports
from daimon.core.optional import require

if TYPE_CHECKING:
    from daimon.server._app import create_app, serve
    from daimon.server._flows import ServedFlow
    from daimon.server._settings import ServerSettings

__all__ = ("ServedFlow", "ServerSettings", "create_app", "serve")

_LAZY: dict[str, str] = {
    "ServedFlow": "daimon.server._flows",
    "ServerSettings": "daimon.server._settings",
    "create_app": "daimon.server._app",
    "serve": "daimon.server._app",
}
_LIBRARIES = ("fastapi", "starlette", "pydantic", "uvicorn", "ag_ui", "jsonpatch")


def _require_web(module: str) -> None:
    if module not in ("daimon.server._settings", "daimon.server._flows"):
        for library in _LIBRARIES:
            require(library, extra="server")


__getattr__, __dir__ = lazy_exports(globals(), _LAZY, before_load=_require_web)
