"""The client side: start a run, stream it, decide its approvals, query it, await it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar
from uuid import uuid4

from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError, CancelledError

from daimon.core.codec import from_data, to_data
from daimon.core.errors import DaimonError, InvalidIdError, RunCancelled
from daimon.core.events import Done, StreamEvent
from daimon.core.ids import check_id
from daimon.core.messages import Message
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse, ApprovalRequest
from daimon.temporal._tokens import TokenTail
from daimon.temporal._types import ActivityOptions, Decision, EventPage, RunRequest, RunStatus
from daimon.temporal._workflow import WORKFLOW_NAME

__all__ = ("RunFailedError", "TemporalRun", "start_run")

T = TypeVar("T")


class RunFailedError(DaimonError):
    """A run's workflow failed; ``error_type`` names the error the run raised."""

    def __init__(self, message: str, error_type: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


async def start_run(
    client: Client,
    agent: Promptable | str,
    prompt: str,
    *,
    task_queue: str,
    workflow_id: str | None = None,
    deps: Any = None,
    history: Sequence[Message] = (),
    instructions: str | None = None,
    options: ActivityOptions | None = None,
    execution_timeout: timedelta | None = None,
    task_timeout: timedelta | None = None,
    continue_after: int = 5000,
) -> TemporalRun:
    """Start ``agent`` (or the agent of that name) on ``prompt`` as a workflow; its handle.

    ``workflow_id`` names the run (its ``run_id`` too; an id that daimon's backends or Temporal
    cannot hold is refused with :class:`~daimon.core.errors.InvalidIdError`); a fresh one when
    not given. ``deps`` is JSON data the worker decodes as the agent's ``deps_type`` (without it
    tools get the worker's deps). ``task_timeout`` bounds one workflow task: how soon a run whose
    worker died while deciding its next step moves to another worker (Temporal's default is
    10 s). A run whose history has ``continue_after`` events when it waits for approval
    continues as a new workflow run (same workflow id) that carries only its paused state.
    """
    name = agent if isinstance(agent, str) else agent.name
    if workflow_id is not None:
        _check_workflow_id(workflow_id)
    request = RunRequest(
        agent=name,
        prompt=prompt,
        instructions=instructions,
        history=tuple(history),
        deps=to_data(deps),
        options=options or ActivityOptions(),
        continue_after=continue_after,
    )
    started: WorkflowHandle[Any, Any] = await client.start_workflow(
        WORKFLOW_NAME,
        request,
        id=workflow_id or f"daimon-{name}-{uuid4().hex}",
        task_queue=task_queue,
        result_type=AgentResponse,
        execution_timeout=execution_timeout,
        task_timeout=task_timeout,
    )
    return TemporalRun.get(client, started.id)  # not bound to the first run: follows them all


WORKFLOW_ID_LIMIT = 1000
"""The longest workflow id the Temporal server takes (its ``limit.maxIDLength``), in bytes."""


def _check_workflow_id(workflow_id: str) -> None:
    """Refuse an id daimon's backends could not hold as a run id, or Temporal as a workflow's."""
    size = len(check_id("run", workflow_id).encode())
    if size > WORKFLOW_ID_LIMIT:
        raise InvalidIdError(
            "run", workflow_id, f"it is {size} bytes long; Temporal's limit is {WORKFLOW_ID_LIMIT}"
        )


class TemporalRun:
    """A run's workflow, from any process: ``TemporalRun.get(client, workflow_id)``."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle

    @classmethod
    def get(cls, client: Client, workflow_id: str) -> TemporalRun:
        """The run started under ``workflow_id`` (by this process or any other)."""
        return cls(client.get_workflow_handle(workflow_id, result_type=AgentResponse))

    @property
    def workflow_id(self) -> str:
        return self.handle.id

    async def result(self, output_type: type[T] | None = None) -> AgentResponse[Any]:
        """Wait for the answer; ``output`` decoded as ``output_type`` when given.

        Raises:
            RunFailedError: The run failed (its ``error_type`` names why).
            RunCancelled: The run's workflow was cancelled.
        """
        try:
            response: AgentResponse[Any] = await self.handle.result()
        except WorkflowFailureError as exc:
            if isinstance(exc.cause, CancelledError):
                raise RunCancelled(f"workflow {self.workflow_id!r} was cancelled") from None
            raise _failed(exc) from None
        if output_type is None:
            return response
        from dataclasses import replace

        return replace(response, output=_decode(output_type, response.output))

    async def status(self) -> RunStatus:
        """The run's phase, messages, usage, cost and pending approvals (a query)."""
        status: RunStatus = await self.handle.query("status", result_type=RunStatus)
        return status

    async def wait_for_approvals(self, poll: float = 0.1) -> tuple[ApprovalRequest, ...]:
        """The calls waiting for a decision, once the run waits for one (``()`` if it ended).

        It polls the ``status`` query every ``poll`` seconds; bound the wait with
        ``asyncio.timeout`` if need be.
        """
        while True:
            status = await self.status()
            if status.phase == "awaiting_approval" and status.pending_approvals:
                return status.pending_approvals
            if status.phase != "running":
                return ()
            await asyncio.sleep(poll)

    async def approve(self, approval_id: str) -> RunStatus:
        """Let a pending call run; the run's status once the workflow took the decision."""
        return await self.decide(approval_id, approved=True)

    async def reject(self, approval_id: str, reason: str | None = None) -> RunStatus:
        """Refuse a pending call (the model is told, with ``reason``)."""
        return await self.decide(approval_id, approved=False, reason=reason)

    async def decide(
        self, approval_id: str, *, approved: bool, reason: str | None = None
    ) -> RunStatus:
        """Send one decision as an update; :class:`DaimonError` if nothing waits for that id."""
        decision = Decision(approval_id=approval_id, approved=approved, reason=reason)
        try:
            status: RunStatus = await self.handle.execute_update(
                "decide", decision, result_type=RunStatus
            )
        except WorkflowUpdateFailedError as exc:
            raise DaimonError(str(exc.cause)) from None
        return status

    async def cancel(self) -> None:
        """Cancel the run: a running tool's activity is cancelled, then the workflow."""
        await self.handle.cancel()

    async def stream(
        self, poll: float = 0.05, *, tokens: bool = False
    ) -> AsyncIterator[StreamEvent]:
        """The run's events as the workflow records them, then ``Done`` with the response.

        The client polls the ``events`` query every ``poll`` seconds (queries add nothing to the
        workflow's history); events arrive per model turn and per tool result. With ``tokens``
        (and workers started with ``stream_tokens``), each poll also reads the model call in
        flight and yields its new text as ``TextDelta``; the turn's recorded text then comes
        less what those deltas showed.
        """
        seen = 0
        tail = TokenTail(self.handle) if tokens else None
        waiter = asyncio.ensure_future(self.result())
        try:
            while True:
                finished = waiter.done()
                page: EventPage = await self.handle.query("events", seen, result_type=EventPage)
                seen = page.start + len(page.events)
                for event in page.events:
                    shown = tail.recorded(event) if tail is not None else event
                    if shown is not None:
                        yield shown
                if finished:
                    break
                if tail is not None:
                    for delta in await tail.deltas():
                        yield delta
                await asyncio.wait({waiter}, timeout=poll)
            yield Done(response=waiter.result())
        finally:
            waiter.cancel()


def _failed(exc: WorkflowFailureError) -> RunFailedError:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return RunFailedError(cause.message, cause.type or "ApplicationError")
    return RunFailedError(str(cause), type(cause).__name__)


def _decode(output_type: type[T], data: Any) -> T:
    validate = getattr(output_type, "model_validate", None)
    if validate is not None:
        return validate(data)  # type: ignore[no-any-return]
    return from_data(output_type, data)
