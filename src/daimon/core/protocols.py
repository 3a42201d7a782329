"""The plugin protocols: implement one of these to add a backend.

They are structural (:class:`typing.Protocol`): a backend needs only daimon.core's types, never a
base class.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.checkpoints import CheckpointState
from daimon.core.documents import Document, ScoredDocument
from daimon.core.events import StreamEvent
from daimon.core.messages import Message
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.core.tasks import AgentTask, DeadLetter, TaskPause, TaskResult, TaskStatus

__all__ = (
    "Broker",
    "Checkpoint",
    "Delivery",
    "EmbeddingModel",
    "KnowledgeBase",
    "Memory",
    "Model",
    "Promptable",
    "Resumable",
    "Retriever",
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


@runtime_checkable
class Delivery(Protocol):
    """One delivery of a task to one worker: a lease on it, renewed by heartbeats."""

    @property
    def task(self) -> AgentTask:
        """The task, with ``attempt`` set to this delivery's attempt number (from 1)."""
        ...

    async def heartbeat(self) -> bool:
        """Renew the lease; ``False`` when this attempt must stop (cancelled, or superseded)."""
        ...

    async def complete(self, result: TaskResult) -> bool:
        """Record the result and acknowledge; ``False`` when refused (stale or already ended)."""
        ...

    async def pause(self, paused: TaskPause) -> bool:
        """Record that the run waits for approvals (status ``PAUSED``); ``False`` when refused."""
        ...

    async def fail(self, error: str, *, retry: bool = False, delay: float = 0.0) -> bool:
        """Record a failure; ``False`` when refused.

        With ``retry`` the task goes back to the queue for another attempt after ``delay``
        seconds, unless this was its last allowed attempt: then it is dead-lettered.
        Without ``retry`` it is dead-lettered at once.
        """
        ...

    async def release(self) -> None:
        """Hand the task back undone (a graceful shutdown); the attempt does not count."""
        ...


@runtime_checkable
class Broker(Protocol):
    """Queues tasks durably and leases them to workers (at-least-once).

    A worker that loses no task needs more than a queue: a handle per delivery (so two
    deliveries of one task are told apart), heartbeats, hand-back, cancellation, and an attempt
    number that fences stale writes. The life of a task::

        submit ──> PENDING ──claim──> RUNNING ──complete──> COMPLETED
                      ^  ^ ^             │ ──fail──────────> FAILED (dead-lettered)
                      │  │ └release/retry┤ ──lease lost, attempts spent──> FAILED (dead-lettered)
                      │  │               ├─lease lost──> (redelivered: attempt + 1)
                      │  └──decide─── PAUSED <──pause  (the run waits for approvals)
                      └──────────────── cancel ────────> CANCELLED (from PENDING, RUNNING, PAUSED)

    Every claim starts a new attempt. Only the newest attempt may settle a task, and a task
    settles once: a write from a stale attempt, or after the task ended, is refused (``False``).
    A paused task keeps its run's state in the broker (versioned JSON); ``decide`` queues it
    again carrying that state and the decisions (:attr:`AgentTask.resume`), for any worker to
    resume. A pause uses up no attempt. :mod:`daimon.kit.task_records` holds this state machine
    for brokers that want it; :class:`daimon.testing.brokers.BrokerConformance` checks a broker.
    """

    @property
    def lease(self) -> float:
        """Seconds a delivery stays leased without a heartbeat."""
        ...

    @property
    def max_deliver(self) -> int:
        """Attempts a task gets before it is dead-lettered."""
        ...

    async def submit(self, task: AgentTask) -> str:
        """Queue a task durably (returns once the broker holds it); its id. Idempotent by id."""
        ...

    async def status(self, task_id: str) -> TaskStatus:
        """Where the task is; :class:`KeyError` for an unknown id."""
        ...

    async def cancel(self, task_id: str) -> bool:
        """Cancel a pending, running or paused task; whether it was (``False``: it had ended)."""
        ...

    async def decide(self, task_id: str, decisions: Mapping[str, ApprovalDecision | bool]) -> bool:
        """Answer a paused task's approvals (by ``ApprovalRequest.id``); it is queued to resume.

        Any subset may be decided: a call left undecided pauses the run again. ``False`` when
        the task was not paused (decided already, or ended); :class:`KeyError` when unknown.
        """
        ...

    async def claim(self, wait: float = 1.0) -> Delivery | None:
        """The next task for this worker, waiting up to ``wait`` seconds; ``None`` if none."""
        ...

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest ``limit`` (1 to 10,000) dead-lettered tasks, oldest first.

        An inspection: nothing listed is removed or queued again.
        """
        ...

    async def aclose(self) -> None:
        """Close the connections; leases held by this handle are left to expire."""
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


# ------------------------------------------------------------------------------ promptables


@runtime_checkable
class Promptable(Protocol):
    """Something that answers a prompt: what every front end serves.

    :class:`~daimon.Agent`, :class:`~daimon.multiagent.Supervisor`,
    :class:`~daimon.multiagent.HandoffNetwork` and the orchestration flows (``Graph``, ``Dag``,
    ``Workflow``, or a :class:`~daimon.orchestration.PromptableFlow` mapping text to their input
    and their result to text) implement it, and ``daimon serve``, ``daimon worker``, the MCP and
    A2A servers and :class:`~daimon.multiagent.AgentTool` accept any of them.

    A run answers an :class:`~daimon.core.results.AgentResponse` (streamed: events ending with a
    ``Done`` carrying it). A response may be paused for approvals; a front end that cannot ask
    a person calls ``response.require_finished(where)``, the one rule that turns a pause into
    :class:`~daimon.core.errors.ApprovalRequiredError`. A keyword a promptable cannot honour
    (history for a flow, which keeps no conversation) raises
    :class:`~daimon.core.errors.BuilderError`; ``session_id`` is accepted by all (a flow ignores
    it).
    """

    @property
    def name(self) -> str:
        """The name servers, tools and traces show."""
        ...

    async def prompt(
        self,
        input: str | Message,
        /,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse[Any]:
        """Run to the final answer (or to a pause for approvals)."""
        ...

    def prompt_stream(
        self,
        input: str | Message,
        /,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Run, streaming events; the last is ``Done``, carrying the response."""
        ...


@runtime_checkable
class Resumable(Promptable, Protocol):
    """A promptable whose paused runs can be continued (an agent, a supervisor)."""

    async def resume(
        self,
        paused: AgentResponse[Any] | str,
        approvals: Mapping[str, ApprovalDecision | bool] | None = None,
        *,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse[Any]:
        """Continue a paused run with the decisions given (by approval id)."""
        ...
