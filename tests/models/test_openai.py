"""OpenAI and Azure OpenAI over real HTTP: the official SDK against a local wire-format server."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
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
    TextDelta,
    ToolSpec,
    Usage,
)
from daimon.core.errors import UnsupportedContentError
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
from daimon.cost import CostTracker, builtin_prices
from daimon.kit.streaming import StreamAccumulator
from daimon.models import infer_model
from daimon.models.openai import AzureOpenAIModel, OpenAIEmbeddingModel, OpenAIModel
from daimon.testing.models import SSE, ModelConformance, WireServer, iter_chunks, sample_request

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).parent.parent / "data" / "caching"

_FINISH = {
    StopReason.END_TURN: "stop",
    StopReason.TOOL_USE: "tool_calls",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTENT_FILTER: "content_filter",
}


def _usage(response: ChatResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _chunk(model: str | None, choices: list[dict[str, Any]], **extra: Any) -> SSE:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "system_fingerprint": "fp_1",
        "choices": choices,
        **extra,
    }
    return SSE(data=body)


def _delta(model: str | None, delta: dict[str, Any], finish: str | None = None) -> SSE:
    return _chunk(model, [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])


_SCHEMA = {"type": "object", "properties": {}}
_TOOLS = (
    ToolSpec(name="ping", description="", parameters=_SCHEMA),
    ToolSpec(name="pong", description="Answer a ping.", parameters=_SCHEMA),
)
"""A tool without a description (a function without a docstring) beside one with."""


def _as_stream(completion: dict[str, Any]) -> list[SSE]:
    """A ``chat.completion`` body as the stream that says the same, its usage in the last chunk."""
    model = completion["model"]
    choice = completion["choices"][0]
    return [
        _delta(model, {"role": "assistant", "content": ""}),
        _delta(model, {"content": choice["message"]["content"]}),
        _delta(model, {}, choice["finish_reason"]),
        _chunk(model, [], usage=completion["usage"]),
        SSE(data="[DONE]"),
    ]


def _image(url: str) -> ImagePart:
    if url.startswith("data:"):
        media_type, _, data = url[5:].partition(";base64,")
        return ImagePart(data=base64.b64decode(data), media_type=media_type)
    return ImagePart(url=url)


def decode_chat_request(body: dict[str, Any], *, max_tokens_field: str) -> ChatRequest:
    """A Chat Completions request body back into a ChatRequest."""
    messages: list[Message] = []
    for wire in body["messages"]:
        role = wire["role"]
        if role == "tool":
            messages.append(Message.tool(wire["tool_call_id"], wire["content"]))
        elif role == "assistant":
            calls = [
                ToolCall.from_json(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in wire.get("tool_calls") or []
            ]
            messages.append(Message.assistant(wire.get("content") or "", calls))
        elif role == "user" and isinstance(wire["content"], list):
            parts = [
                TextPart(text=p["text"]) if p["type"] == "text" else _image(p["image_url"]["url"])
                for p in wire["content"]
            ]
            messages.append(Message.user(parts))
        else:
            messages.append(Message(role=Role(role), content=wire["content"]))
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        choice = choice["function"]["name"]
    fmt = body.get("response_format")
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
        temperature=body.get("temperature"),
        max_tokens=body.get(max_tokens_field),
        tool_choice=choice,
        response_format=ResponseFormat(
            name=fmt["json_schema"]["name"],
            schema=fmt["json_schema"]["schema"],
            strict=fmt["json_schema"]["strict"],
        )
        if fmt
        else None,
    )


class TestOpenAIModel(ModelConformance):
    provider: ClassVar[str] = "openai"
    keeps_tool_errors: ClassVar[bool] = False

    def make_model(self, base_url: str) -> Model:
        return OpenAIModel("gpt-test", api_key="sk-test", base_url=base_url + "/v1")

    def encode_response(self, response: ChatResponse) -> Any:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": response.text or None,
            "refusal": None,
            "annotations": [],
        }
        if response.message.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json},
                }
                for c in response.message.tool_calls
            ]
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": response.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _FINISH[response.stop_reason],
                }
            ],
            "usage": _usage(response),
            "service_tier": "default",
            "system_fingerprint": "fp_1",
        }

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        model = response.model
        events = [_delta(model, {"role": "assistant", "content": "", "refusal": None})]
        events += [_delta(model, {"content": piece}) for piece in iter_chunks(response.text, 3)]
        for index, call in enumerate(response.message.tool_calls):
            start = {"index": index, "id": call.id, "type": "function"}
            start["function"] = {"name": call.name, "arguments": ""}
            events.append(_delta(model, {"tool_calls": [start]}))
            for piece in iter_chunks(call.arguments_json, 2):
                args = {"index": index, "function": {"arguments": piece}}
                events.append(_delta(model, {"tool_calls": [args]}))
        if finished:
            events.append(_delta(model, {}, _FINISH[response.stop_reason]))
            events.append(_chunk(model, [], usage=_usage(response)))
            events.append(SSE(data="[DONE]"))
        return events

    def encode_error(self, status: int, message: str) -> Any:
        return {"error": {"message": message, "type": "invalid_request_error", "param": None}}

    def decode_request(self, body: Any) -> ChatRequest:
        return decode_chat_request(body, max_tokens_field="max_completion_tokens")

    # ------------------------------------------------------------ the exact wire shapes
    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(sample_request())
        sent = wire_server.last
        assert sent.path.endswith("/v1/chat/completions")
        assert sent.headers["authorization"] == "Bearer sk-test"
        body = sent.body
        assert body["model"] == "gpt-test"
        assert body["stream"] is False
        assert body["max_completion_tokens"] == 321
        assert body["messages"][0] == {"role": "system", "content": "You are terse."}
        image = body["messages"][1]["content"][2]
        assert image == {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,iVBORw0KGgoA/w=="},
        }
        assert body["messages"][2]["tool_calls"][1] == {
            "id": "call_2",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
        }
        assert body["messages"][4] == {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": "no such city",
        }
        assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["name"] == "answer"

    async def test_stream_asks_for_usage(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_sse(self.encode_stream(self._text()))
        [e async for e in model.generate_stream(ChatRequest(messages=(Message.user("x"),)))]
        assert wire_server.last.body["stream"] is True
        assert wire_server.last.body["stream_options"] == {"include_usage": True}

    async def test_assistant_turn_with_only_tool_calls_has_null_content(
        self, model: Model, wire_server: WireServer
    ) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        call = ToolCall(id="c", name="f", arguments="not json")
        request = ChatRequest(messages=(Message.user("x"), Message.assistant("", [call])))
        await model.generate(request)
        sent = wire_server.last.body["messages"][1]
        assert sent["content"] == ""
        assert sent["tool_calls"][0]["function"]["arguments"] == "not json"

    async def test_documented_stream_transcript(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A stream as OpenAI documents it, byte for byte, with parallel calls and usage."""
        raw = (FIXTURES / "openai_stream_parallel_tools.sse").read_text()
        events = [SSE(data=block.removeprefix("data: ")) for block in raw.strip().split("\n\n")]
        wire_server.reply_sse(events)
        out = [e async for e in model.generate_stream(ChatRequest(messages=(Message.user("x"),)))]
        text = "".join(e.text for e in out if isinstance(e, TextDelta))
        assert text == ""
        accumulator = StreamAccumulator()
        for event in out:
            accumulator.add(event)
        response = accumulator.response()
        assert [(c.name, c.arguments) for c in response.message.tool_calls] == [
            ("get_weather", {"location": "Paris, France"}),
            ("get_weather", {"location": "Bogotá, Colombia"}),
        ]
        assert response.usage.input_tokens == 82
        assert response.usage.cached_tokens == 64
        assert response.model == "gpt-4.1-2025-04-14"

    async def test_documented_completion(self, model: Model, wire_server: WireServer) -> None:
        body = json.loads((FIXTURES / "openai_completion_tool_call.json").read_text())
        wire_server.reply_json(body)
        response = await model.generate(ChatRequest(messages=(Message.user("x"),)))
        assert response.stop_reason is StopReason.TOOL_USE
        assert response.message.tool_calls == (
            ToolCall(
                id="call_12345xyz", name="get_weather", arguments={"location": "Paris, France"}
            ),
        )
        assert response.usage.cached_tokens == 0
        assert response.usage.input_tokens == 82

    # ------------------------------------------------------------ media and caching
    async def test_media_parts_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        """Audio as input_audio, a PDF as a file part, a text file as text; CachePoints drop."""
        wire_server.reply_json(self.encode_response(self._text()))
        parts = [
            TextPart(text="Listen and read."),
            AudioPart(data=b"RIFF", media_type="audio/wav"),
            CachePoint(),
            DocumentPart(data=b"%PDF-1.7", name="report.pdf"),
            DocumentPart.from_text("a,b", name="data.csv"),
        ]
        await model.generate(ChatRequest(messages=(Message.user(parts),)))
        content = wire_server.last.body["messages"][0]["content"]
        assert content[1] == {
            "type": "input_audio",
            "input_audio": {"data": "UklGRg==", "format": "wav"},
        }
        assert content[2] == {
            "type": "file",
            "file": {
                "filename": "report.pdf",
                "file_data": "data:application/pdf;base64,JVBERi0xLjc=",
            },
        }
        assert content[3] == {"type": "text", "text": "data.csv:\na,b"}
        assert len(content) == 4

    @pytest.mark.parametrize(
        "part",
        [
            AudioPart(url="https://example.com/a.wav"),
            AudioPart(data=b"OggS", media_type="audio/ogg"),
            DocumentPart(url="https://example.com/a.pdf"),
        ],
        ids=["audio-url", "ogg", "pdf-url"],
    )
    async def test_unsupported_part_refused_before_sending(
        self, model: Model, wire_server: WireServer, part: Any
    ) -> None:
        request = ChatRequest(messages=(Message.user([TextPart(text="x"), part]),))
        with pytest.raises(UnsupportedContentError, match=rf"^{self.provider} cannot take this"):
            await model.generate(request)
        assert wire_server.requests == []

    async def test_tool_media_becomes_a_stand_in(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Tool messages are text on Chat Completions: an image is named, not dropped silently."""
        wire_server.reply_json(self.encode_response(self._text()))
        call = ToolCall(id="c1", name="chart", arguments={})
        result = Message.tool("c1", [TextPart(text="done"), ImagePart(data=b"\x89PNG")])
        await model.generate(
            ChatRequest(messages=(Message.user("x"), Message.assistant("", [call]), result))
        )
        sent = wire_server.last.body["messages"][2]
        assert sent["content"].startswith("done\n[the tool returned an image (image/png, 4 bytes)")

    async def test_prompt_cache_key(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        model.prompt_cache_key = "tenant-42"  # type: ignore[attr-defined]
        await model.generate(ChatRequest(messages=(Message.user("x"),)))
        assert wire_server.last.body["prompt_cache_key"] == "tenant-42"

    async def test_recorded_cached_usage_and_cost(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """OpenAI's documented cached completion, priced at gpt-4o's cached-input rate."""
        wire_server.reply_json(
            json.loads((DATA / "openai_chat_completion_cached.json").read_text())
        )
        response = await model.generate(ChatRequest(messages=(Message.user("x"),)))
        assert response.usage == Usage(
            input_tokens=2006, output_tokens=300, cached_tokens=1920, requests=1
        )
        cost = CostTracker(builtin_prices()).record(response.model, response.usage)
        # gpt-4o: $2.50 input, $1.25 cached input, $10 output per million tokens.
        assert cost == pytest.approx((86 * 2.50 + 1920 * 1.25 + 300 * 10.0) / 1e6)

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_recorded_cache_writes_and_cost(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """OpenAI's documented cache write (GPT-5.6): read from the usage details and priced."""
        body = json.loads((DATA / "openai_chat_completion_cache_write.json").read_text())
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
            output_tokens=300,
            cached_tokens=2000,
            cache_write_tokens=400,
            requests=1,
        )
        cost = CostTracker(builtin_prices()).record(response.model, response.usage)
        # gpt-5.6-sol: $5 input, $0.50 cached input, $6.25 cache write, $30 output per million.
        assert cost == pytest.approx((200 * 5.00 + 2000 * 0.50 + 400 * 6.25 + 300 * 30.00) / 1e6)

    # ------------------------------------------------------------ fields left out when empty
    async def test_tool_without_description_leaves_it_out(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A tool without a docstring has no ``description`` on the wire, rather than ``""``."""
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(ChatRequest(messages=(Message.user("x"),), tools=_TOOLS))
        assert [t["function"] for t in wire_server.last.body["tools"]] == [
            {"name": "ping", "parameters": _SCHEMA},
            {"name": "pong", "description": "Answer a ping.", "parameters": _SCHEMA},
        ]

    def test_one_client_per_event_loop(self, wire_server: WireServer) -> None:
        """The same model works from successive event loops (as prompt_sync uses it)."""
        wire_server.reset()
        model = self.make_model(wire_server.url)
        for _ in range(2):
            wire_server.reply_json(self.encode_response(self._text()))
            response = asyncio.run(model.generate(ChatRequest(messages=(Message.user("x"),))))
            assert response.text == "Hello there, friend!"


class TestAzureOpenAIModel(TestOpenAIModel):
    provider: ClassVar[str] = "azure"

    def make_model(self, base_url: str) -> Model:
        return AzureOpenAIModel(
            "my-deployment", endpoint=base_url, api_key="az-key", api_version="2024-10-21"
        )

    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(ChatRequest(messages=(Message.user("x"),)))
        sent = wire_server.last
        assert sent.path == "/openai/deployments/my-deployment/chat/completions"
        assert sent.query["api-version"] == "2024-10-21"
        assert sent.headers["api-key"] == "az-key"


# ---------------------------------------------------------------- OpenAI-compatible servers
async def test_openai_compatible_string_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with WireServer() as server:
        model = infer_model(f"openai-compatible:llama-3@{server.url}/v1")
        assert isinstance(model, OpenAIModel)
        server.reply_json(TestOpenAIModel().encode_response(ChatResponse.reply("hi", model="l3")))
        request = ChatRequest(messages=(Message.user("x"),), max_tokens=7)
        assert (await model.generate(request)).text == "hi"
        await model.aclose()
        body = server.last.body
    assert body["model"] == "llama-3"
    assert body["max_tokens"] == 7
    assert "max_completion_tokens" not in body


async def test_a_given_client_is_used_and_left_open() -> None:
    import openai

    with WireServer() as server:
        client = openai.AsyncOpenAI(api_key="mine", base_url=server.url + "/v1")
        model = OpenAIModel("gpt-test", client=client)
        server.reply_json(TestOpenAIModel().encode_response(ChatResponse.reply("hi", model="m")))
        await model.generate(ChatRequest(messages=(Message.user("x"),)))
        await model.aclose()
        assert server.last.headers["authorization"] == "Bearer mine"
        assert not client.is_closed()
        await client.close()


# ---------------------------------------------------------------- configuration
def test_config_errors_are_builder_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    with pytest.raises(BuilderError, match="OPENAI_API_KEY"):
        OpenAIModel("gpt-4o")
    with pytest.raises(BuilderError, match="model name"):
        OpenAIModel("", api_key="k")
    with pytest.raises(BuilderError, match="AZURE_OPENAI_ENDPOINT"):
        AzureOpenAIModel("dep", api_key="k", api_version="v")
    with pytest.raises(BuilderError, match="credentials"):
        AzureOpenAIModel("dep", endpoint="https://x", api_version="v")
    with pytest.raises(BuilderError, match="OPENAI_API_VERSION"):
        AzureOpenAIModel("dep", endpoint="https://x", api_key="k")
    with pytest.raises(BuilderError, match="dimensions"):
        OpenAIEmbeddingModel("text-embedding-3-small", 0, api_key="k")


def test_config_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.openai.azure.com")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "az-env")
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-10-21")
    assert OpenAIModel("gpt-4o").model_name == "gpt-4o"
    assert AzureOpenAIModel("dep").model_name == "dep"


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "daimon.models.openai")
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[openai\]"'):
        import daimon.models.openai  # noqa: F401
    with pytest.raises(MissingDependencyError, match=r"daimon-agents\[openai\]"):
        infer_model("openai:gpt-4o", api_key="k")


# ---------------------------------------------------------------- embeddings
def _embeddings(*vectors: list[float], order: list[int] | None = None) -> dict[str, Any]:
    indexes = order or list(range(len(vectors)))
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in indexes],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }


async def test_embeddings_in_order_and_batches() -> None:
    with WireServer() as server:
        model = OpenAIEmbeddingModel(
            "text-embedding-3-small", 2, api_key="k", base_url=server.url + "/v1", batch_size=2
        )
        assert isinstance(model, EmbeddingModel)
        server.reply_json(_embeddings([0.1, 0.2], [0.3, 0.4], order=[1, 0]))
        server.reply_json(_embeddings([0.5, 0.6]))
        vectors = await model.embed(["a", "b", "c"])
        assert await model.embed([]) == []
        await model.aclose()
        sent = [r.body for r in server.requests]
    assert vectors == [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
    assert [b["input"] for b in sent] == [["a", "b"], ["c"]]
    assert sent[0]["dimensions"] == 2
    assert sent[0]["encoding_format"] == "float"
    assert sent[0]["model"] == "text-embedding-3-small"


async def test_embedding_errors() -> None:
    with WireServer() as server:
        model = OpenAIEmbeddingModel("other-embedder", 3, api_key="k", base_url=server.url)
        server.reply_json(_embeddings([0.1, 0.2]))
        with pytest.raises(ModelError, match="returned 2 dimensions, expected 3"):
            await model.embed(["a"])
        server.reply_json({"error": {"message": "bad key"}}, status=401)
        with pytest.raises(ModelError, match="bad key") as caught:
            await model.embed(["a"])
        await model.aclose()
        assert "dimensions" not in server.requests[0].body
    assert (caught.value.status_code, caught.value.retryable) == (401, False)


def test_prompt_cache_key_from_the_constructor() -> None:
    assert OpenAIModel("m", api_key="k", prompt_cache_key="t1").prompt_cache_key == "t1"
    azure = AzureOpenAIModel(
        "d", endpoint="https://x", api_key="k", api_version="2024-10-21", prompt_cache_key="t2"
    )
    assert azure.prompt_cache_key == "t2"
    assert OpenAIModel("m", api_key="k").prompt_cache_key is None
