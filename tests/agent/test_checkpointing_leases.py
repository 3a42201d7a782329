"""An agent run holds its run's lease: renewed while it runs, given up however it ends."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from daimon import Agent, ChatRequest, ChatResponse, ModelError, Role, ToolCall, tool
from daimon.checkpoint import FileCheckpoint
from daimon.core import CheckpointState, RunLeasedError
from daimon.core.protocols import Checkpoint
from daimon.models import FunctionModel

WAIT = 10.0


def one_call(request: ChatRequest) -> ChatResponse:
    """Asks for one call of ``charge``, then answers with its result."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))
    return ChatResponse.reply(f"charged: {results[0]}")


def charging_agent(
    store: Checkpoint,
    charges: list[int],
    entered: asyncio.Event | None = None,
    leave: asyncio.Event | None = None,
) -> Agent:
    @tool
    async def charge(cents: int) -> str:
        """Charge a card."""
        charges.append(cents)
        if entered is not None:
            entered.set()
        if leave is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(leave.wait(), WAIT)
        return f"{cents} cents"

    return Agent(FunctionModel(one_call), tools=[charge], checkpoint=store)


async def test_a_long_run_keeps_its_lease_past_the_first_expiry(tmp_path: Path) -> None:
    charges: list[int] = []
    entered, leave = asyncio.Event(), asyncio.Event()
    owner = charging_agent(FileCheckpoint(tmp_path, lease=1.0), charges, entered, leave)
    running = asyncio.create_task(owner.prompt("pay", run_id="long"))
    await asyncio.wait_for(entered.wait(), WAIT)

    await asyncio.sleep(2.5)  # the lease was renewed meanwhile (every third of a second)
    late = charging_agent(FileCheckpoint(tmp_path, lease=1.0), charges)
    with pytest.raises(RunLeasedError, match="is leased by"):
        await late.resume("long")
    leave.set()

    assert (await running).text == "charged: 5 cents"
    assert charges == [5]


def approving_model(request: ChatRequest) -> ChatResponse:
    return ChatResponse.tool_use(ToolCall(id="c1", name="charge", arguments={"cents": 5}))


def failing_model(request: ChatRequest) -> ChatResponse:
    raise ModelError("provider down")


@pytest.mark.parametrize("ending", ["answer", "pause", "failure", "finished"])
async def test_a_run_gives_its_lease_up_however_it_ends(tmp_path: Path, ending: str) -> None:
    store = FileCheckpoint(tmp_path)  # the default lease (30 s): only a release frees the run
    charges: list[int] = []
    if ending == "pause":

        @tool(requires_approval=True)
        async def charge(cents: int) -> str:
            """Charge a card."""
            return f"{cents} cents"

        paused = await Agent(
            FunctionModel(approving_model), tools=[charge], checkpoint=store
        ).prompt("pay", run_id="r")
        assert paused.pending_approvals
    elif ending == "failure":
        with pytest.raises(ModelError):
            await Agent(FunctionModel(failing_model), checkpoint=store).prompt("pay", run_id="r")
    else:
        await charging_agent(store, charges).prompt("pay", run_id="r")
        if ending == "finished":  # resuming a finished run answers, and lets go of the run too
            assert (await charging_agent(store, charges).resume("r")).text == "charged: 5 cents"

    lease = await FileCheckpoint(tmp_path).acquire("r")  # another process takes the run at once
    assert lease.token > 1


async def test_a_store_without_leases_still_runs() -> None:
    """A third-party store that only saves and loads is used as before (no lease)."""

    class Plain:
        def __init__(self) -> None:
            self.states: dict[str, CheckpointState] = {}

        async def save(self, state: CheckpointState) -> None:
            self.states[state.run_id] = state

        async def load(self, run_id: str) -> CheckpointState | None:
            return self.states.get(run_id)

        async def list_runs(self) -> list[str]:
            return sorted(self.states)

        async def delete(self, run_id: str) -> None:
            self.states.pop(run_id, None)

    charges: list[int] = []
    store = Plain()
    assert (await charging_agent(store, charges).prompt("pay", run_id="p")).text == (
        "charged: 5 cents"
    )
    assert (await charging_agent(store, charges).resume("p")).text == "charged: 5 cents"
    assert charges == [5]
