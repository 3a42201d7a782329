"""Ollama over real HTTP: the ``ollama`` package against a local ``/api/chat`` NDJSON server."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from daimon import (
    BuilderError,
    ChatRequest,
    ChatResponse,
    Message,
    MissingDependencyError,
    ModelError,
    ResponseFormat,
    StopReason,
    ToolSpec,
)
from daimon.core.errors import UnsupportedContentError
from daimon.core.events import Done, ToolCallDelta, ToolCallEnd, ToolCallStart
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.protocols import EmbeddingModel, Model
from daimon.kit.streaming import StreamAccumulator
from daimon.models import infer_model
from daimon.models.ollama import OllamaEmbeddingModel, OllamaModel
from daimon.testing.models import SSE, ModelConformance, WireServer, iter_chunks, sample_request

FIXTURES = Path(__file__).parent / "fixtures"
_PROMPT = ChatRequest(messages=(Message.user("Hi"),))
_FORMAT_NAME = "response"
"""Ollama takes a schema only: decoded formats get this name."""
_DONE = {StopReason.END_TURN: "stop", StopReason.TOOL_USE: "stop", StopReason.MAX_TOKENS: "length"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Line(SSE):
    """One NDJSON line, streamed by the WireServer instead of an SSE event."""

    def encode(self) -> bytes:
        return (json.dumps(self.data) + "\n").encode()


def decode_chat_request(body: dict[str, Any]) -> ChatRequest:
    """An ``/api/chat`` body back into a ChatRequest; calls get ids ``call_0``, ``call_1``, ...

    Ollama's wire carries no call ids: a result belongs to the next unanswered call of its name.
    """
    messages: list[Message] = []
    count = 0
    unanswered: list[ToolCall] = []
    for wire in body["messages"]:
        role = wire["role"]
        if role == "assistant":
            calls = []
            for c in wire.get("tool_calls") or []:
                calls.append(
                    ToolCall(
                        id=f"call_{count}",
                        name=c["function"]["name"],
                        arguments=c["function"]["arguments"],
                    )
                )
                count += 1
            unanswered = list(calls)
            messages.append(Message.assistant(wire.get("content", ""), calls))  # may be absent
        elif role == "tool":
            call = next(c for c in unanswered if c.name == wire["tool_name"])
            unanswered.remove(call)
            messages.append(Message.tool(call.id, wire["content"]))
        elif role == "user" and wire.get("images"):
            images = [ImagePart(data=base64.b64decode(i)) for i in wire["images"]]
            messages.append(Message.user([TextPart(text=wire["content"]), *images]))
        else:
            messages.append(Message(role=Role(role), content=wire["content"]))
    options = body.get("options") or {}
    schema = body.get("format")
    return ChatRequest(
        messages=tuple(messages),
        tools=tuple(
            ToolSpec(
                name=t["function"]["name"],
                description=t["function"].get("description", ""),
                parameters=t["function"]["parameters"],
            )
            for t in body.get("tools") or []
        ),
        temperature=options.get("temperature"),
        max_tokens=options.get("num_predict"),
        response_format=ResponseFormat(name=_FORMAT_NAME, schema=schema) if schema else None,
    )


def _positional_ids(request: ChatRequest) -> ChatRequest:
    """``request`` with call ids renamed as :func:`decode_chat_request` names them."""
    renamed: dict[str, str] = {}
    messages = []
    for message in request.messages:
        if message.tool_calls:
            calls = []
            for call in message.tool_calls:
                renamed[call.id] = f"call_{len(renamed)}"
                calls.append(dataclasses.replace(call, id=renamed[call.id]))
            message = dataclasses.replace(message, tool_calls=tuple(calls))
        elif message.role is Role.TOOL:
            key = message.tool_call_id or ""
            message = dataclasses.replace(message, tool_call_id=renamed.get(key, key))
        messages.append(message)
    return dataclasses.replace(request, messages=tuple(messages))


def _bytes_sample() -> ChatRequest:
    """The sample request without its web image: Ollama takes images as bytes only."""
    request = sample_request()
    messages = list(request.messages)
    user = messages[1]
    assert not isinstance(user.content, str)
    parts = [p for p in user.content if not (isinstance(p, ImagePart) and p.url)]
    messages[1] = Message.user(parts)
    return dataclasses.replace(request, messages=tuple(messages))


class TestOllamaModel(ModelConformance):
    provider: ClassVar[str] = "ollama"
    served_model: ClassVar[str] = "llama3.2:3b"
    keeps_tool_errors: ClassVar[bool] = False
    keeps_call_ids: ClassVar[bool] = False

    def make_model(self, base_url: str) -> Model:
        return OllamaModel("llama3.2", base_url=base_url)

    def _chunk(self, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "model": self.served_model,
            "created_at": "2026-11-30T08:00:00.000000Z",
            "message": {"role": "assistant", **message},
            "done": False,
            **extra,
        }

    def _done(self, response: ChatResponse, message: dict[str, Any]) -> dict[str, Any]:
        return self._chunk(
            message,
            done=True,
            done_reason=_DONE[response.stop_reason],
            total_duration=512_000_000,
            load_duration=12_000_000,
            prompt_eval_count=response.usage.input_tokens,
            prompt_eval_duration=50_000_000,
            eval_count=response.usage.output_tokens,
            eval_duration=400_000_000,
        )

    def _tool_calls(self, response: ChatResponse) -> list[dict[str, Any]]:
        return [
            {"function": {"name": c.name, "arguments": c.arguments}}
            for c in response.message.tool_calls
        ]

    def encode_response(self, response: ChatResponse) -> Any:
        message: dict[str, Any] = {"content": response.text}
        if response.message.tool_calls:
            message["tool_calls"] = self._tool_calls(response)
        return self._done(response, message)

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        events: list[SSE] = [
            Line(data=self._chunk({"content": piece})) for piece in iter_chunks(response.text, 3)
        ]
        if response.message.tool_calls:
            message = {"content": "", "tool_calls": self._tool_calls(response)}
            events.append(Line(data=self._chunk(message)))
        if finished:
            events.append(Line(data=self._done(response, {"content": ""})))
        return events

    def encode_error(self, status: int, message: str) -> Any:
        return {"error": message}

    def decode_request(self, body: Any) -> ChatRequest:
        return decode_chat_request(body)

    def round_trip_request(self) -> ChatRequest:
        return _bytes_sample()  # images as bytes: Ollama cannot fetch URLs

    def expected_request(self, request: ChatRequest) -> ChatRequest:
        expected = _positional_ids(super().expected_request(request))
        fmt = expected.response_format
        return dataclasses.replace(
            expected,
            tool_choice=None,  # Ollama has no tool choice on the wire
            response_format=ResponseFormat(name=_FORMAT_NAME, schema=fmt.schema) if fmt else None,
        )

    # ------------------------------------------------------------ where Ollama differs
    async def test_tool_calls_stream_as_start_delta_end(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Ollama sends each call whole: a start, one delta with every argument, an end."""
        calls = (
            ToolCall(id="a", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="b", name="get_weather", arguments={"city": "Oslo"}),
        )
        wire_server.reply_sse(self.encode_stream(self._calls(*calls)))
        events = [e async for e in model.generate_stream(_PROMPT)]
        tool_events = [
            e for e in events if isinstance(e, ToolCallStart | ToolCallDelta | ToolCallEnd)
        ]
        starts = [e for e in tool_events if isinstance(e, ToolCallStart)]
        expected: list[object] = []
        for index, (call, start) in enumerate(zip(calls, starts, strict=True)):
            made = dataclasses.replace(call, id=start.call_id)
            expected += [
                ToolCallStart(call_id=made.id, name=call.name, index=index),
                ToolCallDelta(call_id=made.id, arguments_delta=call.arguments_json, index=index),
                ToolCallEnd(call=made, index=index),
            ]
        assert tool_events == expected
        assert events[-1] == Done(stop_reason=StopReason.TOOL_USE, model=self.served_model)

    async def test_invalid_arguments_stay_raw(self, model: Model, wire_server: WireServer) -> None:
        """Ollama sends ``arguments`` as a JSON object: they cannot be invalid, only empty."""
        call = {"function": {"name": "get_weather", "arguments": {}}}
        response = ChatResponse.reply("")
        wire_server.reply_json(self._done(response, {"content": "", "tool_calls": [call]}))
        got = await model.generate(_PROMPT)
        assert [c.arguments for c in got.message.tool_calls] == [{}]

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_usage_with_cached_tokens(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Ollama reports no cache hits: cached tokens stay 0."""
        scripted = self._text()
        response = await self._ask(model, wire_server, scripted, stream=stream)
        assert response.usage == dataclasses.replace(scripted.usage, cached_tokens=0)

    @pytest.mark.parametrize("stop", [StopReason.MAX_TOKENS])
    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_stop_reasons(
        self, model: Model, wire_server: WireServer, stream: bool, stop: StopReason
    ) -> None:
        """``done_reason: "length"``; Ollama has no content filter to report."""
        await super().test_stop_reasons(model, wire_server, stream, stop)

    @pytest.mark.parametrize("choice", ["auto", "none", "required", "get_time"])
    async def test_tool_choice_modes(
        self, model: Model, wire_server: WireServer, choice: str
    ) -> None:
        """No tool choice in Ollama: ``none`` sends no tools, a name sends that tool alone."""
        weather = sample_request().tools[0]
        clock = ToolSpec(name="get_time", description="The time.", parameters={"type": "object"})
        wire_server.reply_json(self.encode_response(self._text()))
        request = ChatRequest(messages=_PROMPT.messages, tools=(weather, clock), tool_choice=choice)
        await model.generate(request)
        sent = [t["function"]["name"] for t in wire_server.last.body.get("tools") or []]
        expected = {"none": [], "get_time": ["get_time"]}.get(choice, ["get_weather", "get_time"])
        assert sent == expected

    async def test_settings_are_sent_as_extra_fields(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Settings that are not chat arguments are model ``options``."""
        wire_server.reply_json(self.encode_response(self._text()))
        settings = {"x_daimon_probe": {"deep": [1, 2]}}
        await model.generate(ChatRequest(messages=_PROMPT.messages, settings=settings))
        assert wire_server.last.body["options"]["x_daimon_probe"] == {"deep": [1, 2]}

    @pytest.mark.parametrize("stream", [False, True], ids=["prompt", "prompt_stream"])
    async def test_agent_tool_loop(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """The agent's tool result goes back by tool name, after the call it answers."""
        await super().test_agent_tool_loop(model, wire_server, stream)
        sent = wire_server.requests[1].body["messages"]
        assert sent[-2]["tool_calls"] == [
            {"function": {"name": "add_numbers", "arguments": {"a": 2, "b": 3}}}
        ]
        assert sent[-1] == {"role": "tool", "content": "5", "tool_name": "add_numbers"}

    # ------------------------------------------------------------ the exact wire shapes
    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(_bytes_sample())
        sent = wire_server.last
        assert sent.path == "/api/chat"
        body = sent.body
        assert (body["model"], body["stream"]) == ("llama3.2", False)
        assert body["messages"][0] == {"role": "system", "content": "You are terse."}
        assert body["messages"][1]["images"] == ["iVBORw0KGgoA/w=="]
        assert body["messages"][3:5] == [
            {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
            {"role": "tool", "content": "no such city", "tool_name": "get_weather"},
        ]
        assert body["options"] == {"temperature": 0.25, "num_predict": 321}
        assert body["format"] == {"type": "object", "properties": {"text": {"type": "string"}}}
        assert body["tools"][0]["function"]["parameters"]["required"] == ["city"]

    async def test_stream_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_sse(
            self.encode_stream(self._text()), headers={"content-type": "application/x-ndjson"}
        )
        [e async for e in model.generate_stream(_PROMPT)]
        assert (wire_server.last.path, wire_server.last.body["stream"]) == ("/api/chat", True)

    async def test_results_follow_the_order_of_their_calls(
        self, model: Model, wire_server: WireServer
    ) -> None:
        calls = (
            ToolCall(id="a", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="b", name="get_time", arguments={}),
        )
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(
            ChatRequest(
                messages=(
                    Message.user("Hi"),
                    Message.assistant("", calls),
                    Message.tool("b", "noon"),
                    Message.tool("a", "sunny"),
                    Message.assistant("", [ToolCall(id="c", name="f", arguments="{oops")]),
                )
            )
        )
        sent = wire_server.last.body["messages"]
        assert [(m["tool_name"], m["content"]) for m in sent[2:4]] == [
            ("get_weather", "sunny"),
            ("get_time", "noon"),
        ]
        assert sent[4]["tool_calls"][0]["function"]["arguments"] == {"raw_arguments": "{oops"}

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
        functions = [t["function"] for t in wire_server.last.body["tools"]]
        assert [(f["name"], f.get("description")) for f in functions] == [
            ("ping", None),
            ("pong", "Answer a ping."),
        ]

    async def test_web_images_are_refused(self, model: Model, wire_server: WireServer) -> None:
        request = ChatRequest(messages=(Message.user([ImagePart(url="https://x/cat.png")]),))
        with pytest.raises(UnsupportedContentError, match="cannot fetch image URLs") as caught:
            await model.generate(request)
        assert not caught.value.retryable
        assert wire_server.requests == []

    async def test_text_documents_and_tool_images(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A text file is read in place; a tool's image goes in the tool message's images."""
        wire_server.reply_json(self.encode_response(self._text()))
        call = ToolCall(id="c1", name="snap", arguments={})
        messages = (
            Message.user(
                [TextPart(text="See: "), CachePoint(), DocumentPart.from_text("a,b", name="d.csv")]
            ),
            Message.assistant("", [call]),
            Message.tool(
                "c1",
                [TextPart(text="shot"), ImagePart(data=b"png"), DocumentPart(data=b"%PDF")],
                name="snap",
            ),
        )
        await model.generate(ChatRequest(messages=messages))
        sent = wire_server.last.body["messages"]
        assert sent[0]["content"] == "See: d.csv:\na,b"
        assert sent[2]["images"] == [base64.b64encode(b"png").decode()]
        assert sent[2]["content"].startswith("shot\n[the tool returned a document (application/pdf")

    @pytest.mark.parametrize(
        "part",
        [AudioPart(data=b"RIFF"), DocumentPart(data=b"%PDF-1.7")],
        ids=["audio", "pdf"],
    )
    async def test_unsupported_part_refused_before_sending(
        self, model: Model, wire_server: WireServer, part: Any
    ) -> None:
        request = ChatRequest(messages=(Message.user([TextPart(text="x"), part]),))
        with pytest.raises(UnsupportedContentError, match=r"^ollama cannot take this"):
            await model.generate(request)
        assert wire_server.requests == []

    async def test_data_url_images(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        url = "data:image/jpeg;base64," + base64.b64encode(b"jpeg").decode()
        await model.generate(ChatRequest(messages=(Message.user([ImagePart(url=url)]),)))
        assert wire_server.last.body["messages"][0]["images"] == [
            base64.b64encode(b"jpeg").decode()
        ]

    async def test_error_line_inside_a_stream(self, model: Model, wire_server: WireServer) -> None:
        events = self.encode_stream(self._text())[:1]
        error = Line(data={"error": "model runner has unexpectedly stopped"})
        wire_server.reply_sse([*events, error])
        with pytest.raises(ModelError, match="runner has unexpectedly stopped") as caught:
            [e async for e in model.generate_stream(_PROMPT)]
        assert caught.value.status_code is None

    async def test_settings_routing(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        settings = {
            "think": False,
            "keep_alive": "10m",
            "options": {"seed": 7},
            "num_ctx": 8192,
        }
        await model.generate(
            ChatRequest(messages=_PROMPT.messages, max_tokens=5, settings=settings)
        )
        body = wire_server.last.body
        assert (body["think"], body["keep_alive"]) == (False, "10m")
        assert body["options"] == {"seed": 7, "num_ctx": 8192, "num_predict": 5}

    async def test_thinking_is_not_the_answer(self, model: Model, wire_server: WireServer) -> None:
        body = self.encode_response(self._text("42"))
        body["message"]["thinking"] = "Let me count."
        wire_server.reply_json(body)
        assert (await model.generate(_PROMPT)).text == "42"

    async def test_documented_stream_transcript(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A stream as Ollama's API docs show it: text pieces, a tool call, the final counts."""
        lines = (FIXTURES / "ollama_chat_stream_tool_call.ndjson").read_text().splitlines()
        wire_server.reply_sse([Line(data=json.loads(line)) for line in lines])
        accumulator = StreamAccumulator()
        async for event in model.generate_stream(_PROMPT):
            accumulator.add(event)
        response = accumulator.response()
        assert response.text == "Let me check the weather."
        ((name, arguments),) = [(c.name, c.arguments) for c in response.message.tool_calls]
        assert (name, arguments) == ("get_current_weather", {"city": "Toronto"})
        assert response.stop_reason is StopReason.TOOL_USE
        assert (response.usage.input_tokens, response.usage.output_tokens) == (180, 25)
        assert response.model == "qwen3:8b"


# ---------------------------------------------------------------- embeddings
@pytest.fixture(scope="module")
def embed_server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


async def test_embeddings(embed_server: WireServer) -> None:
    embed_server.reset()
    model = OllamaEmbeddingModel(
        "nomic-embed-text", 2, batch_size=2, send_dimensions=True, base_url=embed_server.url
    )
    assert isinstance(model, EmbeddingModel)
    embed_server.reply_json({"model": "nomic-embed-text", "embeddings": [[1, 2], [3, 4]]})
    embed_server.reply_json({"model": "nomic-embed-text", "embeddings": [[5, 6]]})
    async with model:
        assert await model.embed(["a", "b", "c"]) == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    first = embed_server.requests[0]
    assert first.path == "/api/embed"
    assert first.body == {
        "model": "nomic-embed-text",
        "input": ["a", "b"],
        "truncate": True,
        "dimensions": 2,
    }


async def test_embedding_errors(embed_server: WireServer) -> None:
    embed_server.reset()
    async with OllamaEmbeddingModel("e", 3, base_url=embed_server.url) as model:
        embed_server.reply_json({"model": "e", "embeddings": [[1, 2]]})
        with pytest.raises(ModelError, match="returned 2 dimensions, expected 3"):
            await model.embed(["a"])
        assert "dimensions" not in embed_server.last.body
        embed_server.reply_json({"error": 'model "e" not found, try pulling it first'}, status=404)
        with pytest.raises(ModelError, match="try pulling it first") as caught:
            await model.embed(["a"])
        assert (caught.value.status_code, caught.value.retryable) == (404, False)


# ---------------------------------------------------------------- configuration
def test_config() -> None:
    with pytest.raises(BuilderError, match="model name"):
        OllamaModel("")
    with pytest.raises(BuilderError, match="timeout"):
        OllamaModel("m", timeout=-1)
    with pytest.raises(BuilderError, match="dimensions"):
        OllamaEmbeddingModel("e", 0)
    model = infer_model("ollama:llama3.2:3b")
    assert isinstance(model, OllamaModel)
    assert model.model_name == "llama3.2:3b"


async def test_host_and_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with WireServer() as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        monkeypatch.setenv("OLLAMA_API_KEY", "from-env")
        server.reply_json(TestOllamaModel().encode_response(ChatResponse.reply("ok")))
        async with OllamaModel("m") as model:
            assert (await model.generate(_PROMPT)).text == "ok"
        assert server.last.headers["authorization"] == "Bearer from-env"
        server.reply_json(TestOllamaModel().encode_response(ChatResponse.reply("ok")))
        async with OllamaModel("m", api_key="given") as model:
            await model.generate(_PROMPT)
        assert server.last.headers["authorization"] == "Bearer given"


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ollama", None)
    monkeypatch.delitem(sys.modules, "daimon.models.ollama", raising=False)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[ollama\]"'):
        infer_model("ollama:llama3.2")


def test_local_models_cost_nothing() -> None:
    from daimon.cost import builtin_prices

    assert builtin_prices().price("ollama:llama3.2:3b") is None
