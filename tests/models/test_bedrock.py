"""Bedrock over real HTTP: aiobotocore's Converse and ConverseStream against a local server.

ConverseStream answers in the AWS event-stream binary framing
(``application/vnd.amazon.eventstream``); :func:`frame` below writes it, and
:func:`test_the_framing_reads_back_through_botocore` checks it against botocore's own parser.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import struct
import sys
from collections.abc import Iterator, Mapping
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
    StreamClosedError,
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
    Role,
    TextPart,
    ToolCall,
)
from daimon.core.protocols import EmbeddingModel, Model
from daimon.cost import CostTracker, builtin_prices
from daimon.kit.streaming import StreamAccumulator
from daimon.models import infer_model
from daimon.models.bedrock import BedrockEmbeddingModel, BedrockModel
from daimon.testing.models import (
    SSE,
    ModelConformance,
    ScriptedReply,
    WireServer,
    iter_chunks,
    sample_request,
)
from daimon.tools import tool

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).parent.parent / "data" / "caching"
CACHE_POINT = {"cachePoint": {"type": "default"}}
EVENT_STREAM = {"content-type": "application/vnd.amazon.eventstream"}
_PROMPT = ChatRequest(messages=(Message.user("Hi"),))

_STOP = {
    StopReason.END_TURN: "end_turn",
    StopReason.TOOL_USE: "tool_use",
    StopReason.MAX_TOKENS: "max_tokens",
    StopReason.CONTENT_FILTER: "content_filtered",
}
_ERROR_CODES = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


# ---------------------------------------------------------------- the event-stream framing
def _string_header(name: str, value: str) -> bytes:
    key, data = name.encode(), value.encode()
    # name length (1 byte), name, value type 7 (string), value length (2 bytes), value
    return struct.pack(">B", len(key)) + key + b"\x07" + struct.pack(">H", len(data)) + data


def frame(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude, prelude CRC, headers, payload, message CRC."""
    encoded = b"".join(_string_header(k, v) for k, v in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + encoded + payload
    return message + struct.pack(">I", binascii.crc32(message) & 0xFFFFFFFF)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StreamMessage(SSE):
    """An event-stream message the WireServer streams instead of an SSE event."""

    message_type: str = "event"
    """``"event"``, or ``"exception"`` for an error event (``event`` is then its type)."""

    def encode(self) -> bytes:
        kind = ":event-type" if self.message_type == "event" else ":exception-type"
        headers = {
            kind: self.event or "",
            ":content-type": "application/json",
            ":message-type": self.message_type,
        }
        return frame(headers, json.dumps(self.data).encode())


def _event(kind: str, **body: Any) -> StreamMessage:
    return StreamMessage(event=kind, data=body)


def test_the_framing_reads_back_through_botocore() -> None:
    from botocore.eventstream import EventStreamBuffer

    buffer = EventStreamBuffer()
    raw = _event("messageStart", role="assistant").encode()
    buffer.add_data(raw[:7])  # a message in two pieces, as a socket may deliver it
    assert list(buffer) == []
    buffer.add_data(
        raw[7:]
        + StreamMessage(event="throttlingException", data={}, message_type="exception").encode()
    )
    first, second = list(buffer)
    assert first.headers == {
        ":event-type": "messageStart",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(first.payload) == {"role": "assistant"}
    assert first.prelude.total_length == len(raw)
    assert second.headers[":exception-type"] == "throttlingException"


# ---------------------------------------------------------------- the wire format
def _usage(response: ChatResponse) -> dict[str, Any]:
    usage = response.usage
    wire = {
        "inputTokens": usage.input_tokens - usage.cached_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens,
    }
    if usage.cached_tokens:
        wire |= {"cacheReadInputTokens": usage.cached_tokens, "cacheWriteInputTokens": 0}
    return wire


def _image(block: dict[str, Any]) -> ImagePart:
    media_type = f"image/{block['format']}"
    source = block["source"]
    if "bytes" in source:
        return ImagePart(data=base64.b64decode(source["bytes"]), media_type=media_type)
    return ImagePart(url=source["s3Location"]["uri"], media_type=media_type)


def _tool_choice(config: dict[str, Any] | None) -> str | None:
    choice = (config or {}).get("toolChoice")
    if choice is None:
        return None
    if "tool" in choice:
        return str(choice["tool"]["name"])
    return "auto" if "auto" in choice else "required"


def _without_cache_points(value: Any) -> Any:
    """``value`` with every ``cachePoint`` block taken out of its lists."""
    if isinstance(value, dict):
        return {k: _without_cache_points(v) for k, v in value.items()}
    if isinstance(value, list):
        return [
            _without_cache_points(v)
            for v in value
            if not (isinstance(v, dict) and set(v) == {"cachePoint"})
        ]
    return value


def decode_converse_request(body: dict[str, Any]) -> ChatRequest:
    """A Converse request body back into a ChatRequest (cache points left out)."""
    body = _without_cache_points(body)
    messages = [Message.system(block["text"]) for block in body.get("system") or []]
    for turn in body["messages"]:
        blocks = turn["content"]
        if turn["role"] == "assistant":
            text = "".join(b.get("text", "") for b in blocks)
            calls = [
                ToolCall(
                    id=b["toolUse"]["toolUseId"],
                    name=b["toolUse"]["name"],
                    arguments=b["toolUse"]["input"],
                )
                for b in blocks
                if "toolUse" in b
            ]
            messages.append(Message.assistant(text, calls))
            continue
        messages += [
            Message.tool(
                b["toolResult"]["toolUseId"],
                b["toolResult"]["content"][0]["text"],
                is_error=b["toolResult"].get("status") == "error",
            )
            for b in blocks
            if "toolResult" in b
        ]
        others = [b for b in blocks if "toolResult" not in b]
        if len(others) == 1 and "text" in others[0]:
            messages.append(Message.user(others[0]["text"]))
        elif others:
            parts = [
                TextPart(text=b["text"]) if "text" in b else _image(b["image"]) for b in others
            ]
            messages.append(Message.user(parts))
    inference = body.get("inferenceConfig") or {}
    tools = (body.get("toolConfig") or {}).get("tools") or []
    fmt = ((body.get("outputConfig") or {}).get("textFormat") or {}).get("structure")
    return ChatRequest(
        messages=tuple(messages),
        tools=tuple(
            ToolSpec(
                name=t["toolSpec"]["name"],
                description=t["toolSpec"].get("description", ""),
                parameters=t["toolSpec"]["inputSchema"]["json"],
            )
            for t in tools
        ),
        temperature=inference.get("temperature"),
        max_tokens=inference.get("maxTokens"),
        tool_choice=_tool_choice(body.get("toolConfig")),
        response_format=ResponseFormat(
            name=fmt["jsonSchema"]["name"], schema=json.loads(fmt["jsonSchema"]["schema"])
        )
        if fmt
        else None,
    )


def _s3_sample() -> ChatRequest:
    """The sample request with its web image moved to S3 (Converse cannot fetch web URLs)."""
    request = sample_request()
    messages = list(request.messages)
    user = messages[1]
    assert not isinstance(user.content, str)
    parts = [
        ImagePart(url="s3://bucket/cat.png") if isinstance(p, ImagePart) and p.url else p
        for p in user.content
    ]
    messages[1] = Message.user(parts)
    return dataclasses.replace(request, messages=tuple(messages))


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Static test credentials, and nothing from this machine's AWS config."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("aws_env")
class TestBedrockModel(ModelConformance):
    provider: ClassVar[str] = "bedrock"
    served_model: ClassVar[str] = "anthropic.claude-sonnet-4-5-20250929-v1:0"

    def make_model(self, base_url: str) -> Model:
        return BedrockModel(self.served_model, region="us-east-1", base_url=base_url)

    def encode_response(self, response: ChatResponse) -> Any:
        content: list[dict[str, Any]] = []
        if response.text:
            content.append({"text": response.text})
        content += [
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}}
            for c in response.message.tool_calls
        ]
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": _STOP[response.stop_reason],
            "usage": _usage(response),
            "metrics": {"latencyMs": 321},
        }

    def encode_stream(self, response: ChatResponse, *, finished: bool = True) -> list[SSE]:
        events: list[SSE] = [_event("messageStart", role="assistant")]
        index = 0
        if response.text:
            events += [
                _event("contentBlockDelta", contentBlockIndex=0, delta={"text": piece})
                for piece in iter_chunks(response.text, 3)
            ]
            events.append(_event("contentBlockStop", contentBlockIndex=0))
            index = 1
        for call in response.message.tool_calls:
            start = {"toolUse": {"toolUseId": call.id, "name": call.name}}
            events.append(_event("contentBlockStart", contentBlockIndex=index, start=start))
            events += [
                _event(
                    "contentBlockDelta",
                    contentBlockIndex=index,
                    delta={"toolUse": {"input": piece}},
                )
                for piece in iter_chunks(call.arguments_json, 2)
            ]
            events.append(_event("contentBlockStop", contentBlockIndex=index))
            index += 1
        if finished:
            events.append(_event("messageStop", stopReason=_STOP[response.stop_reason]))
            metrics = {"latencyMs": 321}
            events.append(_event("metadata", usage=_usage(response), metrics=metrics))
        return events

    def encode_error(self, status: int, message: str) -> Any:
        return {"__type": _ERROR_CODES[status], "message": message}

    def decode_request(self, body: Any) -> ChatRequest:
        return decode_converse_request(body)

    # ------------------------------------------------------------ where Bedrock differs
    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_request_mapping_round_trips(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """The conformance round trip, with the web image in S3: Converse fetches no URLs."""
        request = _s3_sample()
        if stream:
            wire_server.reply_sse(self.encode_stream(self._text()))
            [e async for e in model.generate_stream(request)]
        else:
            wire_server.reply_json(self.encode_response(self._text()))
            await model.generate(request)
        decoded = self.decode_request(wire_server.last.body)
        expected = self.expected_request(request)
        assert list(decoded.messages) == list(expected.messages)
        assert list(decoded.tools) == list(expected.tools)
        assert (decoded.tool_choice, decoded.temperature, decoded.max_tokens) == (
            expected.tool_choice,
            expected.temperature,
            expected.max_tokens,
        )
        assert decoded.response_format == expected.response_format

    @pytest.mark.parametrize("choice", ["auto", "none", "required"])
    async def test_tool_choice_modes(
        self, model: Model, wire_server: WireServer, choice: str
    ) -> None:
        """``auto`` and ``required`` round-trip; Converse has no ``none``: tools are left out."""
        tools = sample_request().tools
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(
            ChatRequest(messages=_PROMPT.messages, tools=tools, tool_choice=choice)
        )
        body = wire_server.last.body
        if choice == "none":
            assert "toolConfig" not in body
        else:
            assert self.decode_request(body).tool_choice == choice

    async def test_settings_are_sent_as_extra_fields(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """Model-native settings travel in ``additionalModelRequestFields``."""
        wire_server.reply_json(self.encode_response(self._text()))
        settings = {"x_daimon_probe": {"deep": [1, 2]}}
        await model.generate(ChatRequest(messages=_PROMPT.messages, settings=settings))
        assert wire_server.last.body["additionalModelRequestFields"] == settings

    # ------------------------------------------------------------ the exact wire shapes
    async def test_request_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(_s3_sample())
        sent = wire_server.last
        assert sent.path == f"/model/{self.served_model}/converse"
        authorization = sent.headers["authorization"]
        assert authorization.startswith("AWS4-HMAC-SHA256 Credential=x/")
        assert "/us-east-1/bedrock/aws4_request" in authorization
        body = sent.body
        assert body["system"] == [{"text": "You are terse."}, CACHE_POINT]
        assert body["toolConfig"]["tools"][-1] == CACHE_POINT
        assert body["messages"][-1]["content"] == [{"text": "And Rome?"}, CACHE_POINT]
        assert [m["role"] for m in body["messages"]] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        assert body["messages"][0]["content"][1] == {
            "image": {"format": "png", "source": {"s3Location": {"uri": "s3://bucket/cat.png"}}}
        }
        assert body["messages"][0]["content"][2]["image"]["source"] == {"bytes": "iVBORw0KGgoA/w=="}
        assert body["messages"][2]["content"] == [
            {"toolResult": {"toolUseId": "call_1", "content": [{"text": "sunny"}]}},
            {
                "toolResult": {
                    "toolUseId": "call_2",
                    "content": [{"text": "no such city"}],
                    "status": "error",
                }
            },
        ]
        assert body["inferenceConfig"] == {"maxTokens": 321, "temperature": 0.25}
        assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "get_weather"}}
        schema = '{"type": "object", "properties": {"text": {"type": "string"}}}'
        assert body["outputConfig"] == {
            "textFormat": {
                "type": "json_schema",
                "structure": {"jsonSchema": {"schema": schema, "name": "answer"}},
            }
        }

    async def test_stream_wire_shape(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply(
            ScriptedReply(events=self.encode_stream(self._text()), headers=EVENT_STREAM)
        )
        [e async for e in model.generate_stream(_PROMPT)]
        assert wire_server.last.path == f"/model/{self.served_model}/converse-stream"

    async def test_odd_turns(self, model: Model, wire_server: WireServer) -> None:
        """Same-role turns merge, empty text drops, raw arguments wrap, data URLs decode."""
        wire_server.reply_json(self.encode_response(self._text()))
        data_url = "data:image/jpeg;base64," + base64.b64encode(b"jpg").decode()
        await model.generate(
            ChatRequest(
                messages=(
                    Message.user("x"),
                    Message.user([TextPart(text=""), ImagePart(url=data_url)]),
                    Message.assistant(""),
                    Message.assistant("", [ToolCall(id="c", name="f", arguments="{oops")]),
                    Message.tool("c", "bad arguments", is_error=True),
                    Message.user("y"),
                ),
                tools=sample_request().tools,
                tool_choice="none",
            )
        )
        body = wire_server.last.body
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
        assert body["messages"][0]["content"] == [
            {"text": "x"},
            {"image": {"format": "jpeg", "source": {"bytes": base64.b64encode(b"jpg").decode()}}},
        ]
        assert body["messages"][1]["content"][0]["toolUse"]["input"] == {"raw_arguments": "{oops"}
        assert [list(b) for b in body["messages"][2]["content"]] == [
            ["toolResult"],
            ["text"],
            ["cachePoint"],
        ]
        # The conversation holds tool blocks, so the specs stay even with tool_choice="none".
        assert "toolChoice" not in body["toolConfig"]
        assert body["toolConfig"]["tools"][0]["toolSpec"]["name"] == "get_weather"

    @pytest.mark.parametrize(
        ("url", "media_type", "message"),
        [
            ("https://example.com/cat.png", "image/png", "cannot fetch URLs"),
            ("s3://bucket/cat.tiff", "image/tiff", "not 'image/tiff'"),
        ],
    )
    async def test_images_converse_cannot_take(
        self, model: Model, wire_server: WireServer, url: str, media_type: str, message: str
    ) -> None:
        request = ChatRequest(messages=(Message.user([ImagePart(url=url, media_type=media_type)]),))
        with pytest.raises(ModelError, match=message) as caught:
            await model.generate(request)
        assert not caught.value.retryable
        assert wire_server.requests == []

    def cache_neutral(self, body: Any) -> Any:
        return _without_cache_points(body)

    # ------------------------------------------------------------ media
    async def test_documents_and_tool_media(self, model: Model, wire_server: WireServer) -> None:
        """PDFs and text files become document blocks (named as Converse allows); tool results
        carry images and documents, audio as a text stand-in."""
        wire_server.reply_json(self.encode_response(self._text()))
        call = ToolCall(id="c1", name="scan", arguments={})
        messages = (
            Message.user(
                [
                    TextPart(text="Read these."),
                    DocumentPart(data=b"%PDF-1.7", name="Q3 report (final).v2.pdf"),
                    DocumentPart.from_text("a,b", name="data.csv"),
                ]
            ),
            Message.assistant("", [call]),
            Message.tool(
                "c1",
                [
                    TextPart(text="scanned"),
                    ImagePart(data=b"\x89PNG", media_type="image/png"),
                    AudioPart(data=b"RIFF", media_type="audio/wav"),
                ],
            ),
        )
        await model.generate(ChatRequest(messages=messages))
        body = wire_server.last.body
        first = body["messages"][0]["content"]
        assert first[1] == {
            "document": {
                "format": "pdf",
                "name": "Q3 report (final) v2",
                "source": {"bytes": base64.b64encode(b"%PDF-1.7").decode()},
            }
        }
        assert first[2]["document"]["format"] == "txt"
        assert first[2]["document"]["name"] == "data"
        result = body["messages"][2]["content"][0]["toolResult"]["content"]
        assert result[0] == {"text": "scanned"}
        assert result[1]["image"]["format"] == "png"
        assert "audio recording (audio/wav, 4 bytes)" in result[2]["text"]

    @pytest.mark.parametrize(
        "part",
        [
            AudioPart(data=b"RIFF", media_type="audio/wav"),
            DocumentPart(url="https://example.com/a.pdf"),
            DocumentPart(data=b"PK", media_type="application/zip"),
        ],
        ids=["audio", "pdf-by-web-url", "zip"],
    )
    async def test_unsupported_part_refused_before_sending(
        self, model: Model, wire_server: WireServer, part: Any
    ) -> None:
        request = ChatRequest(messages=(Message.user([TextPart(text="x"), part]),))
        with pytest.raises(UnsupportedContentError, match=r"^bedrock cannot take this") as caught:
            await model.generate(request)
        assert not caught.value.retryable
        assert wire_server.requests == []

    # ------------------------------------------------------------ prompt caching
    async def test_cache_points_by_hand(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        request = ChatRequest(
            messages=(
                Message(role=Role.SYSTEM, content=(TextPart(text="Rules."), CachePoint())),
                Message.user([TextPart(text="long"), CachePoint(), TextPart(text="q")]),
            ),
            tools=sample_request().tools,
        )
        await model.generate(request)
        body = wire_server.last.body
        assert body["system"] == [{"text": "Rules."}, CACHE_POINT]
        assert body["messages"][0]["content"] == [{"text": "long"}, CACHE_POINT, {"text": "q"}]
        assert CACHE_POINT not in body["toolConfig"]["tools"]

    @pytest.mark.parametrize(
        ("model_id", "cache", "system", "tools"),
        [
            ("amazon.nova-pro-v1:0", None, True, False),
            ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", None, True, True),
            ("meta.llama3-3-70b-instruct-v1:0", None, False, False),
            ("anthropic.claude-v2", None, False, False),
            ("anthropic.claude-sonnet-4-5-20250929-v1:0", "off", False, False),
        ],
    )
    async def test_where_caching_applies(
        self,
        wire_server: WireServer,
        model_id: str,
        cache: Any,
        system: bool,
        tools: bool,
    ) -> None:
        """Nova caches system and messages, not tools; Claude all three; models AWS does not
        document as caching (Llama, Claude 2) get no cache points; "off" turns it off."""
        wire_server.reset()
        model = BedrockModel(
            model_id, region="us-east-1", base_url=wire_server.url, prompt_cache=cache
        )
        wire_server.reply_json(self.encode_response(self._text()))
        request = _s3_sample()
        await model.generate(ChatRequest(messages=request.messages, tools=request.tools))
        await model.aclose()
        body = wire_server.last.body
        assert (CACHE_POINT in body["system"]) is system
        assert (CACHE_POINT in body["messages"][-1]["content"]) is system
        assert (CACHE_POINT in body["toolConfig"]["tools"]) is tools

    @pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
    async def test_recorded_cache_usage_and_cost(
        self, wire_server: WireServer, stream: bool
    ) -> None:
        """A documented Converse cached response, priced at Claude Sonnet 4.5's Bedrock rates."""
        wire_server.reset()
        model = BedrockModel(
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            region="us-east-1",
            base_url=wire_server.url,
        )
        recorded = json.loads((DATA / "bedrock_converse_cache.json").read_text())
        if stream:
            events = [
                _event("messageStart", role="assistant"),
                _event(
                    "contentBlockDelta",
                    contentBlockIndex=0,
                    delta={"text": recorded["output"]["message"]["content"][0]["text"]},
                ),
                _event("contentBlockStop", contentBlockIndex=0),
                _event("messageStop", stopReason="end_turn"),
                _event("metadata", usage=recorded["usage"], metrics=recorded["metrics"]),
            ]
            wire_server.reply(ScriptedReply(events=events, headers=EVENT_STREAM))
            accumulator = StreamAccumulator()
            async for event in model.generate_stream(_PROMPT):
                accumulator.add(event)
            response = accumulator.response()
        else:
            wire_server.reply_json(recorded)
            response = await model.generate(_PROMPT)
        await model.aclose()
        assert response.usage == Usage(
            input_tokens=24 + 3072 + 2048,
            output_tokens=87,
            cached_tokens=3072,
            cache_write_tokens=2048,
            requests=1,
        )
        cost = CostTracker(builtin_prices()).record(response.model, response.usage)
        # $3 input, $15 output, $0.30 cache read and $3.75 cache write per million tokens.
        assert cost == pytest.approx((24 * 3.0 + 87 * 15.0 + 3072 * 0.30 + 2048 * 3.75) / 1e6)

    @pytest.mark.parametrize(
        ("status", "code", "retryable"),
        [
            (503, "ServiceUnavailableException", True),
            (429, "ModelNotReadyException", True),
            (424, "ModelErrorException", False),
            (408, "ModelTimeoutException", True),
            (400, "ValidationException", False),
        ],
    )
    async def test_errors_named_by_x_amzn_errortype(
        self, model: Model, wire_server: WireServer, status: int, code: str, retryable: bool
    ) -> None:
        headers = {
            "x-amzn-errortype": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        }
        wire_server.reply_json({"message": "the service says no"}, status=status, headers=headers)
        with pytest.raises(ModelError, match="the service says no") as caught:
            await model.generate(_PROMPT)
        error = caught.value
        assert (error.status_code, error.retryable, error.provider) == (
            status,
            retryable,
            "bedrock",
        )
        assert code in str(error)

    @pytest.mark.parametrize(
        ("kind", "status", "retryable"),
        [
            ("throttlingException", 429, True),
            ("modelStreamErrorException", 424, True),
            ("validationException", 400, False),
        ],
    )
    async def test_exception_events_inside_a_stream(
        self, model: Model, wire_server: WireServer, kind: str, status: int, retryable: bool
    ) -> None:
        events = self.encode_stream(self._text())[:2]
        error = StreamMessage(
            event=kind, data={"message": "mid-stream trouble"}, message_type="exception"
        )
        wire_server.reply(ScriptedReply(events=[*events, error], headers=EVENT_STREAM))
        with pytest.raises(ModelError, match="mid-stream trouble") as caught:
            [e async for e in model.generate_stream(_PROMPT)]
        assert not isinstance(caught.value, StreamClosedError)
        assert (caught.value.status_code, caught.value.retryable) == (status, retryable)

    async def test_stream_without_its_metadata(self, model: Model, wire_server: WireServer) -> None:
        """``messageStop`` without the ``metadata`` event (the usage) is still a cut stream."""
        events = self.encode_stream(self._text())[:-1]
        wire_server.reply(ScriptedReply(events=events, headers=EVENT_STREAM))
        with pytest.raises(StreamClosedError, match="metadata"):
            [e async for e in model.generate_stream(_PROMPT)]

    @pytest.mark.parametrize("reason", ["guardrail_intervened", "content_filtered"])
    async def test_guardrails_are_content_filters(
        self, model: Model, wire_server: WireServer, reason: str
    ) -> None:
        body = self.encode_response(self._text())
        body["stopReason"] = reason
        wire_server.reply_json(body)
        assert (await model.generate(_PROMPT)).stop_reason is StopReason.CONTENT_FILTER

    async def test_cache_writes_count_as_input(self, model: Model, wire_server: WireServer) -> None:
        body = self.encode_response(self._text())
        body["usage"] = {
            "inputTokens": 10,
            "outputTokens": 5,
            "totalTokens": 315,
            "cacheReadInputTokens": 100,
            "cacheWriteInputTokens": 200,
        }
        wire_server.reply_json(body)
        usage = (await model.generate(_PROMPT)).usage
        assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (310, 5, 100)
        assert usage.cache_write_tokens == 200

    async def test_settings_routing(self, model: Model, wire_server: WireServer) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        settings = {
            "inferenceConfig": {"topP": 0.5, "stopSequences": ["END"]},
            "guardrailConfig": {"guardrailIdentifier": "g1", "guardrailVersion": "1"},
            "performanceConfig": {"latency": "optimized"},
            "additionalModelRequestFields": {"thinking": {"type": "enabled"}},
            "top_k": 20,
        }
        await model.generate(
            ChatRequest(messages=_PROMPT.messages, max_tokens=9, settings=settings)
        )
        body = wire_server.last.body
        assert body["inferenceConfig"] == {"topP": 0.5, "stopSequences": ["END"], "maxTokens": 9}
        assert body["guardrailConfig"] == settings["guardrailConfig"]
        assert body["performanceConfig"] == {"latency": "optimized"}
        assert body["additionalModelRequestFields"] == {
            "top_k": 20,
            "thinking": {"type": "enabled"},
        }

    async def _warm_up(self, model: Model, wire_server: WireServer) -> None:
        # aiobotocore builds its HTTP session (an SSL context, in a thread) on the first call:
        # under load that alone can outlast a 0.2 s timeout before the request is even sent.
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(_PROMPT)

    async def test_per_call_timeout(self, model: Model, wire_server: WireServer) -> None:
        """``settings["timeout"]`` bounds one call (on a warm client); a timeout is retryable."""
        await self._warm_up(model, wire_server)
        await super().test_per_call_timeout(model, wire_server)

    async def test_stream_timeout(self, model: Model, wire_server: WireServer) -> None:
        """``settings["timeout"]`` bounds the opening of the stream."""
        await self._warm_up(model, wire_server)
        wire_server.reply(
            ScriptedReply(events=self.encode_stream(self._text()), headers=EVENT_STREAM, delay=2.0)
        )
        with pytest.raises(ModelError, match="timed out") as caught:
            request = ChatRequest(messages=_PROMPT.messages, settings={"timeout": 0.2})
            [e async for e in model.generate_stream(request)]
        assert caught.value.retryable

    async def test_documented_stream_transcript(
        self, model: Model, wire_server: WireServer
    ) -> None:
        """A ConverseStream transcript as AWS documents it: text, a tool call, cached usage."""
        documented = json.loads((FIXTURES / "bedrock_converse_stream_tool_use.json").read_text())
        events = [
            StreamMessage(event=next(iter(e)), data=next(iter(e.values()))) for e in documented
        ]
        wire_server.reply(ScriptedReply(events=events, headers=EVENT_STREAM))
        accumulator = StreamAccumulator()
        async for event in model.generate_stream(_PROMPT):
            accumulator.add(event)
        response = accumulator.response()
        assert response.text == "I'll look up the weather in Seattle."
        assert response.message.tool_calls == (
            ToolCall(
                id="tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                name="get_weather",
                arguments={"city": "Seattle", "unit": "celsius"},
            ),
        )
        assert response.stop_reason is StopReason.TOOL_USE
        assert (response.usage.input_tokens, response.usage.cached_tokens) == (223 + 1024, 1024)
        assert response.usage.output_tokens == 61
        assert response.model == self.served_model

    # ------------------------------------------------------------ reasoning
    @pytest.mark.parametrize("stream", [False, True], ids=["prompt", "prompt_stream"])
    async def test_reasoning_goes_back_unchanged_before_its_tool_use(
        self, model: Model, wire_server: WireServer, stream: bool
    ) -> None:
        """Claude's reasoningContent (text with signature, redacted bytes) comes back on the
        next request unchanged, before the turn's text and toolUse blocks."""
        first = json.loads((FIXTURES / "bedrock_converse_thinking_tool_use.json").read_text())
        answer = self._text("Sunny in Paris.")
        if stream:
            documented = (FIXTURES / "bedrock_converse_stream_thinking_tool_use.json").read_text()
            events = [
                StreamMessage(event=next(iter(e)), data=next(iter(e.values())))
                for e in json.loads(documented)
            ]
            wire_server.reply(ScriptedReply(events=events, headers=EVENT_STREAM))
            wire_server.reply(
                ScriptedReply(events=self.encode_stream(answer), headers=EVENT_STREAM)
            )
        else:
            wire_server.reply_json(first)
            wire_server.reply_json(self.encode_response(answer))

        @tool
        def get_weather(city: str) -> str:
            """The weather in a city."""
            return f"sunny in {city}"

        thinking = {"thinking": {"type": "enabled", "budget_tokens": 2048}}
        agent = Agent(model, tools=[get_weather], model_settings=thinking)
        if stream:
            events_out = [e async for e in agent.prompt_stream("Weather in Paris?")]
            done = events_out[-1]
            assert isinstance(done, Done) and done.response is not None
            assert done.response.text == "Sunny in Paris."
        else:
            assert (await agent.prompt("Weather in Paris?")).text == "Sunny in Paris."
        sent = wire_server.requests[-1].body
        assert sent["additionalModelRequestFields"] == thinking
        assert sent["messages"][1] == {
            "role": "assistant",
            "content": first["output"]["message"]["content"],
        }

    async def test_reasoning_of_another_provider_stays_home(
        self, model: Model, wire_server: WireServer
    ) -> None:
        wire_server.reply_json(self.encode_response(self._text()))
        other = Reasoning(provider="anthropic", data={"type": "thinking", "signature": "x"})
        history = (Message.user("a"), Message.assistant("b", reasoning=[other]), Message.user("c"))
        await model.generate(ChatRequest(messages=history))
        assert wire_server.last.body["messages"][1]["content"] == [{"text": "b"}]

    # ------------------------------------------------------------ empty fields
    async def test_a_tool_without_a_docstring(self, model: Model, wire_server: WireServer) -> None:
        """Converse wants a description of at least one character: botocore's own parameter
        validation lets the request through because the empty description is left out."""
        ping = ToolSpec(name="ping", description="", parameters={"type": "object"})
        wire_server.reply_json(self.encode_response(self._text()))
        await model.generate(ChatRequest(messages=_PROMPT.messages, tools=(ping,)))
        assert wire_server.last.body["toolConfig"]["tools"][0] == {
            "toolSpec": {"name": "ping", "inputSchema": {"json": {"type": "object"}}}
        }


@pytest.mark.parametrize(
    ("model_id", "caches"),
    [
        ("anthropic.claude-3-7-sonnet-20250219-v1:0", True),
        ("anthropic.claude-3-5-haiku-20241022-v1:0", True),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", True),
        ("global.anthropic.claude-opus-4-5-20251101-v1:0", True),
        ("anthropic.claude-haiku-4-5-20251001-v1:0", True),
        (
            "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-opus-4-1-20250805-v1:0",
            True,
        ),
        ("amazon.nova-micro-v1:0", True),
        ("us.amazon.nova-premier-v1:0", True),
        ("anthropic.claude-v2", False),
        ("anthropic.claude-v2:1", False),
        ("anthropic.claude-instant-v1", False),
        ("anthropic.claude-3-haiku-20240307-v1:0", False),
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", False),
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", False),
        ("meta.llama3-3-70b-instruct-v1:0", False),
        ("mistral.mistral-large-2407-v1:0", False),
    ],
)
def test_caching_is_on_by_default_only_for_models_aws_documents(
    model_id: str, caches: bool
) -> None:
    model = BedrockModel(model_id, region="us-east-1")
    assert model.prompt_cache == ("auto" if caches else "off")


# ---------------------------------------------------------------- embeddings
@pytest.fixture(scope="module")
def embed_server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.mark.usefixtures("aws_env")
async def test_titan_embeddings(embed_server: WireServer) -> None:
    embed_server.reset()
    model = BedrockEmbeddingModel(
        "amazon.titan-embed-text-v2:0",
        3,
        concurrency=2,
        region="eu-west-1",
        base_url=embed_server.url,
    )
    assert isinstance(model, EmbeddingModel)
    for _ in range(3):
        embed_server.reply_json({"embedding": [0.5, 0.25, 0.125], "inputTextTokenCount": 2})
    async with model:
        vectors = await model.embed(["a", "b", "c"])
    assert vectors == [[0.5, 0.25, 0.125]] * 3
    assert sorted(r.body["inputText"] for r in embed_server.requests) == ["a", "b", "c"]
    sent = embed_server.last
    assert sent.path == "/model/amazon.titan-embed-text-v2:0/invoke"
    assert (sent.body["dimensions"], sent.body["normalize"]) == (3, True)


@pytest.mark.usefixtures("aws_env")
async def test_cohere_embeddings(embed_server: WireServer) -> None:
    embed_server.reset()
    model = BedrockEmbeddingModel(
        "cohere.embed-english-v3",
        2,
        input_type="search_query",
        region="eu-west-1",
        base_url=embed_server.url,
    )
    embed_server.reply_json({"embeddings": {"float": [[1, 2], [3, 4]]}, "id": "e1"})
    async with model:
        assert await model.embed(["a", "b"]) == [[1.0, 2.0], [3.0, 4.0]]
    assert embed_server.last.body == {
        "texts": ["a", "b"],
        "input_type": "search_query",
        "embedding_types": ["float"],
    }


@pytest.mark.usefixtures("aws_env")
async def test_embedding_errors(embed_server: WireServer) -> None:
    embed_server.reset()
    model = BedrockEmbeddingModel(
        "amazon.titan-embed-text-v1", 3, region="eu-west-1", base_url=embed_server.url
    )
    async with model:
        embed_server.reply_json({"embedding": [1.0, 2.0]})
        with pytest.raises(ModelError, match="returned 2 dimensions, expected 3"):
            await model.embed(["a"])
        assert embed_server.last.body == {"inputText": "a"}  # v1 takes no dimensions
        embed_server.reply_json({"__type": "ThrottlingException", "message": "slow"}, status=429)
        with pytest.raises(ModelError, match="slow") as caught:
            await model.embed(["a"])
        assert caught.value.retryable
    with pytest.raises(BuilderError, match="Titan and Cohere"):
        BedrockEmbeddingModel("anthropic.claude-x", 3, region="eu-west-1")


# ---------------------------------------------------------------- configuration
@pytest.mark.usefixtures("aws_env")
def test_config() -> None:
    with pytest.raises(BuilderError, match="AWS_REGION"):
        BedrockModel("amazon.nova-pro-v1:0")
    with pytest.raises(BuilderError, match="model id"):
        BedrockModel("", region="us-east-1")
    with pytest.raises(BuilderError, match="both aws_access_key_id"):
        BedrockModel("m", region="us-east-1", aws_access_key_id="AKID")
    with pytest.raises(BuilderError, match="timeout"):
        BedrockModel("m", region="us-east-1", timeout=0)
    with pytest.raises(BuilderError, match="dimensions"):
        BedrockEmbeddingModel("amazon.titan-embed-text-v2:0", 0, region="us-east-1")


@pytest.mark.usefixtures("aws_env")
async def test_infer_model_takes_region_and_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
    with WireServer() as server:
        server.reply_json(TestBedrockModel().encode_response(ChatResponse.reply("ok")))
        model = infer_model(
            "bedrock:amazon.nova-lite-v1:0", region="ap-south-1", base_url=server.url
        )
        assert isinstance(model, BedrockModel)
        async with model:
            response = await model.generate(_PROMPT)
        assert (response.text, response.model) == ("ok", "amazon.nova-lite-v1:0")
        authorization = server.last.headers["authorization"]
        assert "Credential=AKIDFROMENV/" in authorization
        assert "/ap-south-1/bedrock/" in authorization


@pytest.mark.usefixtures("aws_env")
async def test_explicit_credentials_and_region_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    with WireServer() as server:
        server.reply_json(TestBedrockModel().encode_response(ChatResponse.reply("ok")))
        model = BedrockModel(
            "m", base_url=server.url, aws_access_key_id="AKIDGIVEN", aws_secret_access_key="s"
        )
        async with model:
            await model.generate(_PROMPT)
        authorization = server.last.headers["authorization"]
        assert "Credential=AKIDGIVEN/" in authorization and "/eu-central-1/" in authorization


@pytest.mark.usefixtures("aws_env")
async def test_no_credentials_is_a_model_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    model = BedrockModel("m", region="us-east-1", base_url="http://127.0.0.1:9")
    async with model:
        with pytest.raises(ModelError, match="credentials") as caught:
            await model.generate(_PROMPT)
    assert not caught.value.retryable


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiobotocore.session", None)
    monkeypatch.delitem(sys.modules, "daimon.models.bedrock", raising=False)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[bedrock\]"'):
        infer_model("bedrock:m", region="us-east-1")


def test_prices() -> None:
    from daimon.cost import builtin_prices

    table = builtin_prices()
    sonnet = table.price("anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert sonnet is not None and sonnet == table.price("claude-sonnet-4-5")
    # Cross-region inference profiles are priced as their model.
    assert table.price("bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0") == sonnet
    assert table.price("global.anthropic.claude-haiku-4-5-20251001-v1:0") is not None
    assert table.price("anthropic.claude-opus-4-9") is None
