"""``POST /prompt`` on workers: a server with a broker sends the run as a task and waits for it.

An agent's answer is the task's outcome: its result as ``/prompt`` answers a run (the text is the
output: a typed output does not travel through a broker), its pending approvals when it paused,
or its error, typed as the server types a run's failure. A flow's task writes the run's log, as
its ``/prompt/stream`` does (:mod:`daimon.server._flow_run`), and the answer is the log's last
frame: the ``done`` event's answer, whole (a typed output included), or the ``error`` event's
failure. A client that leaves, or a run that passes the request timeout, cancels the task.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from starlette.responses import Response
from starlette.types import Receive

from daimon._run_logs import AGENT_KEY, JOB_KEY, frame_fields
from daimon.core import errors
from daimon.core.cancel import CancelToken
from daimon.core.protocols import Broker
from daimon.core.results import AgentResponse
from daimon.core.tasks import AgentTask, TaskState, TaskStatus
from daimon.distributed._client import new_task, wait_for_task
from daimon.server._encode import dump_json, prompt_body
from daimon.server._errors import describe_failure, error_response
from daimon.server._flow_run import FlowJob
from daimon.server._run_log import EventId, RunLogs
from daimon.server._runs import ClientDisconnected, run_supervised

__all__ = (
    "failure_status",
    "flow_on_workers",
    "job_task",
    "prompt_on_workers",
    "submit_run",
)

logger = logging.getLogger("daimon.server")

CLIENT_CLOSED = 499

_BY_STATUS: tuple[tuple[type[errors.DaimonError], int], ...] = (
    (errors.TimeoutError, 504),
    (errors.ApprovalRequiredError, 409),
    (errors.CheckpointConflictError, 409),
    (errors.GuardrailBlockedError, 400),
    (errors.InvalidIdError, 400),
    (errors.ClientToolError, 400),
    (errors.ModelError, 502),
)


_OWN_KINDS = {"approval_required": 409, "RunLost": 503, "broker_unavailable": 503}


async def prompt_on_workers(
    broker: Broker,
    agent: str,
    text: str,
    session_id: str | None,
    receive: Receive,
    seconds: float,
) -> Response:
    """Run the prompt as a task on the broker's workers, for ``seconds`` at most; the answer."""
    task = new_task(text, session_id=session_id, metadata={AGENT_KEY: agent})
    try:
        await broker.submit(task)
    except Exception as exc:  # the broker cannot be reached
        message = f"the run could not be queued for the workers: {type(exc).__name__}"
        return error_response(503, "broker_unavailable", message)
    try:
        status = await run_supervised(
            lambda token: wait_for_task(broker, task.task_id, poll=0.05), receive, seconds
        )
    except ClientDisconnected:
        await _cancel(broker, task.task_id)
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # the timeout, or the broker failed while we waited
        await _cancel(broker, task.task_id)
        status_code, kind, message = describe_failure(exc)
        return error_response(status_code, kind, message)
    return _answer(agent, task.task_id, session_id, status)


def job_task(
    logs: RunLogs,
    stream: str,
    agent: str,
    spec: dict[str, Any] | None = None,
    *,
    text: str = "",
    session_id: str | None = None,
    background: bool = False,
) -> AgentTask:
    """The task a worker runs writing the log ``stream`` (its id): ``agent``'s run.

    ``spec`` describes a front end's run (:data:`~daimon._run_logs.JOB_KEY`); without it the
    worker streams the agent's native events on ``text``.
    """
    metadata = {**logs.task_metadata(stream, background=background), AGENT_KEY: agent}
    if spec is not None:
        metadata[JOB_KEY] = spec
    return new_task(text, task_id=stream, session_id=session_id, metadata=metadata)


async def submit_run(logs: RunLogs, stream: str, task: AgentTask) -> Response | None:
    """Send ``task``, writing the log ``stream``, to the workers; the 503 when it cannot go."""
    try:
        await logs.submit(stream, task)
    except Exception as exc:  # the broker (or the store) cannot be reached
        logger.warning("cannot submit a run to the broker", exc_info=True)
        message = f"the run could not be queued for the workers: {type(exc).__name__}"
        return error_response(503, "broker_unavailable", message)
    return None


async def flow_on_workers(
    logs: RunLogs, job: FlowJob, receive: Receive, seconds: float
) -> Response:
    """Run the flow's ``job`` as a task on the workers, for ``seconds`` at most; the answer."""
    stream = uuid.uuid4().hex
    task = job_task(logs, stream, job.name, job.spec(), text=job.text)
    refused = await submit_run(logs, stream, task)
    if refused is not None:
        return refused
    try:
        event, data = await run_supervised(
            lambda token: _last_frame(logs, stream, token), receive, seconds
        )
    except ClientDisconnected:
        await _stop(logs, stream, "the client disconnected")
        return Response(status_code=CLIENT_CLOSED)
    except Exception as exc:  # the timeout, the worker lost, or the store failed while we read
        timed_out = isinstance(exc, errors.TimeoutError)
        await _stop(logs, stream, "the request timed out" if timed_out else "the request failed")
        status, kind, message = describe_failure(exc)
        return error_response(status, kind, message)
    if event == "done":
        return Response(dump_json(data["response"]), media_type="application/json")
    kind = str(data.get("error_type", "internal_error"))
    return error_response(failure_status(kind), kind, str(data.get("message", "")))


async def _last_frame(logs: RunLogs, stream: str, token: CancelToken) -> tuple[str, Any]:
    """The event name and data of the log's last frame (read to the log's end)."""
    last = b""
    async for frame in logs.follow(EventId(stream, 0), token):
        last = frame
    event, data = frame_fields(last)
    if event not in ("done", "error") or not isinstance(data, dict):
        raise errors.AgentRunError(f"the run's log {stream!r} ended without its answer")
    return event, data


async def _stop(logs: RunLogs, stream: str, reason: str) -> None:
    """Cancel the run writing ``stream``, without failing the answer when the store is down."""
    try:
        async with asyncio.timeout(5.0):
            await logs.cancel(stream, reason)
    except Exception:
        return


def _answer(agent: str, task_id: str, session_id: str | None, status: TaskStatus) -> Response:
    """The ``/prompt`` answer for a task that settled (or paused)."""
    if status.state is TaskState.COMPLETED and status.result is not None:
        result = status.result
        response: AgentResponse[str] = AgentResponse(
            text=result.output,
            output=result.output,
            iterations=result.iterations,
            usage=result.usage,
            cost=result.cost,
            run_id=task_id,
            session_id=session_id,
        )
        return Response(dump_json(prompt_body(agent, response)), media_type="application/json")
    if status.state is TaskState.PAUSED:
        paused: AgentResponse[str] = AgentResponse(
            text="", run_id=task_id, session_id=session_id, pending_approvals=status.approvals
        )
        return Response(dump_json(prompt_body(agent, paused)), media_type="application/json")
    if status.state is TaskState.CANCELLED:
        return error_response(500, "RunCancelled", f"the run's task {task_id} was cancelled")
    return _failure(status.error or "")


def _failure(error: str) -> Response:
    """The error answer for a task that failed with ``error`` (``"<Type>: <message>"``)."""
    kind, _, message = error.partition(": ")
    cls = getattr(errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DaimonError)):
        return error_response(500, "internal_error", "internal server error")
    if issubclass(cls, errors.ApprovalRequiredError):
        kind = "approval_required"
    return error_response(failure_status(kind), kind, message)


def failure_status(kind: str) -> int:
    """The HTTP status of a run that failed with the error type ``kind``, as the server names it.

    ``kind`` is a daimon exception's class name, or one of the server's own names
    (``approval_required``, ``RunLost``); anything else is a 500.
    """
    if kind in _OWN_KINDS:
        return _OWN_KINDS[kind]
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.DaimonError):
        for base, status in _BY_STATUS:
            if issubclass(cls, base):
                return status
    return 500


async def _cancel(broker: Broker, task_id: str) -> None:
    """Cancel the task, without failing the answer when the broker cannot be reached."""
    try:
        async with asyncio.timeout(5.0):
            await broker.cancel(task_id)
    except Exception:
        return
