"""The effect ledger on Temporal: a tool call whose activity attempt was lost (its worker stopped
before its result was recorded) does what its tool declared (``@tool(effect=...)``).

A lost attempt is real: the tool blocks its worker's event loop (an ``inline`` sync tool) on its
first run, so the worker sends no heartbeat, and the server times the attempt out after
``heartbeat_timeout``; the worker's late result is refused, as a dead worker's would never come.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client

from daimon import Agent, ChatRequest, ChatResponse, Role, RunContext, ToolCall, ToolRetryPolicy
from daimon import tool as make_tool
from daimon.agent._effects import UNKNOWN_OUTCOME
from daimon.models import FunctionModel
from daimon.temporal import ActivityOptions, TemporalRun, serving, start_run

HEARTBEAT_TIMEOUT = 1.0
QUICK = ActivityOptions(heartbeat_timeout=HEARTBEAT_TIMEOUT, initial_interval=0.1, max_interval=0.2)
HANG = 3 * HEARTBEAT_TIMEOUT
"""How long the first run of a tool blocks its worker: well past its heartbeat timeout."""
AFTER_HANG = ActivityOptions(
    heartbeat_timeout=HEARTBEAT_TIMEOUT, initial_interval=HANG, max_interval=HANG
)
"""A lost attempt is retried once the worker is back (a retry sent to the blocked worker would
be lost too, and retried again)."""


def one_call(request: ChatRequest) -> ChatResponse:
    """Asks for one call of ``charge``, then answers with its result."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))
    return ChatResponse.reply(f"told: {results[0]}")


class Service:
    """A card service: each charge it received (key, activity attempt); the first one hangs."""

    def __init__(self, *, fail_first: bool = False) -> None:
        self.received: list[tuple[str, int]] = []
        self.fail_first = fail_first

    def charge(self, key: str, cents: int) -> str:
        first = not self.received
        self.received.append((key, activity.info().attempt))
        if first and self.fail_first:
            raise ConnectionError("the card service hung up")
        if first and not self.fail_first:
            time.sleep(HANG)  # the worker's loop stops: no heartbeat, the attempt is lost
        return f"{cents} cents"


def charging_agent(service: Service, effect: Any, **options: Any) -> Agent[Any, Any]:
    """An agent whose one call charges ``service`` through a tool of the given effect."""

    @make_tool(effect=effect, inline=True)
    def charge(ctx: RunContext, cents: int) -> str:
        """Charge the customer's card."""
        return service.charge(ctx.idempotency_key, cents)

    return Agent(FunctionModel(one_call), name=f"charging_{effect}", tools=[charge], **options)


async def charged(
    client: Client, task_queue: str, agent: Agent[Any, Any], options: ActivityOptions = QUICK
) -> tuple[TemporalRun, str]:
    """Start the agent's run; the run and the key of its one call."""
    run = await start_run(client, agent, "charge me", task_queue=task_queue, options=options)
    return run, f"{run.workflow_id}:c1"


@pytest.mark.timeout(60)
async def test_a_once_call_whose_attempt_was_lost_is_not_run_again_and_the_model_is_told(
    client: Client, task_queue: str
) -> None:
    service = Service()
    agent = charging_agent(service, "once")
    async with serving(client, [agent], task_queue=task_queue):
        run, key = await charged(client, task_queue, agent)
        done = await asyncio.wait_for(run.result(), 30)
        status = await run.status()
    assert done.text == f"told: {UNKNOWN_OUTCOME}"
    assert service.received == [(key, 1)]  # the lost attempt was not retried
    record = status.effects["c1"]
    assert (record.status, record.effect, record.idempotency_key) == ("in_doubt", "once", key)


@pytest.mark.timeout(60)
async def test_an_ask_call_whose_attempt_was_lost_waits_and_runs_again_when_approved(
    client: Client, task_queue: str
) -> None:
    service = Service()
    agent = charging_agent(service, "ask")
    async with serving(client, [agent], task_queue=task_queue):
        run, key = await charged(client, task_queue, agent)
        (request,) = await asyncio.wait_for(run.wait_for_approvals(), 30)
        waiting = await run.status()
        await asyncio.sleep(HANG)  # nothing runs while the run waits for a person
        assert service.received == [(key, 1)]
        await run.approve(request.id)
        done = await asyncio.wait_for(run.result(), 30)
        status = await run.status()
    assert (request.id, request.in_doubt, request.run_id) == ("c1", True, run.workflow_id)
    assert (waiting.phase, waiting.effects["c1"].status) == ("awaiting_approval", "in_doubt")
    assert done.text == "told: 5 cents"
    assert service.received == [(key, 1), (key, 1)]  # run again: a new activity, same key
    record = status.effects["c1"]
    assert (record.status, record.attempts) == ("completed", 2)


@pytest.mark.timeout(60)
async def test_an_ask_call_whose_attempt_was_lost_is_not_run_again_when_rejected(
    client: Client, task_queue: str
) -> None:
    service = Service()
    agent = charging_agent(service, "ask")
    async with serving(client, [agent], task_queue=task_queue):
        run, key = await charged(client, task_queue, agent)
        (request,) = await asyncio.wait_for(run.wait_for_approvals(), 30)
        await run.reject(request.id, "the customer was charged already")
        done = await asyncio.wait_for(run.result(), 30)
        status = await run.status()
    assert "not to run it again: the customer was charged already" in done.text
    assert service.received == [(key, 1)]
    assert status.effects["c1"].status == "skipped"


@pytest.mark.timeout(60)
async def test_a_keyed_call_whose_attempt_was_lost_runs_again_under_the_same_key(
    client: Client, task_queue: str
) -> None:
    service = Service()
    agent = charging_agent(service, "keyed")
    async with serving(client, [agent], task_queue=task_queue):
        run, key = await charged(client, task_queue, agent, AFTER_HANG)
        done = await asyncio.wait_for(run.result(), 30)
        status = await run.status()
    assert done.text == "told: 5 cents"
    assert service.received == [(key, 1), (key, 2)]  # Temporal's next attempt, the run's key
    record = status.effects["c1"]
    assert (record.status, record.idempotency_key) == ("completed", key)


@pytest.mark.timeout(60)
async def test_a_repeatable_call_whose_attempt_was_lost_runs_again(
    client: Client, task_queue: str
) -> None:
    service = Service()
    agent = charging_agent(service, "repeatable")
    async with serving(client, [agent], task_queue=task_queue):
        run, key = await charged(client, task_queue, agent, AFTER_HANG)
        done = await asyncio.wait_for(run.result(), 30)
        status = await run.status()
    assert done.text == "told: 5 cents"
    assert service.received == [(key, 1), (key, 2)]
    assert status.effects == {}  # a repeatable call is not recorded


@pytest.mark.timeout(60)
async def test_a_once_tools_own_error_is_retried_as_any_tools_is(
    client: Client, task_queue: str
) -> None:
    """An error the tool raised means it finished: the agent's retry policy retries it (in the
    activity's one attempt)."""
    service = Service(fail_first=True)
    retry = ToolRetryPolicy(max_retries=2, retry_on=(ConnectionError,))
    agent = charging_agent(service, "once", tool_retry_policy=retry)
    async with serving(client, [agent], task_queue=task_queue):
        run, key = await charged(client, task_queue, agent)
        done = await asyncio.wait_for(run.result(), 30)
    assert done.text == "told: 5 cents"
    assert service.received == [(key, 1), (key, 1)]
