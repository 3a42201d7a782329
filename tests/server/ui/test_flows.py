"""Served flows in a real browser: the drawing, its nodes lit in order, a failed node marked."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from playwright.sync_api import expect

from daimon.orchestration import (
    END,
    START,
    Dag,
    DagBuilder,
    Graph,
    GraphBuilder,
    GraphContext,
    NodeContext,
)
from daimon.server import ServedFlow

from .conftest import Shots, calculator

if TYPE_CHECKING:
    from playwright.sync_api import Page

Live = Callable[..., Any]
"""tests/server's ``live`` fixture: ``live(agents, **settings)`` starts a server."""

# Records each node's state changes on the drawing, in the order the page makes them.
WATCH = """
() => {
  window.lit = [];
  const box = document.getElementById("flow");
  new MutationObserver((changes) => {
    for (const change of changes) {
      const node = change.target;
      if (change.attributeName === "data-state" && node.dataset.node) {
        window.lit.push(`${node.dataset.node}:${node.dataset.state}`);
      }
    }
  }).observe(box, { subtree: true, attributes: true, attributeFilter: ["data-state"] });
}
"""


def research(gate: threading.Event) -> Graph:
    """classify -> (router) search -> write, and write loops once through its reviewer.

    ``search`` waits for ``gate`` so the test can look at the page while it runs.
    """

    def classify(ctx: GraphContext) -> dict[str, Any]:
        return {"question": ctx.state["input"].endswith("?"), "drafts": 0}

    async def search(ctx: GraphContext) -> dict[str, Any]:
        await asyncio.to_thread(gate.wait, 10)
        return {"notes": "rust is a language"}

    async def write(ctx: GraphContext) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        drafts = ctx.state["drafts"] + 1
        return {"drafts": drafts, "output": f"draft {drafts}: {ctx.state.get('notes', '')}"}

    def route(state: Mapping[str, Any]) -> str:
        return "search" if state["question"] else "write"

    def review(state: Mapping[str, Any]) -> str:
        return "revise" if state["drafts"] < 2 else "done"

    return (
        GraphBuilder("research")
        .add_node("classify", classify)
        .add_node("search", search)
        .add_node("write", write)
        .add_edge(START, "classify")
        .add_router("classify", route, {"search": "search", "write": "write"})
        .add_edge("search", "write")
        .add_router("write", review, {"revise": "write", "done": END})
        .build()
    )


def pipeline() -> Dag:
    """fetch, then parse (which fails) and summarize in parallel; report needs both."""

    async def parse(inputs: Mapping[str, Any]) -> str:
        await asyncio.sleep(0.1)
        raise ValueError("the page is not HTML")

    async def summarize(inputs: Mapping[str, Any]) -> str:
        await asyncio.sleep(2)
        return "summary"

    return (
        DagBuilder("pipeline")
        .add_node("fetch", lambda inputs: "<page>")
        .add_node("parse", parse, depends_on="fetch")
        .add_node("summarize", summarize, depends_on="fetch")
        .add_node("report", lambda inputs: "report", depends_on=["parse", "summarize"])
        .build()
    )


def send(page: Page, text: str) -> None:
    box = page.get_by_label("Message")
    box.fill(text)
    box.press("Control+Enter")


def test_a_flow_is_drawn_and_its_nodes_light_up_as_they_run(
    live: Live, page: Page, shots: Shots
) -> None:
    gate = threading.Event()
    server = live({"research": ServedFlow(research(gate)), "pipeline": pipeline()}, ui=True)
    page.goto(server.url)
    expect(page.get_by_label("Agent")).to_have_value("research")
    expect(page.get_by_label("Agent").locator("option")).to_have_text(
        ["research (graph)", "pipeline (dag)"]
    )
    drawing = page.get_by_role("group", name="Flow research, a graph of 3 nodes")
    expect(drawing).to_be_visible()
    nodes = drawing.locator(".flow-node:not(.terminal)")
    expect(nodes).to_have_count(3)
    expect(drawing.get_by_role("img", name="search: not run")).to_be_visible()
    expect(drawing.locator(".flow-node.terminal")).to_have_count(2)  # START and END
    expect(drawing.locator(".flow-label")).to_have_text(["search", "write", "revise", "done"])
    # Layered top to bottom: each node below the one it follows (the loop does not hang it).
    tops = {
        name: drawing.locator(f'[data-node="{name}"]').bounding_box()
        for name in ("__start__", "classify", "search", "write", "__end__")
    }
    ys = [box["y"] for box in tops.values() if box is not None]
    assert len(ys) == 5 and ys == sorted(ys) and len(set(ys)) == 5
    page.evaluate(WATCH)
    shots(page, "drawn")

    send(page, "what is rust?")
    running = drawing.get_by_role("img", name="search: running")
    expect(running).to_be_visible()
    expect(running).to_have_class("flow-node running")
    expect(running).to_contain_text("⋯ search")  # not by color alone: a glyph too
    expect(
        drawing.get_by_role("img", name=re.compile(r"^classify: done in \d+ ms$"))
    ).to_be_visible()
    expect(drawing.get_by_role("img", name="write: not run")).to_be_visible()
    expect(page.locator(".flow-status")).to_have_text("running: search · 1 of 3 done")
    timeline = page.get_by_role("list", name="Run timeline")
    expect(timeline.locator(".bar.node.running")).to_have_count(1)
    shots(page, "running")
    gate.set()

    expect(page.get_by_test_id("answer")).to_have_text("draft 2: rust is a language")
    write = drawing.get_by_role("img", name=re.compile(r"^write: done in \d+ ms \(ran 2 times\)$"))
    expect(write).to_contain_text("✓ write")
    expect(drawing.locator(".flow-node.done")).to_have_count(3)
    # Lit in order. A quick node may start and end within one frame (the page then shows its
    # end only), so what the page showed is a subsequence of every change, with search's
    # running state (held by the gate) among them.
    lit = page.evaluate("window.lit")
    every = [
        "classify:running",
        "classify:done",
        "search:running",
        "search:done",
        "write:running",
        "write:done",
        "write:running",
        "write:done",
    ]
    remaining = iter(every)
    assert all(change in remaining for change in lit), lit
    assert "search:running" in lit and lit[-1] == "write:done", lit
    # The inspector: one bar per node run, in order, with measured durations.
    bars = timeline.locator(".bar.node")
    expect(bars).to_have_count(4)
    labels = bars.evaluate_all("bars => bars.map(b => b.getAttribute('aria-label'))")
    assert [label.split(",")[0] for label in labels] == ["classify", "search", "write", "write"]
    assert all(float(label.split(", ")[2].split(" ")[0]) >= 50 for label in labels[2:])
    expect(page.locator(".run-summary")).to_contain_text("done · ")
    expect(page.locator(".run-summary")).to_contain_text("4 node runs")
    shots(page, "done")

    # Another flow: a DAG whose parse node fails; its parallel sibling is cancelled.
    page.get_by_label("Agent").select_option("pipeline")
    dag = page.get_by_role("group", name="Flow pipeline, a dag of 4 nodes")
    expect(dag).to_be_visible()
    expect(drawing).to_have_count(0)
    send(page, "https://example.org")
    failed = dag.get_by_role(
        "img", name=re.compile(r"^parse: failed after \d+ ms: node 'parse' failed: ValueError")
    )
    expect(failed).to_be_visible()
    expect(failed).to_have_class("flow-node failed")
    expect(failed).to_contain_text("✗ parse")
    expect(dag.get_by_role("img", name=re.compile(r"^fetch: done in"))).to_be_visible()
    expect(dag.get_by_role("img", name="summarize: cancelled")).to_be_visible()
    expect(dag.get_by_role("img", name="report: not run")).to_be_visible()
    alert = page.get_by_role("log", name="Conversation").get_by_role("alert")
    expect(alert).to_have_text(re.compile(r"^NodeError: node 'parse' failed"))
    expect(timeline.locator(".bar.node.error")).to_have_count(1)
    expect(timeline.locator(".bar.node.cancelled")).to_have_count(1)
    expect(page.locator(".flow-status")).to_have_text("1 of 4 done · failed: parse")
    shots(page, "failed")

    # Back to the graph: a new session, its drawing unlit.
    page.get_by_label("Agent").select_option("research")
    expect(drawing).to_be_visible()
    expect(drawing.locator(".flow-node.idle")).to_have_count(5)
    expect(page.locator(".flow-status")).to_have_text("Not run yet.")


def maths(gate: threading.Event) -> Dag:
    """``plan`` words the question; ``solve`` asks the calculator agent (three tools at once)."""
    agent = calculator(gate)

    async def solve(inputs: Mapping[str, Any], ctx: NodeContext) -> str:
        return (await ctx.prompt(agent, inputs["plan"])).text

    return (
        DagBuilder("maths")
        .add_node("plan", lambda inputs: f"What are {inputs['input']}?")
        .add_node("solve", solve, depends_on="plan")
        .build()
    )


def box(locator: Any) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None
    return dict(found)


def test_an_agent_node_shows_its_model_and_tool_calls_under_its_bar(
    live: Live, page: Page, shots: Shots
) -> None:
    gate = threading.Event()
    server = live({"maths": maths(gate)}, ui=True)
    page.goto(server.url)
    drawing = page.get_by_role("group", name="Flow maths, a dag of 2 nodes")
    expect(drawing).to_be_visible()

    send(page, "2 + 3 and 4 * 5")
    timeline = page.get_by_role("list", name="Run timeline")
    # While add waits for the gate: the node runs, its first model call is over, and the three
    # tools it asked for run side by side under it.
    expect(drawing.get_by_role("img", name="solve: running")).to_be_visible()
    expect(timeline.locator(".bar.node.running")).to_have_count(1)
    expect(timeline.locator(".bar.model.inner.ok")).to_have_count(1)
    expect(timeline.locator(".bar.tool.inner.running")).to_have_count(3)
    expect(timeline.locator(".bar.tool.inner.running").first).to_have_attribute(
        "aria-label", re.compile(r"^add, tool call in solve, [\d.]+ m?s, running$")
    )
    shots(page, "agent-running")
    gate.set()

    expect(page.get_by_test_id("answer")).to_have_text("The sum is 5 and the product is 20.")
    expect(
        drawing.get_by_role("img", name=re.compile(r"^solve: done in [\d.]+ m?s$"))
    ).to_be_visible()
    expect(page.locator(".run-summary")).to_have_text(
        re.compile(r"^run \w+ · done · [\d.]+ m?s · 2 node runs · 2 model calls · 3 tool calls$")
    )
    models = timeline.locator(".bar.model.inner")
    expect(models).to_have_count(2)
    expect(models.first).to_have_attribute(
        "aria-label", re.compile(r"^model call 1, model call in solve, [\d.]+ m?s$")
    )
    tools = timeline.locator(".bar.tool.inner")
    expect(tools).to_have_count(3)
    error = timeline.locator(".bar.tool.inner.error")
    expect(error).to_have_attribute(
        "aria-label", re.compile(r"^divide, tool call in solve, [\d.]+ m?s, error$")
    )
    add_label = timeline.locator(".bar.tool", has_text="add").get_attribute("aria-label") or ""
    value, unit = add_label.split(", ")[2].split(" ")
    assert float(value) * (1000 if unit == "s" else 1) >= 300  # the tool sleeps 0.3 s
    shots(page, "agent-done")

    # Drawn under the node's bar: the model calls on the lane below it, the three parallel tool
    # calls side by side below that, all within the node's time.
    node = timeline.locator(".bar.node", has_text="solve")
    node_lane = int(node.get_attribute("data-lane") or "-1")
    model_lanes = models.evaluate_all("bars => bars.map(b => Number(b.dataset.lane))")
    tool_lanes = tools.evaluate_all("bars => bars.map(b => Number(b.dataset.lane))")
    assert model_lanes == [node_lane + 1] * 2
    assert sorted(tool_lanes) == [node_lane + 2, node_lane + 3, node_lane + 4]
    outer = box(node)
    starts, ends = [], []
    for index in range(3):
        inner = box(tools.nth(index))
        assert inner["y"] > outer["y"]
        assert outer["x"] - 1 <= inner["x"] <= outer["x"] + outer["width"]
        starts.append(inner["x"])
        ends.append(inner["x"] + inner["width"])
    assert max(starts) < min(ends)  # asked for at once: they overlap in time
    second = box(models.nth(1))
    assert second["x"] + second["width"] <= outer["x"] + outer["width"] + 1


def test_an_agent_node_streams_its_text_and_tool_cards_into_the_chat(
    live: Live, page: Page, shots: Shots
) -> None:
    gate = threading.Event()
    server = live({"maths": maths(gate)}, ui=True)
    page.goto(server.url)
    expect(page.get_by_role("group", name="Flow maths, a dag of 2 nodes")).to_be_visible()

    send(page, "2 + 3 and 4 * 5")
    chat = page.get_by_role("log", name="Conversation")
    solve = chat.get_by_role("region", name="Node solve", exact=True)
    # While add waits for the gate: the node's agent has streamed its first sentence and asked
    # for three tools, whose cards (tagged with the node) run; the run's answer is still empty.
    expect(solve.locator(".answer-text").first).to_have_text("Let me work that out.")
    expect(solve.locator(".node-tag").first).to_have_text("in solve")
    add = solve.get_by_role("article", name="Tool call add in solve", exact=True)
    expect(add).to_be_visible()
    expect(add.locator(".node-tag")).to_have_text("in solve")
    expect(add.locator(".tool-state")).to_have_text("running…")
    expect(add.get_by_label("Arguments")).to_have_text('{\n  "a": 2,\n  "b": 3\n}')
    expect(solve.locator(".tool-card.running")).to_have_count(3)
    expect(page.get_by_test_id("answer")).to_have_text("")
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()  # the run is under way
    expect(chat.get_by_role("region", name=re.compile(r"^Node plan"))).to_have_count(0)
    shots(page, "node-streaming")
    gate.set()

    expect(page.get_by_test_id("answer")).to_have_text("The sum is 5 and the product is 20.")
    expect(add.locator(".tool-state")).to_have_text("done")
    expect(add.get_by_label("Result")).to_have_text("5")
    expect(add.locator(".tool-duration")).to_have_text(re.compile(r"^\d+ ms$|^[\d.]+ s$"))
    multiply = solve.get_by_role("article", name="Tool call multiply in solve", exact=True)
    expect(multiply.get_by_label("Result")).to_have_text("20")
    divide = solve.get_by_role("article", name="Tool call divide in solve", exact=True)
    expect(divide).to_have_class(re.compile(r"\bfailed\b"))
    expect(divide.get_by_label("Error")).to_contain_text("ZeroDivisionError")
    # The node's agent streamed its answer after the cards, in its block; the run's answer
    # follows the block.
    texts = solve.locator(".answer-text")
    expect(texts).to_have_count(2)
    expect(texts.nth(1)).to_have_text("The sum is 5 and the product is 20. ")
    assert box(solve)["y"] < box(page.get_by_test_id("answer"))["y"]
    # Usage comes once, from the run's answer: both of the node agent's model calls.
    usage = page.locator(".turn-usage")
    expect(usage).to_have_text(re.compile(r"^This turn: 122 in · 27 out tokens · \$"))
    expect(page.locator("#session-usage")).to_have_text(
        re.compile(r"^Session: 122 in · 27 out tokens · ")
    )
    shots(page, "node-done")
