"""The effect ledger through the server: a run that died mid-tool, resumed over AG-UI by its run
id (the agent keeps a checkpoint store), and approvals in doubt as the client reads them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daimon import Agent, ChatRequest, ChatResponse, Role, RunContext, ToolCall, tool
from daimon.agent._effects import UNKNOWN_OUTCOME
from daimon.checkpoint import FileCheckpoint
from daimon.core import ApprovalRequest, EffectRecord
from daimon.core.results import AgentResponse
from daimon.models import FunctionModel
from daimon.server._encode import prompt_body
from daimon.server._schemas import PromptResponse

from .conftest import Calls, LiveServer
from .test_agui import agui, guarded, kinds, run_input

Live = Callable[..., LiveServer]


class Crash(BaseException):
    """Stands in for the process dying mid-tool: nothing in daimon catches a BaseException."""


def one_call(request: ChatRequest) -> ChatResponse:
    """Asks for one call of ``charge``, then answers with its result."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))
    return ChatResponse.reply(f"told: {results[0]}")


def payer(store: Path, received: list[str], effect: str, *, crash: bool = False) -> Agent:
    """An agent whose ``charge`` reaches a card service (``received``), checkpointed in
    ``store``."""

    @tool(effect=effect)  # type: ignore[call-overload]
    async def charge(ctx: RunContext, cents: int) -> str:
        """Charge a card."""
        received.append(ctx.idempotency_key)
        if crash:
            raise Crash  # the process died after the effect, before its result was stored
        return f"{cents} cents"

    checkpoint = FileCheckpoint(store, lease=0.2)
    return Agent(FunctionModel(one_call), name="payer", tools=[charge], checkpoint=checkpoint)


def died_mid_tool(store: Path, received: list[str], effect: str, run_id: str) -> None:
    """The run as an earlier process ran it: it charged the card, then died."""
    with pytest.raises(Crash):
        asyncio.run(payer(store, received, effect, crash=True).prompt("pay", run_id=run_id))
    assert received == [f"{run_id}:c1"]


def record(store: Path, run_id: str) -> EffectRecord:
    state = asyncio.run(FileCheckpoint(store).load(run_id))
    assert state is not None
    return state.effects["c1"]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def test_a_once_call_in_doubt_answers_with_the_unknown_outcome(live: Live, tmp_path: Path) -> None:
    received: list[str] = []
    died_mid_tool(tmp_path, received, "once", "r-once")
    server = live({"payer": payer(tmp_path, received, "once")})

    events = agui(server, run_input("pay", thread="t-once", runId="r-once"))

    assert received == ["r-once:c1"]  # not run again
    assert text_of(events) == f"told: {UNKNOWN_OUTCOME}"
    assert events[-1]["outcome"] == {"type": "success"}
    assert (record(tmp_path, "r-once").status, record(tmp_path, "r-once").attempts) == (
        "in_doubt",
        1,
    )


def test_an_ask_call_in_doubt_is_an_interrupt_in_doubt_and_approving_runs_it_again(
    live: Live, tmp_path: Path
) -> None:
    received: list[str] = []
    died_mid_tool(tmp_path, received, "ask", "r-ask")
    server = live({"payer": payer(tmp_path, received, "ask")})

    paused = agui(server, run_input("pay", thread="t-ask", runId="r-ask"))

    outcome = paused[-1]["outcome"]
    assert paused[-1]["type"] == "RUN_FINISHED" and outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    assert interrupt["toolCallId"] == "c1" and interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"]["daimon"]["inDoubt"] is True
    assert "outcome is unknown" in interrupt["message"]
    assert received == ["r-ask:c1"] and record(tmp_path, "r-ask").status == "in_doubt"

    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": True}]
    resumed = agui(server, run_input(None, thread="t-ask", resume=resume))

    assert received == ["r-ask:c1", "r-ask:c1"]  # run again, under the same key
    result = next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "c1" and result["content"] == "5 cents"
    assert text_of(resumed) == "told: 5 cents"
    assert resumed[-1]["outcome"] == {"type": "success"}
    done = record(tmp_path, "r-ask")
    assert (done.status, done.attempts) == ("completed", 2)


def test_an_ordinary_approval_is_not_in_doubt(live: Live) -> None:
    server = live({"bank": guarded(Calls())})
    paused = agui(server, run_input("Send 5", thread="t-plain"))
    (interrupt,) = paused[-1]["outcome"]["interrupts"]
    assert interrupt["metadata"]["daimon"]["inDoubt"] is False
    assert interrupt["message"] == "Approve the call to transfer?"
    assert "TOOL_CALL_RESULT" not in kinds(paused)


def test_the_prompt_answer_says_which_approval_is_in_doubt() -> None:
    """``POST /prompt``'s JSON of a paused run (its documented schema holds the flag too)."""
    call = ToolCall(id="c1", name="charge", arguments={"cents": 5})
    plain = ToolCall(id="c2", name="refund", arguments={})
    paused = AgentResponse(
        text="",
        run_id="r",
        pending_approvals=(
            ApprovalRequest(id="c1", call=call, run_id="r", in_doubt=True),
            ApprovalRequest(id="c2", call=plain, run_id="r"),
        ),
    )

    body = prompt_body("payer", paused)

    assert [a["in_doubt"] for a in body["pending_approvals"]] == [True, False]
    checked = PromptResponse.model_validate(body)
    assert [a.in_doubt for a in checked.pending_approvals] == [True, False]
