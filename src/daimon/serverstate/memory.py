"""The server's state in process memory: :class:`MemoryStateStore`, bounded, one process only.

This is what ``daimon serve`` has always done: each kind keeps its newest ``limit`` records and
``limit`` streams (the least recently written is forgotten first), each stream its newest
``max_events`` events. Nothing is shared with another process or survives a restart; replicas
need a shared store (:mod:`daimon.serverstate.redis`, :mod:`daimon.serverstate.postgres`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from daimon.core.state_store import (
    StateRecord,
    check_after,
    check_kind,
    check_limit,
    check_name,
    check_ttl,
    check_value,
    check_version,
    check_wait,
)
from daimon.kit.checks import check_positive
from daimon.kit.lifecycle import SetupOnEnter

__all__ = ("MemoryStateStore",)


@dataclass(slots=True)
class _Entry:
    value: str
    version: int
    expires: float | None


@dataclass(slots=True)
class _Stream:
    events: deque[str]
    last: int = 0
    expires: float | None = None

    def first(self) -> int:
        """The number of the oldest kept event."""
        return self.last - len(self.events) + 1


@dataclass(slots=True)
class _Kind:
    records: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    streams: OrderedDict[str, _Stream] = field(default_factory=OrderedDict)


def _deadline(ttl: float | None) -> float | None:
    return None if ttl is None else time.monotonic() + ttl


def _alive(expires: float | None) -> bool:
    return expires is None or time.monotonic() < expires


class MemoryStateStore(SetupOnEnter):
    """A :class:`~daimon.core.StateStore` in this process's memory (asyncio, one event loop).

    Args:
        limit: Records, and streams, kept per kind; past it the least recently written goes.
        max_events: Events kept per stream; past it the oldest goes.

    Raises:
        BuilderError: A bound is not a positive integer.
    """

    __slots__ = ("_kinds", "_versions", "_waiters", "limit", "max_events")

    def __init__(self, limit: int = 1000, max_events: int = 10_000) -> None:
        self.limit = check_positive("limit", limit)
        self.max_events = check_positive("max_events", max_events)
        self._kinds: dict[str, _Kind] = {}
        self._versions = itertools.count(1)
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = {}

    async def setup(self) -> None:
        """Nothing to create."""

    async def aclose(self) -> None:
        """Nothing to release: the state stays readable (it is this object's)."""

    def _kind(self, kind: str) -> _Kind:
        found = self._kinds.get(kind)
        if found is None:
            found = self._kinds[kind] = _Kind()
        return found

    def _entry(self, kind: str, key: str) -> _Entry | None:
        records = self._kind(check_kind(kind)).records
        entry = records.get(check_name(kind, key))
        if entry is not None and not _alive(entry.expires):
            del records[key]
            return None
        return entry

    def _write(self, kind: str, key: str, value: str, ttl: float | None) -> int:
        records = self._kind(kind).records
        version = next(self._versions)
        records[key] = _Entry(value, version, _deadline(ttl))
        records.move_to_end(key)
        while len(records) > self.limit:
            records.popitem(last=False)
        return version

    async def put(self, kind: str, key: str, value: str, *, ttl: float | None = None) -> int:
        """Write ``value`` under ``key``; its new version."""
        check_name(check_kind(kind), key)
        return self._write(kind, key, check_value(kind, value), check_ttl(ttl))

    async def get(self, kind: str, key: str) -> str | None:
        """The value under ``key``, if any."""
        entry = self._entry(kind, key)
        return None if entry is None else entry.value

    async def read(self, kind: str, key: str) -> StateRecord | None:
        """The value under ``key`` with its version, if any."""
        entry = self._entry(kind, key)
        return None if entry is None else StateRecord(entry.value, entry.version)

    async def replace(
        self, kind: str, key: str, value: str, *, version: int, ttl: float | None = None
    ) -> int | None:
        """Write ``value`` only over ``version`` (0: only if absent); the new version or None."""
        entry = self._entry(kind, key)
        check_value(kind, value)
        check_version(version)
        check_ttl(ttl)
        if (entry.version if entry is not None else 0) != version:
            return None
        return self._write(kind, key, value, ttl)

    async def take(self, kind: str, key: str) -> str | None:
        """Remove the record and return its value, if any."""
        entry = self._entry(kind, key)
        if entry is None:
            return None
        del self._kind(kind).records[key]
        return entry.value

    async def delete(self, kind: str, key: str) -> bool:
        """Remove the record; whether there was one."""
        return await self.take(kind, key) is not None

    def _stream(self, kind: str, stream: str) -> _Stream | None:
        streams = self._kind(check_kind(kind)).streams
        found = streams.get(check_name(kind, stream, "stream"))
        if found is not None and not _alive(found.expires):
            del streams[stream]
            return None
        return found

    async def append(self, kind: str, stream: str, value: str, *, ttl: float | None = None) -> int:
        """Add ``value`` as the stream's next event; its number."""
        found = self._stream(kind, stream)
        check_value(kind, value)
        check_ttl(ttl)
        streams = self._kind(kind).streams
        if found is None:
            found = streams[stream] = _Stream(deque(maxlen=self.max_events))
        found.events.append(value)
        found.last += 1
        found.expires = _deadline(ttl)
        streams.move_to_end(stream)
        while len(streams) > self.limit:
            streams.popitem(last=False)
        for waiter in self._waiters.get((kind, stream), ()):
            waiter.set()
        return found.last

    async def read_after(
        self, kind: str, stream: str, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """The kept events numbered above ``after``, oldest first, at most ``limit``."""
        found = self._stream(kind, stream)
        check_after(after)
        check_limit(limit)
        if found is None or after >= found.last:
            return []
        start = max(after + 1, found.first())
        skip = start - found.first()
        values = itertools.islice(found.events, skip, skip + limit)
        return list(enumerate(values, start))

    async def wait_after(
        self, kind: str, stream: str, after: int, *, wait: float, limit: int = 1000
    ) -> list[tuple[int, str]]:
        """Events above ``after``, waiting up to ``wait`` seconds for the first."""
        deadline = time.monotonic() + check_wait(wait)
        events = await self.read_after(kind, stream, after, limit)
        if events:
            return events
        waiter = asyncio.Event()
        waiters = self._waiters.setdefault((kind, stream), set())
        waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), deadline - time.monotonic())
        finally:
            waiters.discard(waiter)
            if not waiters and self._waiters.get((kind, stream)) is waiters:
                del self._waiters[(kind, stream)]
        return await self.read_after(kind, stream, after, limit)
