r"""The run log's core, without any web library: its names, ids, frames and a writer.

A streamed run writes its server-sent-event frames to a log (a :class:`~daimon.core.StateStore`
stream) that clients read, from any replica sharing the store (see
:mod:`daimon.server._run_log`). The run may be a replica's own, or a task a worker runs
(``daimon serve --broker``): a task whose metadata names a log (:data:`STREAM_KEY`) has its
events written there by the worker, with :class:`LogWriter`. Both sides write the same frames:
``event: <kind>\ndata: <json>\n\n``, the JSON being the stream event's codec encoding.

The log ends with :data:`END`, a value no frame can be (frames start with ``event:`` or
``data:``).

A worker runs a task that names a log as a :class:`LogJob`: :class:`NativeJob`, the agent's own
events (``/prompt/stream``), unless the task's :data:`JOB_KEY` metadata describes a front end's
run (a Responses API response, say), which :func:`log_job` makes from the module that front end
names, so the worker writes the very frames, and keeps the very state, the replica would have.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from daimon.core import codec
from daimon.core.cancel import CancelToken
from daimon.core.errors import AgentRunError, ApprovalRequiredError, BuilderError, DaimonError
from daimon.core.events import Done, ErrorEvent, StreamEvent
from daimon.core.protocols import Promptable, Resumable
from daimon.core.results import AgentResponse
from daimon.core.state_store import StateStore
from daimon.core.tasks import AgentTask
from daimon.server._encode import dump_json, event_data  # web-free: daimon.core only
from daimon.server._failures import RunLost  # web-free too

__all__ = (
    "AGENT_KEY",
    "BROKER_OWNER",
    "CANCELS",
    "CONTROL_KIND",
    "DEADLINE_KEY",
    "END",
    "EventId",
    "GRACE_KEY",
    "JOB_KEY",
    "LISTENER_KIND",
    "LOG_KIND",
    "LogJob",
    "LogWriter",
    "MARK",
    "NativeJob",
    "OWNER_KIND",
    "REPLICA_KIND",
    "RETENTION_KEY",
    "STREAM_KEY",
    "StreamGone",
    "TIMEOUT_KEY",
    "attempt_frame",
    "error_frame",
    "event_frame",
    "failure_frame",
    "frame_fields",
    "frame_mark",
    "log_ended",
    "log_job",
    "lost_run",
    "runs_again",
    "sse_frame",
    "task_agent",
    "unmade_job_frames",
    "watch_cancels",
)

_NATIVE_ENDS = ("event: done", "event: error")
"""The lines that start the frames which end a native stream."""
LOG_KIND = "run_log"
"""The kind of the stores' streams that hold runs' frames."""
LISTENER_KIND = "run_listener"
"""Records that say a client reads a log (refreshed while it does; they expire after)."""
OWNER_KIND = "run_owner"
"""Records naming the replica that runs each log's run (:data:`BROKER_OWNER`: a worker)."""
REPLICA_KIND = "replica"
"""Records each replica refreshes while it lives (they expire when it dies)."""
CONTROL_KIND = "run_control"
CANCELS = "cancels"
"""The control stream every replica watches: names of runs to cancel."""
END = "."
"""The value that ends a log."""
BROKER_OWNER = "broker"
"""The owner record of a run submitted to a broker: its task (id = the log's name) says whether
it still runs."""
AGENT_KEY = "daimon.agent"
"""The task metadata key naming the served agent a task runs (a worker may run several)."""
STREAM_KEY = "daimon.stream"
"""The task metadata key naming the log a worker writes the task's events to."""
GRACE_KEY = "daimon.grace"
"""The task metadata key: seconds the run goes on while no client reads its log."""
RETENTION_KEY = "daimon.retention"
"""The task metadata key: seconds the log is kept after its last frame."""
TIMEOUT_KEY = "daimon.timeout"
"""The task metadata key: seconds the run may take (then it fails with a timeout)."""
DEADLINE_KEY = "daimon.deadline"
"""The task metadata key: the time (Unix seconds) the run's timeout ends, counted from its
submission, so an attempt after a lost one gets what is left of it, not a new timeout."""
JOB_KEY = "daimon.job"
"""The task metadata key describing a front end's run (``{"kind": ..., ...}``); see log_job."""
_JOBS = {
    "agui": "daimon.server._agui_run",
    "chat": "daimon.server._chat_run",
    "flow": "daimon.server._flow_run",
    "responses": "daimon.server._responses_run",
}
"""The module that makes each kind of front-end run (its ``job_from_spec``; and, when the kind's
stream has a failure of its own form, ``failure_frames(spec, exc)``: :func:`unmade_job_frames`)."""


_logger = logging.getLogger("daimon.server")
_CONTROL_WAIT = 0.5
"""One wait on the control stream: some clients (redis-py) sit out a cancelled wait, so this
bounds how long stopping a watcher takes."""

MARK = ": at "
"""Starts the SSE comment line a worker's frame begins with: ``: at <attempt>.<n>``."""


def frame_mark(value: str) -> tuple[int, int] | None:
    """The (attempt, place) a logged frame is marked with; ``None`` when it is not."""
    if not value.startswith(MARK):
        return None
    attempt, _, place = value[len(MARK) : value.index("\n")].partition(".")
    return int(attempt), int(place)


class StreamGone(LookupError):
    """A client asked for a log, or a place in it, that is not kept (never was, or expired)."""


@dataclass(frozen=True, slots=True)
class EventId:
    """Where a client is in a log: the log's name and the number of the last frame it got."""

    stream: str
    number: int

    def __str__(self) -> str:
        return f"{self.stream}:{self.number}"

    @classmethod
    def parse(cls, text: str | None) -> EventId | None:
        """The id a ``Last-Event-ID`` header names; ``None`` when there is none.

        Raises:
            ValueError: The text is no id this server gave (the message says what it expects).
        """
        if text is None or not text.strip():
            return None
        stream, sep, number = text.strip().rpartition(":")
        if not sep or not stream or not number.isdigit() or len(number) > 18:
            raise ValueError(
                f"Last-Event-ID {text[:200]!r} is not an event id of this server: expected "
                "'<stream>:<number>', as sent in the id field of each event"
            )
        return cls(stream, int(number))


def sse_frame(data: bytes, event: str | None = None) -> bytes:
    """One SSE frame: an optional ``event:`` line, then ``data`` (one line) as the data line."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode("ascii") + b"\ndata: " + data + b"\n\n"


def event_frame(event: StreamEvent) -> bytes:
    """A stream event as the native stream sends it: ``event: <kind>``, its JSON as data."""
    return sse_frame(event_data(event), event.kind)


def runs_again(agent: Promptable) -> bool:
    """Whether a run of ``agent`` may start again after an attempt failed or was lost.

    Only a :class:`~daimon.core.protocols.Resumable` one's (an Agent, a Supervisor): its
    checkpoint says what already ran. Any other (a HandoffNetwork, a flow) prompts its agents
    with fresh run ids, so a run started again would run their tools again.
    """
    return isinstance(agent, Resumable)


def task_agent(task: AgentTask, agent: Promptable) -> str:
    """The name ``task`` runs ``agent`` by (its :data:`AGENT_KEY`), else the agent's class."""
    return str(task.metadata.get(AGENT_KEY) or type(agent).__name__)


def lost_run(name: str) -> RunLost:
    """The failure of a later attempt of a run of ``name``, which cannot run again."""
    return RunLost(
        f"the worker running {name!r} was lost before the run ended, and {name!r} cannot resume "
        "a run (only an Agent or a Supervisor can): it is not run again, as its tools could "
        "run twice; send the request again"
    )


def frame_fields(frame: bytes | str) -> tuple[str | None, Any]:
    """A frame's event name and the JSON of its data line (``None`` for none, or ``[DONE]``)."""
    text = frame.decode() if isinstance(frame, bytes) else frame
    event: str | None = None
    for line in text.splitlines():
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = line[len("data: ") :]
            return event, None if data == "[DONE]" else json.loads(data)
    return event, None


def log_ended(logged: Sequence[str]) -> bool:
    """Whether a native stream's frames ``logged`` hold its end (``done`` or ``error``)."""
    return any(line in _NATIVE_ENDS for value in logged for line in value.splitlines())


def error_frame(error_type: str, message: str) -> bytes:
    """The ``error`` frame that ends a failed native stream."""
    event = ErrorEvent(message=message, error_type=error_type)
    return sse_frame(dump_json(codec.to_data(event)), "error")


def failure_frame(exc: BaseException) -> bytes:
    """The ``error`` frame of a run that raised ``exc``, typed as the server types failures.

    A daimon error is named by its class (``approval_required`` for an approval nobody can
    give); anything else is an ``internal_error`` whose text is not shown.
    """
    if isinstance(exc, ApprovalRequiredError):
        return error_frame("approval_required", str(exc))
    if isinstance(exc, RunLost):
        return error_frame("RunLost", str(exc))
    if isinstance(exc, DaimonError):
        return error_frame(type(exc).__name__, str(exc))
    return error_frame("internal_error", "internal server error")


def attempt_frame(attempt: int) -> bytes:
    """The frame that starts a task's attempt after the first.

    What came after the last finished step of the lost attempt (its text deltas, say) may come
    again.
    """
    return sse_frame(json.dumps({"kind": "attempt", "attempt": attempt}).encode(), "attempt")


class LogWriter:
    """Appends one run's frames to its log, and ends it.

    Args:
        store: The store the log is in.
        stream: The log's name.
        retention: Seconds the log is kept after its last frame.
        attempt: The task's attempt: each frame is marked with it and its place (``: at a.n``),
            so readers drop a lost attempt's frames that land late.
        patience: Seconds an append is tried again while the store cannot be reached.
    """

    __slots__ = ("attempt", "patience", "retention", "sent", "store", "stream")

    def __init__(
        self,
        store: StateStore,
        stream: str,
        *,
        retention: float,
        attempt: int = 0,
        patience: float = 0.0,
    ) -> None:
        self.store = store
        self.stream = stream
        self.retention = retention
        self.attempt = attempt
        self.patience = patience
        self.sent = 0

    async def append(self, frame: bytes) -> int:
        """Add a frame (marked with its attempt and place, when the writer has an attempt).

        Tried again while the store cannot be reached, for up to ``patience`` seconds: a
        network cut shorter than the task's lease does not fail the attempt. A try whose reply
        was lost may have landed: readers drop the repeat by its mark. Returns its number.
        """
        value = frame.decode()
        if self.attempt:
            self.sent += 1
            value = f"{MARK}{self.attempt}.{self.sent}\n{value}"
        deadline = time.monotonic() + self.patience
        pause = 0.05
        while True:
            try:
                return await self.store.append(LOG_KIND, self.stream, value, ttl=self.retention)
            except DaimonError:
                raise  # bad input: trying again changes nothing
            except Exception:
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def end(self, last: bytes | None = None) -> None:
        """End the log, after ``last`` (an ``error`` frame, say) when given."""
        if last is not None:
            await self.append(last)
        await self.store.append(LOG_KIND, self.stream, END, ttl=self.retention)


class LogJob(Protocol):
    """What a worker runs for a task that names a log: frames out, a response at the end."""

    @property
    def response(self) -> AgentResponse | None:
        """The finished run's response (``None`` until it finished)."""
        ...

    @property
    def keeps_pauses(self) -> bool:
        """Whether a run paused for client calls is kept by the job (its task then completes)."""
        ...

    @property
    def retries(self) -> bool:
        """Whether an attempt that failed may be tried again (the worker's rules permitting)."""
        ...

    def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The run's frames, in order."""
        ...

    def resume(self, logged: Sequence[str]) -> None:
        """Go on from a lost attempt, whose frames ``logged`` holds."""
        ...

    def on_error(self, exc: BaseException) -> bytes:
        """The frame that ends a run that failed (for good) with ``exc``."""
        ...

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Record that the run ended early (failed for good, or cancelled for ``reason``)."""
        ...


class NativeJob:
    """The agent's own stream events (``/prompt/stream``) as a task's log takes them.

    A later attempt of a run that cannot run again (see :func:`runs_again`) runs nothing: it
    fails with :func:`lost_run`, unless the lost attempt had logged the stream's end.
    """

    __slots__ = ("_agent", "_attempt", "_left", "_task", "response")

    keeps_pauses = False

    def __init__(self, agent: Promptable, task: AgentTask) -> None:
        self._agent = agent
        self._task = task
        self._attempt = 0
        self._left: Literal["all", "nothing", "lost"] = "all"
        self.response: AgentResponse | None = None

    @property
    def retries(self) -> bool:
        """Whether a failed attempt may be tried again: see :func:`runs_again`."""
        return runs_again(self._agent)

    def resume(self, logged: Sequence[str]) -> None:
        """A later attempt starts with an ``attempt`` frame (see :func:`attempt_frame`)."""
        self._attempt = self._task.attempt
        if not runs_again(self._agent):
            self._left = "nothing" if log_ended(logged) else "lost"

    async def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The agent's events on the task's prompt, each as :func:`event_frame` writes it.

        Raises:
            RunLost: A later attempt of a run that cannot run again.
        """
        task = self._task
        if self._left == "lost":
            raise lost_run(task_agent(task, self._agent))
        if self._left == "nothing":
            self.response = AgentResponse(text="", run_id=task.run_id or task.task_id)
            return
        events = self._agent.prompt_stream(
            task.input, run_id=task.run_id or task.task_id, session_id=task.session_id, cancel=token
        )
        try:
            async for event in events:
                if self._attempt:  # the lost attempt's unfinished step runs again
                    yield attempt_frame(self._attempt)
                    self._attempt = 0
                yield event_frame(event)
                if isinstance(event, Done) and event.response is not None:
                    self.response = event.response
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        if self.response is None:
            raise AgentRunError("the agent's stream ended without a done event carrying a response")

    def on_error(self, exc: BaseException) -> bytes:
        return failure_frame(exc)

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Nothing to record: the task's status says how it ended."""


def log_job(agent: Promptable, task: AgentTask, store: StateStore) -> LogJob:
    """The job of a task that names a log: its :data:`JOB_KEY` spec's, or a :class:`NativeJob`.

    Raises:
        BuilderError: The spec names no kind of run this daimon knows.
    """
    spec = task.metadata.get(JOB_KEY)
    if spec is None:
        return NativeJob(agent, task)
    kind = spec.get("kind") if isinstance(spec, Mapping) else None
    if not isinstance(kind, str) or kind not in _JOBS:
        raise BuilderError(
            f"task {task.task_id} describes a run of kind {kind!r}; this worker runs "
            f"{sorted(_JOBS)} (is it older than the server?)"
        )
    make: Any = importlib.import_module(_JOBS[kind]).job_from_spec
    try:
        job: LogJob = make(agent, spec, store)
    except DaimonError:
        raise
    except (KeyError, TypeError, ValueError) as exc:  # another attempt would fail the same way
        raise BuilderError(
            f"task {task.task_id} describes a {kind} run this worker cannot make: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return job


def unmade_job_frames(task: AgentTask, exc: BaseException) -> list[bytes]:
    """The frames that end the log of a task whose job could not be made (raising ``exc``).

    A front end whose stream has a form of its own (AG-UI's ``RUN_STARTED`` and ``RUN_ERROR``)
    ends it in that form; any other stream with a native ``error`` frame
    (:func:`failure_frame`).
    """
    spec = task.metadata.get(JOB_KEY)
    kind = spec.get("kind") if isinstance(spec, Mapping) else None
    if isinstance(spec, Mapping) and isinstance(kind, str) and kind in _JOBS:
        make: Any = getattr(importlib.import_module(_JOBS[kind]), "failure_frames", None)
        if make is not None:
            frames: list[bytes] = make(spec, exc)
            return frames
    return [failure_frame(exc)]


async def watch_cancels(store: StateStore, cancel: Callable[[str], None]) -> None:
    """Call ``cancel(stream)`` for each run any replica is asked to cancel, from now on.

    Replicas watch for their own runs, workers (``daimon worker --store``) for theirs.
    """
    last = 0
    while batch := await store.read_after(CONTROL_KIND, CANCELS, last, limit=1000):
        last = batch[-1][0]  # start after what is there now: older requests were for older runs
    while True:
        task = asyncio.current_task()
        try:
            events = await store.wait_after(CONTROL_KIND, CANCELS, last, wait=_CONTROL_WAIT)
        except Exception:
            if task is not None and task.cancelling():
                raise  # a client library turned our cancellation into its own error
            _logger.warning("cannot read run cancellations from the state store", exc_info=True)
            await asyncio.sleep(1.0)
            continue
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # a client library swallowed our cancellation
        for number, stream in events:
            last = number
            cancel(stream)
