"""The effect ledger on the spans: each tool call's declared effect, and for a recorded call its
status and attempt; a call in doubt that does not run is an event on the run's span."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan

from daimon import (
    Agent,
    ApprovalDecision,
    ChatRequest,
    ChatResponse,
    Role,
    RunContext,
    ToolCall,
    tool,
)
from daimon.agent._effects import UNKNOWN_OUTCOME
from daimon.checkpoint import FileCheckpoint
from daimon.models import FunctionModel
from daimon.telemetry import instrument

from .conftest import Spans


class Crash(BaseException):
    """Stands in for the process dying mid-tool: nothing in daimon catches a BaseException."""


def one_call(request: ChatRequest) -> ChatResponse:
    """Asks for one call of ``charge``, then answers with its result."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))
    return ChatResponse.reply(f"told: {results[0]}")


def charging(effect: str, store: Path | None, spans: Spans, *, crash: bool = False) -> Agent:
    """An instrumented agent whose ``charge`` tool declares ``effect`` (and may die mid-call)."""

    @tool(effect=effect)  # type: ignore[call-overload]
    async def charge(ctx: RunContext, cents: int) -> str:
        """Charge a card."""
        assert ctx.idempotency_key  # what a keyed tool hands its service
        if crash:
            raise Crash  # the process died after the effect, before its result was stored
        return f"{cents} cents"

    checkpoint = None if store is None else FileCheckpoint(store, lease=0.2)
    model = FunctionModel(one_call, model_name="m")
    agent = Agent(model, name="payer", tools=[charge], checkpoint=checkpoint)
    return instrument(agent, tracer_provider=spans.provider)


def effect_of(span: ReadableSpan) -> tuple[object, object, object]:
    attributes = span.attributes or {}
    return (
        attributes.get("daimon.tool.effect"),
        attributes.get("daimon.tool.effect.status"),
        attributes.get("daimon.tool.effect.attempt"),
    )


def doubts(spans: Spans) -> list[dict[str, object]]:
    """The ``daimon.tool.in_doubt`` events of every run span, oldest run first."""
    runs = sorted(spans.named("invoke_agent payer"), key=lambda s: s.start_time or 0)
    return [
        dict(event.attributes or {})
        for run in runs
        for event in run.events
        if event.name == "daimon.tool.in_doubt"
    ]


async def test_every_tool_span_says_its_effect_and_unrecorded_calls_no_status(
    spans: Spans,
) -> None:
    """Without a checkpoint store nothing is recorded: the declared effect is all there is."""
    await charging("once", None, spans).prompt("pay")
    await charging("repeatable", None, spans).prompt("pay")

    assert [effect_of(s) for s in spans.named("execute_tool charge")] == [
        ("once", None, None),
        ("repeatable", None, None),
    ]


async def test_a_recorded_call_says_its_status_and_attempt(spans: Spans, tmp_path: Path) -> None:
    await charging("keyed", tmp_path, spans).prompt("pay", run_id="r-ok")

    assert effect_of(spans.one("execute_tool charge")) == ("keyed", "completed", 1)
    assert doubts(spans) == []


async def test_a_call_that_died_stays_started_and_its_second_attempt_is_two(
    spans: Spans, tmp_path: Path
) -> None:
    with pytest.raises(Crash):
        await charging("keyed", tmp_path, spans, crash=True).prompt("pay", run_id="r-k")
    await charging("keyed", tmp_path, spans).resume("r-k")

    died, again = sorted(spans.named("execute_tool charge"), key=lambda s: s.start_time or 0)
    assert effect_of(died) == ("keyed", "started", 1)
    assert effect_of(again) == ("keyed", "completed", 2)


async def test_a_once_call_in_doubt_is_an_event_on_the_resumed_run(
    spans: Spans, tmp_path: Path
) -> None:
    with pytest.raises(Crash):
        await charging("once", tmp_path, spans, crash=True).prompt("pay", run_id="r-once")
    done = await charging("once", tmp_path, spans).resume("r-once")

    assert done.text == f"told: {UNKNOWN_OUTCOME}"
    assert len(spans.named("execute_tool charge")) == 1  # the call that died; none on resume
    assert doubts(spans) == [
        {
            "gen_ai.tool.name": "charge",
            "gen_ai.tool.call.id": "c1",
            "daimon.tool.effect": "once",
            "daimon.tool.effect.status": "in_doubt",
            "daimon.tool.effect.attempt": 1,
        }
    ]
    resumed = max(spans.named("invoke_agent payer"), key=lambda s: s.start_time or 0)
    [event] = [e for e in resumed.events if e.name == "daimon.tool.in_doubt"]
    after = [s for s in spans.named("chat m") if (s.start_time or 0) > (resumed.start_time or 0)]
    [answer] = after
    assert event.timestamp <= (answer.start_time or 0)  # told before the model reads it


@pytest.mark.parametrize(
    ("approved", "statuses", "attempts"),
    [(True, ["in_doubt"], [1, 2]), (False, ["in_doubt", "skipped"], [1])],
)
async def test_an_ask_call_in_doubt_is_an_event_then_a_second_attempt_or_skipped(
    spans: Spans, tmp_path: Path, approved: bool, statuses: list[str], attempts: list[int]
) -> None:
    with pytest.raises(Crash):
        await charging("ask", tmp_path, spans, crash=True).prompt("pay", run_id="r-ask")
    paused = await charging("ask", tmp_path, spans).resume("r-ask")
    assert paused.pending_approvals[0].in_doubt
    await charging("ask", tmp_path, spans).resume(
        "r-ask", {"c1": ApprovalDecision(approved=approved)}
    )

    assert [e["daimon.tool.effect.status"] for e in doubts(spans)] == statuses
    ran = sorted(spans.named("execute_tool charge"), key=lambda s: s.start_time or 0)
    assert [effect_of(s)[2] for s in ran] == attempts
    assert effect_of(ran[-1])[1] == ("completed" if approved else "started")
