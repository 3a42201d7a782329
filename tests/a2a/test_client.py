"""RemoteA2AAgent against an A2A agent written with the official SDK, and against daimon's."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from daimon import (
    Agent,
    AgentRunError,
    ChatRequest,
    ChatResponse,
    Done,
    Role,
    RunCancelled,
    TextDelta,
    ToolCall,
)
from daimon import TimeoutError as DaimonTimeoutError
from daimon.a2a import RemoteA2AAgent, a2a_app
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError
from daimon.models import FunctionModel
from daimon.orchestration import Chain
from daimon.tools import RunContext

from .conftest import ROOT, counting_agent, serving, streaming_agent


def _sdk() -> Any:
    import importlib.util

    path = ROOT / "tests" / "a2a" / "sdk_server.py"
    spec = importlib.util.spec_from_file_location("daimon_test_a2a_sdk_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _collect(remote: RemoteA2AAgent, text: str) -> tuple[list[str], str]:
    deltas: list[str] = []
    answer = ""
    async for event in remote.prompt_stream(text):
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, Done) and event.response is not None:
            answer = event.response.text
    return deltas, answer


@pytest.mark.parametrize("streaming", [True, False])
async def test_against_the_sdk_server(streaming: bool) -> None:
    sdk = _sdk()
    async with (
        serving(lambda port: sdk.build(port)) as base,
        RemoteA2AAgent(base, streaming=streaming) as remote,
    ):
        assert remote.name == "SDK_Agent"  # the card's name, made tool-safe
        assert remote.description.startswith("Written with the a2a-sdk alone.")
        response = await remote.prompt("hello")
        assert response.text == "sdk says: hello"
        assert response.run_id and response.session_id
        deltas, answer = await _collect(remote, "stream")
        assert answer == "sdk says: stream"
        assert deltas == (["sdk ", "says: ", "stream"] if streaming else ["sdk says: stream"])
        assert (await remote.prompt("reply")).text == "a plain reply"
        with pytest.raises(AgentRunError, match="failed: no can do"):
            await remote.prompt("fail")


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_it_speaks_the_binding_and_version_the_sdk_server_offers(
    binding: str, version: str
) -> None:
    sdk = _sdk()
    async with (
        serving(lambda port: sdk.build(port, version=version)) as base,
        RemoteA2AAgent(base, bindings=[binding]) as remote,
    ):
        assert remote.interface is not None
        assert (remote.interface.protocol_binding, remote.interface.protocol_version) == (
            binding,
            version,
        )
        deltas, answer = await _collect(remote, "hi")
        assert (deltas, answer) == (["sdk ", "says: ", "hi"], "sdk says: hi")
        with pytest.raises(AgentRunError, match="failed: no can do"):
            await remote.prompt("fail")


async def test_a_card_offering_no_binding_it_speaks_is_a_clear_error() -> None:
    sdk = _sdk()
    async with serving(lambda port: sdk.build(port)) as base:
        with pytest.raises(AgentRunError, match=r"offers \[.HTTP\+JSON 1.0., .JSONRPC 1.0.\]"):
            await RemoteA2AAgent(base, bindings=["GRPC-WEB"]).connect()


async def _raw_stream(card: Any, text: str) -> list[Any]:
    """What the SDK's own client receives for ``text``: the stream's items, unread."""
    from a2a.client import ClientConfig, ClientFactory
    from a2a.types import Message, Part, Role, SendMessageRequest

    message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text=text)])
    async with httpx.AsyncClient() as http:
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        return [item async for item in client.send_message(SendMessageRequest(message=message))]


async def test_working_status_text_is_progress_and_artifact_chunks_stream() -> None:
    """An SDK agent says it is working, then streams its answer as artifact chunks: only the
    chunks are answer text (issue 17, item 8)."""
    sdk = _sdk()
    async with serving(lambda port: sdk.build(port)) as base, RemoteA2AAgent(base) as remote:
        raw = await _raw_stream(remote.card, "x")
        kinds = [item.WhichOneof("payload") for item in raw]
        working = [i.status_update.status.message for i in raw if i.HasField("status_update")]
        assert [p.text for p in working[0].parts] == [sdk.PROGRESS]  # it did say so
        assert kinds.count("artifact_update") == 3
        events = [event async for event in remote.prompt_stream("x")]
    assert [type(e) for e in events] == [TextDelta, TextDelta, TextDelta, Done]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["sdk ", "says: ", "x"]
    done = events[-1]
    assert isinstance(done, Done) and done.response is not None
    assert done.response.text == "sdk says: x"


async def test_a_cancel_token_cancels_the_remote_task() -> None:
    sdk = _sdk()
    executor = sdk.Executor()
    async with (
        serving(lambda port: sdk.build(port, executor)) as base,
        RemoteA2AAgent(base) as remote,
    ):
        token = CancelToken()
        asking = asyncio.create_task(remote.prompt("slow", cancel=token))
        await asyncio.sleep(0.3)
        token.cancel("no longer needed")
        with pytest.raises(RunCancelled):
            await asking
        await asyncio.wait_for(executor.cancelled.wait(), 10)  # stopped on the server too


async def test_abandoning_a_stream_cancels_the_remote_task() -> None:
    sdk = _sdk()
    executor = sdk.Executor()
    async with (
        serving(lambda port: sdk.build(port, executor)) as base,
        RemoteA2AAgent(base) as remote,
    ):
        stream = remote.prompt_stream("slow")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):  # the consumer gives up while nothing has arrived
                await anext(stream)
        await asyncio.wait_for(executor.cancelled.wait(), 10)


async def test_no_answer_in_time_is_a_timeout_and_cancels_the_remote_task() -> None:
    sdk = _sdk()
    executor = sdk.Executor()
    async with (
        serving(lambda port: sdk.build(port, executor)) as base,
        RemoteA2AAgent(base, timeout=0.5) as remote,
    ):
        with pytest.raises(DaimonTimeoutError):
            await remote.prompt("slow")
        await asyncio.wait_for(executor.cancelled.wait(), 10)


async def test_daimon_to_daimon_as_a_tool_and_as_a_chain_step() -> None:
    served = streaming_agent("echo")

    def model(request: ChatRequest) -> ChatResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(ToolCall(id="1", name="echo", arguments={"prompt": "x"}))
        return ChatResponse.reply(f"remote said {results[0].text!r}")

    async with (
        serving(lambda port: a2a_app(served, port=port, token="tok")) as base,
        RemoteA2AAgent(base, token="tok") as remote,
    ):
        deltas, answer = await _collect(remote, "hi")
        assert (deltas, answer) == (["Hello, ", "you said: hi"], "Hello, you said: hi")

        caller = Agent(FunctionModel(model), tools=[remote])  # a tool named after the card
        assert (await caller.prompt("go")).text == "remote said 'Hello, you said: x'"

        result = await Chain([remote]).run("chained")  # a step like any agent
        assert result.value == "Hello, you said: chained"

        failed = await remote.execute({"prompt": "fail"}, RunContext(run_id="r", deps=None))
        assert failed.is_error and "ValueError" in failed.content
    async with (
        serving(lambda port: a2a_app(served, port=port, token="tok")) as base,
        RemoteA2AAgent(base, token="wrong") as remote,
    ):
        output = await remote.execute({"prompt": "hi"}, RunContext(run_id="r", deps=None))
        assert output.is_error and "401" in output.content


async def test_the_card_is_fetched_carefully() -> None:
    huge = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
    routes = [
        Route(
            "/moved/.well-known/agent-card.json", lambda r: RedirectResponse("http://x.example/")
        ),
        Route("/huge/.well-known/agent-card.json", lambda r: Response(huge)),
        Route("/list/.well-known/agent-card.json", lambda r: JSONResponse([1])),
        Route("/junk/.well-known/agent-card.json", lambda r: Response(b"<html>")),
    ]
    async with serving(lambda port: Starlette(routes=routes)) as base:
        for path, message in [
            ("/moved", "redirects are not followed"),
            ("/huge", "larger than 1 MiB"),
            ("/list", "not a JSON object"),
            ("/junk", "could not read"),
            ("/missing", "answered 404"),
        ]:
            with pytest.raises(AgentRunError, match=message):
                await RemoteA2AAgent(base + path).connect()


async def test_one_session_is_one_conversation_with_a_daimon_server() -> None:
    served = counting_agent()
    async with (
        serving(lambda port: a2a_app(served, port=port)) as base,
        RemoteA2AAgent(base) as remote,
    ):
        first = await remote.prompt("I am Ada", session_id="chat-1")
        assert (first.text, first.session_id) == ("1: I am Ada", "chat-1")
        second = await remote.prompt("who am I?", session_id="chat-1")
        assert second.text == "2: I am Ada | who am I?"
        assert second.run_id != first.run_id  # a new task in the same context
        assert (await remote.prompt("who am I?", session_id="chat-2")).text == "1: who am I?"

        fresh = await remote.prompt("no session")  # the server makes a context and says which
        assert fresh.text == "1: no session" and fresh.session_id
        again = await remote.prompt("again", session_id=fresh.session_id)
        assert again.text == "2: no session | again"

        deltas: list[str] = []
        answer = ""
        async for event in remote.prompt_stream("streamed", session_id="chat-1"):
            if isinstance(event, TextDelta):
                deltas.append(event.text)
            elif isinstance(event, Done) and event.response is not None:
                answer = event.response.text
        assert answer == "3: I am Ada | who am I? | streamed" == "".join(deltas)

        with pytest.raises(AgentRunError, match=r"contextId 'bad id' .* is not accepted"):
            await remote.prompt("hi", session_id="bad id")


async def test_as_a_tool_a_session_id_carries_the_remote_conversation() -> None:
    served = counting_agent()

    def model(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"remote: {last.text}")
        call = ToolCall(
            id=f"c{len(request.messages)}", name="counter", arguments={"prompt": last.text}
        )
        return ChatResponse.tool_use(call)

    async with (
        serving(lambda port: a2a_app(served, port=port)) as base,
        RemoteA2AAgent(base, session_id=lambda ctx: f"{ctx.session_id}-counter") as kept,
        RemoteA2AAgent(base) as fresh,
    ):
        caller = Agent(FunctionModel(model), tools=[kept])
        assert (await caller.prompt("I am Ada", session_id="u1")).text == "remote: 1: I am Ada"
        second = await caller.prompt("who am I?", session_id="u1")
        assert second.text == "remote: 2: I am Ada | who am I?"
        other = await caller.prompt("who am I?", session_id="u2")
        assert other.text == "remote: 1: who am I?"
        assert len(await served.memory.get_messages("a2a:u1-counter")) == 4

        forgetful = Agent(FunctionModel(model), tools=[fresh])  # by default: no session
        assert (await forgetful.prompt("one", session_id="u1")).text == "remote: 1: one"
        assert (await forgetful.prompt("two", session_id="u1")).text == "remote: 1: two"


def test_urls_names_and_options_are_checked() -> None:
    with pytest.raises(BuilderError, match="http"):
        RemoteA2AAgent("ftp://agents.example")
    with pytest.raises(BuilderError, match="credentials"):
        RemoteA2AAgent("https://user:pw@agents.example")
    with pytest.raises(BuilderError, match="no name yet"):
        _ = RemoteA2AAgent("https://agents.example").name
    assert RemoteA2AAgent("https://agents.example", name="the helper").name == "the_helper"
    with pytest.raises(BuilderError, match="timeout"):
        RemoteA2AAgent("https://agents.example", timeout=0)
    with pytest.raises(BuilderError, match="session_id"):
        RemoteA2AAgent("https://agents.example", session_id=42)  # type: ignore[arg-type]


def test_the_token_goes_to_the_card_origin_only() -> None:
    from daimon.a2a._client import _OriginBearer

    auth = _OriginBearer("tok", "https://agents.example/a2a")
    for url, sent in [
        ("https://agents.example/", True),
        ("https://agents.example:443/rpc", True),
        ("http://agents.example/", False),
        ("https://agents.example:8443/", False),
        ("https://evil.example/", False),
    ]:
        request = httpx.Request("POST", url)
        next(auth.auth_flow(request))
        assert ("authorization" in request.headers) is sent, url
