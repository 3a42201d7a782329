"""The plugin protocols are structural: any object with the right members plugs in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from daimon.core import (
    AgentResponse,
    ChatRequest,
    ChatResponse,
    Done,
    EmbeddingModel,
    Message,
    Model,
    Promptable,
    Resumable,
    StreamEvent,
    TextDelta,
    TokenCounter,
)
from daimon.core.streaming import stream_from_response


class EchoModel:
    """No base class: matching members are enough."""

    model_name = "echo"

    async def generate(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(message=Message.assistant(request.messages[-1].text))

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        async for event in stream_from_response(await self.generate(request)):
            yield event


class Embedder:
    dimensions = 2

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(len(t)), 1.0] for t in texts]


class Chars:
    def count_tokens(self, text: str) -> int:
        return len(text)


def test_runtime_checkable_protocols() -> None:
    assert isinstance(EchoModel(), Model)
    assert isinstance(Embedder(), EmbeddingModel)
    assert isinstance(Chars(), TokenCounter)
    assert not isinstance(object(), Model)
    assert not isinstance(Chars(), EmbeddingModel)


async def test_a_structural_model_works() -> None:
    model: Model = EchoModel()
    request = ChatRequest(messages=(Message.user("ping"),))
    assert (await model.generate(request)).text == "ping"
    kinds = [event.kind async for event in model.generate_stream(request)]
    assert kinds == ["text_delta", "usage", "done"]


class Parrot:
    """A promptable of one's own: a name, ``prompt`` and ``prompt_stream`` are enough."""

    name = "parrot"

    async def prompt(self, input: str | Message, /, **options: object) -> AgentResponse:
        text = input if isinstance(input, str) else input.text
        return AgentResponse(text=text, output=text)

    async def prompt_stream(
        self, input: str | Message, /, **options: object
    ) -> AsyncIterator[StreamEvent]:
        response = await self.prompt(input)
        yield TextDelta(text=response.text)
        yield Done(response=response)


def test_every_kind_of_promptable_is_one_and_only_agents_and_supervisors_resume() -> None:
    from daimon import Agent
    from daimon.models import ScriptedModel
    from daimon.multiagent import HandoffNetwork, Supervisor
    from daimon.orchestration import (
        END,
        START,
        DagBuilder,
        GraphBuilder,
        PromptableFlow,
        WorkflowBuilder,
        workflow_node,
    )

    agent = Agent(ScriptedModel([]), name="a")
    graph = (
        GraphBuilder("g").add_node("n", lambda ctx: {}).add_edge(START, "n").add_edge("n", END)
    ).build()
    dag = DagBuilder("d").add_node("n", lambda inputs: 1).build()
    workflow = (
        WorkflowBuilder("w", inputs={"text": str})
        .add(workflow_node(output="out")(lambda text: text), name="n")
        .build()
    )
    resumable = [agent, Supervisor(ScriptedModel([]), {"a": agent})]
    others = [
        HandoffNetwork({"a": agent}, start="a"),
        graph,
        dag,
        workflow,
        PromptableFlow(workflow),
        Parrot(),
    ]
    for promptable in [*resumable, *others]:
        assert isinstance(promptable, Promptable), promptable
    assert all(isinstance(p, Resumable) for p in resumable)
    assert not any(isinstance(p, Resumable) for p in others)
    assert not isinstance(object(), Promptable)
    assert not isinstance(agent.model, Promptable)


async def test_a_structural_promptable_answers_and_streams() -> None:
    parrot: Promptable = Parrot()
    assert (await parrot.prompt("hi")).text == "hi"
    kinds = [event.kind async for event in parrot.prompt_stream("hi")]
    assert kinds == ["text_delta", "done"]
