"""An AG-UI run as a worker runs it: from its spec, a later attempt going on from the log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from ag_ui_validate.pytest_plugin import assert_valid_agui

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, tool
from daimon._paused_runs import PausedRuns
from daimon._run_logs import END, JOB_KEY, LOG_KIND, STREAM_KEY
from daimon.core.cancel import CancelToken
from daimon.core.events import StreamEvent, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from daimon.core.tasks import AgentTask, TaskState
from daimon.distributed import Worker, new_task, wait_for_task
from daimon.distributed.brokers.memory import MemoryBroker
from daimon.models import FunctionModel
from daimon.multiagent import HandoffNetwork
from daimon.server._agui_events import agent_state
from daimon.server._agui_run import AguiJob, RunInput, _json_completion
from daimon.serverstate import MemoryStateStore

from .conftest import Calls, LiveServer
from .test_agui import final_state, guarded, kinds, run_input


def flaky(calls: Calls) -> Agent:
    """Calls ``note``, then fails (retryably) half-way through its next call's arguments; a
    second attempt calls ``note`` again and answers."""

    @tool
    def note(text: str) -> str:
        """Note something."""
        calls.tool_args.append({"text": text})
        return "noted"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        calls.requests.append(request)
        n = len(calls.requests)
        if request.messages[-1].role is not Role.TOOL:
            yield ToolCallEnd(call=ToolCall(id=f"c{n}", name="note", arguments={"text": "a"}))
        elif n == 2:
            yield TextDelta(text="Let me note more. ")
            yield ToolCallStart(call_id="c2", name="note")
            yield ToolCallDelta(call_id="c2", arguments_delta='{"te')
            raise ModelError("the provider hung up", retryable=True)
        else:
            yield TextDelta(text="Done.")

    return Agent(
        FunctionModel(stream_function=stream, model_name="flaky"), name="flaky", tools=[note]
    )


def _job(agent: Agent, store: MemoryStateStore) -> AguiJob:
    given = RunInput("t-1", "run-1", None, "Note it", None, {"theme": "dark"})
    return AguiJob(agent, "flaky", "flaky", given, PausedRuns(store, "agui"))


async def _logged_events(store: MemoryStateStore, stream: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for _, value in await store.read_after(LOG_KIND, stream, 0):
        if value != END:
            data = value.split("\ndata: ", 1)[1]
            events.append(json.loads(data))
    return events


async def test_a_later_attempt_goes_on_from_what_the_lost_one_logged() -> None:
    broker, store, calls = MemoryBroker(lease=1.0), MemoryStateStore(), Calls()
    agent = flaky(calls)
    metadata = {STREAM_KEY: "s1", JOB_KEY: _job(agent, store).spec()}
    await broker.submit(new_task("", task_id="s1", metadata=metadata))
    worker = Worker(agent, broker.handle(), poll=0.05, store=store, retry_delay=0.0)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            status = await wait_for_task(broker, "s1")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    assert status.state is TaskState.COMPLETED, status.error

    events = await _logged_events(store, "s1")
    assert_valid_agui(events)  # one RUN_STARTED; the lost call and message ended before going on
    seen = kinds(events)
    assert seen.count("RUN_STARTED") == 1 and seen[-1] == "RUN_FINISHED"
    attempt = seen.index("CUSTOM", seen.index("TOOL_CALL_ARGS", seen.index("TEXT_MESSAGE_END")))
    assert events[attempt]["name"] == "daimon.attempt"
    # the lost call's arguments made whole JSON, then it ends, marked lost
    assert events[attempt - 2] == {"type": "TOOL_CALL_ARGS", "toolCallId": "c2", "delta": '":null}'}
    lost = {"type": "TOOL_CALL_END", "toolCallId": "c2", "metadata": {"daimon": {"lost": True}}}
    assert events[attempt - 1] == lost
    assert calls.tool_args == [{"text": "a"}, {"text": "a"}]  # the run again, from its start
    state = final_state(events)
    assert state["theme"] == "dark"
    # the state goes on from the lost attempt's: its model call and tool call count
    assert (state["daimon"]["modelCalls"], state["daimon"]["toolCalls"]) == (3, 2)
    assert state["daimon"]["status"] == "finished"
    assert events[-1]["metadata"]["daimon"]["text"] == "Done."


async def test_a_run_whose_end_was_logged_is_not_run_again() -> None:
    calls = Calls()
    job = _job(flaky(calls), MemoryStateStore())
    ended = {"type": "RUN_FINISHED", "threadId": "t-1", "runId": "run-1"}
    logged = [
        {"type": "RUN_STARTED", "threadId": "t-1", "runId": "run-1"},
        {**ended, "metadata": {"daimon": {"text": "Done."}}},
    ]
    job.resume([f": at 1.{n}\ndata: {json.dumps(e)}\n\n" for n, e in enumerate(logged, 1)])
    assert [frame async for frame in job.frames(CancelToken())] == []
    assert calls.requests == []
    assert job.response is not None and job.response.text == "Done."


def _message_left_open(agent: str) -> list[dict[str, Any]]:
    """The events a lost attempt logged: its run started, a text message begun."""
    return [
        {"type": "RUN_STARTED", "threadId": "t-1", "runId": "run-1"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"daimon": agent_state(agent)}},
        {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "H"},
    ]


async def test_a_message_the_lost_attempt_left_open_is_ended_first() -> None:
    job = _job(
        Agent(FunctionModel(lambda _: ChatResponse.reply("Hi.")), name="flaky"), MemoryStateStore()
    )
    logged = _message_left_open("flaky")
    job.resume([f"data: {json.dumps(event)}\n\n" for event in logged])
    frames = [frame.decode() async for frame in job.frames(CancelToken())]
    events = [*logged, *(json.loads(f.removeprefix("data: ")) for f in frames)]
    assert_valid_agui(events)
    assert kinds(events)[4:7] == ["TEXT_MESSAGE_END", "CUSTOM", "TEXT_MESSAGE_START"]
    assert kinds(events).count("RUN_STARTED") == 1 and kinds(events)[-1] == "RUN_FINISHED"


async def test_a_network_is_not_run_again_its_lost_message_ended_then_run_lost() -> None:
    calls = Calls()

    def answer(request: ChatRequest) -> str:
        calls.requests.append(request)
        return "Hi."

    desk = Agent(FunctionModel(answer), name="desk")
    network = HandoffNetwork({"desk": desk}, start="desk")  # its agents' runs resume nothing
    given = RunInput("t-1", "run-1", None, "Note it", None, {"theme": "dark"})
    job = AguiJob(network, "desk", "desk", given, PausedRuns(MemoryStateStore(), "agui"))
    assert not job.retries
    logged = _message_left_open("desk")
    job.resume([f"data: {json.dumps(event)}\n\n" for event in logged])
    frames = [frame.decode() async for frame in job.frames(CancelToken())]
    events = [*logged, *(json.loads(f.removeprefix("data: ")) for f in frames)]
    assert_valid_agui(events)
    assert kinds(events)[4:] == ["TEXT_MESSAGE_END", "CUSTOM", "STATE_DELTA", "RUN_ERROR"]
    assert events[-1]["code"] == "RunLost" and "could run twice" in events[-1]["message"]
    assert final_state(events)["daimon"]["status"] == "failed"
    assert calls.requests == []  # the network did not run again
    assert job.response is not None and job.response.text == ""


async def test_a_snapshot_the_lost_attempt_did_not_log_is_sent_first() -> None:
    job = _job(
        Agent(FunctionModel(lambda _: ChatResponse.reply("Hi.")), name="f"), MemoryStateStore()
    )
    started = {"type": "RUN_STARTED", "threadId": "t-1", "runId": "run-1"}
    job.resume([f"data: {json.dumps(started)}\n\n"])
    frames = [frame.decode() async for frame in job.frames(CancelToken())]
    events = [started, *(json.loads(f.removeprefix("data: ")) for f in frames)]
    assert_valid_agui(events)
    assert kinds(events)[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM"]
    assert final_state(events)["daimon"]["status"] == "finished"


def test_the_arguments_of_a_lost_call_are_made_whole_json() -> None:
    whole = '{"a": "x\\u00e9\\\\", "n": [1, -2.5e3, true, false, null, {"b": "}"}], "c": {}}'
    for cut in range(1, len(whole) + 1):
        prefix = whole[:cut]
        json.loads(prefix + _json_completion(prefix))


def test_the_run_imports_without_the_web_libraries() -> None:
    code = (
        "import sys\n"
        "import daimon.server._agui_run\n"
        "web = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette'))\n"
        "assert not web, web\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


class _Down(MemoryBroker):
    """A broker that cannot be reached."""

    async def submit(self, task: AgentTask) -> str:
        raise ConnectionError("the broker is down")


def test_a_resume_the_broker_cannot_take_is_503_and_the_paused_run_stays_kept(
    live: Callable[..., LiveServer],
) -> None:
    calls, store = Calls(), MemoryStateStore()
    agent = guarded(calls)
    server = live(agent, store=store, broker=_Down(lease=1.0))
    paused = PausedRuns(store, "agui")

    async def pause() -> str:
        response = await agent.prompt("Send 5", session_id="t-down")
        await paused.keep("bank", response, "t-down")
        return response.pending_approvals[0].id

    interrupt = server.call(pause)
    resume = [{"interruptId": interrupt, "status": "resolved"}]
    answer = server.client().post("/agui", json=run_input(None, thread="t-down", resume=resume))
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "broker_unavailable"
    assert server.call(lambda: paused.get("bank", "t-down")) is not None  # resumable still
    assert calls.tool_args == []
