"""Tasks, task results and task statuses; tool outputs and documents."""

from __future__ import annotations

from daimon.core import (
    AgentTask,
    Document,
    ScoredDocument,
    TaskResult,
    TaskState,
    TaskStatus,
    ToolOutput,
)


def test_status_constructors() -> None:
    result = TaskResult(task_id="t1", output="done")
    assert TaskStatus.pending().state is TaskState.PENDING
    assert TaskStatus.running().state is TaskState.RUNNING
    assert TaskStatus.completed(result) == TaskStatus(state=TaskState.COMPLETED, result=result)
    assert TaskStatus.failed("boom") == TaskStatus(state=TaskState.FAILED, error="boom")
    assert TaskStatus.cancelled().state is TaskState.CANCELLED


def test_task_defaults() -> None:
    task = AgentTask(task_id="t1", input="hello")
    assert (task.attempt, task.run_id, task.session_id, task.metadata) == (1, None, None, {})
    # Each task gets its own metadata dict.
    assert AgentTask(task_id="t2", input="x").metadata is not task.metadata


def test_tool_output_constructors() -> None:
    assert ToolOutput.text("hi") == ToolOutput(content="hi")
    assert ToolOutput.error("bad") == ToolOutput(content="bad", is_error=True)
    out = ToolOutput.json({"a": [1, "é"]})
    assert out.content == '{"a": [1, "é"]}'
    assert out.data == {"a": [1, "é"]}


def test_documents() -> None:
    doc = Document(content="text", id="d1", metadata={"lang": "en"})
    scored = ScoredDocument(document=doc, score=0.9)
    assert scored.document.metadata["lang"] == "en"
    assert Document(content="x").id == ""
