r"""The run log's core, without any web library: its names, ids, frames and a writer.

A streamed run writes its server-sent-event frames to a log (a :class:`~daimon.core.StateStore`
stream) that clients read, from any replica sharing the store (see
:mod:`daimon.server._run_log`). The run may be a replica's own, or a task a worker runs
(``daimon serve --broker``): a task whose metadata names a log (:data:`STREAM_KEY`) has its
events written there by the worker, with :class:`LogWriter`. Both sides write the same frames:
``event: <kind>\ndata: <json>\n\n``, the JSON being the stream event's codec encoding.

The log ends with :data:`END`, a value no frame can be (frames start with ``event:`` or
``data:``).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from daimon.core import codec
from daimon.core.errors import ApprovalRequiredError, DaimonError
from daimon.core.events import ErrorEvent, StreamEvent
from daimon.core.state_store import StateStore
from daimon.server._encode import dump_json, event_data  # web-free: daimon.core only

__all__ = (
    "BROKER_OWNER",
    "CANCELS",
    "CONTROL_KIND",
    "END",
    "EventId",
    "GRACE_KEY",
    "LISTENER_KIND",
    "LOG_KIND",
    "LogWriter",
    "MARK",
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
    "frame_mark",
    "sse_frame",
)

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
STREAM_KEY = "daimon.stream"
"""The task metadata key naming the log a worker writes the task's events to."""
GRACE_KEY = "daimon.grace"
"""The task metadata key: seconds the run goes on while no client reads its log."""
RETENTION_KEY = "daimon.retention"
"""The task metadata key: seconds the log is kept after its last frame."""
TIMEOUT_KEY = "daimon.timeout"
"""The task metadata key: seconds the run may take (then it fails with a timeout)."""


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
