"""Gemini and Vertex AI over real HTTP: google-genai against a local generateContent server."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import AsyncIterator
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
from daimon.core.codec import dumps, loads
from daimon.core.events import Done, StreamEvent, ToolCallDelta, ToolCallEnd, ToolCallStart
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Reasoning,
    TextPart,
    ToolCall,
)
from daimon.core.protocols import EmbeddingModel, Model
from daimon.cost import CostTracker, builtin_prices
from daimon.kit.streaming import StreamAccumulator
from daimon.models import infer_model
from daimon.models.gemini import GeminiEmbeddingModel, GeminiModel
from daimon.testing.models import SSE, ModelConformance, WireServer, iter_chunks, sample_request
from daimon.tools import tool

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).parent.parent / "data" / "caching"
_PROMPT = ChatRequest(messages=(Message.user("Hi"),))

_FINISH = {
    StopReason.END_TURN: "STOP",
    StopReason.TOOL_USE: "STOP",  # Gemini ends a function-calling turn with STOP too
    StopReason.MAX_TOKENS: "MAX_TOKENS",
    StopReason.CONTENT_FILTER: "SAFETY",
}
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_FORMAT_NAME = "response"
"""Gemini takes a schema only: decoded formats get this name."""


def _usage(response: ChatResponse) -> dict[str, Any]:
    usage = response.usage
    wire = {
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": usage.output_tokens,
        "totalTokenCount": usage.total_tokens,
    }
    if usage.cached_tokens:
        wire["cachedContentTokenCount"] = usage.cached_tokens
    return wire


def _call_part(call: ToolCall) -> dict[str, Any]:
    return {"functionCall": {"id": call.id, "name": call.name, "args": call.arguments}}


def _mime(part: dict[str, Any]) -> str:
    return str(part.get("mimeType") or part.get("mime_type"))


def _b64(data: str) -> bytes:
    """Bytes from base64, standard or URL-safe (the SDK writes URL-safe; the API reads both)."""
    return base64.urlsafe_b64decode(data.replace("+", "-").replace("/", "_"))


def _field(wire: dict[str, Any], camel: str, snake: str) -> Any:
    """The SDK writes some nested fields in snake_case; the API reads both spellings."""
    return wire.get(camel, wire.get(snake))


def _image(part: dict[str, Any]) -> ImagePart:
    inline = part.get("inlineData")
    if inline is not None:
        return ImagePart(
            data=_b64(inline["data"]),
            media_type=_field(inline, "mimeType", "mime_type"),
        )
    file = part["fileData"]
    return ImagePart(
        url=_field(file, "fileUri", "file_uri"), media_type=_field(file, "mimeType", "mime_type")
    )


async def _accumulate(events: AsyncIterator[StreamEvent]) -> ChatResponse:
    accumulator = StreamAccumulator()
    async for event in events:
        accumulator.add(event)
    return accumulator.response()


async def _answer(
    model: Model, server: WireServer, chunk: dict[str, Any], *, stream: bool
) -> ChatResponse:
    """``chunk`` served as a whole response, or as a one-chunk stream, and read back."""
    if stream:
        server.reply_sse([SSE(data=chunk)])
        return await _accumulate(model.generate_stream(_PROMPT))
    server.reply_json(chunk)
    return await model.generate(_PROMPT)


@tool
def add_numbers(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _tool_choice(config: dict[str, Any] | None) -> str | None:
    if config is None:
        return None
    calling = config["functionCallingConfig"]
    allowed = _field(calling, "allowedFunctionNames", "allowed_function_names")
    if allowed:
        return str(allowed[0])
    return {"AUTO": "auto", "NONE": "none", "ANY": "required"}[calling["mode"]]


def decode_gemini_request(body: dict[str, Any]) -> ChatRequest:
    """A generateContent request body back into a ChatRequest."""
    messages: list[Message] = []
    system = body.get("systemInstruction")
    if system:
        messages.append(Message.system("".join(p["text"] for p in system["parts"])))
    for content in body["contents"]:
        parts = content["parts"]
        if content["role"] == "model":
            text = "".join(p.get("text", "") for p in parts)
            calls = [
                ToolCall(
                    id=p["functionCall"].get("id", ""),
                    name=p["functionCall"]["name"],
                    arguments=p["functionCall"]["args"],
                )
                for p in parts
                if "functionCall" in p
            ]
            messages.append(Message.assistant(text, calls))
            continue
        results = [p["functionResponse"] for p in parts if "functionResponse" in p]
        messages += [
            Message.tool(
                r.get("id", ""),
                r["response"].get("output", r["response"].get("error", "")),
                is_error="error" in r["response"],
            )
            for r in results
        ]
        others = [p for p in parts if "functionResponse" not in p]
        if len(others) == 1 and "text" in others[0]:
            messages.append(Message.user(others[0]["text"]))
        elif others:
            messages.append(
                Message.user(
                    [TextPart(text=p["text"]) if "text" in p else _image(p) for p in others]
                )
            )
    generation = body.get("generationConfig") or {}
    declarations = (body.get("tools") or [{}])[0].get("functionDeclarations") or []
    schema = generation.get("responseJsonSchema")
    return ChatRequest(
        messages=tuple(messages),
        tools=tuple(
            ToolSpec(
                name=d["name"],
                description=d.get("description", ""),
                parameters=_field(d, "parametersJsonSchema", "parameters_json_schema"),
            )
            for d in declarations
        ),
        temperature=generation.get("temperature"),
        max_tokens=generation.get("maxOutputTokens"),
        tool_choice=_tool_choice(body.get("toolConfig")),
        response_format=ResponseFormat(name=_FORMAT_NAME, schema=schema) if schema else None,
    )


class TestGeminiModel(ModelConformance):
    provider: ClassVar[str] = "gemini"
    turns_key: ClassVar[str] = "contents"

    def make_model(self, base_url: str) -> Model:
        return GeminiModel("gemini-test", api_key="test-key", base_url=base_url)

    def _chunk(self, parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if "finishReason" in extra:
            candidate["finishReason"] = extra.pop("finishReason")
        return {"candidates": [candidate], "modelVersion": self.served_model, **extra}

    def encode_response(self, response: ChatResponse) -> Any:
        parts: list[dict[str, Any]] = []
        if response.text:
            parts.append({"text": response.text})
        parts += [_call_part(call) for call in response.message.tool_calls]
        return self._chunk(
            parts,
            finishReason=_FINISH[response.stop_reason],
            usageMetadata=_usage(response),
            responseId="resp-1",
        )

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        events = [SSE(data=self._chunk([{"text": t}])) for t in iter_chunks(response.text, 3)]
        calls = [_call_part(call) for call in response.message.tool_calls]
        if calls:
            events.append(SSE(data=self._chunk(calls)))
        if finished:
            last = self._chunk(
                [{"text": ""}],
                finishReason=_FINISH[response.stop_reason],
                usageMetadata=_usage(response),
            )
            events.append(SSE(data=last))
        return events

    def encode_error(self, status: int, message: str) -> Any:
        return {"error": {"code": status, "message": message, "status": _STATUS[status]}}

    def decode_request(self, body: Any) -> ChatRequest:
        return decode_gemini_request(body)

    def expected_request(self, request: ChatRequest) -> ChatRequest:
        expected = super().expected_request(request)
        if expected.response_format is None:
            return expected
        return ChatRequest(
            messages=expected.messages,
            tools=expected.tools,
            temperature=expected.temperature,
            max_tokens=expected.max_tokens,
            tool_choice=expected.tool_choice,
            response_format=ResponseFormat(
                name=_FORMAT_NAME, schema=expected.response_format.schema
            ),
        )

    # ------------------------------------------------------------ where Gemini differs
    async def test_tool_calls_stream_as_start_delta_end(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Gemini sends each call whole: a start, one delta with every argument, an end."""
        calls = (
            ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="call_2", name="get_weather", arguments={"city": "Oslo"}),
        )
        wire_server.reply_sse(self.encode_stream(self._calls(*calls)))
        events = [e async for e in model.generate_stream(_PROMPT)]
        tool_events = [
            e for e in events if isinstance(e, ToolCallStart | ToolCallDelta | ToolCallEnd)
        ]
        expected: list[object] = []
        for index, call in enumerate(calls):
            expected += [
                ToolCallStart(call_id=call.id, name=call.name, index=index),
                ToolCallDelta(call_id=call.id, arguments_delta=call.arguments_json, index=index),
                ToolCallEnd(call=call, index=index),
            ]
        assert tool_events == expected
        assert events[-1] == Done(stop_reason=StopReason.TOOL_USE, model=self.served_model)

    async def test_invalid_arguments_stay_raw(self, model: Model, wire_server: WireServer) -> None:
        """Gemini sends ``args`` as a JSON object: they cannot be invalid, only empty."""
        wire_server.reply_json(
            self._chunk([{"functionCall": {"name": "get_weather"}}], finishReason="STOP")
        )
        response = await model.generate(_PROMPT)
        assert [c.arguments for c in response.message.tool_calls] == [{}]

    # ------------------------------------------------------------ the exact wire shapes
    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(sample_request())
        sent = wire_server.last
        assert sent.path.endswith("/models/gemini-test:generateContent")
        assert sent.headers["x-goog-api-key"] == "test-key"
        body = sent.body
        assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
        assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "model", "user"]
        image = body["contents"][0]["parts"][2]["inlineData"]
        assert _b64(image["data"]) == b"\x89PNG\r\n\x1a\n\x00\xff"
        assert body["contents"][2]["parts"] == [
            {
                "functionResponse": {
                    "id": "call_1",
                    "name": "get_weather",
                    "response": {"output": "sunny"},
                }
            },
            {
                "functionResponse": {
                    "id": "call_2",
                    "name": "get_weather",
                    "response": {"error": "no such city"},
                }
            },
        ]
        assert body["toolConfig"] == {
            "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}
        }
        assert body["generationConfig"]["responseMimeType"] == "application/json"
        assert body["generationConfig"]["maxOutputTokens"] == 321
        # SDK-side switches never reach the wire.
        assert "automaticFunctionCalling" not in json.dumps(body)

    # ------------------------------------------------------------ media and caching
    async def test_media_parts_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        """Audio, PDFs and text files go as inlineData or fileData; CachePoints drop."""
        wire_server.reply_json(self.encode_response(self._text()))
        parts = [
            TextPart(text="Summarise."),
            AudioPart(data=b"ID3", media_type="audio/mpeg"),
            CachePoint(),
            DocumentPart(url="gs://bucket/report.pdf"),
            DocumentPart.from_text("notes"),
        ]
        await model.generate(ChatRequest(messages=(Message.user(parts),)))
        sent = wire_server.last.body["contents"][0]["parts"]
        # The SDK writes the field inside inlineData/fileData as mime_type (proto JSON takes both).
        inline = [(_mime(p["inlineData"]), _b64(p["inlineData"]["data"])) for p in sent[1::2]]
        assert inline == [("audio/mpeg", b"ID3"), ("text/plain", b"notes")]
        file_data = sent[2]["fileData"]
        assert (_mime(file_data), file_data.get("fileUri") or file_data.get("file_uri")) == (
            "application/pdf",
            "gs://bucket/report.pdf",
        )
        assert len(sent) == 4

    async def test_tool_media_becomes_a_stand_in(
        self, model: Model, wire_server: WireServer
    ) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        call = ToolCall(id="c1", name="chart", arguments={})
        result = Message.tool("c1", [TextPart(text="done"), ImagePart(data=b"\x89PNG")])
        await model.generate(
            ChatRequest(messages=(Message.user("x"), Message.assistant("", [call]), result))
        )
        response = wire_server.last.body["contents"][2]["parts"][0]["functionResponse"]["response"]
        assert response["output"].startswith("done\n[the tool returned an image (image/png")

    # ------------------------------------------------------------ fields left out when empty
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
        await model.generate(ChatRequest(messages=_PROMPT.messages, tools=tools))
        declarations = wire_server.last.body["tools"][0]["functionDeclarations"]
        assert [(d["name"], d.get("description")) for d in declarations] == [
            ("ping", None),
            ("pong", "Answer a ping."),
        ]

    async def test_empty_text_parts_are_left_out(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Gemini refuses a part whose ``text`` is empty: such parts are not sent."""
        wire_server.reply_json(self.encode_response(self._text()))
        parts = [TextPart(text=""), TextPart(text="Hi"), CachePoint(), TextPart(text="")]
        await model.generate(ChatRequest(messages=(Message.user(parts),)))
        assert wire_server.last.body["contents"] == [{"role": "user", "parts": [{"text": "Hi"}]}]

    async def test_cached_content_replaces_system_and_tools(self, wire_server: WireServer) -> None:
        """Gemini refuses a system instruction, tools or tool config beside a cache."""
        wire_server.reset()
        model = GeminiModel(
            "gemini-test",
            api_key="k",
            base_url=wire_server.url,
            cached_content="cachedContents/abc123",
        )
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(sample_request())
        await model.aclose()
        body = wire_server.last.body
        assert body["cachedContent"] == "cachedContents/abc123"
        assert not {"systemInstruction", "tools", "toolConfig"} & set(body)

    async def test_recorded_cached_usage_and_cost(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Gemini's documented cached call: cachedContentTokenCount at the cached rate."""
        wire_server.reply_json(
            json.loads((DATA / "gemini_generate_content_cached.json").read_text())
        )
        response = await model.generate(_PROMPT)
        assert response.usage == Usage(
            input_tokens=696219, output_tokens=214, cached_tokens=696190, requests=1
        )
        cost = CostTracker(builtin_prices()).record(response.model, response.usage)
        # gemini-2.5-flash: $0.30 input, $0.03 cached input, $2.50 output per million tokens.
        assert cost == pytest.approx((29 * 0.30 + 696190 * 0.03 + 214 * 2.50) / 1e6)

    async def test_stream_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_sse(self.encode_stream(self._text()))
        [e async for e in model.generate_stream(_PROMPT)]
        assert wire_server.last.path.endswith("/models/gemini-test:streamGenerateContent")
        assert wire_server.last.query == {"alt": "sse"}

    async def test_calls_without_ids_get_stable_unique_ids(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Synthesized ids are unique, the same across events, and never sent back."""
        parts = [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"name": "get_time", "args": {"city": "Paris"}}},
        ]
        wire_server.reply_sse([SSE(data=self._chunk(parts, finishReason="STOP"))])
        accumulator = StreamAccumulator()
        starts = []
        async for event in model.generate_stream(_PROMPT):
            accumulator.add(event)
            if isinstance(event, ToolCallStart):
                starts.append(event.call_id)
        calls = accumulator.response().message.tool_calls
        assert [c.id for c in calls] == starts
        assert len(set(starts)) == 2
        assert all(s.startswith("gemini_") for s in starts)
        # The results come back in call order, matched by name and position, without ids.
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(
            ChatRequest(
                messages=(
                    Message.user("Hi"),
                    Message.assistant("", calls),
                    Message.tool(calls[1].id, "noon"),
                    Message.tool(calls[0].id, "sunny"),
                )
            )
        )
        model_turn, results = wire_server.last.body["contents"][1:]
        assert [p["functionCall"] for p in model_turn["parts"]] == [
            {"name": "get_weather", "args": {"city": "Paris"}},
            {"name": "get_time", "args": {"city": "Paris"}},
        ]
        assert [p["functionResponse"] for p in results["parts"]] == [
            {"name": "get_weather", "response": {"output": "sunny"}},
            {"name": "get_time", "response": {"output": "noon"}},
        ]

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_thought_signatures_round_trip(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Each signature goes back unchanged on its part: here the first of two parallel calls.

        Gemini signs the first call of a step only; the turn is kept as JSON (memory, checkpoints)
        between the calls, and the tool results follow.
        """
        signature = base64.b64encode(b"\x00\xffsignature-bytes\x10").decode()
        parts = [
            {"text": "Let me think.", "thought": True},
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": signature,
            },
            {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}},
        ]
        chunk = self._chunk(parts, finishReason="STOP")
        response = await _answer(model, wire_server, chunk, stream=stream)
        assert response.text == ""
        first, second = response.message.tool_calls
        # Ids stay plain ids: OpenAI refuses long ones, and a conversation may move to it.
        assert [len(c.id) for c in (first, second)] == [31, 31]
        assert response.message.reasoning == (
            Reasoning(
                provider="gemini", data={"thought_signature": signature, "call_id": first.id}
            ),
        )
        kept = loads(dumps(response.message), Message)
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(
            ChatRequest(
                messages=(
                    Message.user("Hi"),
                    kept,
                    Message.tool(first.id, "sunny", name="get_weather"),
                    Message.tool(second.id, "cold", name="get_weather"),
                )
            )
        )
        model_turn = wire_server.last.body["contents"][1]["parts"]
        assert [p["functionCall"]["args"]["city"] for p in model_turn] == ["Paris", "Oslo"]
        assert [_b64(p["thoughtSignature"]) for p in model_turn if "thoughtSignature" in p] == [
            base64.b64decode(signature)
        ]
        assert "thoughtSignature" in model_turn[0]
        assert all("id" not in p["functionCall"] for p in model_turn)

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_agent_tool_loop_sends_the_signature_back(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """An agent's second call carries the signature of the first call's function call."""
        signature = base64.b64encode(b"agent-loop-signature").decode()
        call = {"name": "add_numbers", "args": {"a": 2, "b": 3}}
        signed = self._chunk([{"functionCall": call, "thoughtSignature": signature}])
        signed["candidates"][0]["finishReason"] = "STOP"
        answer = self._text("2 + 3 = 5")
        if stream:
            wire_server.reply_sse([SSE(data=signed)])
            wire_server.reply_sse(self.encode_stream(answer))
        else:
            wire_server.reply_json(signed)
            wire_server.reply_json(self.encode_response(answer))
        agent = Agent(model, tools=[add_numbers])
        if stream:
            events = [e async for e in agent.prompt_stream("What is 2 + 3?")]
            done = events[-1]
            assert isinstance(done, Done) and done.response is not None
            text = done.response.text
        else:
            text = (await agent.prompt("What is 2 + 3?")).text
        assert text == "2 + 3 = 5"
        model_turn, results = wire_server.requests[1].body["contents"][1:]
        assert model_turn["role"] == "model"
        (part,) = model_turn["parts"]
        assert part["functionCall"]["name"] == "add_numbers"
        assert _b64(part["thoughtSignature"]) == b"agent-loop-signature"
        assert results["parts"][0]["functionResponse"]["response"] == {"output": "5"}

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_text_part_signature_round_trips(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """A turn without calls may end on an empty text part that carries the signature."""
        signature = base64.b64encode(b"text-turn-signature").decode()
        text, signed = {"text": "Paris is sunny."}, {"text": "", "thoughtSignature": signature}
        if stream:
            chunks = [self._chunk([text]), self._chunk([signed], finishReason="STOP")]
            wire_server.reply_sse([SSE(data=c) for c in chunks])
            response = await _accumulate(model.generate_stream(_PROMPT))
        else:
            wire_server.reply_json(self._chunk([text, signed], finishReason="STOP"))
            response = await model.generate(_PROMPT)
        assert response.text == "Paris is sunny."
        wire_server.reply_json(self.encode_response(self._text()))
        turns = (Message.user("Hi"), response.message, Message.user("And Oslo?"))
        await model.generate(ChatRequest(messages=turns))
        (part,) = wire_server.last.body["contents"][1]["parts"]
        assert part["text"] == "Paris is sunny."
        assert _b64(part.get("thoughtSignature", "")) == b"text-turn-signature"
        assert response.message.reasoning == (
            Reasoning(provider="gemini", data={"thought_signature": signature}),
        )

    async def test_other_providers_reasoning_is_not_sent(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Reasoning another wire format wrote stays out of a Gemini request."""
        foreign = Reasoning(provider="anthropic", text="hmm", data={"signature": "c2ln"})
        call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"})
        turn = Message.assistant("", [call], reasoning=[foreign])
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(
            ChatRequest(messages=(Message.user("Hi"), turn, Message.tool("call_1", "sunny")))
        )
        (part,) = wire_server.last.body["contents"][1]["parts"]
        assert set(part) == {"functionCall"}

    async def test_retry_info_in_the_error_body(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Gemini says how long to wait in a ``RetryInfo`` detail rather than a header."""
        body = self.encode_error(429, "Resource has been exhausted")
        body["error"]["details"] = [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
        ]
        wire_server.reply_json(body, status=429)
        with pytest.raises(ModelError, match="exhausted") as caught:
            await model.generate(_PROMPT)
        assert (caught.value.retryable, caught.value.retry_after) == (True, 37.0)

    async def test_error_chunk_inside_a_stream(self, model: Model, wire_server: WireServer) -> None:
        events = self.encode_stream(self._text())[:1]
        error = self.encode_error(503, "The model is overloaded")
        wire_server.reply_sse([*events, SSE(data=error)])
        with pytest.raises(ModelError, match="overloaded") as caught:
            [e async for e in model.generate_stream(_PROMPT)]
        assert (caught.value.status_code, caught.value.retryable) == (503, True)

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_blocked_prompt(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        blocked = {
            "promptFeedback": {"blockReason": "SAFETY"},
            "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
            "modelVersion": self.served_model,
        }
        if stream:
            wire_server.reply_sse([SSE(data=blocked)])
            accumulator = StreamAccumulator()
            async for event in model.generate_stream(_PROMPT):
                accumulator.add(event)
            response = accumulator.response()
        else:
            wire_server.reply_json(blocked)
            response = await model.generate(_PROMPT)
        assert (response.text, response.stop_reason) == ("", StopReason.CONTENT_FILTER)
        assert response.usage.input_tokens == 7

    async def test_thinking_and_tool_use_tokens(
        self, model: Model, wire_server: WireServer
    ) -> None:
        body = self.encode_response(self._text())
        body["usageMetadata"] = {
            "promptTokenCount": 100,
            "toolUsePromptTokenCount": 5,
            "candidatesTokenCount": 20,
            "thoughtsTokenCount": 30,
            "cachedContentTokenCount": 60,
            "totalTokenCount": 155,
        }
        wire_server.reply_json(body)
        usage = (await model.generate(_PROMPT)).usage
        assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (105, 50, 60)

    async def test_settings_split_between_config_http_and_body(
        self, model: Model, wire_server: WireServer
    ) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        settings = {
            "top_k": 3,
            "thinking_config": {"thinking_budget": 0},
            "extra_headers": {"x-probe": "1"},
            "extra_body": {"labels_probe": True},
        }
        await model.generate(ChatRequest(messages=_PROMPT.messages, settings=settings))
        sent = wire_server.last
        assert sent.body["generationConfig"]["topK"] == 3
        thinking = sent.body["generationConfig"]["thinkingConfig"]
        assert _field(thinking, "thinkingBudget", "thinking_budget") == 0
        assert sent.body["labels_probe"] is True
        assert sent.headers["x-probe"] == "1"

    async def test_documented_stream_transcript(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A stream shaped as Gemini documents it: text, a signed call, cumulative usage."""
        raw = (FIXTURES / "gemini_stream_function_call.sse").read_text()
        events = [SSE(data=block.removeprefix("data: ")) for block in raw.strip().split("\n\n")]
        wire_server.reply_sse(events)
        accumulator = StreamAccumulator()
        async for event in model.generate_stream(_PROMPT):
            accumulator.add(event)
        response = accumulator.response()
        assert response.text == "Let me check the weather in Boston."
        (call,) = response.message.tool_calls
        assert (call.name, call.arguments) == ("get_weather", {"location": "Boston, MA"})
        assert call.id.startswith("gemini_")
        signature = "CiQBVKhc7nGx9cxuTCYxYyRZt9o2S6d4kQ8L7sRf0JwqzpSqx8sKXwFUqFzu"  # the fixture's
        assert response.message.reasoning == (
            Reasoning(provider="gemini", data={"thought_signature": signature, "call_id": call.id}),
        )
        assert response.stop_reason is StopReason.TOOL_USE
        assert (response.usage.input_tokens, response.usage.output_tokens) == (72, 14 + 95)
        assert response.model == "gemini-2.5-flash"


class TestVertexModel(TestGeminiModel):
    """The same suite on Vertex AI: project paths, OAuth bearer tokens, ``vertex`` errors."""

    provider: ClassVar[str] = "vertex"

    def make_model(self, base_url: str) -> Model:
        from google.oauth2.credentials import Credentials

        return GeminiModel(
            "gemini-test",
            vertexai=True,
            project="proj-1",
            location="europe-west4",
            credentials=Credentials(token="ya29.test"),
            base_url=base_url,
        )

    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(sample_request())
        sent = wire_server.last
        assert sent.path.endswith(
            "/projects/proj-1/locations/europe-west4/publishers/google/models/"
            "gemini-test:generateContent"
        )
        assert sent.headers["authorization"] == "Bearer ya29.test"
        assert (
            decode_gemini_request(sent.body).messages
            == self.expected_request(sample_request()).messages
        )

    async def test_stream_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_sse(self.encode_stream(self._text()))
        [e async for e in model.generate_stream(_PROMPT)]
        assert wire_server.last.path.endswith("/gemini-test:streamGenerateContent")


# ---------------------------------------------------------------- embeddings
@pytest.fixture(scope="module")
def embed_server() -> Any:
    with WireServer() as server:
        yield server


async def test_embeddings_on_the_gemini_api(embed_server: WireServer) -> None:
    embed_server.reset()
    model = GeminiEmbeddingModel(
        "gemini-embedding-001",
        3,
        task_type="RETRIEVAL_DOCUMENT",
        batch_size=2,
        api_key="k",
        base_url=embed_server.url,
    )
    assert isinstance(model, EmbeddingModel)
    embed_server.reply_json({"embeddings": [{"values": [1, 2, 3]}, {"values": [4, 5, 6]}]})
    embed_server.reply_json({"embeddings": [{"values": [7, 8, 9]}]})
    async with model:
        vectors = await model.embed(["a", "b", "c"])
    assert vectors == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
    first = embed_server.requests[0]
    assert first.path.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert [r["content"]["parts"][0]["text"] for r in first.body["requests"]] == ["a", "b"]
    assert first.body["requests"][0]["outputDimensionality"] == 3
    assert first.body["requests"][0]["taskType"] == "RETRIEVAL_DOCUMENT"


async def test_embeddings_on_vertex(embed_server: WireServer) -> None:
    from google.oauth2.credentials import Credentials

    embed_server.reset()
    model = GeminiEmbeddingModel(
        "text-embedding-005",
        2,
        vertexai=True,
        project="p",
        location="us-central1",
        credentials=Credentials(token="t"),
        base_url=embed_server.url,
    )
    embed_server.reply_json({"predictions": [{"embeddings": {"values": [0.5, 0.25]}}]})
    async with model:
        assert await model.embed(["hello"]) == [[0.5, 0.25]]
    sent = embed_server.last
    assert sent.path.endswith("/publishers/google/models/text-embedding-005:predict")
    assert sent.body["instances"] == [{"content": "hello"}]


async def test_embedding_errors(embed_server: WireServer) -> None:
    embed_server.reset()
    model = GeminiEmbeddingModel("gemini-embedding-001", 3, api_key="k", base_url=embed_server.url)
    async with model:
        embed_server.reply_json({"embeddings": [{"values": [1, 2]}]})
        with pytest.raises(ModelError, match="returned 2 dimensions, expected 3"):
            await model.embed(["a"])
        embed_server.reply_json({"embeddings": []})
        with pytest.raises(ModelError, match="0 embeddings for 1 texts"):
            await model.embed(["a"])
        error = {"error": {"code": 400, "message": "bad input", "status": "INVALID_ARGUMENT"}}
        embed_server.reply_json(error, status=400)
        with pytest.raises(ModelError, match="bad input") as caught:
            await model.embed(["a"])
        assert (caught.value.status_code, caught.value.retryable) == (400, False)


# ---------------------------------------------------------------- configuration
def test_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BuilderError, match="GEMINI_API_KEY"):
        GeminiModel("gemini-x")
    with pytest.raises(BuilderError, match="model name"):
        GeminiModel("", api_key="k")
    with pytest.raises(BuilderError, match="timeout"):
        GeminiModel("gemini-x", api_key="k", timeout=0)
    with pytest.raises(BuilderError, match="dimensions"):
        GeminiEmbeddingModel("e", 0, api_key="k")
    monkeypatch.setenv("GEMINI_API_KEY", "from-env")
    model = infer_model("gemini:gemini-2.5-flash", timeout=5.0)
    assert isinstance(model, GeminiModel)
    assert (model.model_name, model.provider) == ("gemini-2.5-flash", "gemini")
    vertex = infer_model("vertex:gemini-2.5-pro", project="p", location="us-central1")
    assert isinstance(vertex, GeminiModel)
    assert vertex.provider == "vertex"
    assert repr(vertex) == "GeminiModel('gemini-2.5-pro', vertexai=True)"


async def test_env_key_reaches_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "from-env")
    with WireServer() as server:
        server.reply_json(TestGeminiModel().encode_response(ChatResponse.reply("ok")))
        async with GeminiModel("gemini-x", base_url=server.url) as model:
            assert (await model.generate(_PROMPT)).text == "ok"
        assert server.last.headers["x-goog-api-key"] == "from-env"


async def test_vertex_without_credentials_is_a_model_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    model = GeminiModel("gemini-x", vertexai=True)
    with pytest.raises(ModelError, match="could not set up the vertex client") as caught:
        await model.generate(_PROMPT)
    assert not caught.value.retryable


async def test_vertex_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.oauth2.credentials import Credentials

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "asia-northeast1")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with WireServer() as server:
        server.reply_json(TestGeminiModel().encode_response(ChatResponse.reply("ok")))
        model = infer_model(
            "vertex:gemini-x", credentials=Credentials(token="t"), base_url=server.url
        )
        async with model:
            await model.generate(_PROMPT)
        assert "/projects/env-project/locations/asia-northeast1/" in server.last.path


async def test_vertex_express_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"):
        monkeypatch.delenv(name, raising=False)
    with WireServer() as server:
        server.reply_json(TestGeminiModel().encode_response(ChatResponse.reply("ok")))
        async with GeminiModel(
            "gemini-x", vertexai=True, api_key="express", base_url=server.url
        ) as m:
            await m.generate(_PROMPT)
        assert server.last.path.endswith("/publishers/google/models/gemini-x:generateContent")
        assert server.last.headers["x-goog-api-key"] == "express"


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)
    monkeypatch.delitem(sys.modules, "daimon.models.gemini", raising=False)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[gemini\]"'):
        infer_model("gemini:gemini-x", api_key="k")


def test_prices() -> None:
    from daimon.cost import builtin_prices

    table = builtin_prices()
    flash, lite = table.price("gemini-2.5-flash"), table.price("gemini-2.5-flash-lite-preview")
    assert flash is not None and lite is not None and lite.input < flash.input
    assert table.price("vertex:gemini-3-flash-preview") == table.price("gemini-3-flash")
