"""Trace an agent and its sub-agent with OpenTelemetry (extra ``otel``; no API key needed).

Every run is an ``invoke_agent`` span, every model call a ``chat`` span and every tool call an
``execute_tool`` span, with the GenAI semantic conventions' attributes; a sub-agent's run nests
under the tool call that started it. Here the spans are kept in memory and printed as a tree. To
send them to a collector instead, set ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and ``OTEL_SERVICE_NAME``):
this example then calls ``configure_otlp()``, which exports over OTLP/HTTP.
"""

import asyncio
import os

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, Usage
from daimon.models import FunctionModel
from daimon.multiagent import AgentTool
from daimon.telemetry import configure_otlp, instrument


def researcher_model(request: ChatRequest) -> ChatResponse:
    """Plays the researcher's LLM."""
    usage = Usage(input_tokens=30, output_tokens=12, requests=1)
    return ChatResponse.reply("Owls hunt at night.", usage=usage, model="small-1")


def writer_model(request: ChatRequest) -> ChatResponse:
    """Plays the writer's LLM: asks the researcher, then writes."""
    usage = Usage(input_tokens=100, output_tokens=20, requests=1)
    facts = [m.text for m in request.messages if m.role is Role.TOOL]
    if not facts:
        call = ToolCall(id="call-1", name="research", arguments={"task": "owls"})
        return ChatResponse.tool_use(call, usage=usage, model="large-1")
    return ChatResponse.reply(f"A note on owls: {facts[0]}", usage=usage, model="large-1")


def print_tree(spans: list[ReadableSpan]) -> None:
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent else None
        children.setdefault(parent, []).append(span)

    def show(span: ReadableSpan, depth: int) -> None:
        attributes = span.attributes or {}
        tokens = attributes.get("gen_ai.usage.input_tokens")
        note = f"  ({tokens} tokens in)" if tokens is not None else ""
        print(f"{'  ' * depth}{span.name}{note}")
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)


async def main() -> None:
    exporter = None
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        provider = configure_otlp(service_name="owl-writer")
    else:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))

    researcher = instrument(
        Agent(FunctionModel(researcher_model, model_name="small"), name="researcher"),
        tracer_provider=provider,
    )
    writer = instrument(
        Agent(
            FunctionModel(writer_model, model_name="large"),
            name="writer",
            tools=[AgentTool(researcher, name="research", description="Finds facts")],
        ),
        tracer_provider=provider,
    )
    response = await writer.prompt("Write a note on owls", session_id="conversation-1")
    print(response.text)
    provider.shutdown()
    if exporter is not None:
        print_tree(list(exporter.get_finished_spans()))


if __name__ == "__main__":
    asyncio.run(main())
