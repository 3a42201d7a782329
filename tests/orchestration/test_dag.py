from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daimon.core import AgentResponse, BuilderError, CancelToken, RunCancelled, Usage
from daimon.orchestration import DagBuilder, NodeContext, NodeError, OrchestrationBuildError


async def test_nodes_get_their_predecessors_outputs_and_roots_get_the_inputs() -> None:
    seen: dict[str, Any] = {}

    def record(name: str, value: Any) -> Any:
        async def node(inputs: dict[str, Any]) -> Any:
            seen[name] = inputs
            await asyncio.sleep(0)
            return value

        return node

    dag = (
        DagBuilder()
        .add_node("merge", record("merge", "merged"), depends_on=["web", "docs"])
        .add_node("web", record("web", ["w"]))
        .add_node("docs", lambda inputs: ["d"])
        .add_node("answer", record("answer", "done"), depends_on="merge")
        .build()
    )
    result = await dag.run({"query": "q"})

    assert seen == {
        "web": {"query": "q"},
        "merge": {"web": ["w"], "docs": ["d"]},
        "answer": {"merge": "merged"},
    }
    assert result.outputs == {"web": ["w"], "docs": ["d"], "merge": "merged", "answer": "done"}
    assert list(result.outputs) == list(dag.order) == ["web", "docs", "merge", "answer"]
    assert result.ok and result.failed == {} and result.skipped == ()
    assert {t.name for t in result.timings} == {"web", "docs", "merge", "answer"}
    assert [t.name for t in result.timings][-2:] == ["merge", "answer"]


async def test_independent_nodes_run_in_parallel() -> None:
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a(inputs: dict[str, Any]) -> str:
        a_started.set()
        await b_started.wait()  # returns only if b runs at the same time
        return "a"

    async def b(inputs: dict[str, Any]) -> str:
        b_started.set()
        await a_started.wait()
        return "b"

    dag = (
        DagBuilder()
        .add_node("a", a)
        .add_node("b", b)
        .add_node("c", lambda i: i, depends_on=["a", "b"])
        .build()
    )
    async with asyncio.timeout(5):
        result = await dag.run()
    assert result.outputs["c"] == {"a": "a", "b": "b"}


async def test_max_concurrency_limits_how_many_nodes_run_at_once() -> None:
    running = 0
    peak = 0

    async def busy(inputs: dict[str, Any]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        for _ in range(3):
            await asyncio.sleep(0)
        running -= 1

    builder = DagBuilder()
    for name in "abcd":
        builder.add_node(name, busy)
    dag = builder.build()
    await dag.run()
    assert peak == 4
    peak = 0
    await dag.run(max_concurrency=2)
    assert peak == 2
    with pytest.raises(BuilderError, match="max_concurrency"):
        await dag.run(max_concurrency=0)
    with pytest.raises(BuilderError, match="on_error"):
        await dag.run(on_error="ignore")  # type: ignore[arg-type]


def test_a_cycle_is_refused_and_its_nodes_named() -> None:
    builder = (
        DagBuilder()
        .add_node("root", print)
        .add_node("a", print, depends_on=["root", "c"])
        .add_node("b", print, depends_on=["a"])
        .add_node("c", print, depends_on=["b"])
        .add_node("after", print, depends_on=["c"])
    )
    with pytest.raises(OrchestrationBuildError, match="has a cycle: ") as caught:
        builder.build()
    assert isinstance(caught.value, BuilderError)
    assert sorted(caught.value.nodes) == ["a", "b", "c"]
    cycle = str(caught.value).split("has a cycle: ")[1]
    assert cycle in ("a -> b -> c -> a", "b -> c -> a -> b", "c -> a -> b -> c")

    with pytest.raises(OrchestrationBuildError, match="cycle: self -> self"):
        DagBuilder().add_node("self", print, depends_on=["self"]).build()


def test_missing_and_duplicate_nodes_are_refused() -> None:
    with pytest.raises(
        OrchestrationBuildError, match=r"'b' depends on missing node.*: ghost"
    ) as caught:
        DagBuilder().add_node("a", print).add_node("b", print, depends_on=["a", "ghost"]).build()
    assert caught.value.nodes == ("ghost",)
    with pytest.raises(OrchestrationBuildError, match="duplicate node 'a'"):
        DagBuilder().add_node("a", print).add_node("a", print)
    with pytest.raises(OrchestrationBuildError, match="no nodes"):
        DagBuilder().build()
    with pytest.raises(OrchestrationBuildError, match="not callable"):
        DagBuilder().add_node("a", "print")  # type: ignore[arg-type]


class Tracker:
    """Nodes that sleep, recording whether they finished or were cancelled."""

    def __init__(self) -> None:
        self.started: dict[str, asyncio.Event] = {}
        self.finished: list[str] = []
        self.cancelled: list[str] = []

    def sleeper(self, name: str, seconds: float = 10) -> Any:
        self.started[name] = asyncio.Event()

        async def node(inputs: dict[str, Any]) -> str:
            self.started[name].set()
            try:
                await asyncio.sleep(seconds)
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise
            self.finished.append(name)
            return name

        return node


async def test_on_error_cancel_stops_everything_and_names_the_node() -> None:
    tracker = Tracker()

    async def broken(inputs: dict[str, Any]) -> None:
        await tracker.started["slow"].wait()
        raise ValueError("bad data")

    dag = (
        DagBuilder()
        .add_node("slow", tracker.sleeper("slow"))
        .add_node("broken", broken)
        .add_node("after", tracker.sleeper("after", 0), depends_on=["broken"])
        .build()
    )
    with pytest.raises(NodeError, match="node 'broken' failed: ValueError: bad data") as caught:
        await dag.run()
    assert caught.value.node == "broken"
    assert isinstance(caught.value.__cause__, ValueError)
    assert tracker.cancelled == ["slow"] and tracker.finished == []


async def test_on_error_isolate_skips_descendants_and_finishes_other_branches() -> None:
    def fail(inputs: dict[str, Any]) -> None:
        raise KeyError("missing")

    dag = (
        DagBuilder()
        .add_node("root", lambda i: "r")
        .add_node("bad", fail, depends_on=["root"])
        .add_node("good", lambda i: "g", depends_on=["root"])
        .add_node("child", lambda i: "c", depends_on=["bad"])
        .add_node("grandchild", lambda i: "gc", depends_on=["child", "good"])
        .add_node("sibling", lambda i: "s", depends_on=["good"])
        .build()
    )
    result = await dag.run(on_error="isolate")
    assert list(result.failed) == ["bad"]
    assert isinstance(result.failed["bad"], KeyError)
    assert result.skipped == ("child", "grandchild")
    assert result.outputs == {"root": "r", "good": "g", "sibling": "s"}
    assert not result.ok


async def test_cancelling_a_parallel_dag_leaves_no_node_running() -> None:
    tracker = Tracker()
    token = CancelToken()
    builder = DagBuilder()
    for name in ("a", "b", "c"):
        builder.add_node(name, tracker.sleeper(name))
    builder.add_node("after", tracker.sleeper("after", 0), depends_on=["a"])
    dag = builder.build()

    async def cancel_when_all_started() -> None:
        for event in tracker.started.values():
            if event is not tracker.started["after"]:
                await event.wait()
        token.cancel("stop")

    canceller = asyncio.create_task(cancel_when_all_started())
    with pytest.raises(RunCancelled, match="stop"):
        await dag.run(cancel=token)
    await canceller
    # Every node was stopped before run() returned, not merely abandoned.
    assert sorted(tracker.cancelled) == ["a", "b", "c"]
    assert tracker.finished == []
    assert not tracker.started["after"].is_set()
    await asyncio.sleep(0.01)
    assert tracker.finished == []

    with pytest.raises(RunCancelled):
        await dag.run(cancel=token)
    assert sorted(tracker.cancelled) == ["a", "b", "c"]


async def test_a_node_can_take_a_context_and_agent_usage_rolls_up(fake_agent: Any) -> None:
    agent = fake_agent(tokens=4, cost=0.25)
    token = CancelToken()
    contexts: list[NodeContext] = []

    async def ask(inputs: dict[str, Any], ctx: NodeContext) -> str:
        contexts.append(ctx)
        response = await ctx.prompt(agent, f"{ctx.run_inputs['topic']}?")
        return response.text

    async def answer(inputs: dict[str, Any]) -> AgentResponse:
        response: AgentResponse = await agent.prompt(inputs["ask"])
        return response

    dag = DagBuilder().add_node("ask", ask).add_node("answer", answer, depends_on=["ask"]).build()
    result = await dag.run({"topic": "cats"}, cancel=token)

    assert result.outputs["ask"] == "<cats?>"
    assert isinstance(result.outputs["answer"], AgentResponse)
    assert result.outputs["answer"].text == "<<cats?>>"
    assert result.usage == Usage(input_tokens=8, output_tokens=4, requests=2)
    assert result.cost == pytest.approx(0.5)
    assert contexts[0].node == "ask" and contexts[0].cancel is token
    assert agent.cancels == [token, None]


async def test_one_dag_serves_concurrent_runs() -> None:
    async def double(inputs: dict[str, Any]) -> int:
        await asyncio.sleep(0)
        return int(inputs["n"]) * 2

    dag = DagBuilder().add_node("double", double).build()
    results = await asyncio.gather(*(dag.run({"n": n}) for n in range(4)))
    assert [r.outputs["double"] for r in results] == [0, 2, 4, 6]


async def test_a_response_prompted_through_the_context_and_returned_counts_once(
    fake_agent: Any,
) -> None:
    agent = fake_agent(tokens=10, cost=1.0)

    async def ask(inputs: dict[str, Any], ctx: NodeContext) -> AgentResponse:
        response = await ctx.prompt(agent, "q")
        ctx.record(response)
        return response

    result = await DagBuilder().add_node("ask", ask).build().run()
    assert result.usage == Usage(input_tokens=10, output_tokens=5, requests=1)
    assert result.cost == pytest.approx(1.0)
