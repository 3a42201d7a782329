"""Anthropic over real HTTP: the official SDK against a local Messages API wire-format server."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from daimon import (
    Agent,
    BuilderError,
    ChatRequest,
    ChatResponse,
    Message,
    MissingDependencyError,
    ModelError,
    ResponseFormat,
    StopReason,
    ToolSpec,
    Usage,
)
from daimon.core.errors import UnsupportedContentError
from daimon.core.events import Done
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Reasoning,
    TextPart,
    ToolCall,
)
from daimon.core.protocols import Model
from daimon.cost import CostTracker, builtin_prices
from daimon.kit.streaming import StreamAccumulator
from daimon.models import infer_model
from daimon.models.anthropic import AnthropicModel
from daimon.testing.models import SSE, ModelConformance, WireServer, iter_chunks, sample_request
from daimon.tools import tool

DATA = Path(__file__).parent.parent / "data" / "caching"
EPHEMERAL = {"type": "ephemeral"}


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


def _marked(value: Any) -> list[Any]:
    """Every block that carries a cache_control breakpoint."""
    if isinstance(value, dict):
        found = [value] if "cache_control" in value else []
        return found + [b for v in value.values() for b in _marked(v)]
    if isinstance(value, list):
        return [b for v in value for b in _marked(v)]
    return []


def _sse_file(path: Path) -> list[SSE]:
    events = []
    for block in path.read_text().strip().split("\n\n"):
        head, data = block.split("\n", 1)
        events.append(SSE(event=head.removeprefix("event: "), data=data[len("data: ") :]))
    return events


FIXTURES = Path(__file__).parent / "fixtures"

_STOP = {
    StopReason.END_TURN: "end_turn",
    StopReason.TOOL_USE: "tool_use",
    StopReason.MAX_TOKENS: "max_tokens",
    StopReason.CONTENT_FILTER: "refusal",
}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_FORMAT_NAME = "response"
"""The Messages API sends a schema only: decoded formats get this name."""


def _usage(response: ChatResponse, *, output: int | None = None) -> dict[str, Any]:
    usage = response.usage
    return {
        "input_tokens": usage.input_tokens - usage.cached_tokens,
        "output_tokens": usage.output_tokens if output is None else output,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def _event(kind: str, **fields: Any) -> SSE:
    return SSE(event=kind, data={"type": kind, **fields})


def _image(source: dict[str, Any]) -> ImagePart:
    if source["type"] == "base64":
        return ImagePart(data=base64.b64decode(source["data"]), media_type=source["media_type"])
    return ImagePart(url=source["url"])


def _tool_choice(choice: dict[str, Any] | None) -> str | None:
    if choice is None:
        return None
    return {"auto": "auto", "any": "required", "none": "none"}.get(
        choice["type"], choice.get("name")
    )


def decode_messages_request(body: dict[str, Any]) -> ChatRequest:
    """A Messages API request body back into a ChatRequest."""
    messages: list[Message] = []
    system = body.get("system")
    if isinstance(system, list):  # blocks, as sent with caching on
        system = "".join(b["text"] for b in system)
    if system:
        messages.append(Message.system(system))
    for turn in body["messages"]:
        content = turn["content"]
        texts = isinstance(content, list) and content and all(b["type"] == "text" for b in content)
        if turn["role"] == "user" and texts:
            content = "".join(b["text"] for b in content)  # text blocks, as sent with caching on
        if turn["role"] == "assistant":
            text = "".join(b["text"] for b in content if b["type"] == "text")
            calls = [
                ToolCall(id=b["id"], name=b["name"], arguments=b["input"])
                for b in content
                if b["type"] == "tool_use"
            ]
            messages.append(Message.assistant(text, calls))
        elif isinstance(content, str):
            messages.append(Message.user(content))
        elif all(b["type"] == "tool_result" for b in content):
            messages += [
                Message.tool(
                    b["tool_use_id"], b.get("content", ""), is_error=b.get("is_error", False)
                )
                for b in content
            ]
        else:
            parts = [
                TextPart(text=b["text"]) if b["type"] == "text" else _image(b["source"])
                for b in content
            ]
            messages.append(Message.user(parts))
    fmt = (body.get("output_config") or {}).get("format")
    return ChatRequest(
        messages=tuple(messages),
        tools=tuple(
            ToolSpec(
                name=t["name"], description=t.get("description", ""), parameters=t["input_schema"]
            )
            for t in body.get("tools") or []
        ),
        temperature=body.get("temperature"),
        max_tokens=body.get("max_tokens"),
        tool_choice=_tool_choice(body.get("tool_choice")),
        response_format=ResponseFormat(name=_FORMAT_NAME, schema=fmt["schema"]) if fmt else None,
    )


class TestAnthropicModel(ModelConformance):
    provider: ClassVar[str] = "anthropic"

    def make_model(self, base_url: str) -> Model:
        return AnthropicModel("claude-test", api_key="sk-ant-test", base_url=base_url)

    def encode_response(self, response: ChatResponse) -> Any:
        content: list[dict[str, Any]] = []
        if response.text:
            content.append({"type": "text", "text": response.text, "citations": None})
        for call in response.message.tool_calls:
            content.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            )
        return {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": response.model,
            "content": content,
            "stop_reason": _STOP[response.stop_reason],
            "stop_sequence": None,
            "usage": _usage(response),
        }

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        message = self.encode_response(response) | {"content": [], "stop_reason": None}
        message["usage"] = _usage(response, output=1)
        events = [_event("message_start", message=message), _event("ping")]
        index = 0
        if response.text:
            events.append(
                _event("content_block_start", index=0, content_block={"type": "text", "text": ""})
            )
            events += [
                _event("content_block_delta", index=0, delta={"type": "text_delta", "text": t})
                for t in iter_chunks(response.text, 3)
            ]
            events.append(_event("content_block_stop", index=0))
            index = 1
        for call in response.message.tool_calls:
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            events.append(_event("content_block_start", index=index, content_block=block))
            events += [
                _event(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
                for piece in ["", *iter_chunks(call.arguments_json, 2)]
            ]
            events.append(_event("content_block_stop", index=index))
            index += 1
        if finished:
            delta = {"stop_reason": _STOP[response.stop_reason], "stop_sequence": None}
            usage = {"output_tokens": response.usage.output_tokens}
            events += [_event("message_delta", delta=delta, usage=usage), _event("message_stop")]
        return events

    def encode_error(self, status: int, message: str) -> Any:
        return {"type": "error", "error": {"type": _ERROR_TYPES[status], "message": message}}

    def decode_request(self, body: Any) -> ChatRequest:
        return decode_messages_request(body)

    def expected_request(self, request: ChatRequest) -> ChatRequest:
        expected = super().expected_request(request)
        if expected.response_format is None:
            return expected
        schema = expected.response_format.schema
        return ChatRequest(
            messages=expected.messages,
            tools=expected.tools,
            temperature=expected.temperature,
            max_tokens=expected.max_tokens,
            tool_choice=expected.tool_choice,
            response_format=ResponseFormat(name=_FORMAT_NAME, schema=schema),
        )

    # ------------------------------------------------------------ the exact wire shapes
    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(sample_request())
        sent = wire_server.last
        assert sent.path == "/v1/messages"
        assert "anthropic-version" in sent.headers
        key = sent.headers.get("x-api-key") or sent.headers["authorization"].removeprefix("Bearer ")
        assert key == "sk-ant-test"
        body = sent.body
        assert body["model"] == "claude-test"
        assert body["system"] == [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ]
        assert [m["role"] for m in body["messages"]] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        assert body["messages"][0]["content"][2]["source"] == {
            "type": "base64",
            "media_type": "image/png",
            "data": "iVBORw0KGgoA/w==",
        }
        assert body["messages"][0]["content"][1]["source"] == {
            "type": "url",
            "url": "https://example.com/cat.png",
        }
        assert body["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
            {
                "type": "tool_result",
                "tool_use_id": "call_2",
                "content": "no such city",
                "is_error": True,
            },
        ]
        assert body["tool_choice"] == {"type": "tool", "name": "get_weather"}
        assert body["tools"][0]["input_schema"]["required"] == ["city"]
        schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}

    async def test_defaults_and_odd_turns(self, model: Model, wire_server: WireServer) -> None:
        """max_tokens defaults, temperature stays out, empty turns drop, raw arguments wrap."""
        wire_server.reply_json(self.encode_response(self._text()))
        request = ChatRequest(
            messages=(
                Message.user("x"),
                Message.assistant(""),
                Message.user("y"),
                Message.assistant("", [ToolCall(id="c", name="f", arguments="{oops")]),
                Message.tool("c", "bad arguments", is_error=True),
                Message.system("Be brief."),
            ),
            response_format=ResponseFormat(name="r", schema={"type": "object"}),
            settings={"output_config": {"effort": "low"}, "top_k": 5},
        )
        await model.generate(request)
        body = wire_server.last.body
        assert body["max_tokens"] == 4096
        assert "temperature" not in body
        assert body["system"][0]["text"] == "Be brief."
        assert [m["role"] for m in body["messages"]] == ["user", "user", "assistant", "user"]
        assert body["messages"][2]["content"][0]["input"] == {"raw_arguments": "{oops"}
        assert body["output_config"] == {
            "effort": "low",
            "format": {"type": "json_schema", "schema": {"type": "object"}},
        }
        assert body["top_k"] == 5

    async def test_error_event_inside_a_stream(self, model: Model, wire_server: WireServer) -> None:
        """An ``overloaded_error`` event mid-stream is a retryable 529."""
        events = self.encode_stream(self._text())[:3]
        error = {"type": "overloaded_error", "message": "Overloaded"}
        wire_server.reply_sse([*events, _event("error", error=error)])
        with pytest.raises(ModelError, match="Overloaded") as caught:
            [e async for e in model.generate_stream(ChatRequest(messages=(Message.user("x"),)))]
        assert (caught.value.status_code, caught.value.retryable) == (529, True)

    async def test_documented_stream_transcript(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A stream as Anthropic documents it: ping, text, a tool call, cumulative usage."""
        raw = (FIXTURES / "anthropic_stream_tool_use.sse").read_text()
        events = []
        for block in raw.strip().split("\n\n"):
            head, data = block.split("\n", 1)
            events.append(SSE(event=head.removeprefix("event: "), data=data[len("data: ") :]))
        wire_server.reply_sse(events)
        accumulator = StreamAccumulator()
        async for event in model.generate_stream(ChatRequest(messages=(Message.user("x"),))):
            accumulator.add(event)
        response = accumulator.response()
        assert response.text == "Okay, let's check the weather for San Francisco, CA:"
        assert response.message.tool_calls == (
            ToolCall(
                id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                name="get_weather",
                arguments={"location": "San Francisco, CA", "unit": "fahrenheit"},
            ),
        )
        assert response.stop_reason is StopReason.TOOL_USE
        assert response.usage.input_tokens == 472 + 100
        assert response.usage.cached_tokens == 100
        assert response.usage.output_tokens == 89
        assert response.model == "claude-sonnet-4-5"

    def cache_neutral(self, body: Any) -> Any:
        return _strip_cache_control(body)

    # ------------------------------------------------------------ media
    async def test_media_parts_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        """Images, PDFs (bytes and URL) and text documents become Messages API blocks."""
        wire_server.reply_json(self.encode_response(self._text()))
        parts = [
            TextPart(text="Compare these."),
            ImagePart(data=b"\xff\xd8\xff", media_type="image/jpeg"),
            DocumentPart(data=b"%PDF-1.7", name="report.pdf"),
            DocumentPart(url="https://example.com/paper.pdf"),
            DocumentPart.from_text("line one", name="notes.txt"),
        ]
        await model.generate(ChatRequest(messages=(Message.user(parts),)))
        blocks = wire_server.last.body["messages"][0]["content"]
        assert blocks[1] == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"},
        }
        assert blocks[2] == {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjc="},
            "title": "report.pdf",
        }
        assert blocks[3] == {
            "type": "document",
            "source": {"type": "url", "url": "https://example.com/paper.pdf"},
        }
        assert blocks[4]["source"] == {
            "type": "text",
            "media_type": "text/plain",
            "data": "line one",
        }

    @pytest.mark.parametrize(
        "part",
        [
            AudioPart(data=b"RIFF", media_type="audio/wav"),
            DocumentPart(data=b"PK", media_type="application/zip"),
            DocumentPart(url="https://example.com/a.txt", media_type="text/plain"),
        ],
        ids=["audio", "zip", "text-by-url"],
    )
    async def test_unsupported_part_refused_before_sending(
        self, model: Model, wire_server: WireServer, part: Any
    ) -> None:
        request = ChatRequest(messages=(Message.user([TextPart(text="hear"), part]),))
        with pytest.raises(UnsupportedContentError, match=r"^anthropic cannot take this") as caught:
            await model.generate(request)
        assert caught.value.provider == "anthropic"
        assert caught.value.retryable is False
        assert wire_server.requests == []

    async def test_tool_results_carry_media(self, model: Model, wire_server: WireServer) -> None:
        """Images and documents ride in the tool_result; audio becomes a text stand-in."""
        wire_server.reply_json(self.encode_response(self._text()))
        result = Message.tool(
            "call_1",
            [
                TextPart(text="the chart"),
                ImagePart(data=b"\x89PNG", media_type="image/png"),
                AudioPart(data=b"RIFF", media_type="audio/wav"),
            ],
        )
        call = ToolCall(id="call_1", name="chart", arguments={})
        messages = (Message.user("draw"), Message.assistant("", [call]), result)
        await model.generate(ChatRequest(messages=messages))
        block = wire_server.last.body["messages"][2]["content"][0]
        assert block["type"] == "tool_result"
        content = block["content"]
        assert content[0] == {"type": "text", "text": "the chart"}
        assert content[1]["type"] == "image"
        assert content[2]["type"] == "text"
        assert "audio recording (audio/wav, 4 bytes)" in content[2]["text"]

    # ------------------------------------------------------------ prompt caching
    async def test_breakpoints_placed_automatically(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """The last tool, the system text and the last block of the conversation are marked."""
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(sample_request())
        body = wire_server.last.body
        assert body["tools"][-1]["cache_control"] == EPHEMERAL
        assert body["system"][0]["cache_control"] == EPHEMERAL
        assert body["messages"][-1]["content"] == [
            {"type": "text", "text": "And Rome?", "cache_control": EPHEMERAL}
        ]
        assert len(_marked(body)) == 3  # of the four the API allows

    async def test_breakpoints_by_hand(self, model: Model, wire_server: WireServer) -> None:
        """Hand-placed CachePoints replace the automatic breakpoints."""
        wire_server.reply_json(self.encode_response(self._text()))
        long_text = TextPart(text="a long reference text")
        request = ChatRequest(
            messages=(
                Message.system("Be brief."),
                Message.user([long_text, CachePoint(), TextPart(text="question")]),
            ),
            tools=sample_request().tools,
        )
        await model.generate(request)
        body = wire_server.last.body
        assert _marked(body) == [
            {"type": "text", "text": "a long reference text", "cache_control": EPHEMERAL}
        ]
        assert body["messages"][0]["content"][1] == {"type": "text", "text": "question"}

    async def test_caching_off(self, wire_server: WireServer) -> None:
        wire_server.reset()
        model = AnthropicModel(
            "claude-test", api_key="k", base_url=wire_server.url, prompt_cache="off"
        )
        wire_server.reply_json(self.encode_response(self._text()))
        request = sample_request()
        hand = Message.user([TextPart(text="x"), CachePoint()])
        await model.generate(ChatRequest(messages=(*request.messages, hand), tools=request.tools))
        await model.aclose()
        body = wire_server.last.body
        assert _marked(body) == []
        assert body["system"] == "You are terse."

    async def test_recorded_cache_usage_and_cost(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Anthropic's documented cache write then read: usage and dollars at their own rates."""
        for name in ("anthropic_message_cache_write.json", "anthropic_message_cache_read.json"):
            wire_server.reply_json(json.loads((DATA / name).read_text()))
        tracker = CostTracker(builtin_prices())
        written = await model.generate(ChatRequest(messages=(Message.user("themes?"),)))
        read = await model.generate(ChatRequest(messages=(Message.user("Darcy?"),)))
        assert written.usage == Usage(
            input_tokens=21 + 188086, output_tokens=393, cache_write_tokens=188086, requests=1
        )
        assert read.usage == Usage(
            input_tokens=17 + 188086, output_tokens=211, cached_tokens=188086, requests=1
        )
        # claude-sonnet-4-5: $3 input, $15 output, $0.30 cache read, $3.75 cache write per M.
        assert tracker.record(written.model, written.usage) == pytest.approx(
            (21 * 3.00 + 188086 * 3.75 + 393 * 15.00) / 1e6
        )
        assert tracker.record(read.model, read.usage) == pytest.approx(
            (17 * 3.00 + 188086 * 0.30 + 211 * 15.00) / 1e6
        )

    async def test_an_agent_prices_cache_writes_within_its_budget(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """The run's cost and usage carry the cache write at its own rate, under a budget."""
        recorded = json.loads((DATA / "anthropic_message_cache_write.json").read_text())
        wire_server.reply_json(recorded)
        agent = Agent(model, cost_model=builtin_prices(), max_budget=1.0, max_tokens=1000)
        answer = await agent.prompt("themes?")
        assert answer.usage.cache_write_tokens == 188086
        assert answer.cost == pytest.approx((21 * 3.00 + 188086 * 3.75 + 393 * 15.00) / 1e6)

    async def test_streamed_cache_usage(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_sse(_sse_file(DATA / "anthropic_stream_cache.sse"))
        accumulator = StreamAccumulator()
        async for event in model.generate_stream(ChatRequest(messages=(Message.user("x"),))):
            accumulator.add(event)
        usage = accumulator.response().usage
        assert usage == Usage(
            input_tokens=35 + 2051 + 4120,
            output_tokens=15,
            cached_tokens=4120,
            cache_write_tokens=2051,
            requests=1,
        )

    # ------------------------------------------------------------ extended thinking
    @pytest.mark.parametrize("stream", [False, True], ids=["prompt", "prompt_stream"])
    async def test_thinking_goes_back_unchanged_before_its_tool_use(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """A tool-use turn with extended thinking: the next request holds its thinking block
        (signature and all) and its redacted thinking block unchanged, before text and tool_use."""
        first = json.loads((FIXTURES / "anthropic_message_thinking_tool_use.json").read_text())
        answer = self._text("Sunny in Paris.")
        if stream:
            wire_server.reply_sse(_sse_file(FIXTURES / "anthropic_stream_thinking_tool_use.sse"))
            wire_server.reply_sse(self.encode_stream(answer))
        else:
            wire_server.reply_json(first)
            wire_server.reply_json(self.encode_response(answer))

        @tool
        def get_weather(city: str) -> str:
            """The weather in a city."""
            return f"sunny in {city}"

        thinking = {"type": "enabled", "budget_tokens": 2048}
        agent = Agent(model, tools=[get_weather], model_settings={"thinking": thinking})
        if stream:
            events = [e async for e in agent.prompt_stream("Weather in Paris?")]
            done = events[-1]
            assert isinstance(done, Done) and done.response is not None
            assert done.response.text == "Sunny in Paris."
        else:
            assert (await agent.prompt("Weather in Paris?")).text == "Sunny in Paris."
        sent = wire_server.requests[-1].body
        assert sent["thinking"] == thinking
        assert sent["messages"][1] == {"role": "assistant", "content": first["content"]}

    async def test_thinking_of_another_provider_stays_home(
        self, model: Model, wire_server: WireServer
    ) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        other = Reasoning(provider="bedrock", text="hm", data={"reasoningText": {"text": "hm"}})
        history = (Message.user("a"), Message.assistant("b", reasoning=[other]), Message.user("c"))
        await model.generate(ChatRequest(messages=history))
        assert wire_server.last.body["messages"][1]["content"] == [{"type": "text", "text": "b"}]

    # ------------------------------------------------------------ empty fields
    async def test_empty_fields_are_left_out(self, model: Model, wire_server: WireServer) -> None:
        """A tool without a docstring has no description; empty text parts are dropped."""
        ping = ToolSpec(name="ping", description="", parameters={"type": "object"})
        wire_server.reply_json(self.encode_response(self._text()))
        parts = [TextPart(text=""), ImagePart(url="https://example.com/cat.png")]
        await model.generate(ChatRequest(messages=(Message.user(parts),), tools=(ping,)))
        body = wire_server.last.body
        assert "description" not in body["tools"][0]
        assert [b["type"] for b in body["messages"][0]["content"]] == ["image"]

    async def test_empty_tool_results(self, model: Model, wire_server: WireServer) -> None:
        """An empty result goes without content; an empty failure says that it failed (the
        API refuses a tool_result with is_error and no content)."""
        wire_server.reply_json(self.encode_response(self._text()))
        calls = [ToolCall(id="c1", name="f"), ToolCall(id="c2", name="f")]
        messages = (
            Message.user("go"),
            Message.assistant("", calls),
            Message.tool("c1", ""),
            Message.tool("c2", "", is_error=True),
        )
        await model.generate(ChatRequest(messages=messages))
        results = _strip_cache_control(wire_server.last.body["messages"][2]["content"])
        assert results == [
            {"type": "tool_result", "tool_use_id": "c1"},
            {
                "type": "tool_result",
                "tool_use_id": "c2",
                "content": "Error: the tool failed without a message.",
                "is_error": True,
            },
        ]


# ---------------------------------------------------------------- configuration
def test_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BuilderError, match="ANTHROPIC_API_KEY"):
        AnthropicModel("claude-x")
    with pytest.raises(BuilderError, match="max_tokens_default"):
        AnthropicModel("claude-x", api_key="k", max_tokens_default=0)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    model = infer_model("anthropic:claude-sonnet-4-5", timeout=5.0)
    assert isinstance(model, AnthropicModel)
    assert model.model_name == "claude-sonnet-4-5"


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delitem(sys.modules, "daimon.models.anthropic")
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[anthropic\]"'):
        infer_model("anthropic:claude-x", api_key="k")
