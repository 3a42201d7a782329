"""The plugin protocols are structural: any object with the right members plugs in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

from daimon.core import (
    AgentTask,
    ApprovalDecision,
    Broker,
    ChatRequest,
    ChatResponse,
    DeadLetter,
    Delivery,
    EmbeddingModel,
    Message,
    Model,
    StreamEvent,
    TaskPause,
    TaskResult,
    TaskStatus,
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
