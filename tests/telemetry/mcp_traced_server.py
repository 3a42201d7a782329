"""A daimon MCP server over stdio, traced the way a deployed one is: a global tracer provider.

    python mcp_traced_server.py SPANS_FILE

Every finished span is appended to SPANS_FILE as one JSON line (name, ids in hex, parent id), so
the test that started the server can read the server's side of the trace.
"""

import asyncio
import json
import sys
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from daimon import Agent, ChatResponse
from daimon.mcp import serve_mcp
from daimon.models import FunctionModel
from daimon.telemetry import instrument


class JsonLines(SpanExporter):
    """Appends each span to a file as it ends."""

    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as out:
            for span in spans:
                parent = span.parent
                record = {
                    "name": span.name,
                    "trace_id": f"{span.context.trace_id:032x}",
                    "span_id": f"{span.context.span_id:016x}",
                    "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
                }
                out.write(json.dumps(record) + "\n")
        return SpanExportResult.SUCCESS


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(sys.argv[1])))
    trace.set_tracer_provider(provider)
    agent = instrument(Agent(FunctionModel(lambda r: ChatResponse.reply("done")), name="inner"))
    asyncio.run(serve_mcp(agent, expose_tools=False))


if __name__ == "__main__":
    main()
