"""The OpenAI Responses API over real HTTP: the official SDK against a local wire-format server."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from daimon import (
    Agent,
    BuilderError,
    ChatRequest,
    ChatResponse,
    Message,
    ModelError,
    ResponseFormat,
    StopReason,
    StreamClosedError,
    TextDelta,
    ToolSpec,
)
from daimon.core.chat import Usage
from daimon.core.errors import UnsupportedContentError
from daimon.core.events import ReasoningEvent, ToolCallDelta
from daimon.core.messages import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Reasoning,
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.protocols import Model
from daimon.cost import CostTracker, ModelPrice, PriceTable, builtin_prices
from daimon.kit.streaming import StreamAccumulator
from daimon.models import infer_model
from daimon.models.openai import AzureOpenAIResponsesModel, OpenAIResponsesModel
from daimon.testing.models import SSE, ModelConformance, WireServer, iter_chunks
from daimon.tools import tool

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).parent.parent / "data" / "caching"

_SECRET = "gAAAAABencrypted-reasoning=="


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _reasoning_item(reasoning: Reasoning) -> dict[str, Any]:
    return {**reasoning.data, "type": "reasoning", "status": None}


def _message_item(text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": "msg_1",
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content if text or status == "completed" else [],
    }


def _call_item(call: ToolCall, index: int, arguments: str | None = None) -> dict[str, Any]:
    return {
        "id": f"fc_{index}",
        "type": "function_call",
        "status": "completed",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments_json if arguments is None else arguments,
    }


_INCOMPLETE = {
    StopReason.MAX_TOKENS: "max_output_tokens",
    StopReason.CONTENT_FILTER: "content_filter",
}


def _response_object(response: ChatResponse, output: list[dict[str, Any]], status: str) -> Any:
    incomplete = _INCOMPLETE.get(response.stop_reason)
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "incomplete" if incomplete and status == "completed" else status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None,
        "model": response.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": _usage(response.usage) if status == "completed" else None,
        "store": False,
        "text": {"format": {"type": "text"}},
    }


def _output(response: ChatResponse) -> list[dict[str, Any]]:
    items = [_reasoning_item(r) for r in response.message.reasoning]
    if response.text or not response.message.tool_calls:
        items.append(_message_item(response.text))
    items += [_call_item(c, i) for i, c in enumerate(response.message.tool_calls)]
    return items


def decode_input(items: list[dict[str, Any]]) -> list[Message]:
    """``input`` items back into messages (reasoning joins the assistant turn after it)."""
    messages: list[Message] = []
    reasoning: list[Reasoning] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "reasoning":
            summary = "\n\n".join(s["text"] for s in item.get("summary") or [])
            reasoning.append(Reasoning(provider="openai-responses", text=summary, data=item))
        elif kind == "function_call_output":
            messages.append(Message.tool(item["call_id"], item["output"]))
        elif kind == "function_call":
            call = ToolCall.from_json(item["call_id"], item["name"], item["arguments"])
            last = messages[-1] if messages else None
            if last is not None and last.role is Role.ASSISTANT and last.tool_calls:
                messages[-1] = Message.assistant(
                    last.text, [*last.tool_calls, call], reasoning=last.reasoning
                )
            elif last is not None and last.role is Role.ASSISTANT and not last.tool_calls:
                messages[-1] = Message.assistant(last.text, [call], reasoning=last.reasoning)
            else:
                messages.append(Message.assistant("", [call], reasoning=reasoning))
                reasoning = []
        elif item["role"] == "assistant":
            messages.append(Message.assistant(item["content"], reasoning=reasoning))
            reasoning = []
        elif item["role"] == "user" and isinstance(item["content"], list):
            parts: list[TextPart | ImagePart] = []
            for part in item["content"]:
                if part["type"] == "input_text":
                    parts.append(TextPart(text=part["text"]))
                    continue
                url = part["image_url"]
                if url.startswith("data:"):
                    media_type, _, data = url[5:].partition(";base64,")
                    parts.append(ImagePart(data=base64.b64decode(data), media_type=media_type))
                else:
                    parts.append(ImagePart(url=url))
            messages.append(Message.user(parts))
        else:
            messages.append(Message(role=Role(item["role"]), content=item["content"]))
    return messages


class TestOpenAIResponsesModel(ModelConformance):
    provider: ClassVar[str] = "openai"
    keeps_tool_errors: ClassVar[bool] = False
    turns_key: ClassVar[str] = "input"

    def make_model(self, base_url: str) -> Model:
        return OpenAIResponsesModel("gpt-test", api_key="sk-test", base_url=base_url + "/v1")

    def encode_response(self, response: ChatResponse) -> Any:
        return _response_object(response, _output(response), "completed")

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        events: list[dict[str, Any]] = []
        created = _response_object(response, [], "in_progress")
        events.append({"type": "response.created", "response": created})
        events.append({"type": "response.in_progress", "response": created})
        index = 0
        for reasoning in response.message.reasoning:
            item = _reasoning_item(reasoning)
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "summary": [], "encrypted_content": None},
                }
            )
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
            index += 1
        if response.text or not response.message.tool_calls:
            events += _text_events(response.text, index)
            index += 1
        for number, call in enumerate(response.message.tool_calls):
            events += _call_events(call, index, number)
            index += 1
        if finished:
            done = _response_object(response, _output(response), "completed")
            kind = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
            events.append({"type": kind, "response": done})
        return [
            SSE(event=e["type"], data={**e, "sequence_number": n}) for n, e in enumerate(events)
        ]

    def encode_error(self, status: int, message: str) -> Any:
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }

    def decode_request(self, body: Any) -> ChatRequest:
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            choice = choice["name"]
        fmt = (body.get("text") or {}).get("format")
        return ChatRequest(
            messages=tuple(decode_input(body["input"])),
            tools=tuple(
                ToolSpec(
                    name=t["name"],
                    description=t.get("description", ""),
                    parameters=t["parameters"],
                )
                for t in body.get("tools") or []
            ),
            temperature=body.get("temperature"),
            max_tokens=body.get("max_output_tokens"),
            tool_choice=choice,
            response_format=ResponseFormat(
                name=fmt["name"], schema=fmt["schema"], strict=fmt["strict"]
            )
            if fmt
            else None,
        )

    # ------------------------------------------------------------ the exact wire shapes
    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        request = ChatRequest(
            messages=(
                Message.system("Be terse."),
                Message.user([TextPart(text="What is this?"), ImagePart(data=b"\x89P")]),
                Message.assistant("", [ToolCall(id="call_1", name="f", arguments={"a": 1})]),
                Message.tool("call_1", "boom", is_error=True),
            ),
            tools=(ToolSpec(name="f", description="F.", parameters={"type": "object"}),),
            tool_choice="f",
            max_tokens=99,
            response_format=ResponseFormat(name="answer", schema={"type": "object"}),
        )
        await model.generate(request)
        sent = wire_server.last
        assert sent.path == "/v1/responses"
        assert sent.headers["authorization"] == "Bearer sk-test"
        body = sent.body
        assert (body["model"], body["stream"], body["store"]) == ("gpt-test", False, False)
        assert "include" not in body  # not a reasoning model
        assert body["input"] == [
            {"role": "system", "content": "Be terse."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,iVA=",
                        "detail": "auto",
                    },
                ],
            },
            {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"a":1}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "boom"},
        ]
        assert body["tools"] == [
            {
                "type": "function",
                "name": "f",
                "description": "F.",
                "parameters": {"type": "object"},
                "strict": False,
            }
        ]
        assert body["tool_choice"] == {"type": "function", "name": "f"}
        assert body["max_output_tokens"] == 99
        assert body["text"] == {
            "format": {
                "type": "json_schema",
                "name": "answer",
                "schema": {"type": "object"},
                "strict": True,
            }
        }

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_reasoning_items_and_their_tokens(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Reasoning comes back with its encrypted content and summary; tokens are counted."""
        reasoning = Reasoning(
            provider="openai-responses",
            text="Think about Paris.",
            data={
                "id": "rs_1",
                "type": "reasoning",
                "encrypted_content": _SECRET,
                "summary": [{"type": "summary_text", "text": "Think about Paris."}],
            },
        )
        usage = Usage(
            input_tokens=900, output_tokens=300, cached_tokens=512, reasoning_tokens=256, requests=1
        )
        call = ToolCall(id="call_w", name="get_weather", arguments={"city": "Paris"})
        scripted = self._response(
            ChatResponse(
                message=Message.assistant("", [call], reasoning=[reasoning]),
                stop_reason=StopReason.TOOL_USE,
                usage=usage,
            )
        )
        response = await self._ask(model, wire_server, scripted, stream=stream)
        assert response.message.reasoning == (reasoning,)
        assert response.message.tool_calls == (call,)
        assert response.usage == usage
        assert response.stop_reason is StopReason.TOOL_USE

    async def test_reasoning_goes_back_before_its_calls(self, wire_server: WireServer) -> None:
        """An agent's next call sends the reasoning item back, encrypted content and all."""
        wire_server.reset()
        model = OpenAIResponsesModel("o4-mini", api_key="k", base_url=wire_server.url + "/v1")

        @tool
        def add(a: int, b: int) -> int:
            """Add two numbers."""
            return a + b

        reasoning = Reasoning(
            provider="openai-responses",
            data={"id": "rs_9", "type": "reasoning", "encrypted_content": _SECRET, "summary": []},
        )
        call = ToolCall(id="call_add", name="add", arguments={"a": 2, "b": 3})
        first = ChatResponse(
            message=Message.assistant("", [call], reasoning=[reasoning]),
            stop_reason=StopReason.TOOL_USE,
            model="o4-mini",
        )
        for stream in (False, True):
            if stream:
                wire_server.reply_sse(self.encode_stream(first))
                wire_server.reply_sse(self.encode_stream(ChatResponse.reply("5", model="o4-mini")))
            else:
                wire_server.reply_json(self.encode_response(first))
                wire_server.reply_json(self.encode_response(ChatResponse.reply("5")))
            agent = Agent(model, tools=[add])
            if stream:
                events = [e async for e in agent.prompt_stream("2+3?")]
                assert not any(isinstance(e, ReasoningEvent) for e in events)  # model-level only
            else:
                assert (await agent.prompt("2+3?")).text == "5"
            sent = wire_server.requests[-2:]
            assert sent[0].body["include"] == ["reasoning.encrypted_content"]
            assert sent[1].body["input"][1:] == [
                {"id": "rs_9", "type": "reasoning", "encrypted_content": _SECRET, "summary": []},
                {
                    "type": "function_call",
                    "call_id": "call_add",
                    "name": "add",
                    "arguments": '{"a":2,"b":3}',
                },
                {"type": "function_call_output", "call_id": "call_add", "output": "5"},
            ]
        await model.aclose()

    async def test_reasoning_of_another_provider_stays_home(
        self, model: Model, wire_server: WireServer
    ) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        other = Reasoning(provider="anthropic", text="hm", data={"signature": "x"})
        history = (Message.user("a"), Message.assistant("b", reasoning=[other]), Message.user("c"))
        await model.generate(ChatRequest(messages=history))
        assert wire_server.last.body["input"][1] == {"role": "assistant", "content": "b"}

    async def test_documented_stream_transcript(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A stream as OpenAI documents it: reasoning, two parallel calls, usage."""
        raw = (FIXTURES / "openai_responses_stream_parallel_tools.sse").read_text()
        events = []
        for block in raw.strip().split("\n\n"):
            head, _, data = block.partition("\n")
            events.append(SSE(event=head.removeprefix("event: "), data=data.removeprefix("data: ")))
        wire_server.reply_sse(events)
        out = [e async for e in model.generate_stream(ChatRequest(messages=(Message.user("x"),)))]
        accumulator = StreamAccumulator()
        for event in out:
            accumulator.add(event)
        response = accumulator.response()
        assert [(c.id, c.name, c.arguments) for c in response.message.tool_calls] == [
            ("call_paris", "get_weather", {"location": "Paris, France"}),
            ("call_bogota", "get_weather", {"location": "Bogotá, Colombia"}),
        ]
        deltas = [e for e in out if isinstance(e, ToolCallDelta)]
        assert [d.index for d in deltas] == [0, 0, 1, 1]
        assert response.message.reasoning[0].data["encrypted_content"] == "gAAAAB-fixture"
        assert response.usage == Usage(
            input_tokens=291, output_tokens=187, cached_tokens=128, reasoning_tokens=128, requests=1
        )
        assert response.model == "o4-mini-2025-04-16"
        assert response.stop_reason is StopReason.TOOL_USE

    @pytest.mark.parametrize(
        ("event", "retryable"),
        [
            (
                {
                    "type": "error",
                    "code": "server_error",
                    "message": "the provider says no",
                    "param": None,
                },
                True,
            ),
            (
                {
                    "type": "response.failed",
                    "response": {
                        "status": "failed",
                        "error": {"code": "invalid_prompt", "message": "the provider says no"},
                    },
                },
                False,
            ),
        ],
        ids=["error", "response.failed"],
    )
    async def test_failures_inside_a_stream(
        self, model: Model, wire_server: WireServer, event: dict[str, Any], retryable: bool
    ) -> None:
        start = self.encode_stream(self._text(), finished=False)[:3]
        wire_server.reply_sse([*start, SSE(event=event["type"], data=event)])
        with pytest.raises(ModelError, match="the provider says no") as caught:
            [e async for e in model.generate_stream(ChatRequest(messages=(Message.user("x"),)))]
        assert not isinstance(caught.value, StreamClosedError)
        assert caught.value.retryable is retryable

    async def test_a_failed_response_raises(self, model: Model, wire_server: WireServer) -> None:
        body = self.encode_response(self._text())
        body.update(status="failed", error={"code": "server_error", "message": "overheated"})
        wire_server.reply_json(body)
        with pytest.raises(ModelError, match="overheated") as caught:
            await model.generate(ChatRequest(messages=(Message.user("x"),)))
        assert caught.value.retryable

    async def test_structured_output_with_an_agent(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """An agent's output type goes out as a JSON-schema text format."""
        from pydantic import BaseModel

        class City(BaseModel):
            name: str

        wire_server.reply_json(self.encode_response(self._text('{"name": "Oslo"}')))
        answer = await Agent(model, output_type=City).prompt("A city?")
        assert answer.output == City(name="Oslo")
        fmt = wire_server.last.body["text"]["format"]
        assert fmt["type"] == "json_schema"
        assert fmt["schema"]["properties"]["name"]["type"] == "string"

    async def test_cached_tokens_cost_the_cached_rate(
        self, model: Model, wire_server: WireServer
    ) -> None:
        usage = Usage(
            input_tokens=1_000_000,
            output_tokens=1_000_000,
            cached_tokens=500_000,
            reasoning_tokens=400_000,
            requests=1,
        )
        wire_server.reply_json(
            self.encode_response(self._response(ChatResponse.reply("ok", usage=usage)))
        )
        prices = PriceTable(
            {self.served_model: ModelPrice(input=2.0, output=8.0, cached_input=0.5)}, as_of="t"
        )
        answer = await Agent(model, cost_model=prices).prompt("x")
        # 0.5M uncached at $2, 0.5M cached at $0.50, 1M output (reasoning included) at $8
        assert answer.cost == pytest.approx(1.0 + 0.25 + 8.0)
        assert answer.usage.reasoning_tokens == 400_000

    # ------------------------------------------------------------ media and caching
    async def test_media_parts_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        """PDFs as input_file (bytes or URL), text files as input_text."""
        wire_server.reply_json(self.encode_response(self._text()))
        parts = [
            TextPart(text="Read."),
            DocumentPart(data=b"%PDF-1.7", name="report.pdf"),
            DocumentPart(url="https://example.com/paper.pdf"),
            DocumentPart.from_text("hello"),
        ]
        await model.generate(ChatRequest(messages=(Message.user(parts),)))
        content = wire_server.last.body["input"][0]["content"]
        assert content[1] == {
            "type": "input_file",
            "filename": "report.pdf",
            "file_data": "data:application/pdf;base64,JVBERi0xLjc=",
        }
        assert content[2] == {"type": "input_file", "file_url": "https://example.com/paper.pdf"}
        assert content[3] == {"type": "input_text", "text": "hello"}

    async def test_audio_refused_before_sending(
        self, model: Model, wire_server: WireServer
    ) -> None:
        request = ChatRequest(messages=(Message.user([AudioPart(data=b"RIFF")]),))
        with pytest.raises(
            UnsupportedContentError, match=rf"^{self.provider} cannot take this audio"
        ):
            await model.generate(request)
        assert wire_server.requests == []

    async def test_tool_output_carries_media(self, model: Model, wire_server: WireServer) -> None:
        """A function_call_output holds text, images and files; audio is a stand-in."""
        wire_server.reply_json(self.encode_response(self._text()))
        call = ToolCall(id="c1", name="snap", arguments={})
        result = Message.tool(
            "c1",
            [
                TextPart(text="here"),
                ImagePart(data=b"\x89PNG"),
                DocumentPart(data=b"%PDF", name="a.pdf"),
                AudioPart(data=b"RIFF"),
            ],
        )
        await model.generate(
            ChatRequest(messages=(Message.user("x"), Message.assistant("", [call]), result))
        )
        output = wire_server.last.body["input"][-1]["output"]
        assert output[0] == {"type": "input_text", "text": "here"}
        assert output[1] == {
            "type": "input_image",
            "image_url": "data:image/png;base64,iVBORw==",
            "detail": "auto",
        }
        assert output[2]["type"] == "input_file"
        assert output[3]["type"] == "input_text"
        assert "audio recording" in output[3]["text"]

    async def test_prompt_cache_key(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        model.prompt_cache_key = "tenant-42"  # type: ignore[attr-defined]
        await model.generate(ChatRequest(messages=(Message.user("x"),)))
        assert wire_server.last.body["prompt_cache_key"] == "tenant-42"

    async def test_recorded_cached_usage_and_cost(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A documented Responses usage block, priced at gpt-5-mini's cached-input rate."""
        wire_server.reply_json(json.loads((DATA / "openai_response_cached.json").read_text()))
        response = await model.generate(ChatRequest(messages=(Message.user("x"),)))
        assert response.usage == Usage(
            input_tokens=4096,
            output_tokens=512,
            cached_tokens=3840,
            reasoning_tokens=448,
            requests=1,
        )
        cost = CostTracker(builtin_prices()).record(response.model, response.usage)
        # gpt-5-mini: $0.25 input, $0.025 cached input, $2.00 output per million tokens.
        assert cost == pytest.approx((256 * 0.25 + 3840 * 0.025 + 512 * 2.00) / 1e6)

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_recorded_cache_writes_and_cost(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """OpenAI's documented cache write (GPT-5.6): read from the usage details and priced."""
        body = json.loads((DATA / "openai_response_cache_write.json").read_text())
        request = ChatRequest(messages=(Message.user("x"),))
        if stream:
            wire_server.reply_sse(_as_stream(body))
            accumulator = StreamAccumulator()
            async for event in model.generate_stream(request):
                accumulator.add(event)
            response = accumulator.response()
        else:
            wire_server.reply_json(body)
            response = await model.generate(request)
        assert response.usage == Usage(
            input_tokens=2600,
            output_tokens=512,
            cached_tokens=2000,
            cache_write_tokens=400,
            reasoning_tokens=448,
            requests=1,
        )
        cost = CostTracker(builtin_prices()).record(response.model, response.usage)
        # gpt-5.6-terra: $2.50 input, $0.25 cached, $3.125 cache write, $15 output per million.
        assert cost == pytest.approx((200 * 2.50 + 2000 * 0.25 + 400 * 3.125 + 512 * 15.00) / 1e6)

    async def test_tool_without_description_leaves_it_out(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A tool without a docstring has no ``description`` on the wire, rather than ``""``."""
        wire_server.reply_json(self.encode_response(self._text()))
        schema = {"type": "object", "properties": {}}
        tools = (
            ToolSpec(name="ping", description="", parameters=schema),
            ToolSpec(name="pong", description="Answer a ping.", parameters=schema),
        )
        await model.generate(ChatRequest(messages=(Message.user("x"),), tools=tools))
        assert wire_server.last.body["tools"] == [
            {"type": "function", "name": "ping", "parameters": schema, "strict": False},
            {
                "type": "function",
                "name": "pong",
                "description": "Answer a ping.",
                "parameters": schema,
                "strict": False,
            },
        ]

    async def test_text_streams_as_text_deltas(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_sse(self.encode_stream(self._text("abcdef")))
        out = [e async for e in model.generate_stream(ChatRequest(messages=(Message.user("x"),)))]
        assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "abcdef"


def _as_stream(response: dict[str, Any]) -> list[SSE]:
    """A completed ``response`` object as the stream that says the same (one text item)."""
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    (message,) = response["output"]
    events = [
        {"type": "response.created", "response": start},
        *_text_events(message["content"][0]["text"], 0),
        {"type": "response.completed", "response": response},
    ]
    return [SSE(event=e["type"], data={**e, "sequence_number": n}) for n, e in enumerate(events)]


def _text_events(text: str, index: int) -> list[dict[str, Any]]:
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    where = {"item_id": "msg_1", "output_index": index, "content_index": 0}
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": _message_item("", "in_progress"),
        },
        {"type": "response.content_part.added", **where, "part": part},
    ]
    events += [
        {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
        for piece in iter_chunks(text, 3)
    ]
    events += [
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": index, "item": _message_item(text)},
    ]
    return events


def _call_events(call: ToolCall, index: int, number: int) -> list[dict[str, Any]]:
    item_id = f"fc_{number}"
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**_call_item(call, number, ""), "status": "in_progress"},
        },
    ]
    events += [
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": index,
            "delta": piece,
        }
        for piece in iter_chunks(call.arguments_json, 2)
    ]
    events += [
        {
            "type": "response.function_call_arguments.done",
            "item_id": item_id,
            "output_index": index,
            "arguments": call.arguments_json,
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": _call_item(call, number),
        },
    ]
    return events


class TestAzureOpenAIResponsesModel(TestOpenAIResponsesModel):
    provider: ClassVar[str] = "azure"

    def make_model(self, base_url: str) -> Model:
        return AzureOpenAIResponsesModel(
            "my-deployment", endpoint=base_url, api_key="az-key", api_version="2025-03-01-preview"
        )

    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(ChatRequest(messages=(Message.user("x"),)))
        sent = wire_server.last
        assert sent.path == "/openai/responses"
        assert sent.query["api-version"] == "2025-03-01-preview"
        assert sent.headers["api-key"] == "az-key"
        assert sent.body["model"] == "my-deployment"


# ---------------------------------------------------------------- configuration
def test_model_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.openai.azure.com")
    monkeypatch.setenv("OPENAI_API_VERSION", "2025-03-01-preview")
    model = infer_model("openai-responses:gpt-5-mini", api_key="k")
    assert isinstance(model, OpenAIResponsesModel)
    assert model.model_name == "gpt-5-mini"
    azure = infer_model("azure-responses:dep", api_key="k")
    assert isinstance(azure, AzureOpenAIResponsesModel)
    with pytest.raises(BuilderError, match="bad settings"):
        infer_model("openai-responses:gpt-5", max_tokens_param="max_tokens")


def test_config_errors_are_builder_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "OPENAI_API_VERSION",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BuilderError, match="OPENAI_API_KEY"):
        OpenAIResponsesModel("gpt-5")
    with pytest.raises(BuilderError, match="model name"):
        OpenAIResponsesModel("", api_key="k")
    with pytest.raises(BuilderError, match="AzureOpenAIResponsesModel needs an endpoint"):
        AzureOpenAIResponsesModel("dep", api_key="k", api_version="v")
    with pytest.raises(BuilderError, match="OPENAI_API_VERSION"):
        AzureOpenAIResponsesModel("dep", endpoint="https://x", api_key="k")
