"""Streams that outlive their connection: a run's SSE frames kept as a log in the state store.

A streamed run no longer writes to its client: :meth:`RunLogs.start` runs it in a task of its own
that appends each frame to the run's log (a :class:`~daimon.core.StateStore` stream), and every
client, the first one included, reads the log (:meth:`RunLogs.follow`). So:

- each frame goes out with an SSE ``id`` (``<stream>:<number>``); a client that reconnects with
  ``Last-Event-ID``, to this replica or any other sharing the store, gets the frames after it,
  once each and in order;
- the run goes on while no client listens, for ``grace`` seconds: when nobody has read its log
  for that long, it is cancelled (no model is paid for an answer nobody will read);
- a log is kept ``retention`` seconds after its last frame, then forgotten;
- :meth:`RunLogs.cancel` stops a run wherever it runs: a replica that does not run it appends
  the request to a control stream every replica watches;
- with a broker (``daimon serve --broker``), :meth:`RunLogs.submit` sends a run to the workers
  as a task naming its log: a worker writes its frames there (:mod:`daimon._run_logs`), a reader
  asks the broker whether it still runs, and a cancel cancels the task.

The log ends with a marker no frame can be (frames start with ``event:`` or ``data:``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any

from daimon._run_logs import (
    BROKER_OWNER,
    CANCELS,
    CONTROL_KIND,
    DEADLINE_KEY,
    END,
    GRACE_KEY,
    LISTENER_KIND,
    LOG_KIND,
    OWNER_KIND,
    REPLICA_KIND,
    RETENTION_KEY,
    STREAM_KEY,
    TIMEOUT_KEY,
    EventId,
    LogWriter,
    StreamGone,
    failure_frame,
    frame_mark,
    watch_cancels,
)
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, RunCancelled
from daimon.core.errors import TimeoutError as RunTimeoutError
from daimon.core.protocols import Broker
from daimon.core.state_store import StateStore
from daimon.core.tasks import AgentTask, TaskState
from daimon.server._errors import RunLost
from daimon.server._local_runs import LocalRun
from daimon.server._sse import EventStreamResponse, Source
from daimon.server._state import ServerState

__all__ = ("EventId", "RunLogs", "RunLost", "StreamGone")

logger = logging.getLogger("daimon.server")

_READ_WAIT = 5.0  # longest single wait on a log: bounds how stale a listener record gets
_CATCH_UP = 5.0  # longest wait for a live run's writer to reach the frame a client names
_CATCH_UP_SLICE = 0.25  # ... asking between waits whether the run has ended
_BEAT = 2.0  # seconds between a replica's "alive" records (each lives three beats)
_LIVE_TASK = frozenset({TaskState.PENDING, TaskState.RUNNING, TaskState.PAUSED})

_MOST_FRAMES = 1_000_000
"""The most frames counted in a log."""


class RunLogs:
    """The logs of the streamed runs: this process's producers, and readers of any log.

    Args:
        state: The server's store.
        timeout: Seconds a run may take before it is cancelled (its log ends with an error).
        grace: Seconds a run goes on with no client reading its log before it is cancelled.
        retention: Seconds a log is kept after its last frame.
        broker: Where :meth:`submit` sends runs for workers to run (``daimon serve --broker``).
    """

    __slots__ = (
        "_runs",
        "_state",
        "_watchers",
        "broker",
        "grace",
        "replica",
        "retention",
        "timeout",
    )

    def __init__(
        self,
        state: ServerState,
        *,
        timeout: float,
        grace: float,
        retention: float,
        broker: Broker | None = None,
    ) -> None:
        self._state = state
        self.broker = broker
        self.timeout = timeout
        self.grace = grace
        self.retention = retention
        self._runs: dict[str, LocalRun] = {}
        self._watchers: list[asyncio.Task[None]] = []
        self.replica = uuid.uuid4().hex
        """This process's name in the store (its runs' logs name it as their owner)."""

    def __len__(self) -> int:
        return len(self._runs)

    async def start(
        self,
        stream: str,
        source: Source,
        on_error: Callable[[BaseException], bytes],
        *,
        background: bool = False,
    ) -> None:
        """Run ``source`` in its own task, appending its frames to the log ``stream``.

        A ``background`` run goes on whether or not anybody reads its log; any other is
        cancelled once nobody has read it for ``grace`` seconds.
        """
        store = await self.open()
        await store.put(OWNER_KIND, stream, self.replica, ttl=self.retention)
        run = LocalRun(CancelToken(), background=background)
        self._runs[stream] = run
        run.task = asyncio.create_task(self._produce(store, stream, run, source, on_error))

    async def submit(self, stream: str, task: AgentTask) -> None:
        """Have a worker run ``task``, writing its frames to the log ``stream`` (the task's id).

        The log's owner record says a broker runs it: a reader asks the broker whether the task
        still runs (:meth:`owner_alive`). Workers cancel the run once nobody has read its log for
        ``grace`` seconds, as a replica does its own.

        Raises:
            BuilderError: No broker was given.
        """
        if self.broker is None:
            raise BuilderError("submitting a run needs a broker (ServerSettings.broker)")
        store = await self.open()
        await store.put(OWNER_KIND, stream, BROKER_OWNER, ttl=self.retention)
        await self._listen(store, stream)
        await self.broker.submit(task)

    def task_metadata(self, stream: str, *, background: bool = False) -> dict[str, Any]:
        """What a task needs to write its events to the log ``stream`` (see :meth:`submit`).

        A ``background`` run goes on whether or not anybody reads its log.
        """
        metadata: dict[str, Any] = {
            STREAM_KEY: stream,
            RETENTION_KEY: self.retention,
            TIMEOUT_KEY: self.timeout,
            DEADLINE_KEY: time.time() + self.timeout,
        }
        if not background:
            metadata[GRACE_KEY] = self.grace
        return metadata

    async def open(self) -> StateStore:
        """The store, with this replica's watchers started (cancels, the grace, its beat)."""
        store = await self._state.open()
        if not self._watchers:
            self._watchers = [
                asyncio.create_task(watch_cancels(store, self._cancel_here)),
                asyncio.create_task(self._sweep(store)),
            ]
            await self._beat(store)
        return store

    async def _produce(
        self,
        store: StateStore,
        stream: str,
        run: LocalRun,
        source: Source,
        on_error: Callable[[BaseException], bytes],
    ) -> None:
        """Run ``source``, its frames to ``run`` (its readers here) and to the store's log."""
        writer = asyncio.create_task(run.persist(store, stream, self.retention))
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(self.timeout, run.stop, "timeout")
        ending: BaseException | None = None
        try:
            frames = source(run.token)
            try:
                async for frame in frames:
                    run.add(frame.decode())
            finally:
                await frames.aclose()
        except (asyncio.CancelledError, RunCancelled) as exc:
            if not run.stops:  # not ours: the server is shutting down
                run.finish()
                writer.cancel()
                self._runs.pop(stream, None)
                raise
            ending = exc
        except Exception as exc:
            ending = exc
        finally:
            deadline.cancel()
        if run.stops:
            reason = run.stops[0]
            timed_out = reason == "timeout"
            ending = RunTimeoutError(self.timeout, "the run") if timed_out else RunCancelled(reason)
        if ending is not None:
            run.add(on_error(ending).decode())
        run.finish()
        try:
            await writer  # flushed: a reader elsewhere, or one coming back, finds every frame
            # ended: a reader asking for a frame past the end need not wait for this replica
            await store.put(OWNER_KIND, stream, END, ttl=self.retention)
        finally:
            if self._runs.get(stream) is run:
                del self._runs[stream]

    async def check(self, at: EventId) -> None:
        """Refuse a rejoin whose place is no longer kept.

        Raises:
            StreamGone: The log, or the frame ``at`` names, is not kept.
        """
        run = self._runs.get(at.stream)
        if run is not None and at.number <= len(run.frames):
            return
        store = await self._state.open()
        if run is not None and run.ended:  # past the end of a run of this replica's
            raise StreamGone(f"stream {at.stream!r} ended before event {at.number}")
        if at.number == 0:
            found = await store.read_after(LOG_KIND, at.stream, 0, limit=1)
            kept = bool(found)
        else:
            found = await store.read_after(LOG_KIND, at.stream, at.number - 1, limit=1)
            deadline = asyncio.get_running_loop().time() + _CATCH_UP
            while not found and asyncio.get_running_loop().time() < deadline:
                # Its replica sent this frame to its own readers and may not have written it
                # yet: wait for its writer (a client can come back within a millisecond), while
                # the run goes on (once ended, its log is whole).
                if not await self.owner_alive(at.stream):
                    break
                found = await store.wait_after(
                    LOG_KIND, at.stream, at.number - 1, wait=_CATCH_UP_SLICE, limit=1
                )
            kept = bool(found) and found[0][0] == at.number
        if not kept:
            raise StreamGone(
                f"no events of stream {at.stream!r} after {at.number} are kept: the stream is "
                f"unknown, or it ended more than {self.retention:g} s ago"
            )

    async def follow(self, at: EventId, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The log's frames after ``at``, each with its SSE ``id``, until the log ends.

        ``token`` is the reader's (its client left): the run goes on.
        """
        stream, last = at.stream, at.number
        run = self._runs.get(stream)
        if run is not None and last <= len(run.frames):
            async for frame in run.read(stream, last):
                yield frame
            return
        store = await self._state.open()
        loop = asyncio.get_running_loop()
        refresh_every = self.grace / 3
        await self._listen(store, stream)  # the replica running it keeps it for this reader
        refreshed = loop.time()
        newest = await _mark_at(store, stream, last)
        while not token.cancelled:
            wait = min(_READ_WAIT, refresh_every)
            events = await store.wait_after(LOG_KIND, stream, last, wait=wait)
            for number, value in events:
                if value == END:
                    return
                last = number
                mark = frame_mark(value)
                if mark is not None:
                    if mark <= newest:  # a lost attempt's frame (it landed late), or a repeat
                        continue
                    newest = mark
                yield f"id: {stream}:{number}\n".encode() + value.encode()
            if not events and await self._lost(store, stream, last):
                raise RunLost(f"the server running stream {stream!r} stopped before its run ended")
            if loop.time() - refreshed >= refresh_every:
                await self._listen(store, stream)
                refreshed = loop.time()

    async def _lost(self, store: StateStore, stream: str, last: int) -> bool:
        """Whether the run writing ``stream`` died: its owner is dead and wrote nothing more."""
        if await self.owner_alive(stream) is not False:
            return False
        return not await store.read_after(LOG_KIND, stream, last, limit=1)

    async def owner_alive(self, stream: str) -> bool | None:
        """Whether the replica that ran or runs ``stream``'s run lives.

        ``None`` when no log names one. A run whose log has not ended and whose owner is dead
        is lost.
        """
        if stream in self._runs:
            return True
        store = await self._state.open()
        owner = await store.get(OWNER_KIND, stream)
        if owner is None or owner == END:  # none, or the run ended (its log says so too)
            return None
        if owner == BROKER_OWNER:
            return await self._task_alive(stream)
        return owner == self.replica or await store.get(REPLICA_KIND, owner) is not None

    async def _task_alive(self, stream: str) -> bool | None:
        """Whether the broker's task writing ``stream`` may still write to it.

        Pending, running or paused: a worker runs it, or will (a dead worker's task is leased
        again after its lease). ``None`` when this replica has no broker or cannot reach it.
        """
        if self.broker is None:
            return None
        try:
            status = await self.broker.status(stream)
        except KeyError:
            return False
        except Exception:
            logger.warning("cannot ask the broker about task %s", stream, exc_info=True)
            return None
        return status.state in _LIVE_TASK

    async def known(self, stream: str) -> bool:
        """Whether ``stream`` names a run's log that is kept."""
        if stream in self._runs:
            return True
        store = await self._state.open()
        if await store.get(OWNER_KIND, stream) is not None:
            return True
        return bool(await store.read_after(LOG_KIND, stream, 0, limit=1))

    def reader(
        self, at: EventId, on_error: Callable[[BaseException], bytes], heartbeat: float
    ) -> EventStreamResponse:
        """The response that streams the log from ``at`` to a client (see :meth:`follow`)."""
        return EventStreamResponse(
            lambda token: self.follow(at, token),
            on_error=on_error,
            heartbeat=heartbeat,
            timeout=self.timeout + self.grace,
        )

    async def _listen(self, store: StateStore, stream: str) -> None:
        """Say that a client reads ``stream`` (for ``grace`` seconds from now)."""
        await store.put(LISTENER_KIND, stream, "1", ttl=self.grace)

    async def cancel(
        self,
        stream: str,
        reason: str = "cancelled by the client",
        *,
        ending: Callable[[int], bytes] | None = None,
    ) -> None:
        """Stop the run writing ``stream``, on whichever replica runs it.

        A worker's run is cancelled through the broker, its log ended here first with
        ``ending(frames logged)`` (by default the native ``error`` frame).
        """
        run = self._runs.get(stream)
        if run is not None:
            run.stop(reason)
            return
        store = await self._state.open()
        if self.broker is not None and await store.get(OWNER_KIND, stream) == BROKER_OWNER:
            # End the log first, so no reader sees the task cancelled with its log open (lost);
            # the worker stops at its next heartbeat, and anything it writes after is not read.
            if ending is None:
                last = failure_frame(RunCancelled(reason))
            else:
                last = ending(len(await store.read_after(LOG_KIND, stream, 0, limit=_MOST_FRAMES)))
            await LogWriter(store, stream, retention=self.retention).end(last)
            await self.broker.cancel(stream)
            # ... and the worker running it stops now, not at its next heartbeat
            await store.append(CONTROL_KIND, CANCELS, stream, ttl=self.retention)
            return
        await store.append(CONTROL_KIND, CANCELS, stream, ttl=self.retention)

    def _cancel_here(self, stream: str) -> None:
        """Cancel this process's run of ``stream`` (another replica was asked to), if it runs."""
        run = self._runs.get(stream)
        if run is not None:
            run.stop("cancelled by the client")

    async def _beat(self, store: StateStore) -> None:
        """Say this replica lives, for three beats."""
        await store.put(REPLICA_KIND, self.replica, "1", ttl=3 * _BEAT)

    async def _sweep(self, store: StateStore) -> None:
        """Say this replica lives; cancel runs nobody has read for ``grace`` seconds."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(_BEAT, self.grace / 2))
            try:
                await self._beat(store)
            except Exception:
                logger.warning("cannot reach the state store", exc_info=True)
            for stream, run in list(self._runs.items()):
                if run.background or run.readers or run.alone_since is None:
                    continue
                if loop.time() - run.alone_since < self.grace:
                    continue
                try:
                    listened = await store.get(LISTENER_KIND, stream)
                except Exception:
                    continue  # the store is down: keep the run rather than guess
                if listened is None:
                    run.stop(f"no client read its events for {self.grace:g} s")

    async def aclose(self, drain: float = 0.0) -> None:
        """Let the runs finish within ``drain`` seconds, then cancel them; stop the watchers."""
        tasks = [run.task for run in self._runs.values() if run.task is not None]
        if tasks and drain > 0:
            await asyncio.wait(tasks, timeout=drain)
        for run in list(self._runs.values()):
            run.stop("the server shut down")
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*tasks, *self._watchers, return_exceptions=True)
        self._watchers = []


async def _mark_at(store: StateStore, stream: str, number: int) -> tuple[int, int]:
    """The newest worker's mark among the frames up to ``number`` (where a reader rejoins)."""
    newest = (0, 0)
    after = 0
    while after < number and (batch := await store.read_after(LOG_KIND, stream, after)):
        for found, value in batch:
            if found > number:
                return newest
            mark = frame_mark(value)
            if mark is not None and mark > newest:
                newest = mark
            after = found
    return newest
