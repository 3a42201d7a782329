from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import pytest

from daimon.core import BuilderError, CancelToken, OrchestrationError, Usage
from daimon.orchestration import (
    NodeContext,
    NodeError,
    OrchestrationBuildError,
    WiringError,
    WorkflowBuilder,
    WorkflowNode,
    workflow_node,
)
from daimon.orchestration._fields import compatible


class Stats(TypedDict):
    words: int
    chars: int


@dataclass
class Verdict:
    ok: bool
    reason: str


@workflow_node
async def count(text: str) -> Stats:
    await asyncio.sleep(0)
    return {"words": len(text.split()), "chars": len(text)}


@workflow_node(output="summary")
def summarize(text: str, limit: int = 5) -> str:
    return text[:limit]


@workflow_node
def judge(words: int, summary: str) -> Verdict:
    return Verdict(ok=words < 10, reason=f"{words} words, starts {summary!r}")


@workflow_node(inputs={"chars": int}, outputs={"long": bool})
def explicit(**fields: Any) -> dict[str, Any]:
    return {"long": fields["chars"] > 20}


async def test_fields_are_wired_by_name_and_the_result_holds_every_field() -> None:
    workflow = (
        WorkflowBuilder("review", inputs={"text": str})
        .add(judge)
        .add(count)
        .add(summarize)
        .add(explicit)
        .build()
    )
    assert workflow.order == ("count", "summarize", "judge", "explicit")
    assert workflow.sources["judge"] == {"words": "count", "summary": "summarize"}
    assert workflow.sources["summarize"] == {"text": None}  # limit: no producer, default used

    result = await workflow.run({"text": "the quick brown fox jumps"})
    assert result.fields == {
        "text": "the quick brown fox jumps",
        "words": 5,
        "chars": 25,
        "summary": "the q",
        "ok": True,
        "reason": "5 words, starts 'the q'",
        "long": True,
    }
    assert result["summary"] == "the q"
    assert not result.failed and not result.skipped
    assert {t.name for t in result.timings} == {"count", "summarize", "judge", "explicit"}


async def test_independent_nodes_run_in_parallel() -> None:
    left_started, right_started = asyncio.Event(), asyncio.Event()

    async def left(text: str) -> str:
        left_started.set()
        await right_started.wait()
        return text + "L"

    async def right(text: str) -> str:
        right_started.set()
        await left_started.wait()
        return text + "R"

    workflow = (
        WorkflowBuilder(inputs={"text": str})
        .add(workflow_node(output="l")(left))
        .add(workflow_node(output="r")(right))
        .build()
    )
    async with asyncio.timeout(5):
        result = await workflow.run({"text": "x"})
    assert (result["l"], result["r"]) == ("xL", "xR")


def test_an_input_without_a_producer_is_refused() -> None:
    builder = WorkflowBuilder().add(summarize).add(count)
    with pytest.raises(
        WiringError, match="field 'text', an input of summarize, count, has no producer"
    ) as caught:
        builder.build()
    assert caught.value.field == "text"
    assert caught.value.consumers == ("summarize", "count")
    assert caught.value.producers == ()
    assert isinstance(caught.value, OrchestrationBuildError) and isinstance(
        caught.value, BuilderError
    )


def test_a_field_with_two_producers_is_refused() -> None:
    @workflow_node(output="summary")
    def other_summary(text: str) -> str:
        return text

    builder = (
        WorkflowBuilder(inputs={"text": str})
        .add(summarize)
        .add(other_summary)
        .add(judge)
        .add(count)
    )
    with pytest.raises(
        WiringError, match="'summary' has 2 producers \\(summarize, other_summary\\)"
    ) as caught:
        builder.build()
    assert caught.value.producers == ("summarize", "other_summary")
    assert caught.value.consumers == ("judge",)

    with pytest.raises(WiringError, match="'words' has 2 producers") as caught:
        WorkflowBuilder(inputs={"text": str, "words": int}).add(count).build()
    assert caught.value.producers == ("<input>", "count")


def test_a_type_mismatch_is_refused() -> None:
    @workflow_node(output="words")
    def words_as_text(text: str) -> str:
        return text

    builder = WorkflowBuilder(inputs={"text": str}).add(words_as_text).add(summarize).add(judge)
    with pytest.raises(
        WiringError, match="'words': words_as_text produces str but judge needs int"
    ) as caught:
        builder.build()
    assert (caught.value.field, caught.value.consumers, caught.value.producers) == (
        "words",
        ("judge",),
        ("words_as_text",),
    )
    with pytest.raises(WiringError, match="'text': <input> produces bytes but summarize needs str"):
        WorkflowBuilder(inputs={"text": bytes}).add(summarize).build()


@pytest.mark.parametrize(
    ("produced", "consumed", "fits"),
    [
        (int, int, True),
        (int, float, True),
        (bool, int, True),
        (float, int, False),
        (str, str | None, True),
        (str | None, str, False),
        (list[bool], list[int], True),
        (list[str], list[int], False),
        (dict[str, int], dict[str, float], True),
        (list[int], tuple[int, ...], False),
        (Literal["a", "b"], str, True),
        (str, Literal["a"], False),
        (Any, bytes, True),
        (Stats, Stats, True),
        (Stats, Verdict, False),
        (Verdict, Stats, False),
    ],
)
def test_type_compatibility(produced: Any, consumed: Any, fits: bool) -> None:
    assert compatible(produced, consumed) is fits


def test_a_node_must_declare_outputs_and_take_named_inputs() -> None:
    def plain(text: str) -> str:
        return text

    with pytest.raises(OrchestrationBuildError, match="'plain' declares no outputs"):
        WorkflowBuilder().add(plain)
    with pytest.raises(OrchestrationBuildError, match=r"\*args or \*\*kwargs"):
        workflow_node(output="x")(lambda *texts: texts)
    with pytest.raises(OrchestrationBuildError, match="output= or outputs=, not both"):
        workflow_node(output="x", outputs={"y": int})(plain)
    with pytest.raises(OrchestrationBuildError, match="duplicate node 'summarize'"):
        WorkflowBuilder(inputs={"text": str}).add(summarize).add(summarize)
    with pytest.raises(OrchestrationBuildError, match="no nodes"):
        WorkflowBuilder().build()


def test_a_wiring_cycle_is_refused() -> None:
    @workflow_node(output="a")
    def make_a(b: int) -> int:
        return b

    @workflow_node(output="b")
    def make_b(a: int) -> int:
        return a

    with pytest.raises(OrchestrationBuildError, match="cycle: ") as caught:
        WorkflowBuilder().add(make_a).add(make_b).build()
    assert sorted(caught.value.nodes) == ["make_a", "make_b"]


async def test_a_node_returning_a_wrong_type_or_fields_fails_at_run_time() -> None:
    @workflow_node(output="n")
    def liar(text: str) -> int:
        return text  # type: ignore[return-value]

    with pytest.raises(NodeError, match="returned str for field 'n', declared int") as caught:
        await WorkflowBuilder(inputs={"text": str}).add(liar).build().run({"text": "x"})
    assert isinstance(caught.value.__cause__, OrchestrationError)

    @workflow_node
    def partial(text: str) -> Stats:
        return {"words": 1}  # type: ignore[typeddict-item]

    with pytest.raises(NodeError, match="wrong fields: missing chars; unexpected none"):
        await WorkflowBuilder(inputs={"text": str}).add(partial).build().run({"text": "x"})


async def test_run_inputs_are_checked() -> None:
    workflow = WorkflowBuilder("w", inputs={"text": str}).add(summarize).build()
    with pytest.raises(OrchestrationError, match="missing text; unknown txt"):
        await workflow.run({"txt": "x"})
    with pytest.raises(OrchestrationError, match="input 'text' is int, declared str"):
        await workflow.run({"text": 3})


async def test_a_context_parameter_gets_the_node_context(fake_agent: Any) -> None:
    agent = fake_agent(tokens=2, cost=0.125)
    token = CancelToken()

    @workflow_node(output="answer")
    async def ask(question: str, ctx: NodeContext) -> str:
        assert ctx.node == "ask" and ctx.run_inputs == {"question": question}
        return (await ctx.prompt(agent, question)).text

    workflow = WorkflowBuilder(inputs={"question": str}).add(ask).build()
    assert workflow.nodes["ask"].inputs == {"question": str}
    result = await workflow.run({"question": "why"}, cancel=token)
    assert result["answer"] == "<why>"
    assert result.usage == Usage(input_tokens=2, output_tokens=1, requests=1)
    assert result.cost == pytest.approx(0.125)
    assert agent.cancels == [token]


async def test_isolate_skips_the_nodes_that_need_a_failed_field() -> None:
    @workflow_node(output="summary")
    def broken(text: str) -> str:
        raise RuntimeError("model down")

    workflow = WorkflowBuilder(inputs={"text": str}).add(broken).add(count).add(judge).build()
    result = await workflow.run({"text": "a b"}, on_error="isolate")
    assert list(result.failed) == ["broken"]
    assert result.skipped == ("judge",)
    assert result.fields == {"text": "a b", "words": 2, "chars": 3}


async def test_a_workflow_node_is_still_callable_and_can_be_renamed() -> None:
    assert isinstance(summarize, WorkflowNode)
    assert summarize("abcdefg", limit=2) == "ab"
    workflow = WorkflowBuilder(inputs={"text": str}).add(summarize, name="short").build()
    assert workflow.order == ("short",)
    assert summarize.name == "summarize"
    assert (await workflow.run({"text": "abcdefgh"}))["summary"] == "abcde"
