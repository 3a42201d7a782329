"""AG-UI 1.0 over real HTTP, every stream checked by the ``ag-ui-validate`` conformance validator.

Each run is posted to a uvicorn server on loopback by the validator's own transport
(``ag_ui_validate.transport.validate_endpoint``), which reads the SSE stream as a client does and
reports every conformance finding; the tests then look at the events it received.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import jsonpatch
import pytest
from ag_ui.core import RunAgentInput
from ag_ui_validate.transport import TransportOptions, validate_endpoint

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, Usage, tool
from daimon.core.events import StreamEvent, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from daimon.models import FunctionModel
from daimon.orchestration import DagBuilder

from .conftest import TOKEN, Calls, LiveServer, echo
from .test_agents import desk, team
from .test_flows import fragile_dag, research, writer

Live = Callable[..., LiveServer]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def run_input(text: str | None = "Hello", thread: str = "thread-1", **more: Any) -> dict[str, Any]:
    messages = [] if text is None else [{"id": "m1", "role": "user", "content": text}]
    return {
        "threadId": thread,
        "runId": f"run-{uuid.uuid4().hex[:8]}",
        "messages": messages,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **more,
    }


def agui(server: LiveServer, body: dict[str, Any], path: str = "/agui") -> list[dict[str, Any]]:
    """Post ``body`` through the validator's transport; the events, once it found no error."""
    received: list[str] = []

    async def check() -> Any:
        options = TransportOptions(
            input=body,
            headers=AUTH if server.settings.token else None,
            timeout_ms=20_000,
            on_event=lambda raw, _: received.append(raw),
        )
        return await validate_endpoint(server.url + path, options)

    result = asyncio.run(check())
    problems = [d for d in result.report.diagnostics if d.severity == "error"]
    assert result.status == 200 and result.content_type.startswith("text/event-stream")
    assert not problems, "\n".join(f"{d.rule} at {d.event_index}: {d.message}" for d in problems)
    RunAgentInput.model_validate(body)  # the tests send what the spec calls valid
    return [json.loads(raw) for raw in received]


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def final_state(events: list[dict[str, Any]]) -> Any:
    """The state a client holds at the end: the snapshot with every delta applied."""
    state: Any = None
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])
    return state


def streaming_tools() -> Agent:
    """Streams text, then a ``lookup`` call whose arguments arrive in two pieces; then answers."""

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: 12 C"

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        if request.messages[-1].role is Role.TOOL:
            yield TextDelta(text=f"It is {request.messages[-1].text}.")
            return
        yield TextDelta(text="Let me look. ")
        yield ToolCallStart(call_id="call-1", name="lookup")
        yield ToolCallDelta(call_id="call-1", arguments_delta='{"city": ')
        yield ToolCallDelta(call_id="call-1", arguments_delta='"Oslo"}')
        yield ToolCallEnd(call=ToolCall(id="call-1", name="lookup", arguments={"city": "Oslo"}))

    model = FunctionModel(stream_function=stream, model_name="stream-model")
    return Agent(model, name="weather", tools=[lookup])


def guarded(calls: Calls) -> Agent:
    """Calls ``transfer`` (which needs approval), then reports what the tool said."""

    @tool(requires_approval=True)
    def transfer(amount: int) -> str:
        """Move money."""
        calls.tool_args.append({"amount": amount})
        return f"moved {amount}"

    def model(request: ChatRequest) -> ChatResponse:
        calls.requests.append(request)
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ChatResponse.reply(f"Done: {last.text}")
        return ChatResponse.tool_use(ToolCall(id="tx-1", name="transfer", arguments={"amount": 5}))

    return Agent(FunctionModel(model, model_name="bank-model"), name="bank", tools=[transfer])


# ------------------------------------------------------------------------------ text, usage


def test_an_agent_run_streams_text_state_and_usage_and_finishes_with_success(live: Live) -> None:
    server = live({"writer": writer()}, token=TOKEN)
    events = agui(server, run_input("Hi there", state={"theme": "dark"}, parentRunId="run-0"))

    assert kinds(events)[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert events[0]["threadId"] == "thread-1" and events[0]["protocolVersion"] == "1.0"
    assert events[0]["parentRunId"] == "run-0"
    assert kinds(events)[-1] == "RUN_FINISHED"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "draft: Hi there"
    finished = events[-1]
    assert finished["outcome"] == {"type": "success"} and finished["result"] == "draft: Hi there"
    assert finished["usage"] == [
        {"model": "writer-model", "inputTokens": 7, "outputTokens": 3, "totalTokens": 10}
        | {"cachedInputTokens": 0, "cacheWriteInputTokens": 0}
    ]
    # The client's state comes back, with the run's own beside it, kept up to date by deltas.
    state = final_state(events)
    assert state["theme"] == "dark"
    assert state["daimon"]["agent"] == "writer" and state["daimon"]["status"] == "finished"
    assert state["daimon"]["modelCalls"] == 1
    assert state["daimon"]["usage"] == {"inputTokens": 7, "outputTokens": 3}
    assert any(e["type"] == "CUSTOM" and e["name"] == "daimon.usage" for e in events)


def test_usage_reports_cached_and_cache_write_tokens(live: Live) -> None:
    def model(request: ChatRequest) -> ChatResponse:
        usage = Usage(
            input_tokens=50, output_tokens=5, cached_tokens=30, cache_write_tokens=12, requests=1
        )
        return ChatResponse.reply("ok", usage=usage)

    server = live(Agent(FunctionModel(model, model_name="cacher"), name="cacher"), token=TOKEN)
    events = agui(server, run_input("Hi"))
    finished = events[-1]
    assert finished["usage"][0]["cachedInputTokens"] == 30
    assert finished["usage"][0]["cacheWriteInputTokens"] == 12
    assert finished["metadata"]["daimon"]["usage"]["cache_write_tokens"] == 12
    (call,) = [e["value"] for e in events if e.get("name") == "daimon.usage"]
    assert (call["cachedTokens"], call["cacheWriteTokens"]) == (30, 12)


def test_the_thread_is_the_session_so_a_second_run_continues_the_conversation(
    live: Live,
) -> None:
    calls = Calls()
    server = live({"echo": echo(calls)})
    agui(server, run_input("first", thread="t-42"))
    events = agui(server, run_input("second", thread="t-42"), path="/agui/echo")

    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "echo: second (3 messages)"  # the first turn came from the agent's memory


# ------------------------------------------------------------------------------ tool calls


def test_tool_calls_stream_their_arguments_and_results(live: Live) -> None:
    server = live({"weather": streaming_tools()})
    events = agui(server, run_input("Weather in Oslo?"))

    order = [k for k in kinds(events) if k.startswith(("TOOL_CALL", "TEXT_MESSAGE"))]
    assert order == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",  # text closes when the call starts
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallId"] == "call-1" and start["toolCallName"] == "lookup"
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"city": "Oslo"}
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "Oslo: 12 C" and result["toolCallId"] == "call-1"
    assert result["metadata"]["daimon"]["isError"] is False
    assert final_state(events)["daimon"]["toolCalls"] == 1


# ------------------------------------------------------------------- approvals as interrupts


def test_an_approval_is_an_interrupt_and_the_client_resumes_it(live: Live) -> None:
    calls = Calls()
    server = live({"bank": guarded(calls)})
    paused = agui(server, run_input("Send 5", thread="t-bank"))

    outcome = paused[-1]["outcome"]
    assert paused[-1]["type"] == "RUN_FINISHED" and outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["reason"] == "tool_approval" and interrupt["toolCallId"] == "tx-1"
    assert "TOOL_CALL_RESULT" not in kinds(paused) and calls.tool_args == []
    assert final_state(paused)["daimon"]["status"] == "paused"

    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    resumed = agui(server, run_input(None, thread="t-bank", resume=resume))

    # The resumed run first tells the conversation so far, the paused call included.
    snapshot = next(e for e in resumed if e["type"] == "MESSAGES_SNAPSHOT")
    assert [m["role"] for m in snapshot["messages"]] == ["user", "assistant"]
    assert snapshot["messages"][1]["toolCalls"][0]["id"] == "tx-1"

    assert calls.tool_args == [{"amount": 5}]
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "tx-1" and result["content"] == "moved 5"
    text = "".join(e["delta"] for e in resumed if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Done: moved 5"
    assert resumed[-1]["outcome"] == {"type": "success"}
    # Answered once: the thread is no longer paused.
    again = server.client().post("/agui", json=run_input(None, thread="t-bank", resume=resume))
    assert again.status_code == 409


def test_a_cancelled_interrupt_rejects_the_call_and_the_model_is_told(live: Live) -> None:
    calls = Calls()
    server = live({"bank": guarded(calls)})
    paused = agui(server, run_input("Send 5", thread="t-no"))
    interrupt = paused[-1]["outcome"]["interrupts"][0]

    resume = [{"interruptId": interrupt["id"], "status": "cancelled"}]
    resumed = agui(server, run_input(None, thread="t-no", resume=resume))

    assert calls.tool_args == []  # never ran
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert "cancelled" in result["content"]
    assert resumed[-1]["outcome"] == {"type": "success"}


def test_bad_resumes_are_refused_and_the_paused_run_is_kept(live: Live) -> None:
    calls = Calls()
    server = live({"bank": guarded(calls), "echo": echo(calls)})
    client = server.client()

    # Nothing paused on this thread: 409.
    resume = [{"interruptId": "tx-1", "status": "resolved"}]
    reply = client.post("/agui", json=run_input(None, thread="idle", resume=resume))
    assert reply.status_code == 409 and reply.json()["error"]["type"] == "not_paused"

    paused = agui(server, run_input("Send 5", thread="t-bad"))
    interrupt_id = paused[-1]["outcome"]["interrupts"][0]["id"]
    # An unknown interrupt id, an answer the interrupt cannot take, no answer at all: 422.
    for entries, words in [
        ([{"interruptId": "nope", "status": "resolved"}], "not an interrupt"),
        ([{"interruptId": interrupt_id, "status": "resolved", "payload": "yes"}], "payload"),
        ([{"interruptId": interrupt_id, "status": "maybe"}], "status"),
    ]:
        reply = client.post("/agui", json=run_input(None, thread="t-bad", resume=entries))
        assert reply.status_code == 422, reply.text
        assert words in reply.json()["error"]["message"]
    # A new run while the thread waits for answers: 409.
    reply = client.post("/agui", json=run_input("something else", thread="t-bad"))
    assert reply.status_code == 409 and reply.json()["error"]["type"] == "run_paused"

    # Nothing was lost: the right answer still resumes the run.
    resume = [{"interruptId": interrupt_id, "status": "resolved"}]
    resumed = agui(server, run_input(None, thread="t-bad", resume=resume))
    assert resumed[-1]["outcome"] == {"type": "success"} and calls.tool_args == [{"amount": 5}]


def test_paused_runs_kept_are_bounded_the_oldest_forgotten(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daimon._paused_runs import PausedRuns
    from daimon.serverstate import MemoryStateStore

    def bounded(store: object, front: str, ttl: float | None) -> PausedRuns:
        return PausedRuns(MemoryStateStore(limit=1), front, ttl)

    monkeypatch.setattr("daimon.server._agui.PausedRuns", bounded)
    calls = Calls()
    server = live({"bank": guarded(calls)})
    first = agui(server, run_input("Send 5", thread="t-old"))
    second = agui(server, run_input("Send 5", thread="t-new"))  # the first is forgotten

    resume = [{"interruptId": first[-1]["outcome"]["interrupts"][0]["id"], "status": "resolved"}]
    reply = server.client().post("/agui", json=run_input(None, thread="t-old", resume=resume))
    assert reply.status_code == 409 and reply.json()["error"]["type"] == "not_paused"
    assert "'bank' waits for thread 't-old'" in reply.json()["error"]["message"]
    assert "is no longer kept" in reply.json()["error"]["message"]
    assert calls.tool_args == []  # nothing ran unapproved

    resume = [{"interruptId": second[-1]["outcome"]["interrupts"][0]["id"], "status": "resolved"}]
    resumed = agui(server, run_input(None, thread="t-new", resume=resume))
    assert resumed[-1]["outcome"] == {"type": "success"} and calls.tool_args == [{"amount": 5}]


def test_a_supervisor_and_a_handoff_network_are_served_too(live: Live) -> None:
    server = live({"team": team(Calls()), "desk": desk()})
    events = agui(server, run_input("hello", thread="t-team"), path="/agui/team")

    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "delegate"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "team: echo: hello (1 messages)"
    assert final_state(events)["daimon"]["agent"] == "team"

    events = agui(server, run_input("I want a refund", thread="t-desk"), path="/agui/desk")
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}


class Unresumable:
    """A promptable without ``resume``: an agent's runs, and nothing to continue them."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.name = agent.name

    async def prompt(self, input: Any, /, **options: Any) -> Any:
        return await self.agent.prompt(input, **options)

    def prompt_stream(self, input: Any, /, **options: Any) -> AsyncIterator[StreamEvent]:
        return self.agent.prompt_stream(input, **options)


def test_a_promptable_that_cannot_resume_fails_its_paused_run(live: Live) -> None:
    calls = Calls()
    server = live({"bank": Unresumable(guarded(calls))})
    events = agui(server, run_input("Send 5", thread="t-u"))

    assert kinds(events)[-1] == "RUN_ERROR" and events[-1]["code"] == "approval_required"
    assert calls.tool_args == []
    # Nothing waits on the thread: the next run is an ordinary one.
    assert kinds(agui(server, run_input("Send 5", thread="t-u")))[-1] == "RUN_ERROR"


# -------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"runId": "r", "messages": []}, 422, "threadId"),
        ({"threadId": "t", "runId": "r", "messages": "hi"}, 422, "messages"),
        (run_input(None), 422, "last message must be the user's prompt"),
        (
            run_input(
                "hi", messages=[{"id": "a", "role": "assistant", "content": "hello"}], resume=None
            ),
            422,
            "got assistant",
        ),
        (
            run_input("hi", tools=[{"name": "pick", "description": "d", "parameters": []}]),
            422,
            "tools: client tool 'pick': parameters must be a JSON Schema of type 'object'",
        ),
    ],
)
def test_malformed_input_is_a_clear_4xx_before_any_event(
    live: Live, body: Any, status: int, words: str
) -> None:
    server = live({"echo": echo(Calls())})
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = server.client().post(
        "/agui", content=content, headers={"content-type": "application/json"}
    )
    assert reply.status_code == status, reply.text
    assert words in reply.json()["error"]["message"]


def test_an_unknown_agent_is_404_and_the_token_is_required(live: Live) -> None:
    server = live({"echo": echo(Calls())}, token=TOKEN)
    client = server.client()
    assert client.post("/agui", json=run_input()).status_code == 401
    reply = client.post("/agui/nobody", json=run_input(), headers=AUTH)
    assert reply.status_code == 404 and "no agent named 'nobody'" in reply.text


def test_a_failing_run_ends_with_run_error(live: Live) -> None:
    def model(request: ChatRequest) -> ChatResponse:
        raise ModelError("the provider is down", status_code=503)

    server = live({"broken": Agent(FunctionModel(model), name="broken")})
    events = agui(server, run_input("hi"))

    assert kinds(events)[0] == "RUN_STARTED" and kinds(events)[-1] == "RUN_ERROR"
    assert "the provider is down" in events[-1]["message"]
    assert events[-1]["code"] == "ModelError"


def test_a_run_past_the_request_timeout_ends_with_run_error(live: Live) -> None:
    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="Thinking")
        await asyncio.sleep(30)
        yield TextDelta(text=" (never)")

    slow = Agent(FunctionModel(stream_function=stream, model_name="slow"), name="slow")
    server = live({"slow": slow}, request_timeout=0.5)
    events = agui(server, run_input("hi"))

    assert kinds(events)[-1] == "RUN_ERROR" and events[-1]["code"] == "TimeoutError"
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Thinking"


def test_a_client_that_leaves_cancels_its_run_after_the_stream_grace(live: Live) -> None:
    started, cancelled = threading.Event(), threading.Event()

    async def stream(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta(text="Thinking")
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield TextDelta(text=" (never)")

    slow = Agent(FunctionModel(stream_function=stream, model_name="slow"), name="slow")
    server = live({"slow": slow}, stream_grace=0.3)
    with (
        server.client() as client,
        client.stream("POST", "/agui", json=run_input("hi")) as reply,
    ):
        assert reply.status_code == 200
        assert started.wait(10)
    left = time.monotonic()
    assert cancelled.wait(10)  # nobody came back within the grace: the model was stopped
    assert time.monotonic() - left >= 0.3


def test_a_flow_whose_agent_asks_for_approval_fails_with_run_error(live: Live) -> None:
    bank = guarded(Calls())

    async def ask(inputs: dict[str, Any]) -> str:
        return (await bank.prompt(inputs["input"])).require_finished("a flow").text

    server = live({"flow": DagBuilder("flow").add_node("ask", ask).build()})
    events = agui(server, run_input("Send 5"))

    assert kinds(events)[-1] == "RUN_ERROR" and events[-1]["code"] == "approval_required"
    assert "transfer" in events[-1]["message"]


# ------------------------------------------------------------------------------------ flows


def test_a_graph_streams_its_nodes_as_steps_and_state(live: Live) -> None:
    server = live({"research": research()})
    events = agui(server, run_input("Why is the sky blue?"))

    steps = [(e["type"], e["stepName"]) for e in events if e["type"].startswith("STEP_")]
    assert steps == [
        ("STEP_STARTED", "classify"),
        ("STEP_FINISHED", "classify"),
        ("STEP_STARTED", "search"),
        ("STEP_FINISHED", "search"),
        ("STEP_STARTED", "write"),
        ("STEP_FINISHED", "write"),
    ]
    nodes = final_state(events)["daimon"]["nodes"]
    assert {name: node["status"] for name, node in nodes.items()} == {
        "classify": "finished",
        "search": "finished",
        "write": "finished",
    }
    # The writer agent's text is attributed to its node; the flow's answer comes last.
    texts = [e for e in events if e["type"] == "TEXT_MESSAGE_START"]
    assert texts[0]["metadata"]["daimon"]["node"] == "write"
    assert "metadata" not in texts[-1]
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"] == {"type": "success"}
    assert finished["usage"][0]["inputTokens"] == 7


def test_a_failing_dag_node_ends_the_run_with_run_error(live: Live) -> None:
    server = live({"pipeline": fragile_dag()})
    events = agui(server, run_input("example.com"))

    assert kinds(events)[-1] == "RUN_ERROR"
    failed = [e for e in events if e["type"] == "STEP_FINISHED" and e["stepName"] == "parse"]
    assert failed[0]["metadata"]["daimon"]["errorType"] == "ValueError"
    assert final_state(events)["daimon"]["nodes"]["parse"]["status"] == "failed"


def test_a_dag_answers_and_its_output_is_the_result(live: Live) -> None:
    dag = DagBuilder("shout").add_node("upper", lambda inputs: inputs["input"].upper()).build()
    server = live({"shout": dag})
    events = agui(server, run_input("quiet"))

    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "QUIET"
    assert events[-1]["outcome"] == {"type": "success"}


def test_the_protocol_types_load_on_the_first_agui_request_not_with_the_app() -> None:
    code = (
        "import sys\n"
        "from daimon import Agent\n"
        "from daimon.models import FunctionModel\n"
        "from daimon.server import create_app\n"
        "from daimon.core import ChatResponse\n"
        "create_app(Agent(FunctionModel(lambda r: ChatResponse.reply('hi')), name='a'))\n"
        "print('ag_ui.core' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
