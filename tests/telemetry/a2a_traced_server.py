"""A daimon A2A server traced the way a deployed one is: a global tracer provider.

    python a2a_traced_server.py SPANS_FILE PORT

With a global provider, a2a-sdk makes server spans of its own (its request handler's, its event
queue's). Every finished span is appended to SPANS_FILE as one JSON line (name, ids in hex,
parent id), so the test that started the server can read the server's side of the trace.
"""

import asyncio
import sys

from mcp_traced_server import JsonLines
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from daimon import Agent, ChatResponse
from daimon.a2a import serve_a2a
from daimon.models import FunctionModel
from daimon.telemetry import instrument


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(sys.argv[1])))
    trace.set_tracer_provider(provider)
    agent = instrument(Agent(FunctionModel(lambda r: ChatResponse.reply("done")), name="inner"))
    asyncio.run(serve_a2a(agent, port=int(sys.argv[2])))


if __name__ == "__main__":
    main()
