"""Files in A2A messages, sent with the official SDK's client: what reaches the model, what not."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import ListTasksRequest, Message, Part, Role, SendMessageRequest, TaskState
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from starlette.applications import Starlette

from daimon import Agent, ChatRequest, ChatResponse
from daimon.a2a import DaimonAgentExecutor, a2a_app, agent_card
from daimon.core.errors import BuilderError
from daimon.core.messages import AudioPart, DocumentPart, ImagePart
from daimon.kit.media import DEFAULT_FILE_TYPES
from daimon.models import FunctionModel
from daimon.orchestration import WorkflowBuilder, workflow_node

from .conftest import serving

CARD_PATH = "/.well-known/agent-card.json"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def _looking_agent(seen: list[Any]) -> Agent:
    """Answers with what it was given: the last user message's parts, kept in ``seen``."""

    def look(request: ChatRequest) -> ChatResponse:
        content = request.messages[-1].content
        seen.append(content)
        kinds = [content] if isinstance(content, str) else [p.kind for p in content]
        return ChatResponse.reply(f"saw {kinds}")

    return Agent(FunctionModel(look), name="looker")


def _send(*parts: Part) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=list(parts))
    return SendMessageRequest(message=message)


async def _answer(base: str, request: SendMessageRequest) -> Any:
    """The finished task the SDK's client gets for ``request``."""
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(base, ClientConfig(httpx_client=http, streaming=False))
        try:
            events = [event async for event in client.send_message(request)]
        finally:
            await client.close()
    return events[-1].task


async def _tasks(base: str) -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(base, ClientConfig(httpx_client=http))
        try:
            return list((await client.list_tasks(ListTasksRequest())).tasks)
        finally:
            await client.close()


async def test_an_image_a_document_and_a_url_reach_the_model_as_media_parts() -> None:
    seen: list[Any] = []
    agent = _looking_agent(seen)
    request = _send(
        Part(text="What is on these?"),
        Part(raw=PNG, media_type="image/png", filename="dot.png"),
        Part(raw=b"%PDF-1.4 tiny", media_type="application/pdf", filename="brief.pdf"),
        Part(url="https://example.org/clip.mp3", media_type="audio/mpeg"),
    )
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        task = await _answer(base, request)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (content,) = seen
    text, image, document, audio = content
    assert text.text == "What is on these?"
    assert image == ImagePart(data=PNG, media_type="image/png")
    assert document == DocumentPart(
        data=b"%PDF-1.4 tiny", media_type="application/pdf", name="brief.pdf"
    )
    assert audio == AudioPart(url="https://example.org/clip.mp3", media_type="audio/mpeg")


async def test_a_file_as_a_base64_data_url_reaches_the_model_as_its_bytes() -> None:
    seen: list[Any] = []
    agent = _looking_agent(seen)
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        task = await _answer(base, _send(Part(url=url, media_type="image/png")))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert seen == [(ImagePart(data=PNG, media_type="image/png"),)]


async def test_the_card_lists_the_accepted_input_modes() -> None:
    agent = _looking_agent([])
    async with (
        serving(lambda port: a2a_app(agent, port=port, file_types=["image/png"])) as base,
        httpx.AsyncClient() as http,
    ):
        narrowed = (await http.get(base + CARD_PATH)).json()
    assert narrowed["defaultInputModes"] == ["text/plain", "image/png"]
    assert narrowed["skills"][0]["inputModes"] == ["text/plain", "image/png"]
    async with (
        serving(lambda port: a2a_app(agent, port=port)) as base,
        httpx.AsyncClient() as http,
    ):
        default = (await http.get(base + CARD_PATH)).json()
    assert default["defaultInputModes"] == ["text/plain", *DEFAULT_FILE_TYPES]


@pytest.mark.parametrize(
    "part",
    [
        Part(raw=b"PK\x03\x04", media_type="application/zip", filename="a.zip"),
        Part(url="https://example.org/film.mp4", media_type="video/mp4"),
    ],
    ids=["zip-bytes", "video-url"],
)
async def test_a_file_of_a_type_not_taken_is_content_type_not_supported(part: Part) -> None:
    seen: list[Any] = []
    agent = _looking_agent(seen)
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        with pytest.raises(
            ContentTypeNotSupportedError, match="not accepted; accepted: text/plain"
        ):
            await _answer(base, _send(Part(text="look"), part))
        assert await _tasks(base) == []  # refused before any task
    assert seen == []


async def test_an_oversized_file_and_too_many_bytes_together_are_refused() -> None:
    seen: list[Any] = []
    agent = _looking_agent(seen)

    def app(port: int) -> Any:
        return a2a_app(agent, port=port, max_file_bytes=1000, max_files_bytes=1500)

    big = Part(raw=bytes(1001), media_type="image/png")
    fits = Part(raw=bytes(800), media_type="image/png")
    async with serving(app) as base:
        with pytest.raises(InvalidParamsError, match=r"parts\[0\]: the file is larger than 1000"):
            await _answer(base, _send(big))
        with pytest.raises(InvalidParamsError, match="more than 1500 bytes together"):
            await _answer(base, _send(fits, fits))
        assert await _tasks(base) == []
        task = await _answer(base, _send(fits))  # one that fits is taken
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert seen == [(ImagePart(data=bytes(800), media_type="image/png"),)]


@pytest.mark.parametrize(
    ("part", "why"),
    [
        (Part(raw=PNG), "needs its mediaType"),
        (Part(url="ftp://example.org/a.png", media_type="image/png"), "must be http"),
        (Part(url="data:image/png,plain", media_type="image/png"), "must hold base64"),
    ],
    ids=["no-media-type", "ftp-url", "data-url-not-base64"],
)
async def test_an_unusable_file_is_invalid_params(part: Part, why: str) -> None:
    agent = _looking_agent([])
    async with serving(lambda port: a2a_app(agent, port=port)) as base:
        with pytest.raises(InvalidParamsError, match=why):
            await _answer(base, _send(part))


async def test_a_flow_takes_text_only() -> None:
    @workflow_node(output="loud")
    def shout(text: str) -> str:
        return text.upper()

    flow = WorkflowBuilder("shout", inputs={"text": str}).add(shout).build()
    async with (
        serving(lambda port: a2a_app(flow, port=port)) as base,
        httpx.AsyncClient() as http,
    ):
        card = (await http.get(base + CARD_PATH)).json()
        with pytest.raises(ContentTypeNotSupportedError, match="takes text only"):
            await _answer(base, _send(Part(raw=PNG, media_type="image/png")))
        task = await _answer(base, _send(Part(text="hi")))
    assert card["defaultInputModes"] == ["text/plain"]
    assert task.artifacts[0].parts[0].text == "HI"


def test_malformed_file_limits_are_refused() -> None:
    agent = _looking_agent([])
    with pytest.raises(BuilderError, match="not a media type"):
        a2a_app(agent, file_types=["png"])
    with pytest.raises(BuilderError, match="max_file_bytes must be a positive integer"):
        a2a_app(agent, max_file_bytes=0)


async def test_the_executor_with_a_handler_of_your_own_rejects_a_file_it_does_not_take() -> None:
    seen: list[Any] = []
    agent = _looking_agent(seen)

    def app(port: int) -> Starlette:
        card = agent_card(agent, url=f"http://127.0.0.1:{port}/")
        executor = DaimonAgentExecutor(agent, file_types=["image/png"])
        handler = DefaultRequestHandler(executor, InMemoryTaskStore(), card)
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        return Starlette(routes=routes)

    async with serving(app) as base:
        refused = await _answer(base, _send(Part(raw=b"%PDF", media_type="application/pdf")))
        taken = await _answer(base, _send(Part(raw=PNG, media_type="image/png")))
    assert refused.status.state == TaskState.TASK_STATE_REJECTED
    assert refused.status.message.parts[0].text.startswith(
        "Error: message.parts[0]: application/pdf files are not accepted"
    )
    assert taken.status.state == TaskState.TASK_STATE_COMPLETED
    assert seen == [(ImagePart(data=PNG, media_type="image/png"),)]
