"""Agents the Temporal tests run, in the test process and in worker processes.

The model is a :class:`FunctionModel`: its answer depends only on the request, so any worker
answers a run's call the same way. ``DAIMON_TEMPORAL_LOG`` names a file where the tools append
one line per execution (``<tool> <idempotency key> <activity attempt> <pid>``), one ``write``
per line on an ``O_APPEND`` file, so concurrent processes never interleave.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from temporalio import activity

from daimon import Agent, ChatRequest, ChatResponse, RunContext, ToolCall, ToolRetryPolicy, tool
from daimon.models import FunctionModel
from daimon.multiagent import Supervisor
from daimon.orchestration import END, START, GraphBuilder, GraphContext


def log(*words: object) -> None:
    path = os.environ.get("DAIMON_TEMPORAL_LOG")
    if not path:
        return
    attempt = activity.info().attempt if activity.in_activity() else 0
    line = " ".join(map(str, (*words, attempt, os.getpid()))) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _arithmetic(request: ChatRequest) -> ChatResponse:
    """``add A B``: call ``add`` then answer with the sum; any other prompt is echoed."""
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"the sum is {last.text}")
    words = last.text.split()
    if len(words) == 3 and words[0] == "add":
        args = {"a": _number(words[1]), "b": _number(words[2])}
        return ChatResponse.tool_use(ToolCall(id="call-1", name="add", arguments=args))
    return ChatResponse.reply(f"echo: {last.text}")


def _number(word: str) -> int | str:
    return int(word) if word.isdigit() else word  # a word: the tool's schema refuses it


@tool
async def add(ctx: RunContext, a: int, b: int) -> str:
    """Add two numbers (slowly enough for a worker to die during the call)."""
    await asyncio.sleep(float(os.environ.get("DAIMON_TEMPORAL_TOOL_SECONDS", "0")))
    log("add", ctx.idempotency_key)
    return str(a + b)


arithmetic = Agent(FunctionModel(_arithmetic), name="arithmetic", tools=[add])


# --------------------------------------------------------------------------- approvals


def _refunds(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"refund: {last.text}")
    order = last.text.split()[-1]
    return ChatResponse.tool_use(ToolCall(id="refund-1", name="refund", arguments={"order": order}))


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves each refund)."""
    return f"order {order} refunded"


refunds = Agent(FunctionModel(_refunds), name="refunds", tools=[refund])


# ---------------------------------------------------------------------- idempotency


@tool
def charge(ctx: RunContext, amount: int) -> str:
    """Charge once per idempotency key, however often the call is retried."""
    ledger = Path(os.environ["DAIMON_TEMPORAL_LEDGER"])
    keys = set(ledger.read_text().split()) if ledger.exists() else set()
    if ctx.idempotency_key not in keys:  # the side effect, keyed
        with ledger.open("a") as out:
            out.write(ctx.idempotency_key + "\n")
    log("charge", ctx.idempotency_key)
    if activity.info().attempt < 3:  # the call's result is lost twice: Temporal retries it
        raise ConnectionError("the payment service dropped the connection")
    return json.dumps({"charged": amount})


def _payments(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(last.text)
    return ChatResponse.tool_use(ToolCall(id="pay-1", name="charge", arguments={"amount": 5}))


payments = Agent(
    FunctionModel(_payments),
    name="payments",
    tools=[charge],
    tool_retry_policy=ToolRetryPolicy(max_retries=3, retry_on=(ConnectionError,)),
)


# ----------------------------------------------------------------------- cancellation


@tool
async def wait(ctx: RunContext, seconds: float) -> str:
    """Wait, logging when the wait starts and when it is cancelled."""
    log("wait-start", ctx.idempotency_key)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log("wait-cancelled", ctx.idempotency_key)
        raise
    return "waited"


def _sleepy(request: ChatRequest) -> ChatResponse:
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(last.text)
    return ChatResponse.tool_use(ToolCall(id="wait-1", name="wait", arguments={"seconds": 600}))


sleeper = Agent(FunctionModel(_sleepy), name="sleeper", tools=[wait])


# ------------------------------------------------------------------------- long runs


def _counting(request: ChatRequest) -> ChatResponse:
    """``count N``: one ``add`` call a turn (the total plus one), N turns, then the total."""
    wanted = int(request.messages[0].text.split()[1])
    results = [m for m in request.messages if m.role.value == "tool"]
    total = int(results[-1].text) if results else 0
    if len(results) < wanted:
        call = ToolCall(id=f"call-{len(results) + 1}", name="add", arguments={"a": total, "b": 1})
        return ChatResponse.tool_use(call)
    return ChatResponse.reply(f"counted to {total}")


counter = Agent(FunctionModel(_counting), name="counter", tools=[add], max_iterations=50)


def _counting_then(request: ChatRequest) -> ChatResponse:
    """``count N then refund|wait``: N ``add`` turns, then one call of the last tool."""
    _, wanted, _, last = request.messages[0].text.split()
    results = [m for m in request.messages if m.role.value == "tool"]
    if len(results) < int(wanted):
        total = int(results[-1].text) if results else 0
        call = ToolCall(id=f"call-{len(results) + 1}", name="add", arguments={"a": total, "b": 1})
        return ChatResponse.tool_use(call)
    if len(results) == int(wanted):
        arguments: dict[str, Any] = {"order": wanted} if last == "refund" else {"seconds": 600}
        return ChatResponse.tool_use(ToolCall(id="last-1", name=last, arguments=arguments))
    return ChatResponse.reply(f"done: {results[-1].text}")


finisher = Agent(
    FunctionModel(_counting_then), name="finisher", tools=[add, refund, wait], max_iterations=50
)


# ------------------------------------------------------- sub-agents and flows' agents


def log_call(kind: str) -> None:
    """In an activity, one line for this execution: ``<kind> <workflow id>/<activity id>``."""
    if activity.in_activity():
        info = activity.info()
        log(kind, f"{info.workflow_id}/{info.activity_id}")


@tool
async def plus(a: int, b: int) -> str:
    """Add two numbers (slowly enough for a worker to die during the call)."""
    await asyncio.sleep(float(os.environ.get("DAIMON_TEMPORAL_TOOL_SECONDS", "0")))
    log_call("plus")
    return str(a + b)


def _adding(request: ChatRequest) -> ChatResponse:
    """``add A B``: call ``plus``, then answer with the sum."""
    log_call("model")
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"the sum is {last.text}")
    _, a, b = last.text.split()
    return ChatResponse.tool_use(
        ToolCall(id="plus-1", name="plus", arguments={"a": int(a), "b": int(b)})
    )


adder = Agent(FunctionModel(_adding), name="adder", tools=[plus])
doubler = Agent(FunctionModel(_adding), name="doubler", tools=[plus])


def _leading(request: ChatRequest) -> ChatResponse:
    """Delegate the prompt to ``adder``, then pass its answer on."""
    log_call("model")
    last = request.messages[-1]
    if last.role.value == "tool":
        return ChatResponse.reply(f"the team says: {last.text}")
    task = {"agent": "adder", "task": last.text}
    return ChatResponse.tool_use(ToolCall(id="delegate-1", name="delegate", arguments=task))


team = Supervisor(FunctionModel(_leading), {"adder": adder}, name="team")


async def _first(ctx: GraphContext) -> dict[str, Any]:
    response = await ctx.prompt(adder, ctx.state["input"])
    return {"sum": int(response.text.split()[-1])}


async def _second(ctx: GraphContext) -> dict[str, Any]:
    total = ctx.state["sum"]
    response = await ctx.prompt(doubler, f"add {total} {total}")
    return {"output": f"doubled: {response.text.split()[-1]}"}


pipeline = (
    GraphBuilder("pipeline")
    .add_node("first", _first)
    .add_node("second", _second)
    .add_edge(START, "first")
    .add_edge("first", "second")
    .add_edge("second", END)
    .build()
)
