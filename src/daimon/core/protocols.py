"""The plugin protocols: implement one of these to add a backend.

They are structural (:class:`typing.Protocol`): a backend needs only daimon.core's types, never a
base class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.checkpoints import CheckpointState
from daimon.core.documents import Document, ScoredDocument
from daimon.core.events import StreamEvent
from daimon.core.messages import Message
from daimon.core.tasks import AgentTask, TaskResult, TaskStatus

__all__ = (
    "Checkpoint",
    "EmbeddingModel",
    "Memory",
    "Model",
    "TaskBroker",
    "TokenCounter",
    "VectorStore",
)


@runtime_checkable
class Model(Protocol):
    """A language model."""

    @property
    def model_name(self) -> str:
        """The model id, used for pricing and telemetry."""
        ...

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer a request in one piece."""
        ...

    def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer a request as a stream of events that ends with ``Done``."""
        ...


@runtime_checkable
class EmbeddingModel(Protocol):
    """Turns texts into vectors."""

    @property
    def dimensions(self) -> int:
        """Length of every vector this model returns."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class VectorStore(Protocol):
    """Stores pre-computed embeddings and finds the nearest ones."""

    async def upsert(self, id: str, embedding: Sequence[float], document: Document) -> None:
        """Insert or replace one vector."""
        ...

    async def query(
        self,
        embedding: Sequence[float],
        top_k: int,
        filter: Mapping[str, Any] | None = None,
    ) -> list[ScoredDocument]:
        """The ``top_k`` nearest documents, closest first, matching ``filter`` when given."""
        ...

    async def delete(self, id: str) -> bool:
        """Remove one vector; whether it existed."""
        ...

    async def count(self) -> int:
        """How many vectors are stored."""
        ...


class TaskBroker(Protocol):
    """Hands agent tasks to workers across processes."""

    async def submit(self, task: AgentTask) -> str:
        """Queue a task durably; its id."""
        ...

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is."""
        ...

    async def receive(self) -> AgentTask | None:
        """The next task for this worker, or ``None`` when there is none yet."""
        ...

    async def complete(self, task_id: str, result: TaskResult) -> None:
        """Record a task's result and acknowledge it."""
        ...

    async def fail(self, task_id: str, error: str) -> None:
        """Record a task's failure."""
        ...


class Memory(Protocol):
    """Conversation history, kept per session."""

    async def get_messages(self, session_id: str) -> list[Message]:
        """The session's messages, oldest first (possibly windowed)."""
        ...

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages to the session, atomically."""
        ...

    async def clear(self, session_id: str) -> None:
        """Forget the session."""
        ...


class Checkpoint(Protocol):
    """Persists run state so runs can resume after a crash."""

    async def save(self, state: CheckpointState) -> None:
        """Store the run's latest state."""
        ...

    async def load(self, run_id: str) -> CheckpointState | None:
        """The run's latest state, or ``None`` when it has none."""
        ...

    async def list_runs(self) -> list[str]:
        """Ids of the runs that have checkpoints."""
        ...

    async def delete(self, run_id: str) -> None:
        """Remove a run's checkpoints."""
        ...


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a text costs for some model's tokenizer."""

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is."""
        ...
