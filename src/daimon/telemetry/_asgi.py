"""ASGI middleware running each HTTP request in the trace context its headers carry.

Servers built on other libraries (a2a-sdk, FastAPI) start spans before daimon's code runs; with
the caller's context attached around the whole request, those spans join the caller's trace
too. Standard library only: without trace headers, or with OpenTelemetry not loaded, a request
passes straight through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from daimon.telemetry._propagation import join_trace

__all__ = ("TraceContextMiddleware",)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SINGLE = b"traceparent"
_LISTS = (b"tracestate", b"baggage")  # repeated headers of these are one comma-separated list


class TraceContextMiddleware:
    """Handles each HTTP request inside the W3C trace context (and baggage) of its headers.

    Every span started while the request is handled, the response body streamed included, is in
    the caller's trace; the context is detached when the request ends, however it ends. A span
    in front that already continued the caller's trace (an instrumented ASGI stack) stays the
    parent. A malformed ``traceparent`` (or several of them) means a new trace, never an error.
    """

    __slots__ = ("_app",)

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        carrier = _carrier(scope) if scope.get("type") == "http" else None
        if not carrier:
            await self._app(scope, receive, send)
            return
        # Attached and detached in this task: the whole request, body included, runs in here.
        with join_trace(carrier):
            await self._app(scope, receive, send)


def _carrier(scope: Scope) -> dict[str, str]:
    """The trace headers of a request (ASGI header names are lower-case bytes)."""
    parents: list[bytes] = []
    lists: dict[bytes, list[bytes]] = {}
    for name, value in scope.get("headers") or ():
        key = bytes(name).lower()
        if key == _SINGLE:
            parents.append(bytes(value))
        elif key in _LISTS:
            lists.setdefault(key, []).append(bytes(value))
    carrier = {key.decode(): b",".join(values).decode("latin-1") for key, values in lists.items()}
    if len(parents) == 1:
        carrier["traceparent"] = parents[0].decode("latin-1")
    else:  # none, or an ambiguous several: no parent, and tracestate belongs to no one
        carrier.pop("tracestate", None)
    return carrier
