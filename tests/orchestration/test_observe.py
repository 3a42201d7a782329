"""The ``on_node`` observer of graph, DAG and workflow runs: node starts, ends, failures, skips."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from daimon.core import CancelToken, RunCancelled
from daimon.orchestration import (
    END,
    START,
    DagBuilder,
    GraphBuilder,
    GraphContext,
    NodeError,
    NodeEvent,
    NodeFailed,
    NodeFinished,
    NodeSkipped,
    NodeStarted,
    WorkflowBuilder,
    workflow_node,
)


def brief(events: list[NodeEvent]) -> list[tuple[str, str]]:
    return [(event.kind, event.node) for event in events]


async def test_a_graph_reports_each_node_with_its_superstep_and_duration() -> None:
    events: list[NodeEvent] = []

    async def plan(ctx: GraphContext) -> dict[str, Any]:
        await asyncio.sleep(0.02)
        return {"plan": "p", "count": ctx.state.get("count", 0) + 1}

    def route(state: Mapping[str, Any]) -> str:
        return "again" if state["count"] < 2 else "done"

    graph = (
        GraphBuilder()
        .add_node("plan", plan)
        .add_node("answer", lambda ctx: {"answer": "a"})
        .add_edge(START, "plan")
        .add_router("plan", route, {"again": "plan", "done": "answer"})
        .add_edge("answer", END)
        .build()
    )
    result = await graph.run({}, on_node=events.append)

    assert result.state["answer"] == "a"
    assert brief(events) == [
        ("node_started", "plan"),
        ("node_finished", "plan"),
        ("node_started", "plan"),
        ("node_finished", "plan"),
        ("node_started", "answer"),
        ("node_finished", "answer"),
    ]
    assert [event.step for event in events if isinstance(event, NodeStarted)] == [0, 1, 2]
    finished = [event for event in events if isinstance(event, NodeFinished)]
    assert all(event.seconds >= 0.02 for event in finished[:2])
    assert finished[2].seconds < 0.02


async def test_a_graph_reports_the_failing_node_before_raising() -> None:
    events: list[NodeEvent] = []

    def broken(ctx: GraphContext) -> None:
        raise ValueError("no plan")

    graph = (
        GraphBuilder()
        .add_node("fine", lambda ctx: {"a": 1})
        .add_node("broken", broken)
        .add_edge(START, "fine")
        .add_edge(START, "broken")
        .add_edge("fine", END)
        .add_edge("broken", END)
        .build()
    )
    with pytest.raises(NodeError, match="no plan"):
        await graph.run(on_node=events.append)

    failed = [event for event in events if isinstance(event, NodeFailed)]
    assert [event.node for event in failed] == ["broken"]
    assert isinstance(failed[0].error, ValueError) and failed[0].step == 0
    assert ("node_started", "broken") in brief(events)


async def test_parallel_dag_nodes_start_before_either_finishes() -> None:
    events: list[NodeEvent] = []
    both_started = asyncio.Event()

    async def slow(inputs: Mapping[str, Any]) -> str:
        if sum(isinstance(event, NodeStarted) for event in events) == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), 5)
        return "x"

    dag = (
        DagBuilder()
        .add_node("left", slow)
        .add_node("right", slow)
        .add_node("join", lambda inputs: "".join(inputs.values()), depends_on=["left", "right"])
        .build()
    )
    result = await dag.run(on_node=events.append)

    assert result.outputs["join"] == "xx"
    assert brief(events)[:2] == [("node_started", "left"), ("node_started", "right")]
    assert brief(events)[-2:] == [("node_started", "join"), ("node_finished", "join")]
    timings = {timing.name: timing.seconds for timing in result.timings}
    ends = {event.node: event.seconds for event in events if isinstance(event, NodeFinished)}
    assert ends == timings


async def test_isolated_dag_failures_report_the_failure_and_the_skipped_nodes() -> None:
    events: list[NodeEvent] = []

    def fail(inputs: Mapping[str, Any]) -> None:
        raise RuntimeError("down")

    dag = (
        DagBuilder()
        .add_node("fetch", fail)
        .add_node("parse", lambda inputs: 1, depends_on="fetch")
        .add_node("other", lambda inputs: 2)
        .build()
    )
    result = await dag.run(on_error="isolate", on_node=events.append)

    assert result.skipped == ("parse",)
    assert ("node_failed", "fetch") in brief(events)
    assert ("node_skipped", "parse") in brief(events)
    assert ("node_started", "parse") not in brief(events)
    assert [e for e in events if isinstance(e, NodeSkipped)] == [NodeSkipped(node="parse")]


async def test_a_workflow_reports_its_nodes() -> None:
    events: list[NodeEvent] = []

    @workflow_node(output="words")
    def split(text: str) -> list[str]:
        return text.split()

    @workflow_node(output="count")
    def count(words: list[str]) -> int:
        return len(words)

    workflow = WorkflowBuilder(inputs={"text": str}).add(split).add(count).build()
    result = await workflow.run({"text": "a b c"}, on_node=events.append)

    assert result.fields["count"] == 3
    assert brief(events) == [
        ("node_started", "split"),
        ("node_finished", "split"),
        ("node_started", "count"),
        ("node_finished", "count"),
    ]
    assert all(event.step is None for event in events if not isinstance(event, NodeSkipped))


async def test_a_cancelled_node_reports_no_end() -> None:
    events: list[NodeEvent] = []
    cancel = CancelToken()

    async def hang(inputs: Mapping[str, Any]) -> None:
        cancel.cancel("stop")
        await asyncio.sleep(10)

    dag = DagBuilder().add_node("hang", hang).build()
    with pytest.raises(RunCancelled):
        await dag.run(cancel=cancel, on_node=events.append)
    assert brief(events) == [("node_started", "hang")]


async def test_an_observer_that_raises_ends_the_run_with_its_error() -> None:
    def observer(event: NodeEvent) -> None:
        raise LookupError("observer broke")

    dag = DagBuilder().add_node("a", lambda inputs: 1).build()
    with pytest.raises(LookupError, match="observer broke"):
        await dag.run(on_node=observer)
