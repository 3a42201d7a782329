from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from daimon.core import BuilderError, CancelToken, OrchestrationError, RunCancelled, Usage
from daimon.orchestration import (
    END,
    START,
    GraphBuilder,
    GraphContext,
    MaxStepsError,
    NodeError,
    NodeOutcome,
    OrchestrationBuildError,
    StateConflictError,
    append,
    merge,
)


def write(key: str, value: Any) -> Any:
    """A node that writes one state key."""

    async def node(ctx: GraphContext) -> dict[str, Any]:
        return {key: value}

    return node


async def test_a_router_loops_until_it_picks_the_exit() -> None:
    async def increment(ctx: GraphContext) -> dict[str, Any]:
        return {"count": ctx.state.get("count", 0) + 1}

    def again(state: Mapping[str, Any]) -> str:
        return "again" if state["count"] < 3 else "done"

    graph = (
        GraphBuilder()
        .add_node("increment", increment)
        .add_node("report", lambda ctx: {"report": f"counted to {ctx.state['count']}"})
        .add_edge(START, "increment")
        .add_router("increment", again, {"again": "increment", "done": "report"})
        .add_edge("report", END)
        .build()
    )
    result = await graph.run({"count": 0})

    assert result.state == {"count": 3, "report": "counted to 3"}
    assert result.history == (("increment",),) * 3 + (("report",),)
    assert result.steps == 4
    assert not result.resumed


async def test_a_node_outcome_picks_the_next_node_among_its_destinations() -> None:
    async def classify(ctx: GraphContext) -> NodeOutcome:
        topic = "math" if any(c.isdigit() for c in ctx.state["question"]) else "prose"
        return NodeOutcome(update={"topic": topic}, goto=topic)

    def build(destinations: tuple[str, ...]) -> Any:
        builder = (
            GraphBuilder()
            .add_node("classify", classify, destinations=destinations)
            .add_node("math", write("answer", "4"))
            .add_node("prose", write("answer", "words"))
            .add_edge(START, "classify")
            .add_edge("prose", END)
        )
        # "prose" must stay reachable when classify may not route to it
        return builder.add_edge("math", "prose" if "prose" not in destinations else END).build()

    graph = build(("math", "prose"))
    assert (await graph.run({"question": "2+2?"})).state["answer"] == "4"
    result = await graph.run({"question": "why?"})
    assert result.state == {"question": "why?", "topic": "prose", "answer": "words"}
    assert result.history == (("classify",), ("prose",))

    only_math = build(("math",))
    with pytest.raises(OrchestrationError, match="routed to 'prose', which is not one of its"):
        await only_math.run({"question": "why?"})


async def test_returning_names_fans_out_and_an_empty_goto_ends_the_branch() -> None:
    graph = (
        GraphBuilder(reducers={"seen": append})
        .add_node("split", lambda ctx: ["left", "right"], destinations=["left", "right"])
        .add_node(
            "left", lambda ctx: NodeOutcome(update={"seen": "left"}, goto=()), destinations=[END]
        )
        .add_node("right", write("seen", "right"))
        .add_edge(START, "split")
        .add_edge("right", END)
        .build()
    )
    result = await graph.run()
    assert result.history == (("split",), ("left", "right"))
    assert result.state == {"seen": ["left", "right"]}


async def test_fan_out_runs_branches_in_parallel_and_fan_in_runs_the_join_once() -> None:
    b_started, c_started, c_finished = asyncio.Event(), asyncio.Event(), asyncio.Event()
    joined: list[Any] = []

    async def b(ctx: GraphContext) -> dict[str, Any]:
        b_started.set()
        await c_started.wait()  # only returns if c runs at the same time
        await c_finished.wait()  # b finishes last, yet its update is merged first
        return {"log": ["b"]}

    async def c(ctx: GraphContext) -> dict[str, Any]:
        c_started.set()
        await b_started.wait()
        c_finished.set()
        return {"log": ["c"]}

    async def d(ctx: GraphContext) -> None:
        joined.append(list(ctx.state["log"]))

    graph = (
        GraphBuilder(reducers={"log": append})
        .add_node("a", write("log", ["a"]))
        .add_node("b", b)
        .add_node("c", c)
        .add_node("d", d)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("a", "c")
        .add_edge("b", "d")
        .add_edge("c", "d")
        .add_edge("d", END)
        .build()
    )
    async with asyncio.timeout(5):
        result = await graph.run()

    assert result.history == (("a",), ("b", "c"), ("d",))
    assert joined == [["a", "b", "c"]]
    assert result.state["log"] == ["a", "b", "c"]


async def test_a_join_waits_for_branches_of_different_lengths() -> None:
    calls: list[list[str]] = []

    async def summarize(ctx: GraphContext) -> None:
        calls.append(list(ctx.state["log"]))

    def build(join: bool) -> Any:
        builder = (
            GraphBuilder(reducers={"log": append})
            .add_node("short", write("log", "short"))
            .add_node("long1", write("log", "long1"))
            .add_node("long2", write("log", "long2"))
            .add_node("summarize", summarize)
            .add_edge(START, "short")
            .add_edge(START, "long1")
            .add_edge("long1", "long2")
            .add_edge("summarize", END)
        )
        if join:
            return builder.add_join(["short", "long2"], "summarize").build()
        return builder.add_edge("short", "summarize").add_edge("long2", "summarize").build()

    result = await build(join=True).run()
    assert calls == [["short", "long1", "long2"]]
    assert result.history == (("short", "long1"), ("long2",), ("summarize",))

    calls.clear()
    await build(join=False).run()
    assert len(calls) == 2  # without the join, the shorter branch reaches it first


async def test_a_router_on_start_picks_the_entry() -> None:
    graph = (
        GraphBuilder()
        .add_node("small", write("size", "small"))
        .add_node("big", write("size", "big"))
        .add_router(START, lambda s: "big" if s["n"] > 10 else "small", ["small", "big"])
        .add_edge("small", END)
        .add_edge("big", END)
        .build()
    )
    assert (await graph.run({"n": 99})).state["size"] == "big"
    assert (await graph.run({"n": 1})).state["size"] == "small"


async def test_parallel_writes_to_a_key_without_a_reducer_conflict() -> None:
    graph = (
        GraphBuilder(reducers={"notes": merge})
        .add_node("a", lambda ctx: {"answer": 1, "notes": {"a": 1}})
        .add_node("b", lambda ctx: {"answer": 2, "notes": {"b": 2}})
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .build()
    )
    with pytest.raises(
        StateConflictError, match="'answer' was written by 2 parallel nodes"
    ) as caught:
        await graph.run()
    assert (caught.value.key, caught.value.nodes, caught.value.step) == ("answer", ("a", "b"), 0)


async def test_reducers_merge_parallel_writes_in_scheduling_order() -> None:
    graph = (
        GraphBuilder(reducers={"notes": merge, "log": append})
        .add_node("a", lambda ctx: {"notes": {"a": 1, "x": "a"}, "log": ["a1", "a2"]})
        .add_node("b", lambda ctx: {"notes": {"b": 2, "x": "b"}, "log": "b"})
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .build()
    )
    result = await graph.run({"log": ["start"]})
    assert result.state == {"log": ["start", "a1", "a2", "b"], "notes": {"a": 1, "b": 2, "x": "b"}}


async def test_a_failing_reducer_names_the_key_and_node() -> None:
    graph = (
        GraphBuilder(reducers={"notes": merge})
        .add_node("a", write("notes", "not a mapping"))
        .add_edge(START, "a")
        .add_edge("a", END)
        .build()
    )
    with pytest.raises(OrchestrationError, match=r"reducer of state key 'notes' failed on .* 'a'"):
        await graph.run()


async def test_a_graph_that_loops_forever_stops_at_max_steps() -> None:
    graph = (
        GraphBuilder()
        .add_node("ping", write("x", 1), destinations=["pong"])
        .add_node("pong", write("x", 2))
        .add_edge(START, "ping")
        .add_edge("ping", "pong")
        .add_edge("pong", "ping")
        .build()
    )
    with pytest.raises(
        MaxStepsError, match=r"max_steps=5 after 5 supersteps; last nodes: ping"
    ) as caught:
        await graph.run(max_steps=5)
    assert caught.value.max_steps == 5
    assert caught.value.last_nodes == ("ping",)
    assert caught.value.next_nodes == ("pong",)
    with pytest.raises(BuilderError, match="max_steps"):
        await graph.run(max_steps=0)


async def test_a_failing_node_is_named_and_its_running_siblings_are_cancelled() -> None:
    finished: list[str] = []
    cancelled: list[str] = []

    async def slow(ctx: GraphContext) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(ctx.node)
            raise
        finished.append(ctx.node)

    async def broken(ctx: GraphContext) -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    graph = (
        GraphBuilder()
        .add_node("slow", slow)
        .add_node("broken", broken)
        .add_edge(START, "slow")
        .add_edge(START, "broken")
        .add_edge("slow", END)
        .add_edge("broken", END)
        .build()
    )
    with pytest.raises(NodeError, match="node 'broken' failed: ValueError: boom") as caught:
        await graph.run()
    assert caught.value.node == "broken"
    assert isinstance(caught.value.__cause__, ValueError)
    assert cancelled == ["slow"] and finished == []


async def test_a_node_returning_something_else_fails() -> None:
    def wrong(ctx: GraphContext) -> Any:
        return 42

    graph = GraphBuilder().add_node("n", wrong).add_edge(START, "n").add_edge("n", END).build()
    with pytest.raises(NodeError, match="returned int: return a NodeOutcome"):
        await graph.run()


async def test_a_router_that_fails_or_picks_an_unknown_route() -> None:
    def build(router: Any) -> Any:
        return (
            GraphBuilder()
            .add_node("n", write("x", 1))
            .add_edge(START, "n")
            .add_router("n", router, {"done": END})
            .build()
        )

    with pytest.raises(NodeError, match="router of 'n' failed: KeyError") as caught:
        await build(lambda state: state["missing"]).run()
    assert caught.value.node == "n"
    with pytest.raises(
        OrchestrationError, match=r"picked unknown route.*'nowhere'; routes: 'done'"
    ):
        await build(lambda state: "nowhere").run()
    assert (await build(lambda state: "done").run()).state == {"x": 1}


async def test_cancelling_mid_superstep_stops_every_node() -> None:
    token = CancelToken()
    started = asyncio.Event()
    finished: list[str] = []

    async def waits(ctx: GraphContext) -> None:
        started.set()
        await asyncio.sleep(10)
        finished.append(ctx.node)

    graph = (
        GraphBuilder()
        .add_node("a", waits)
        .add_node("b", waits)
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .build()
    )
    run = asyncio.create_task(graph.run(cancel=token))
    await started.wait()
    token.cancel("user stop")
    with pytest.raises(RunCancelled, match="user stop"):
        await run
    assert finished == []


async def test_cancel_is_checked_before_each_superstep() -> None:
    token = CancelToken()
    ran: list[str] = []

    async def first(ctx: GraphContext) -> None:
        ran.append("first")
        token.cancel()

    graph = (
        GraphBuilder()
        .add_node("first", first)
        .add_node("second", lambda ctx: ran.append("second"))
        .add_edge(START, "first")
        .add_edge("first", "second")
        .add_edge("second", END)
        .build()
    )
    with pytest.raises(RunCancelled):
        await graph.run(cancel=token)
    assert ran == ["first"]
    with pytest.raises(RunCancelled):
        await graph.run(cancel=token)
    assert ran == ["first"]


async def test_nodes_prompt_agents_with_the_token_and_usage_rolls_up(fake_agent: Any) -> None:
    agent = fake_agent(tokens=6, cost=0.1)
    token = CancelToken()

    async def ask(ctx: GraphContext) -> dict[str, Any]:
        response = await ctx.prompt(agent, f"q{ctx.step}")
        return {ctx.node: response.text}

    graph = (
        GraphBuilder()
        .add_node("one", ask)
        .add_node("two", ask)
        .add_edge(START, "one")
        .add_edge("one", "two")
        .add_edge("two", END)
        .build()
    )
    result = await graph.run(cancel=token)
    assert result.state == {"one": "<q0>", "two": "<q1>"}
    assert result.usage == Usage(input_tokens=12, output_tokens=6, requests=2)
    assert result.cost == pytest.approx(0.2)
    assert agent.cancels == [token, token]


async def test_one_graph_serves_concurrent_runs() -> None:
    async def double(ctx: GraphContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"n": ctx.state["n"] * 2}

    graph = GraphBuilder().add_node("d", double).add_edge(START, "d").add_edge("d", END).build()
    results = await asyncio.gather(*(graph.run({"n": n}) for n in range(5)))
    assert [r.state["n"] for r in results] == [0, 2, 4, 6, 8]


def test_bad_graphs_are_refused_when_built() -> None:
    def node(ctx: GraphContext) -> None:
        return None

    with pytest.raises(OrchestrationBuildError, match="duplicate node 'a'") as caught:
        GraphBuilder().add_node("a", node).add_node("a", node)
    assert isinstance(caught.value, BuilderError) and caught.value.nodes == ("a",)
    with pytest.raises(OrchestrationBuildError, match="reserved"):
        GraphBuilder().add_node(END, node)
    with pytest.raises(OrchestrationBuildError, match=r"missing node.*: ghost") as caught:
        GraphBuilder().add_node("a", node).add_edge(START, "a").add_edge("a", "ghost").build()
    assert caught.value.nodes == ("ghost",)
    with pytest.raises(OrchestrationBuildError, match="no entry"):
        GraphBuilder().add_node("a", node).add_edge("a", END).build()
    with pytest.raises(OrchestrationBuildError, match="no way out: b") as caught:
        (
            GraphBuilder()
            .add_node("a", node)
            .add_node("b", node)
            .add_edge(START, "a")
            .add_edge("a", "b")
            .build()
        )
    assert caught.value.nodes == ("b",)
    with pytest.raises(OrchestrationBuildError, match="unreachable from START: island"):
        (
            GraphBuilder()
            .add_node("a", node)
            .add_node("island", node)
            .add_edge(START, "a")
            .add_edge("a", END)
            .add_edge("island", END)
            .build()
        )
    with pytest.raises(OrchestrationBuildError, match="duplicate edge"):
        GraphBuilder().add_edge("a", "b").add_edge("a", "b")
    with pytest.raises(OrchestrationBuildError, match="already has a router"):
        GraphBuilder().add_router("a", lambda s: "x", ["x"]).add_router("a", lambda s: "x", ["x"])
    with pytest.raises(OrchestrationBuildError, match="none of them to START"):
        GraphBuilder().add_router("a", lambda s: "x", {"x": START})
    with pytest.raises(OrchestrationBuildError, match="cannot route to START"):
        (GraphBuilder().add_node("a", node, destinations=[START]).add_edge(START, "a").build())
    with pytest.raises(OrchestrationBuildError, match="distinct sources"):
        GraphBuilder().add_join(["a", "a"], "b")
    with pytest.raises(OrchestrationBuildError, match="reducer of state key 'k' is not callable"):
        GraphBuilder(reducers={"k": 3})  # type: ignore[dict-item]
