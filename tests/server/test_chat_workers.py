"""Chat Completions runs on workers (``daimon serve --broker ... --store ...``).

First the job a worker runs for a completion, in-process (a memory broker and store); then two
replicas and two workers (a Redis broker, the state on PostgreSQL) driven by the official
``openai`` client. The agents note the thread each model call runs in: ``daimon-worker`` is a
worker's, ``daimon-server`` a replica's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import openai
import pytest

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, Usage, tool
from daimon._paused_runs import PausedRuns
from daimon._run_logs import END, JOB_KEY, LOG_KIND, STREAM_KEY, LogWriter, frame_fields
from daimon.core import TaskState, TaskStatus
from daimon.core.cancel import CancelToken
from daimon.core.events import StreamEvent, TextDelta, ToolCallEnd
from daimon.core.state_store import StateStore
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.server._chat_run import ChatRun
from daimon.server._client_tools import RunStart
from daimon.serverstate import MemoryStateStore

from .conftest import TOKEN, LiveServer, WorkerThread, sdk, sse_events, stop_workers
from .test_client_tools import LOCATION_TOOL

# ------------------------------------------------------------------------------ the job


def flaky(fail: dict[str, int], *, after: int) -> tuple[Agent, list[str]]:
    """Streams ``a``, ``b``, ``c``; its first ``fail["n"]`` calls fail (retryable) after
    ``after`` deltas. Returns the agent and the prompts its model was asked."""
    asked: list[str] = []

    async def talk(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        asked.append(request.messages[-1].text)
        for n, piece in enumerate("abc"):
            if n == after and fail["n"] > 0:
                fail["n"] -= 1
                raise ModelError("the provider hung up", retryable=True)
            yield TextDelta(text=piece)

    def answer(request: ChatRequest) -> ChatResponse:
        asked.append(request.messages[-1].text)
        if fail["n"] > 0:
            fail["n"] -= 1
            raise ModelError("the provider hung up", retryable=True)
        return ChatResponse.reply("abc")

    return Agent(FunctionModel(answer, stream_function=talk), name="flaky"), asked


async def run_job(agent: Agent, *, stream: bool) -> tuple[TaskStatus, list[str]]:
    """Run one completion as a worker's task (failed attempts tried again at once); its
    status and the data of its log's frames (``END`` last)."""
    broker, store = MemoryBroker(lease=1.0), MemoryStateStore()
    run = ChatRun(
        agent=agent,
        model="flaky",
        conversation=RunStart("hi", [], None),
        paused=PausedRuns(store, "chat"),
        stream=stream,
    )
    metadata = {STREAM_KEY: run.id, JOB_KEY: run.spec()}
    await broker.submit(new_task("", task_id=run.id, metadata=metadata))
    worker = Worker(agent, broker.handle(), poll=0.05, store=store, retry_delay=0.0)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            status = await wait_for_task(broker, run.id)
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    logged = await store.read_after(LOG_KIND, run.id, 0)
    data = [value if value == END else value.split("\n", 1)[1] for _, value in logged]
    return status, data


def contents(frames: list[str]) -> list[Any]:
    """The ``delta`` (or error) each streamed frame holds; ``[DONE]`` and ``END`` as such."""
    out: list[Any] = []
    for frame in frames:
        data = frame_fields(frame)[1]
        if data is None:
            out.append("END" if frame == END else "[DONE]")
        else:
            out.append(data["choices"][0]["delta"] if "choices" in data else data)
    return out


async def test_a_stream_lost_after_its_text_began_ends_with_run_lost() -> None:
    agent, asked = flaky({"n": 1}, after=2)
    status, frames = await run_job(agent, stream=True)
    got = contents(frames)
    assert got[:3] == [{"role": "assistant", "content": ""}, {"content": "a"}, {"content": "b"}]
    error = got[3]["error"]
    assert error["type"] == "RunLost"
    assert "cannot be resumed: send the request again" in error["message"]
    assert got[4:] == ["END"]
    assert asked == ["hi"]  # the later attempt did not run the agent again
    assert status.state is TaskState.COMPLETED


async def test_a_stream_lost_before_its_text_goes_on_from_the_start() -> None:
    agent, asked = flaky({"n": 1}, after=0)
    status, frames = await run_job(agent, stream=True)
    got = contents(frames)
    assert got[0] == {"role": "assistant", "content": ""}  # sent once
    assert got[1:4] == [{"content": piece} for piece in "abc"]
    assert got[-2:] == ["[DONE]", "END"]
    assert asked == ["hi", "hi"]
    assert status.state is TaskState.COMPLETED


async def test_a_completion_that_failed_is_run_again_whole() -> None:
    agent, asked = flaky({"n": 1}, after=0)
    status, frames = await run_job(agent, stream=False)
    assert len(frames) == 2 and frames[-1] == END
    completion = frame_fields(frames[0])[1]
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == "abc"
    assert asked == ["hi", "hi"]
    assert status.state is TaskState.COMPLETED


async def test_an_attempt_after_the_last_frame_has_nothing_to_do() -> None:
    agent, asked = flaky({"n": 0}, after=0)
    store = MemoryStateStore()
    run = ChatRun(agent, "flaky", RunStart("hi", [], None), PausedRuns(store, "chat"))
    run.resume(['data: {"id":"chatcmpl-x","object":"chat.completion"}\n\n'])
    assert [frame async for frame in run.frames(CancelToken())] == []
    assert run.response is not None and asked == []


def test_the_chat_run_imports_without_the_web_libraries() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import daimon.server._chat_run\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'starlette', 'pydantic'))\n"
        "assert not web, web\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------ on workers


class Workers:
    """``workers(agent, **settings)``: two replicas of ``agent`` sending their runs to two
    workers (a Redis broker), the state on PostgreSQL; stopped after the test."""

    def __init__(self, live: Callable[..., LiveServer], redis_url: str, make_store: Any) -> None:
        self._live = live
        self._redis_url = redis_url
        self._make_store = make_store
        self.queue = f"chat-{uuid.uuid4().hex}"
        self.started: list[tuple[LiveServer, StateStore]] = []
        self.threads: list[WorkerThread] = []

    def _broker(self) -> Any:
        from daimon.distributed import broker_from_url

        return broker_from_url(self._redis_url, queue=self.queue, lease=5.0)

    def __call__(self, agent: Agent, **settings: Any) -> tuple[LiveServer, LiveServer]:
        for _ in range(2):
            store = self._make_store()
            options = {"broker": self._redis_url, "queue": self.queue, **settings}
            self.started.append((self._live(agent, token=TOKEN, store=store, **options), store))
        made = (WorkerThread(agent, self._broker, self._make_store) for _ in range(2))
        self.threads.extend(thread.start() for thread in made)
        return self.started[0][0], self.started[1][0]

    def settled(self, task_id: str) -> TaskState:
        """How the task ``task_id`` ended (waiting for it to)."""

        async def settle() -> TaskState:
            broker = self._broker()
            try:
                async with asyncio.timeout(5):
                    return (await wait_for_task(broker, task_id, poll=0.02)).state
            finally:
                await broker.aclose()

        return asyncio.run(settle())

    def logged(self, stream: str) -> list[str]:
        """The values of the log ``stream``, in order."""

        async def read() -> list[str]:
            store = self._make_store()
            try:
                return [value for _, value in await store.read_after(LOG_KIND, stream, 0)]
            finally:
                await store.aclose()

        return asyncio.run(read())

    def stop(self) -> None:
        stop_workers(self.threads)
        for server, store in self.started:
            server.call(store.aclose)


@pytest.fixture
def workers(request: pytest.FixtureRequest, live: Callable[..., LiveServer]) -> Iterator[Workers]:
    from daimon.serverstate.postgres import PostgresStateStore

    url = request.getfixturevalue("postgres_url")
    prefix = request.getfixturevalue("postgres_prefix")
    fleet = Workers(
        live, request.getfixturevalue("redis_url"), lambda: PostgresStateStore(url, prefix=prefix)
    )
    yield fleet
    fleet.stop()


class Threads:
    """The threads the model and the tools ran in."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.tool_args: list[dict[str, Any]] = []
        self.deltas: list[int] = []
        self.stopped = threading.Event()

    def note(self) -> None:
        self.names.append(threading.current_thread().name)


def weather(seen: Threads) -> Agent:
    """Says a sentence, calls ``weather`` (and the client's ``get_location`` when sent), then
    answers with the results; usage on each model call."""

    @tool
    async def weather(city: str) -> str:  # async: it runs in the run's own thread
        """The weather in a city."""
        seen.note()
        seen.tool_args.append({"city": city})
        return f"sunny in {city}"

    def calls(request: ChatRequest) -> list[ToolCall]:
        found = [ToolCall(id="w1", name="weather", arguments={"city": "Oslo"})]
        if any(spec.name == "get_location" for spec in request.tools):
            found.append(ToolCall(id="loc1", name="get_location", arguments={}))
        return found

    def answer(request: ChatRequest) -> str:
        return " | ".join(m.text for m in request.messages if m.role is Role.TOOL)

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        seen.note()
        if request.messages[-1].role is Role.TOOL:
            yield TextDelta(text=answer(request))
            return
        yield TextDelta(text="Let me check.")
        for call in calls(request):
            yield ToolCallEnd(call=call)

    def generate(request: ChatRequest) -> ChatResponse:
        seen.note()
        usage = Usage(input_tokens=7, output_tokens=3, requests=1)
        if request.messages[-1].role is Role.TOOL:
            return ChatResponse.reply(answer(request), usage=usage)
        return ChatResponse.tool_use(*calls(request), text="Let me check.", usage=usage)

    model = FunctionModel(generate, stream_function=stream, model_name="fake-weather")
    return Agent(model, name="weather", tools=[weather])


USER: Any = [{"role": "user", "content": "Weather in Oslo?"}]


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_completion_runs_on_a_worker(workers: Workers) -> None:
    seen = Threads()
    a, _b = workers(weather(seen))
    completion = sdk(a).chat.completions.create(model="weather", messages=USER)
    assert seen.names == ["daimon-worker"] * 3  # model, tool, model: none on the replica
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("stop", "sunny in Oslo")
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.total_tokens) == (14, 20)


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_streamed_completion_runs_on_a_worker(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    ending = LogWriter.end

    async def late_end(self: LogWriter, last: bytes | None = None) -> None:
        await asyncio.sleep(0.3)  # a slow store: the client has [DONE] and goes first
        await ending(self, last)

    monkeypatch.setattr(LogWriter, "end", late_end)
    seen = Threads()
    a, b = workers(weather(seen))
    chunks = list(
        sdk(a).chat.completions.create(
            model="weather", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    assert seen.names == ["daimon-worker"] * 3
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me check.\n\nsunny in Oslo"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    # the client closes the connection once it has [DONE]: that does not cancel the run
    assert workers.settled(chunks[0].id) is TaskState.COMPLETED
    logged = workers.logged(chunks[0].id)
    assert logged[-2].endswith("data: [DONE]\n\n") and logged[-1] == END, logged
    assert not [value for value in logged if "RunCancelled" in value], logged  # no cancel
    # on the wire, as a replica's own stream: no event ids, no attempt marks, [DONE] last
    body = {"model": "weather", "messages": USER, "stream": True}
    http = b.client(headers={"authorization": f"Bearer {TOKEN}"})
    with http.stream("POST", "/v1/chat/completions", json=body) as answer:
        lines = list(answer.iter_lines())
    assert not [line for line in lines if line.startswith(("id:", ":"))], lines
    assert sse_events(lines)[-1] == ("", "[DONE]")
    assert seen.names == ["daimon-worker"] * 6


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_client_tool_call_from_a_worker_is_answered_on_the_other_replica(
    workers: Workers,
) -> None:
    seen = Threads()
    a, b = (sdk(server) for server in workers(weather(seen)))
    messages: list[Any] = list(USER)
    first = a.chat.completions.create(model="weather", messages=messages, tools=[LOCATION_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    [call] = choice.message.tool_calls
    assert (call.id, call.function.name) == ("loc1", "get_location")
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Bergen"},
    ]
    chunks = list(
        b.chat.completions.create(
            model="weather", messages=messages, tools=[LOCATION_TOOL], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "sunny in Oslo | Bergen"
    assert seen.tool_args == [{"city": "Oslo"}]  # the server's tool ran once
    assert seen.names == ["daimon-worker"] * 3
    with pytest.raises(openai.BadRequestError) as refused:  # answered already
        a.chat.completions.create(model="weather", messages=messages, tools=[LOCATION_TOOL])
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "tool_call_not_found"


def moody(seen: Threads) -> Agent:
    """By prompt: ``fail`` (a provider error after some text), ``refund`` (a tool that needs an
    approval), ``slow`` (400 deltas 10 ms apart, or a 5 s wait)."""

    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        seen.tool_args.append({"order": order})
        return "refunded"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        seen.note()
        prompt = request.messages[-1].text
        if prompt == "refund":
            yield ToolCallEnd(call=ToolCall(id="r1", name="refund", arguments={"order": "A"}))
        elif prompt == "fail":
            yield TextDelta(text="partial ")
            raise ModelError("provider fell over")
        else:
            try:
                for n in range(400):
                    seen.deltas.append(n)
                    yield TextDelta(text=f"t{n} ")
                    await asyncio.sleep(0.01)
            finally:
                seen.stopped.set()

    async def generate(request: ChatRequest) -> ChatResponse:
        seen.note()
        prompt = request.messages[-1].text
        if prompt == "refund":
            return ChatResponse.tool_use(ToolCall(id="r1", name="refund", arguments={"order": "A"}))
        if prompt == "fail":
            raise ModelError("provider fell over")
        await asyncio.sleep(5)
        return ChatResponse.reply("too late")

    return Agent(FunctionModel(generate, stream_function=stream), name="moody", tools=[refund])


def _ask(prompt: str, stream: bool = False) -> dict[str, Any]:
    return {"model": "moody", "messages": [{"role": "user", "content": prompt}], "stream": stream}


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_runs_that_fail_on_a_worker_answer_as_on_a_replica(workers: Workers) -> None:
    seen = Threads()
    a, b = workers(moody(seen), request_timeout=1.0)
    http = a.client(headers={"authorization": f"Bearer {TOKEN}"})
    failed = http.post("/v1/chat/completions", json=_ask("fail"))
    assert failed.status_code == 502, failed.text
    assert failed.json()["error"] == {"type": "ModelError", "message": "provider fell over"}
    with pytest.raises(openai.APIError, match="provider fell over"):
        for _chunk in sdk(b).chat.completions.create(**_ask("fail", stream=True)):
            pass
    paused = http.post("/v1/chat/completions", json=_ask("refund"))
    assert paused.status_code == 409, paused.text
    assert paused.json()["error"]["type"] == "approval_required"
    assert "use POST /prompt" in paused.json()["error"]["message"]
    with http.stream("POST", "/v1/chat/completions", json=_ask("refund", True)) as answer:
        frames = sse_events(list(answer.iter_lines()))
    assert json.loads(frames[-1][1])["error"]["type"] == "approval_required"
    assert seen.tool_args == []
    late = http.post("/v1/chat/completions", json=_ask("slow"))
    assert late.status_code == 504, late.text
    assert late.json()["error"]["type"] == "TimeoutError"
    assert seen.names and set(seen.names) == {"daimon-worker"}


@pytest.mark.service("redis")
@pytest.mark.service("postgres")
def test_a_client_that_leaves_stops_the_run_on_its_worker(workers: Workers) -> None:
    seen = Threads()
    a, _b = workers(moody(seen))
    http = a.client(headers={"authorization": f"Bearer {TOKEN}"})
    with http.stream("POST", "/v1/chat/completions", json=_ask("slow", True)) as answer:
        for line in answer.iter_lines():
            if "t1 " in line:
                break  # the connection closes
    assert seen.stopped.wait(3)  # the model's stream was closed, well before its 400 deltas
    assert len(seen.deltas) < 400
    assert seen.names == ["daimon-worker"]
