"""A daimon run as a Temporal workflow, on the real dev server: answers, approvals, queries."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory

from daimon import Agent, ChatRequest, ChatResponse, ToolCall, tool
from daimon.core.errors import DaimonError, InvalidIdError, RunCancelled
from daimon.core.events import Done, ToolResult
from daimon.models import FunctionModel
from daimon.temporal import (
    ActivityOptions,
    RunFailedError,
    RunStatus,
    TemporalRun,
    serving,
    start_run,
)

from ._agents import arithmetic, counter, finisher, payments, refund, refunds, sleeper


async def test_a_run_with_a_tool_answers_through_activities(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [arithmetic], task_queue=task_queue):
        run = await start_run(client, arithmetic, "add 2 3", task_queue=task_queue)
        response = await run.result()
    assert response.text == "the sum is 5"
    assert response.run_id == run.workflow_id
    assert [m.role.value for m in response.messages] == ["user", "assistant", "tool", "assistant"]
    history = await run.handle.fetch_history()
    kinds = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert kinds == ["daimon.model_call", "daimon.tool_call", "daimon.model_call"]


async def test_an_approval_waits_in_the_workflow_until_decided_by_id(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [refunds], task_queue=task_queue):
        run = await start_run(client, "refunds", "refund order 42", task_queue=task_queue)
        status = await _wait_for(run, "awaiting_approval")
        (pending,) = status.pending_approvals
        assert pending.call.name == "refund" and pending.call.arguments == {"order": "42"}
        later = TemporalRun.get(client, run.workflow_id)  # another process: only the id
        with pytest.raises(DaimonError, match="no pending approval 'nope'"):
            await later.approve("nope")
        await later.approve(pending.id)
        response = await later.result()
    assert response.text == "refund: order 42 refunded"


async def test_a_rejection_reaches_the_model(client: Client, task_queue: str) -> None:
    async with serving(client, [refunds], task_queue=task_queue):
        run = await start_run(client, refunds, "refund order 7", task_queue=task_queue)
        status = await _wait_for(run, "awaiting_approval")
        await run.reject(status.pending_approvals[0].id, "not eligible")
        response = await run.result()
    assert response.text == "refund: The user rejected this call: not eligible"


async def test_the_status_query_shows_messages_usage_and_pending_calls(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [refunds], task_queue=task_queue):
        run = await start_run(client, refunds, "refund order 9", task_queue=task_queue)
        status = await _wait_for(run, "awaiting_approval")
        assert status.iteration == 1
        assert [m.role.value for m in status.messages] == ["user", "assistant"]
        await run.approve(status.pending_approvals[0].id)
        await run.result()
        final = await run.status()
    assert final.phase == "completed" and final.iteration == 2


def _two_refunds(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply("both decided")
    calls = [ToolCall(id=f"refund-{n}", name="refund", arguments={"order": n}) for n in "12"]
    return ChatResponse.tool_use(*calls)


two_refunds = Agent(FunctionModel(_two_refunds), name="two_refunds", tools=[refund])


async def test_a_decision_returns_the_status_without_the_decided_call(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [two_refunds], task_queue=task_queue):
        run = await start_run(client, two_refunds, "refund both", task_queue=task_queue)
        first, second = (await _wait_for(run, "awaiting_approval")).pending_approvals
        after_first = await run.approve(first.id)
        assert after_first.phase == "awaiting_approval"
        assert after_first.pending_approvals == (second,)
        with pytest.raises(DaimonError, match="no pending approval 'refund-1'"):
            await run.reject(first.id)  # decided: no longer pending
        after_second = await run.reject(second.id)
        assert after_second.phase == "running"
        assert after_second.pending_approvals == ()
        assert (await run.result()).text == "both decided"


@pytest.mark.parametrize("bad", ["", "run\0one", "caf\udce9", "x" * 1001, "x" * 1025])
async def test_a_run_id_no_backend_can_hold_is_refused_before_the_workflow_starts(
    client: Client, task_queue: str, bad: str
) -> None:
    with pytest.raises(InvalidIdError, match="invalid run id"):
        await start_run(client, arithmetic, "add 1 2", task_queue=task_queue, workflow_id=bad)


async def test_an_unknown_agent_fails_the_run_with_its_name(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [arithmetic], task_queue=task_queue):
        run = await start_run(client, "nobody", "add 1 1", task_queue=task_queue)
        with pytest.raises(RunFailedError, match="no agent named 'nobody'"):
            await run.result()


async def _wait_for(run: TemporalRun, phase: str) -> RunStatus:
    async with asyncio.timeout(30):
        while (status := await run.status()).phase != phase:  # noqa: ASYNC110 - polls a query
            await asyncio.sleep(0.05)
    return status


async def test_cancelling_the_workflow_reaches_the_running_tool(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    monkeypatch.setenv("DAIMON_TEMPORAL_LOG", str(log))
    async with serving(client, [sleeper], task_queue=task_queue):
        run = await start_run(
            client,
            sleeper,
            "wait",
            task_queue=task_queue,
            options=ActivityOptions(heartbeat_timeout=2),
        )
        await _wait_for_line(log, "wait-start")
        await run.cancel()
        with pytest.raises(RunCancelled):
            await run.result()
    assert any(line.startswith("wait-cancelled") for line in log.read_text().splitlines())


waits: dict[str, float] = {}


@tool
async def wait_timed(seconds: float) -> str:
    """Wait, noting when the wait started and when its cancellation reached it."""
    waits["started"] = time.monotonic()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        waits["cancelled"] = time.monotonic()
        raise
    return "waited"


def _waits(request: ChatRequest) -> ChatResponse:
    call = ToolCall(id="w", name="wait_timed", arguments={"seconds": 600})
    return ChatResponse.tool_use(call)


waiter = Agent(FunctionModel(_waits), name="waiter", tools=[wait_timed])


async def test_with_the_default_options_a_cancellation_reaches_the_tool_within_seconds(
    client: Client, task_queue: str
) -> None:
    waits.clear()
    async with serving(client, [waiter], task_queue=task_queue):
        run = await start_run(client, waiter, "wait", task_queue=task_queue)
        async with asyncio.timeout(30):
            while "started" not in waits:  # noqa: ASYNC110 - the tool notes it in this process
                await asyncio.sleep(0.01)
        await asyncio.sleep(waits["started"] + 2.5 - time.monotonic())  # past a heartbeat
        cancelled = time.monotonic()
        await run.cancel()
        with pytest.raises(RunCancelled):
            await asyncio.wait_for(run.result(), 40)
    assert waits["cancelled"] - cancelled < 5  # HEARTBEAT: 2 s between two heartbeats


async def test_a_retried_tool_charges_once_under_its_idempotency_key(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, log = tmp_path / "ledger", tmp_path / "log"
    monkeypatch.setenv("DAIMON_TEMPORAL_LEDGER", str(ledger))
    monkeypatch.setenv("DAIMON_TEMPORAL_LOG", str(log))
    fast = ActivityOptions(initial_interval=0.1, max_interval=0.2)
    async with serving(client, [payments], task_queue=task_queue):
        run = await start_run(client, payments, "pay", task_queue=task_queue, options=fast)
        response = await run.result()
    assert response.text == '{"charged": 5}'
    key = f"{run.workflow_id}:pay-1"
    assert ledger.read_text().split() == [key]  # the side effect: once
    attempts = [line.split() for line in log.read_text().splitlines()]
    assert [(tool, k, attempt) for tool, k, attempt, _pid in attempts] == [
        ("charge", key, "1"),
        ("charge", key, "2"),
        ("charge", key, "3"),
    ]  # three executions, Temporal's retries, one key


async def test_arguments_the_schema_refuses_are_an_error_the_model_reads(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [arithmetic], task_queue=task_queue):
        run = await start_run(client, arithmetic, "add 2 x", task_queue=task_queue)
        response = await run.result()
    assert response.text.startswith("the sum is Error: ")
    assert "'b'" in response.text


async def test_streaming_yields_turns_tool_results_and_done(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [arithmetic], task_queue=task_queue):
        run = await start_run(client, arithmetic, "add 4 5", task_queue=task_queue)
        events = [event async for event in run.stream(poll=0.02)]
    assert [type(e).__name__ for e in events] == [
        "ToolCallEnd",
        "ToolResult",
        "TextDelta",
        "Done",
    ]
    assert events[1].output.content == "9"  # type: ignore[union-attr]
    assert events[-1].response.text == "the sum is 9"  # type: ignore[union-attr]


def _has_line(path: Path, prefix: str) -> bool:
    return path.exists() and any(line.startswith(prefix) for line in path.read_text().splitlines())


async def _wait_for_line(path: Path, prefix: str) -> None:
    async with asyncio.timeout(30):
        while not _has_line(path, prefix):  # noqa: ASYNC110 - polls another process's file
            await asyncio.sleep(0.05)


async def test_a_waiting_run_continues_as_new_and_is_still_approved_by_id(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [refunds], task_queue=task_queue):
        run = await start_run(
            client, refunds, "refund order 11", task_queue=task_queue, continue_after=1
        )
        first_run_id = (await run.handle.describe()).run_id
        (pending,) = await asyncio.wait_for(run.wait_for_approvals(), 30)
        status = await run.status()
        assert status.iteration == 1 and status.events == 1  # the paused state came along
        assert [m.role.value for m in status.messages] == ["user", "assistant"]
        await run.approve(pending.id)
        response = await run.result()
        first = client.get_workflow_handle(run.workflow_id, run_id=first_run_id)
        assert (await first.describe()).status == WorkflowExecutionStatus.CONTINUED_AS_NEW
    assert response.text == "refund: order 42 refunded".replace("42", "11")
    assert response.iterations == 2


@pytest.mark.parametrize("cached", [100, 0], ids=["cached", "replayed-every-task"])
async def test_a_long_run_continues_as_new_between_turns_and_answers_as_in_process(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: int
) -> None:
    log = tmp_path / "log"
    monkeypatch.setenv("DAIMON_TEMPORAL_LOG", str(log))
    async with serving(client, [counter], task_queue=task_queue, max_cached_workflows=cached):
        run = await start_run(client, counter, "count 8", task_queue=task_queue, continue_after=30)
        events = [event async for event in run.stream(poll=0.01)]
        response = await run.result()
    keys = [line.split()[1] for line in log.read_text().splitlines()]
    assert keys == [f"{run.workflow_id}:call-{i}" for i in range(1, 9)]
    plain = await counter.prompt("count 8")
    assert response.text == plain.text == "counted to 8"
    assert response.messages == plain.messages
    assert (response.usage, response.iterations) == (plain.usage, plain.iterations)
    assert response.iterations == 9
    histories = await _histories(client, run)
    assert len(histories) >= 3  # two continue-as-new boundaries at least
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for history in histories
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]  # no call scheduled twice: each workflow run went on from where the last one stopped
    assert scheduled == ["daimon.model_call", "daimon.tool_call"] * 8 + ["daimon.model_call"]
    results = [e.output.content for e in events if isinstance(e, ToolResult)]
    assert results == [str(i) for i in range(1, 9)]  # the stream missed none across runs
    assert isinstance(events[-1], Done) and events[-1].response.text == "counted to 8"


async def _histories(client: Client, run: TemporalRun) -> list[WorkflowHistory]:
    """The histories of every workflow run of ``run``'s chain, oldest first."""
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(run.workflow_id, run_id=run_id)
        history = await handle.fetch_history()
        histories.insert(0, history)
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id
        if not run_id:
            return histories


async def test_after_continuing_as_new_mid_run_a_run_is_queried_and_approved_by_id(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [finisher], task_queue=task_queue):
        run = await start_run(
            client, finisher, "count 6 then refund", task_queue=task_queue, continue_after=30
        )
        status = await _wait_for(run, "awaiting_approval")
        assert len(await _histories(client, run)) >= 2  # the pause came after a boundary
        # seven turns, each a tool call, and six results: every event counted across boundaries
        assert (status.iteration, status.events) == (7, 13)
        assert [m.role.value for m in status.messages].count("tool") == 6
        (pending,) = status.pending_approvals
        await TemporalRun.get(client, run.workflow_id).approve(pending.id)
        response = await run.result()
    assert response.text == "done: order 6 refunded"
    assert response.iterations == 8


async def test_after_continuing_as_new_mid_run_cancelling_reaches_the_running_tool(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log"
    monkeypatch.setenv("DAIMON_TEMPORAL_LOG", str(log))
    async with serving(client, [finisher], task_queue=task_queue):
        run = await start_run(
            client,
            finisher,
            "count 6 then wait",
            task_queue=task_queue,
            continue_after=30,
            options=ActivityOptions(heartbeat_timeout=2),
        )
        await _wait_for_line(log, "wait-start")
        assert len(await _histories(client, run)) >= 2
        await run.cancel()
        with pytest.raises(RunCancelled):
            await run.result()
    assert _has_line(log, "wait-cancelled")
