"""A streamed run this replica runs: its frames in memory for its own readers, and in the store.

A run's frames reach the readers on its replica from memory, at once: the run never waits for
the store. A writer task of its own appends them to the run's log in the store, in order, for
readers on other replicas and for clients that come back later. Frame ``n`` (from 1) is log
number ``n`` in both places, because the writer is the log's only appender; the writer checks
the number each append returns, and stops persisting (with a warning) at the first append that
fails or is numbered otherwise, so no reader is ever given a wrong id. A store outage during a
run thus leaves its stream whole for the clients reading it here, and unresumable elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

from daimon._run_logs import END, LOG_KIND
from daimon.core.cancel import CancelToken
from daimon.core.state_store import StateStore

__all__ = ("LocalRun",)

logger = logging.getLogger("daimon.server")


@dataclass(slots=True)
class LocalRun:
    """A run this process produces: its task, its frames, and its local readers."""

    token: CancelToken
    background: bool = False
    task: asyncio.Task[None] | None = None
    readers: int = 0
    alone_since: float | None = None
    stops: list[str] = field(default_factory=list[str])
    frames: list[str] = field(default_factory=list[str])
    ended: bool = False
    producing: bool = True
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: str) -> None:
        """Cancel the run (once); a run that has produced its last frame is left to flush."""
        if not self.stops and self.producing:
            self.stops.append(reason)
            self.token.cancel(reason)
            if self.task is not None:
                self.task.cancel()

    def add(self, frame: str) -> None:
        """One more frame: wake every reader and the writer."""
        self.frames.append(frame)
        self._wake()

    def finish(self) -> None:
        """No more frames will come."""
        self.ended = True
        self.producing = False
        self._wake()

    def _wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    async def read(self, stream: str, after: int) -> AsyncGenerator[bytes, None]:
        """The frames after number ``after``, with their SSE ids, until the run ends."""
        loop = asyncio.get_running_loop()
        self.readers += 1
        try:
            index = after
            while True:
                changed = self.changed
                while index < len(self.frames):
                    index += 1
                    yield f"id: {stream}:{index}\n".encode() + self.frames[index - 1].encode()
                if self.ended:
                    return
                await changed.wait()
        finally:
            self.readers -= 1
            if self.readers == 0:
                self.alone_since = loop.time()

    async def persist(self, store: StateStore, stream: str, retention: float) -> None:
        """Write every frame and the end marker to the log, in order."""
        try:
            written = 0
            while True:
                changed = self.changed
                while written < len(self.frames):
                    number = await store.append(
                        LOG_KIND, stream, self.frames[written], ttl=retention
                    )
                    written += 1
                    if number != written:
                        raise RuntimeError(f"the store numbered frame {written} as {number}")
                if self.ended:
                    await store.append(LOG_KIND, stream, END, ttl=retention)
                    return
                await changed.wait()
        except Exception:
            logger.warning(
                "stream %s: its events can no longer be kept in the state store (readers here "
                "get them all; it cannot be resumed elsewhere)",
                stream,
                exc_info=True,
            )
