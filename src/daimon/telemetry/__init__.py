"""OpenTelemetry for agents, following the GenAI semantic conventions (extra ``otel``).

* :func:`instrument`: an agent whose runs, model calls and tool calls become spans
  (``invoke_agent``, ``chat``, ``execute_tool``), and whose model calls are measured
  (``gen_ai.client.token.usage``, ``gen_ai.client.operation.duration``);
* :func:`configure_otlp`: tracer and meter providers exporting over OTLP/HTTP, configured by the
  standard ``OTEL_*`` environment variables;
* :func:`inject_trace_context` / :func:`extract_trace_context`: carry the W3C trace context
  (``traceparent``) across a transport (brokers, MCP, A2A).

The namespace is lazy: importing it loads no OpenTelemetry library. The propagation helpers work
without the extra and do nothing until OpenTelemetry is loaded, so transports call them always.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.telemetry._export import configure_otlp
    from daimon.telemetry._otel import instrument
    from daimon.telemetry._propagation import extract_trace_context, inject_trace_context

__all__ = ("configure_otlp", "extract_trace_context", "inject_trace_context", "instrument")

_LAZY: dict[str, str] = {
    "configure_otlp": "daimon.telemetry._export",
    "instrument": "daimon.telemetry._otel",
    "extract_trace_context": "daimon.telemetry._propagation",
    "inject_trace_context": "daimon.telemetry._propagation",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
