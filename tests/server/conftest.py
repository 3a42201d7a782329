"""A real daimon server on loopback (uvicorn in a background thread) and the agents it serves."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest
import uvicorn

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.core.events import StreamEvent, TextDelta, ToolCallEnd
from daimon.models import FunctionModel
from daimon.server import ServerSettings, create_app

if TYPE_CHECKING:
    import openai

T = TypeVar("T")

TOKEN = "test-token-0123456789"


class _Uvicorn(uvicorn.Server):
    """``uvicorn.Server`` whose main loop ends as soon as :meth:`wake` is called after
    ``should_exit`` is set, not at its next tick (a tenth of a second apart)."""

    async def main_loop(self) -> None:
        self._woken = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), 0.1)

    def wake(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Have the main loop look at ``should_exit`` now (from any thread)."""
        if loop is not None and hasattr(self, "_woken"):
            loop.call_soon_threadsafe(self._woken.set)


class LiveServer:
    """``create_app(agents, settings)`` served by uvicorn on 127.0.0.1, on a port of its own."""

    def __init__(self, agents: Agent | Mapping[str, Agent], **settings: Any) -> None:
        # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they
        # are TCP, and without it each small response waits ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port: int = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.settings = ServerSettings(port=self.port, **settings)
        self.app = create_app(agents, settings=self.settings)
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on")
        self._server = _Uvicorn(config)
        self._socket = sock
        self.loop: asyncio.AbstractEventLoop | None = None
        self._clients: list[httpx.Client] = []
        self._thread = threading.Thread(target=self._run, name="daimon-server", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            await self._server.serve(sockets=[self._socket])

        asyncio.run(main())

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def client(self, **options: Any) -> httpx.Client:
        """An HTTP client for this server (``verify=False``: plain HTTP needs no TLS setup)."""
        client = httpx.Client(base_url=self.url, verify=False, timeout=10, **options)
        self._clients.append(client)
        return client

    def async_client(self, **options: Any) -> httpx.AsyncClient:
        """An async HTTP client for this server; close it yourself."""
        return httpx.AsyncClient(base_url=self.url, verify=False, timeout=10, **options)

    def stop(self) -> None:
        stop_servers([self])

    def ask_to_stop(self) -> None:
        """Close its clients and tell uvicorn to shut down (see :meth:`wait_stopped`)."""
        for client in self._clients:
            client.close()
        self._server.should_exit = True
        with contextlib.suppress(RuntimeError):  # its loop has closed: it has stopped
            self._server.wake(self.loop)

    def wait_stopped(self) -> None:
        """Wait for the shutdown :meth:`ask_to_stop` began."""
        self._thread.join(timeout=10)
        self._socket.close()

    def call(self, function: Callable[[], Awaitable[T]], timeout: float = 5) -> T:
        """Run ``function()`` on the server's event loop and return its result."""
        assert self.loop is not None

        async def run() -> T:
            return await function()

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return future.result(timeout)

    def task_count(self) -> int:
        """Tasks alive on the server's loop (this probe's own task excluded)."""

        async def count() -> int:
            return len(asyncio.all_tasks()) - 1

        return self.call(count)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class WorkerThread:
    """A :class:`~daimon.distributed.Worker` on a loop of its own (as ``daimon worker`` runs).

    ``open_broker`` and ``open_store`` make its handles on that loop; both are closed at stop.
    """

    def __init__(
        self,
        agent: Agent,
        open_broker: Callable[[], Any],
        open_store: Callable[[], Any],
    ) -> None:
        self._agent = agent
        self._open_broker = open_broker
        self._open_store = open_store
        self._started = threading.Event()
        self._worker: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="daimon-worker", daemon=True)

    def _run(self) -> None:
        from daimon.distributed import Worker

        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            broker, store = self._open_broker(), self._open_store()
            worker = Worker(self._agent, broker, poll=0.2, store=store, concurrency=4)
            self._worker = worker
            self._started.set()
            try:
                await worker.run()
            finally:
                await broker.aclose()
                await store.aclose()

        asyncio.run(main())

    def start(self) -> WorkerThread:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the worker did not start")
        return self

    def stop(self) -> None:
        stop_workers([self])

    def ask_to_stop(self) -> None:
        """Tell the worker to stop (see :meth:`wait_stopped`)."""
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._worker.stop)

    def wait_stopped(self) -> None:
        """Wait for the worker's thread to end."""
        self._thread.join(timeout=15)


def stop_servers(servers: list[LiveServer]) -> None:
    """Stop ``servers`` side by side (each takes a tick of uvicorn's loop to notice)."""
    for server in servers:
        server.ask_to_stop()
    for server in servers:
        server.wait_stopped()


def stop_workers(workers: list[WorkerThread]) -> None:
    """Stop ``workers`` side by side (each finishes its current wait for a task first)."""
    for worker in workers:
        worker.ask_to_stop()
    for worker in workers:
        worker.wait_stopped()


@pytest.fixture
def live() -> Iterator[Callable[..., LiveServer]]:
    """``live(agents, **settings)``: a started server, stopped after the test."""
    servers: list[LiveServer] = []

    def start(agents: Agent | Mapping[str, Agent], **settings: Any) -> LiveServer:
        server = LiveServer(agents, **settings).start()
        servers.append(server)
        return server

    yield start
    stop_servers(servers)


_sdk_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    """Closes the clients :func:`sdk` made during the test."""
    yield
    while _sdk_clients:
        _sdk_clients.pop().close()


def sdk(server: LiveServer, token: str = TOKEN) -> openai.OpenAI:
    """The official ``openai`` client, pointed at ``server`` (no retries; closed after the test)."""
    import openai

    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)
    _sdk_clients.append(client)
    return client


# ---------------------------------------------------------------------------------- agents


class Calls:
    """What the agents' tools were asked, and what the models saw."""

    def __init__(self) -> None:
        self.tool_args: list[dict[str, Any]] = []
        self.requests: list[ChatRequest] = []


def calculator(calls: Calls, name: str = "calc") -> Agent:
    """Calls ``add(2, 3)``, then answers with the result."""

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        calls.tool_args.append({"a": a, "b": b})
        return a + b

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        results = [m.text for m in request.messages[-1:] if m.role is Role.TOOL]
        if not results:
            return ChatResponse.tool_use(ToolCall(id="c1", name="add", arguments={"a": 2, "b": 3}))
        return ChatResponse.reply(f"The answer is {results[0]}.")

    return Agent(FunctionModel(model), name=name, tools=[add], system_prompt="Be exact.")


def obedient(calls: Calls, name: str = "weather") -> Agent:
    """Obeys ``tool_choice``: calls the tool it names, or ``weather`` when a call is required;
    answers in text when it may ("auto", "none", unset) or once it has a tool's result."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        calls.tool_args.append({"city": city})
        return f"sunny in {city}"

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"It is {last.text}.")
        choice = request.tool_choice
        if choice in (None, "auto", "none"):
            return ChatResponse.reply(f"No tool called (tool_choice {choice}).")
        called = "weather" if choice == "required" else choice
        arguments = {"city": "Oslo"} if called == "weather" else {}
        return ChatResponse.tool_use(ToolCall(id="w1", name=called, arguments=arguments))

    return Agent(FunctionModel(model), name=name, tools=[weather])


def echo(calls: Calls, name: str = "echo") -> Agent:
    """Answers ``echo: <prompt> (<n> messages)``, n counting what the model was sent."""

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        last = request.messages[-1].text
        return ChatResponse.reply(f"echo: {last} ({len(request.messages)} messages)")

    return Agent(FunctionModel(model), name=name)


def streaming(
    chunks: list[str], *, delay: float = 0.0, then_call: str | None = None, name: str = "stream"
) -> FunctionModel:
    """A model that streams ``chunks`` (``delay`` apart), then optionally calls a tool."""

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        for chunk in chunks:
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(text=chunk)
        if then_call is not None:
            n = sum(1 for m in request.messages if m.role is Role.TOOL)
            yield ToolCallEnd(call=ToolCall(id=f"t{n}", name=then_call, arguments={}))

    return FunctionModel(stream_function=stream, model_name=name)


def sse_events(lines: list[str]) -> list[tuple[str, str]]:
    """``(event, data)`` per SSE frame (``("", data)`` for frames without an event line), and
    ``(":", text)`` per comment."""
    frames: list[tuple[str, str]] = []
    event, data = "", None
    for line in lines:
        if line.startswith(":"):
            frames.append((":", line[1:].strip()))
        elif line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
        elif line == "" and data is not None:
            frames.append((event, data))
            event, data = "", None
    return frames
