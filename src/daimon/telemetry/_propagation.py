"""W3C trace context across transports: ``traceparent`` into a carrier, and back out of one.

Brokers, MCP and A2A call these on every message. Tracing is on exactly when OpenTelemetry is
loaded: without it there is no span to continue, so both helpers then do nothing and import
nothing, and the transports can call them whether or not the ``otel`` extra is installed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping, MutableMapping

from daimon.core.optional import require

__all__ = ("extract_trace_context", "inject_trace_context", "join_trace")


def _tracing() -> bool:
    return "opentelemetry.trace" in sys.modules


def inject_trace_context(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current trace context (``traceparent``, ``tracestate``) into ``carrier``.

    Call it where a message leaves the process (a task put on a broker, an MCP or A2A request),
    with the message's headers. Returns ``carrier``, unchanged when nothing is being traced.
    The propagators are OpenTelemetry's global ones (W3C trace context and baggage unless
    ``OTEL_PROPAGATORS`` says otherwise).
    """
    if _tracing():
        propagate = require("opentelemetry.propagate", extra="otel")
        propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def extract_trace_context(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Continue the trace a message came with, for the duration of a ``with`` block.

    Call it where a message arrives, around the work it asks for; spans started inside (an
    instrumented agent's run) become children of the sender's span::

        with extract_trace_context(task.headers):
            response = await agent.prompt(task.prompt)

    Header names are matched case-insensitively. Does nothing when nothing is being traced or the
    carrier holds no trace context.
    """
    if not carrier or not _tracing():
        yield
        return
    propagate = require("opentelemetry.propagate", extra="otel")
    context = require("opentelemetry.context", extra="otel")
    headers = {str(key).lower(): value for key, value in carrier.items()}
    # Extract on top of the current context, so a carrier without a trace keeps the current one.
    token = context.attach(propagate.extract(headers, context=context.get_current()))
    try:
        yield
    finally:
        context.detach(token)


def _trace_id(traceparent: str | None) -> str | None:
    parts = traceparent.strip().lower().split("-") if traceparent else []
    return parts[1] if len(parts) >= 4 else None


@contextlib.contextmanager
def join_trace(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """:func:`extract_trace_context`, keeping the current span when it is already in that trace.

    A server extracting at several layers (an ASGI middleware, then the handler) must not make
    the inner layer reparent its spans onto the caller's span, skipping the spans in between:
    when the current span already belongs to the carrier's trace, it stays the parent and only
    the carrier's baggage is taken.
    """
    if not carrier or not _tracing():
        yield
        return
    headers = {str(key).lower(): value for key, value in carrier.items()}
    current = inject_trace_context({}).get("traceparent")
    if current is not None and _trace_id(current) == _trace_id(headers.get("traceparent")):
        headers = {key: value for key, value in headers.items() if key == "baggage"}
    with extract_trace_context(headers):
        yield
