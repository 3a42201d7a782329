"""Human approval of tool calls: pause, decide several at once in any order, resume."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from daimon import (
    Agent,
    ApprovalDecision,
    BuilderError,
    ChatRequest,
    ChatResponse,
    Role,
    ToolCall,
    tool,
)
from daimon.core import codec
from daimon.core.results import AgentResponse
from daimon.models import FunctionModel

ran: Counter[str] = Counter()


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    ran[path] += 1
    return f"deleted {path}"


@tool
def list_files() -> str:
    """List files."""
    ran["list"] += 1
    return "a.txt b.txt c.txt"


def planner(request: ChatRequest) -> ChatResponse:
    results = [m for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(
            ToolCall(id="del-a", name="delete_file", arguments={"path": "a.txt"}),
            ToolCall(id="list", name="list_files", arguments={}),
            ToolCall(id="del-b", name="delete_file", arguments={"path": "b.txt"}),
        )
    return ChatResponse.reply(" | ".join(m.text for m in results))


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


async def test_two_approvals_answered_in_reverse_order_resume_the_run() -> None:
    agent = Agent(FunctionModel(planner), tools=[delete_file, list_files])
    paused = await agent.prompt("clean up")
    assert paused.paused
    assert [a.id for a in paused.pending_approvals] == ["del-a", "del-b"]
    assert ran == Counter({"list": 1})  # calls needing no approval already ran

    # a paused run survives the trip through JSON (a web form, a queue, a database)
    paused = codec.loads(codec.dumps(paused), AgentResponse)
    second = await agent.resume(paused, {"del-b": ApprovalDecision.reject("keep b")})
    assert second.paused and [a.id for a in second.pending_approvals] == ["del-a"]
    done = await agent.resume(second, {"del-a": True})
    assert not done.paused
    assert done.text == "deleted a.txt | a.txt b.txt c.txt | The user rejected this call: keep b"
    assert ran == Counter({"list": 1, "a.txt": 1})


async def test_all_decided_at_once() -> None:
    agent = Agent(FunctionModel(planner), tools=[delete_file, list_files])
    paused = await agent.prompt("clean up")
    done = await agent.resume(paused, {"del-a": False, "del-b": True})
    assert done.text.startswith("The user rejected this call.")
    assert ran == Counter({"list": 1, "b.txt": 1})


async def test_resume_needs_a_paused_run() -> None:
    agent = Agent(FunctionModel(lambda r: "hi"))
    finished = await agent.prompt("x")
    with pytest.raises(BuilderError, match="not a paused run"):
        await agent.resume(finished, {})
    with pytest.raises(BuilderError, match="checkpoint"):
        await agent.resume("some-run-id", {})


async def test_approvals_resume_by_run_id_from_a_checkpoint_in_a_new_process(
    tmp_path: Path,
) -> None:
    from daimon.checkpoint import FileCheckpoint

    first = Agent(FunctionModel(planner), tools=[delete_file, list_files],
                  checkpoint=FileCheckpoint(tmp_path))  # fmt: skip
    paused = await first.prompt("clean up", run_id="job-1")
    assert [a.id for a in paused.pending_approvals] == ["del-a", "del-b"]
    # another process: a fresh agent on the same store knows the run only by its id
    second = Agent(FunctionModel(planner), tools=[delete_file, list_files],
                   checkpoint=FileCheckpoint(tmp_path))  # fmt: skip
    done = await second.resume("job-1", {"del-a": True, "del-b": True})
    assert done.text == "deleted a.txt | a.txt b.txt c.txt | deleted b.txt"
    assert ran == Counter({"list": 1, "a.txt": 1, "b.txt": 1})
