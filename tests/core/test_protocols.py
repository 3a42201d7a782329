"""The plugin protocols are structural: any object with the right members plugs in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

from daimon.core import (
    AgentResponse,
    AgentTask,
    ApprovalDecision,
    Broker,
    ChatRequest,
    ChatResponse,
    DeadLetter,
    Delivery,
    Done,
    EmbeddingModel,
    Message,
    Model,
    Promptable,
    Resumable,
    StreamEvent,
    TaskPause,
    TaskResult,
    TaskStatus,
    TextDelta,
    TokenCounter,
)
from daimon.kit.streaming import stream_from_response


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


class OneShotDelivery:
    """A delivery written against core alone: no base class, no other daimon import."""

    def __init__(self, task: AgentTask) -> None:
        self._task = task

    @property
    def task(self) -> AgentTask:
        return self._task

    async def heartbeat(self) -> bool:
        return True

    async def complete(self, result: TaskResult) -> bool:
        return True

    async def pause(self, paused: TaskPause) -> bool:
        return True

    async def fail(self, error: str, *, retry: bool = False, delay: float = 0.0) -> bool:
        return True

    async def release(self) -> None:
        return None


class ListBroker:
    """A broker written against core alone (leases and fencing left out: shape only)."""

    lease = 30.0
    max_deliver = 3

    def __init__(self) -> None:
        self._queue: list[AgentTask] = []

    async def submit(self, task: AgentTask) -> str:
        self._queue.append(task)
        return task.task_id

    async def status(self, task_id: str) -> TaskStatus:
        return TaskStatus.pending()

    async def cancel(self, task_id: str) -> bool:
        return False

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        return False

    async def claim(self, wait: float = 1.0) -> Delivery | None:
        return OneShotDelivery(self._queue.pop(0)) if self._queue else None

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return []

    async def aclose(self) -> None:
        return None


async def test_the_broker_protocol_is_structural() -> None:
    broker: Broker = ListBroker()  # checked by mypy too
    assert isinstance(broker, Broker)
    assert not isinstance(Chars(), Broker)
    await broker.submit(AgentTask(task_id="t1", input="hi"))
    delivery = await broker.claim(wait=0.0)
    assert isinstance(delivery, Delivery) and delivery.task.task_id == "t1"
    assert await broker.claim(wait=0.0) is None


def test_distributed_exports_the_core_broker_protocols() -> None:
    import daimon.distributed

    assert daimon.distributed.Broker is Broker
    assert daimon.distributed.Delivery is Delivery
    assert daimon.distributed.DeadLetter is DeadLetter


def test_one_promptable_protocol_in_the_house() -> None:
    from daimon import eval as evaluation
    from daimon import orchestration

    assert orchestration.Promptable is Promptable
    assert evaluation.Promptable is Promptable
