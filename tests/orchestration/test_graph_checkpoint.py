from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from daimon.checkpoint.file import FileCheckpoint
from daimon.core import (
    BuilderError,
    CancelToken,
    CheckpointState,
    OrchestrationError,
    RunCancelled,
    Usage,
)
from daimon.core.protocols import Checkpoint
from daimon.orchestration import END, START, GraphBuilder, GraphContext, NodeError, append


class MemoryCheckpoint:
    """The core Checkpoint protocol in memory, keeping every save."""

    def __init__(self) -> None:
        self.saves: dict[str, list[CheckpointState]] = {}

    async def save(self, state: CheckpointState) -> None:
        json.dumps(state.custom)  # what a real backend would store
        self.saves.setdefault(state.run_id, []).append(state)

    async def load(self, run_id: str) -> CheckpointState | None:
        saves = self.saves.get(run_id)
        return saves[-1] if saves else None

    async def list_runs(self) -> list[str]:
        return list(self.saves)

    async def delete(self, run_id: str) -> None:
        self.saves.pop(run_id, None)


def test_the_fake_is_a_checkpoint() -> None:
    checkpoint: Checkpoint = MemoryCheckpoint()
    assert checkpoint is not None


class Pipeline:
    """a -> (b, c) -> d; counts calls, and the nodes in ``fail_once`` raise on their first call."""

    def __init__(self, *fail_once: str) -> None:
        self.calls: Counter[str] = Counter()
        self.fail_once = set(fail_once)
        builder = GraphBuilder(reducers={"log": append})
        for name in "abcd":
            builder.add_node(name, self.node)
        self.graph = (
            builder.add_edge(START, "a")
            .add_edge("a", "b")
            .add_edge("a", "c")
            .add_edge("b", "d")
            .add_edge("c", "d")
            .add_edge("d", END)
            .build()
        )

    async def node(self, ctx: GraphContext) -> dict[str, Any]:
        self.calls[ctx.node] += 1
        await asyncio.sleep(0)
        if ctx.node in self.fail_once and self.calls[ctx.node] == 1:
            raise ConnectionError(f"{ctx.node} lost its connection")
        return {"log": ctx.node}


async def test_a_checkpoint_is_saved_after_every_superstep() -> None:
    checkpoint = MemoryCheckpoint()
    pipeline = Pipeline()
    result = await pipeline.graph.run({"log": []}, run_id="r1", checkpoint=checkpoint)

    assert result.state == {"log": ["a", "b", "c", "d"]}
    saves = checkpoint.saves["r1"]
    assert [s.iteration for s in saves] == [1, 2, 3]
    assert saves[0].custom == {
        "graph": {"step": 1, "next": ["b", "c"], "state": {"log": ["a"]}, "joins": [], "done": {}}
    }
    assert saves[-1].custom["graph"]["next"] == []


async def test_a_crashed_run_resumes_without_rerunning_finished_supersteps() -> None:
    checkpoint = MemoryCheckpoint()
    pipeline = Pipeline("d")
    with pytest.raises(NodeError, match="node 'd' failed: ConnectionError"):
        await pipeline.graph.run({"log": []}, run_id="r1", checkpoint=checkpoint)
    assert pipeline.calls == {"a": 1, "b": 1, "c": 1, "d": 1}

    result = await pipeline.graph.run({"log": []}, run_id="r1", checkpoint=checkpoint)

    assert pipeline.calls == {"a": 1, "b": 1, "c": 1, "d": 2}
    assert result.resumed
    assert result.history == (("d",),)
    assert result.steps == 3
    assert result.state == {"log": ["a", "b", "c", "d"]}


async def test_a_resumed_superstep_reruns_only_the_nodes_that_failed() -> None:
    checkpoint = MemoryCheckpoint()
    pipeline = Pipeline("c")
    with pytest.raises(NodeError, match="'c'"):
        await pipeline.graph.run({"log": []}, run_id="r1", checkpoint=checkpoint)
    saved = checkpoint.saves["r1"][-1].custom["graph"]
    assert saved["step"] == 1
    assert saved["done"] == {"b": {"update": {"log": "b"}, "goto": None}}

    result = await pipeline.graph.run(None, run_id="r1", checkpoint=checkpoint)
    assert pipeline.calls == {"a": 1, "b": 1, "c": 2, "d": 1}
    assert result.state == {"log": ["a", "b", "c", "d"]}  # b's update kept, in order
    assert result.history == (("b", "c"), ("d",))


async def test_a_finished_run_returns_its_state_without_running_again() -> None:
    checkpoint = MemoryCheckpoint()
    pipeline = Pipeline()
    first = await pipeline.graph.run({"log": []}, run_id="r1", checkpoint=checkpoint)
    again = await pipeline.graph.run({"log": ["ignored"]}, run_id="r1", checkpoint=checkpoint)
    assert pipeline.calls == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert again.state == first.state and again.resumed and again.history == ()

    other = await pipeline.graph.run({"log": []}, run_id="r2", checkpoint=checkpoint)
    assert not other.resumed and pipeline.calls["a"] == 2


async def test_a_cancelled_run_resumes_from_its_checkpoint() -> None:
    checkpoint = MemoryCheckpoint()
    token = CancelToken()
    pipeline = Pipeline()

    async def stop_after_a(ctx: GraphContext) -> dict[str, Any]:
        update = await pipeline.node(ctx)
        token.cancel("pause")  # a finishes (no await after this); the run stops before b
        return update

    graph = (
        GraphBuilder(reducers={"log": append})
        .add_node("a", stop_after_a)
        .add_node("b", pipeline.node)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .build()
    )
    with pytest.raises(RunCancelled, match="pause"):
        await graph.run({"log": []}, run_id="r1", checkpoint=checkpoint, cancel=token)
    assert pipeline.calls == {"a": 1}
    result = await graph.run({"log": []}, run_id="r1", checkpoint=checkpoint)
    assert pipeline.calls == {"a": 1, "b": 1}
    assert result.state == {"log": ["a", "b"]}


async def test_usage_survives_a_resume(fake_agent: Any) -> None:
    checkpoint = MemoryCheckpoint()
    agent = fake_agent(tokens=10, cost=1.0)
    failed = False

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        nonlocal failed
        response = await ctx.prompt(agent, ctx.node)
        if ctx.node == "second" and not failed:
            failed = True
            raise TimeoutError("slow")
        return {ctx.node: response.text}

    graph = (
        GraphBuilder()
        .add_node("first", ask)
        .add_node("second", ask)
        .add_edge(START, "first")
        .add_edge("first", "second")
        .add_edge("second", END)
        .build()
    )
    with pytest.raises(NodeError):
        await graph.run(run_id="r1", checkpoint=checkpoint)
    result = await graph.run(run_id="r1", checkpoint=checkpoint)
    # first (saved with its superstep), then second's retry; the failed attempt was not saved
    assert result.usage == Usage(input_tokens=20, output_tokens=10, requests=2)
    assert result.cost == pytest.approx(2.0)
    assert agent.prompts == ["first", "second", "second"]


async def test_checkpointed_state_must_be_json() -> None:
    graph = (
        GraphBuilder()
        .add_node("a", lambda ctx: {"when": object()})
        .add_edge(START, "a")
        .add_edge("a", END)
        .build()
    )
    with pytest.raises(OrchestrationError, match="state key 'when' is not a JSON value"):
        await graph.run(run_id="r1", checkpoint=MemoryCheckpoint())
    assert "when" in (await graph.run()).state  # without a checkpoint, any value will do
    with pytest.raises(BuilderError, match="needs a run_id"):
        await graph.run(checkpoint=MemoryCheckpoint())


async def test_a_checkpoint_from_another_run_kind_or_graph_is_refused() -> None:
    checkpoint = MemoryCheckpoint()
    await checkpoint.save(CheckpointState(run_id="agent-run", custom={"other": 1}))
    await checkpoint.save(
        CheckpointState(
            run_id="other-graph",
            custom={"graph": {"step": 1, "next": ["zz"], "state": {}, "joins": [], "done": {}}},
        )
    )
    graph = Pipeline().graph
    with pytest.raises(OrchestrationError, match="'agent-run' is not a graph checkpoint"):
        await graph.run(run_id="agent-run", checkpoint=checkpoint)
    with pytest.raises(OrchestrationError, match=r"different graph.*unknown nodes: zz"):
        await graph.run(run_id="other-graph", checkpoint=checkpoint)


async def test_resuming_through_a_real_file_checkpoint(tmp_path: Path) -> None:
    pipeline = Pipeline("d")
    with pytest.raises(NodeError):
        await pipeline.graph.run({"log": []}, run_id="r1", checkpoint=FileCheckpoint(tmp_path))
    # a new handle, as after a process restart
    result = await pipeline.graph.run(None, run_id="r1", checkpoint=FileCheckpoint(tmp_path))
    assert result.state == {"log": ["a", "b", "c", "d"]}
    assert pipeline.calls == {"a": 1, "b": 1, "c": 1, "d": 2}
