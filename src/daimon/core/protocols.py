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
    "KnowledgeBase",
    "Memory",
    "Model",
    "Retriever",
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
    """Stores pre-computed embeddings with their documents and finds the nearest ones.

    A store holds vectors of one length (:attr:`dimension`) compared by one metric (cosine, dot
    or l2, see :mod:`daimon.kit.vectors`); scores are higher for closer vectors. ``filter``
    arguments use the language of :mod:`daimon.kit.filters`. Writes check their whole input
    first: a refused call writes nothing. A found document carries the id it was stored under.
    """

    @property
    def dimension(self) -> int:
        """Length of every vector stored."""
        ...

    async def setup(self) -> None:
        """Create what the store needs (collection, table, index); safe to call again.

        Raises:
            DimensionMismatchError: What exists holds vectors of another length.
        """
        ...

    async def aclose(self) -> None:
        """Release connections; safe to call again."""
        ...

    async def upsert(self, id: str, embedding: Sequence[float], document: Document) -> None:
        """Insert or replace one vector."""
        ...

    async def upsert_many(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        documents: Sequence[Document],
    ) -> None:
        """Insert or replace many vectors, checked as a whole before any is written."""
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

    async def delete_where(self, filter: Mapping[str, Any]) -> int:
        """Remove every vector whose metadata matches ``filter``; how many were removed."""
        ...

    async def count(self, filter: Mapping[str, Any] | None = None) -> int:
        """How many vectors are stored (matching ``filter`` when given)."""
        ...


@runtime_checkable
class Retriever(Protocol):
    """Finds the documents most relevant to a text query."""

    async def retrieve(
        self, query: str, top_k: int = 4, filter: Mapping[str, Any] | None = None
    ) -> list[ScoredDocument]:
        """The ``top_k`` most relevant documents, best first, matching ``filter`` when given."""
        ...


class KnowledgeBase(Protocol):
    """Documents split, embedded and stored so that they can be searched by meaning."""

    async def ingest(self, documents: Sequence[Document]) -> int:
        """Add documents, replacing earlier versions with the same id; how many chunks written."""
        ...

    async def search(
        self, query: str, top_k: int = 4, filter: Mapping[str, Any] | None = None
    ) -> list[ScoredDocument]:
        """The chunks nearest to ``query``, best first, matching ``filter`` when given."""
        ...

    async def remove(self, document_id: str) -> int:
        """Forget a document; how many of its chunks were removed."""
        ...

    async def count(self) -> int:
        """How many chunks are stored."""
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

    async def list_sessions(self) -> list[str]:
        """Ids of the sessions that hold messages, sorted."""
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
