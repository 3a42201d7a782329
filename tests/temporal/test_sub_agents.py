"""Sub-agents and flows' agents as workflows of their own, on the real dev server.

A Supervisor's delegation (or an ``AgentTool`` call) to an agent the worker serves runs it as a
child workflow; an agent a flow's node prompts runs as a workflow the flow's activity starts.
The fault tests SIGKILL the worker process mid-run: every run completes, and no activity that
completed (in any of the workflows) ever runs again.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import defaultdict
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from daimon import Agent, ChatRequest, ChatResponse, ToolCall
from daimon.models import FunctionModel
from daimon.multiagent import AgentTool
from daimon.temporal import ActivityOptions, TemporalRun, serving, start_run

from ._agents import adder, doubler, pipeline, team
from ._server import DevServer, WorkerProcess

SRC = Path(__file__).parents[2] / "src"
QUICK = ActivityOptions(heartbeat_timeout=3, initial_interval=0.2, max_interval=1)


def _asking(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"asked: {last.text}")
    return ChatResponse.tool_use(ToolCall(id="ask-1", name="ask", arguments={"task": last.text}))


asker = Agent(
    FunctionModel(_asking),
    name="asker",
    tools=[AgentTool(adder, name="ask", description="Adds two numbers")],
)


async def _children(client: Client, workflow_id: str) -> list[str]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [
        e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED
    ]


async def _activities(client: Client, workflow_id: str) -> list[str]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def test_a_supervisors_delegation_runs_the_served_agent_as_a_child_workflow(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [team, adder], task_queue=task_queue):
        run = await start_run(client, team, "add 2 3", task_queue=task_queue)
        response = await run.result()
    plain = await team.prompt("add 2 3")
    assert response.text == plain.text == "the team says: the sum is 5"
    assert response.messages == plain.messages
    assert (response.usage, response.cost) == (plain.usage, plain.cost)
    assert await _activities(client, run.workflow_id) == ["daimon.model_call"] * 2
    (child,) = await _children(client, run.workflow_id)
    assert child.startswith(f"{run.workflow_id}-agent-")
    calls = ["daimon.model_call", "daimon.tool_call", "daimon.model_call"]
    assert await _activities(client, child) == calls


async def test_an_agent_tool_to_a_served_agent_runs_it_as_a_child_workflow(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [asker, adder], task_queue=task_queue):
        run = await start_run(client, asker, "add 4 5", task_queue=task_queue)
        response = await run.result()
    assert response.text == "asked: the sum is 9"
    (child,) = await _children(client, run.workflow_id)
    assert (await TemporalRun.get(client, child).result()).text == "the sum is 9"


async def test_a_sub_agent_the_worker_does_not_serve_runs_inside_the_tool_activity(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [team], task_queue=task_queue):
        run = await start_run(client, team, "add 1 1", task_queue=task_queue)
        response = await run.result()
    assert response.text == "the team says: the sum is 2"
    assert await _children(client, run.workflow_id) == []
    kinds = ["daimon.model_call", "daimon.tool_call", "daimon.model_call"]
    assert await _activities(client, run.workflow_id) == kinds


async def test_a_flows_agents_run_as_workflows_of_their_own(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [pipeline, adder, doubler], task_queue=task_queue):
        run = await start_run(client, pipeline, "add 2 3", task_queue=task_queue)
        response = await run.result()
    assert response.text == "doubled: 10"
    assert await _activities(client, run.workflow_id) == ["daimon.prompt"]
    for name, prompt, answer in (
        ("adder", "add 2 3", "the sum is 5"),
        ("doubler", "add 5 5", "the sum is 10"),
    ):  # each under the id the flow's activity finds it by when it runs again
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
        handle = TemporalRun.get(client, f"{run.workflow_id}-{name}-{digest}-1")
        assert (await handle.result()).text == answer


# ------------------------------------------------------------------------------ faults


def _log(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


async def _completed_attempts(client: Client, workflow_id: str) -> dict[str, int]:
    """``<workflow id>/<activity id>`` -> the attempt that completed, from the history."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    ids, attempts, done = {}, {}, {}
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            ids[e.event_id] = e.activity_task_scheduled_event_attributes.activity_id
        elif e.HasField("activity_task_started_event_attributes"):
            attempts[e.event_id] = e.activity_task_started_event_attributes.attempt
        elif e.HasField("activity_task_completed_event_attributes"):
            completed = e.activity_task_completed_event_attributes
            key = f"{workflow_id}/{ids[completed.scheduled_event_id]}"
            done[key] = attempts[completed.started_event_id]
    return done


async def _no_completed_activity_ran_again(client: Client, lines: list[list[str]]) -> int:
    """Each logged activity ran its completed attempt once, and nothing after it; the retries."""
    ran: dict[str, list[int]] = defaultdict(list)
    for _kind, key, attempt, _pid in lines:
        ran[key].append(int(attempt))
    completed: dict[str, int] = {}
    for workflow_id in {key.split("/")[0] for key in ran}:
        completed |= await _completed_attempts(client, workflow_id)
    assert set(ran) == set(completed)  # every logged call completed, and is in a history
    for key, attempts in ran.items():
        assert attempts.count(completed[key]) == 1, (key, attempts, completed[key])
        assert max(attempts) == completed[key], (key, attempts, completed[key])
    return sum(completed[key] > 1 for key in ran)


async def _killed_mid_run(
    client: Client,
    server: DevServer,
    task_queue: str,
    tmp_path: Path,
    names: tuple[str, ...],
    prompt: str,
) -> tuple[str, str, list[list[str]]]:
    """Start ``names[0]`` on ``prompt``; SIGKILL its worker while a sub-agent's tool runs.

    The kill comes once a model call of another workflow than the run's has completed (a
    sub-agent's first turn): its tool call (two seconds) is then in flight.
    """
    log = tmp_path / "log"
    env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "DAIMON_TEMPORAL_LOG": str(log),
        "DAIMON_TEMPORAL_TOOL_SECONDS": "2",
    }
    worker = WorkerProcess(server.address, task_queue, env, names)
    await worker.start()
    try:
        run = await start_run(client, names[0], prompt, task_queue=task_queue, options=QUICK)
        async with asyncio.timeout(60):
            while not any(  # noqa: ASYNC110 - polls the worker's log
                kind == "model" and not key.startswith(f"{run.workflow_id}/")
                for kind, key, *_ in _log(log)
            ):
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        worker.kill()
        await worker.start()
        response = await asyncio.wait_for(run.result(), 120)
    finally:
        worker.kill()
    return run.workflow_id, response.text, _log(log)


@pytest.mark.timeout(300)
async def test_a_supervisor_completes_when_its_worker_is_sigkilled_during_the_sub_agent(
    client: Client, temporal_server: DevServer, task_queue: str, tmp_path: Path
) -> None:
    workflow_id, text, lines = await _killed_mid_run(
        client, temporal_server, task_queue, tmp_path, ("team", "adder"), "add 20 22"
    )
    assert text == "the team says: the sum is 42"
    retried = await _no_completed_activity_ran_again(client, lines)
    assert retried == 1  # the sub-agent's tool call the kill cut short
    assert {key.split("/")[0] for _, key, *_ in lines} == {
        workflow_id,
        *await _children(client, workflow_id),
    }


@pytest.mark.timeout(300)
async def test_a_flow_of_two_agents_completes_when_its_worker_is_sigkilled(
    client: Client, temporal_server: DevServer, task_queue: str, tmp_path: Path
) -> None:
    workflow_id, text, lines = await _killed_mid_run(
        client,
        temporal_server,
        task_queue,
        tmp_path,
        ("pipeline", "adder", "doubler"),
        "add 20 22",
    )
    assert text == "doubled: 84"
    retried = await _no_completed_activity_ran_again(client, lines)
    assert retried == 1  # the first agent's tool call the kill cut short
    agents = {key.split("/")[0] for _, key, *_ in lines}
    assert len(agents) == 2 and all(a.startswith(f"{workflow_id}-") for a in agents)
