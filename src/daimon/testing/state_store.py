"""A conformance suite for :class:`daimon.core.StateStore` backends.

Subclass :class:`StateStoreConformance` in a test module and provide a ``make_store`` fixture:
an async callable that opens a new handle on one store, fresh for each test (set up, and closed
at teardown). Handles must share their state: the races below run on two handles, as two
replicas of a server would::

    class TestRedisStateStore(StateStoreConformance):
        @pytest.fixture
        async def make_store(self, redis_url, redis_prefix):
            handles = []

            async def make():
                handles.append(RedisStateStore(redis_url, prefix=redis_prefix))
                return handles[-1]

            yield make
            for handle in handles:
                await handle.aclose()

A store in one process's memory returns the same object each time.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable

import pytest

from daimon.core.errors import DaimonError, InvalidIdError, SerializationError, StateStoreError
from daimon.core.state_store import StateRecord, StateStore

__all__ = ("StateStoreConformance", "StateStoreFactory")

StateStoreFactory = Callable[[], Awaitable[StateStore]]
"""Opens a new handle on the store under test."""

_TTL = 0.4
"""Seconds a record lives in the expiry tests (sleeps are kept short: the suite runs often)."""

_WAIT = 10.0
"""Seconds a test waits for something that should happen at once (generous: CI is loaded)."""

_UNICODE = json.dumps(
    {"text": "Ünïcödé 🧪 \"quotes\" 'single' \\ back \n newline"}, ensure_ascii=False
)

_BAD_KINDS: tuple[object, ...] = ("", "Response", "a:b", "a b", "1st", "x" * 41, 7, None)
_BAD_NAMES: tuple[object, ...] = ("", "a\0b", "\ud800", "é" * 600, 7, None, b"key")
_BAD_VALUES: tuple[object, ...] = (b"{}", None, 1, {"a": 1}, "a\0b", "\udfff")
_BAD_TTLS: tuple[object, ...] = (0, -1, math.inf, math.nan, True, "1")


class StateStoreConformance:
    """Tests every :class:`~daimon.core.StateStore` passes; provide ``make_store``."""

    # ------------------------------------------------------------------ records

    async def test_put_get_read(self, make_store: StateStoreFactory) -> None:
        """A record reads back as written, with the version its put returned."""
        store = await make_store()
        assert await store.get("response", "r1") is None
        assert await store.read("response", "r1") is None
        version = await store.put("response", "r1", '{"status": "queued"}')
        assert type(version) is int and version > 0
        assert await store.get("response", "r1") == '{"status": "queued"}'
        assert await store.read("response", "r1") == StateRecord('{"status": "queued"}', version)

    async def test_every_write_gives_a_new_version(self, make_store: StateStoreFactory) -> None:
        """Versions change on every write and are never given again, even after a delete."""
        store = await make_store()
        first = await store.put("response", "r1", '"a"')
        second = await store.put("response", "r1", '"b"')
        assert second != first
        assert await store.read("response", "r1") == StateRecord('"b"', second)
        # A record deleted and written again never matches a version read before.
        assert await store.delete("response", "r1")
        third = await store.put("response", "r1", '"c"')
        assert third not in (first, second)
        assert await store.replace("response", "r1", '"d"', version=second) is None

    async def test_take_returns_the_value_once(self, make_store: StateStoreFactory) -> None:
        """A take returns the record and removes it."""
        store = await make_store()
        await store.put("paused_run", "run-1", '{"run": 1}')
        assert await store.take("paused_run", "run-1") == '{"run": 1}'
        assert await store.take("paused_run", "run-1") is None
        assert await store.get("paused_run", "run-1") is None

    async def test_delete_says_whether_there_was_a_record(
        self, make_store: StateStoreFactory
    ) -> None:
        """A delete removes the record and says whether there was one."""
        store = await make_store()
        await store.put("response", "r1", "1")
        assert await store.delete("response", "r1") is True
        assert await store.delete("response", "r1") is False
        assert await store.get("response", "r1") is None

    async def test_kinds_records_and_streams_are_apart(self, make_store: StateStoreFactory) -> None:
        """One name in two kinds, or as a record and a stream, names different things."""
        store = await make_store()
        await store.put("response", "x", '"response"')
        await store.put("a2a_task", "x", '"task"')
        await store.append("response", "x", '"event"')
        assert await store.get("response", "x") == '"response"'
        assert await store.get("a2a_task", "x") == '"task"'
        assert await store.read_after("response", "x") == [(1, '"event"')]
        assert await store.read_after("a2a_task", "x") == []
        assert await store.take("response", "x") == '"response"'
        assert await store.read_after("response", "x") == [(1, '"event"')]

    async def test_replace_writes_only_over_the_version_named(
        self, make_store: StateStoreFactory
    ) -> None:
        """Compare and set: a replace writes over the version named only; 0 creates."""
        store = await make_store()
        assert await store.replace("response", "r1", '"new"', version=5) is None
        created = await store.replace("response", "r1", '"created"', version=0)
        assert created is not None
        assert await store.replace("response", "r1", '"again"', version=0) is None
        updated = await store.replace("response", "r1", '"updated"', version=created)
        assert updated is not None and updated != created
        assert await store.replace("response", "r1", '"stale"', version=created) is None
        assert await store.read("response", "r1") == StateRecord('"updated"', updated)

    # ------------------------------------------------------------------ expiry

    async def test_records_expire(self, make_store: StateStoreFactory) -> None:
        """A record written with a ttl reads as absent once it passes; a write resets it."""
        store = await make_store()
        await store.put("response", "short", '"s"', ttl=_TTL)
        await store.put("response", "kept", '"k"', ttl=_TTL)
        await store.put("response", "kept", '"k2"')  # a write without ttl keeps it for good
        await store.put("response", "long", '"l"', ttl=60)
        assert await store.get("response", "short") == '"s"'
        await asyncio.sleep(_TTL + 0.3)
        assert await store.get("response", "short") is None
        assert await store.read("response", "short") is None
        assert await store.take("response", "short") is None
        assert await store.delete("response", "short") is False
        assert await store.get("response", "kept") == '"k2"'
        assert await store.get("response", "long") == '"l"'
        # An expired record counts as absent for a create.
        await store.put("response", "gone", '"g"', ttl=_TTL)
        await asyncio.sleep(_TTL + 0.3)
        assert await store.replace("response", "gone", '"new"', version=0) is not None

    async def test_streams_expire(self, make_store: StateStoreFactory) -> None:
        """A stream expires ttl after its last append; appended to again, it starts anew."""
        store = await make_store()
        await store.append("mcp_event", "s1", '"a"', ttl=_TTL)
        await store.append("mcp_event", "s2", '"a"', ttl=_TTL)
        await store.append("mcp_event", "s2", '"b"')  # an append sets the stream's ttl afresh
        await asyncio.sleep(_TTL + 0.3)
        assert await store.read_after("mcp_event", "s1") == []
        assert [v for _, v in await store.read_after("mcp_event", "s2")] == ['"a"', '"b"']
        # A stream appended to after it expired holds only the new event.
        events = await store.read_after("mcp_event", "s1", 0)
        assert events == []
        number = await store.append("mcp_event", "s1", '"new"')
        assert await store.read_after("mcp_event", "s1") == [(number, '"new"')]

    # ------------------------------------------------------------------ races

    async def test_racing_takes_give_each_record_once(self, make_store: StateStoreFactory) -> None:
        """Takes racing on two handles: exactly one gets each record."""
        first, second = await make_store(), await make_store()
        keys = [f"run-{i}" for i in range(20)]
        for key in keys:
            await first.put("paused_run", key, json.dumps(key))
        for key in keys:
            got = await asyncio.gather(*(h.take("paused_run", key) for h in (first, second) * 2))
            assert sorted(got, key=str) == [json.dumps(key), None, None, None], key

    async def test_racing_replaces_have_one_winner(self, make_store: StateStoreFactory) -> None:
        """Replaces of one version racing on two handles: exactly one wins."""
        first, second = await make_store(), await make_store()
        version = await first.put("response", "r1", '{"status": "in_progress"}')
        writers = [
            (first if i % 2 else second).replace(
                "response", "r1", json.dumps({"status": "cancelled", "by": i}), version=version
            )
            for i in range(8)
        ]
        results = await asyncio.gather(*writers)
        winners = [i for i, result in enumerate(results) if result is not None]
        assert len(winners) == 1, results
        record = await second.read("response", "r1")
        assert record is not None and json.loads(record.value)["by"] == winners[0]
        assert record.version == results[winners[0]]

    async def test_racing_creates_have_one_winner(self, make_store: StateStoreFactory) -> None:
        """Creates (version 0) racing on two handles: exactly one wins."""
        first, second = await make_store(), await make_store()
        results = await asyncio.gather(
            *((first, second)[i % 2].replace("lease", "l1", str(i), version=0) for i in range(8))
        )
        assert sum(result is not None for result in results) == 1, results

    async def test_compare_and_set_loses_no_update(self, make_store: StateStoreFactory) -> None:
        """Read-modify-replace loops on two handles lose no increment."""
        first, second = await make_store(), await make_store()
        await first.put("counter", "c", "0")

        async def increment(store: StateStore, times: int) -> None:
            for _ in range(times):
                while True:
                    record = await store.read("counter", "c")
                    assert record is not None
                    new = str(int(record.value) + 1)
                    if await store.replace("counter", "c", new, version=record.version):
                        break

        await asyncio.gather(increment(first, 25), increment(second, 25), increment(first, 25))
        assert await second.get("counter", "c") == "75"

    # ------------------------------------------------------------------ streams

    async def test_events_are_numbered_in_order(self, make_store: StateStoreFactory) -> None:
        """A stream's events are numbered 1, 2, ... and read from any number on."""
        store = await make_store()
        numbers = [await store.append("mcp_event", "s1", json.dumps(i)) for i in range(5)]
        assert numbers == [1, 2, 3, 4, 5]
        events = [(n, json.dumps(n - 1)) for n in numbers]
        assert await store.read_after("mcp_event", "s1") == events
        assert await store.read_after("mcp_event", "s1", 2) == events[2:]
        assert await store.read_after("mcp_event", "s1", 1, limit=2) == events[1:3]
        assert await store.read_after("mcp_event", "s1", 5) == []
        assert await store.read_after("mcp_event", "s1", 99) == []
        assert await store.read_after("mcp_event", "unknown") == []
        assert await store.append("mcp_event", "s2", '"other"') == 1

    async def test_two_appenders_keep_order_and_unique_numbers(
        self, make_store: StateStoreFactory
    ) -> None:
        """Two handles appending at once: unique numbers, each appender's order kept."""
        first, second = await make_store(), await make_store()

        async def appender(store: StateStore, name: str) -> list[int]:
            return [
                await store.append("mcp_event", "shared", json.dumps([name, i])) for i in range(40)
            ]

        got_a, got_b = await asyncio.gather(appender(first, "a"), appender(second, "b"))
        assert got_a == sorted(got_a) and got_b == sorted(got_b)
        assert sorted(got_a + got_b) == list(range(1, 81))
        events = await second.read_after("mcp_event", "shared", 0, limit=1000)
        assert [n for n, _ in events] == list(range(1, 81))
        by_number = dict(events)
        for name, numbers in (("a", got_a), ("b", got_b)):
            assert [json.loads(by_number[n]) for n in numbers] == [[name, i] for i in range(40)]

    async def test_wait_after_returns_at_once_when_events_are_there(
        self, make_store: StateStoreFactory
    ) -> None:
        """A wait with events already there does not wait."""
        store = await make_store()
        await store.append("mcp_event", "s1", '"a"')
        started = time.monotonic()
        assert await store.wait_after("mcp_event", "s1", 0, wait=_WAIT) == [(1, '"a"')]
        assert time.monotonic() - started < _WAIT / 2

    async def test_wait_after_times_out_empty(self, make_store: StateStoreFactory) -> None:
        """A wait with nothing appended returns nothing once its time passes."""
        store = await make_store()
        await store.append("mcp_event", "s1", '"a"')
        started = time.monotonic()
        assert await store.wait_after("mcp_event", "s1", 1, wait=0.3) == []
        assert 0.25 <= time.monotonic() - started < _WAIT / 2

    async def test_wait_after_wakes_on_append(self, make_store: StateStoreFactory) -> None:
        """A wait wakes when another handle appends to its stream (and not to another)."""
        waiter, writer = await make_store(), await make_store()
        await writer.append("mcp_event", "s1", '"a"')
        waiting = asyncio.ensure_future(waiter.wait_after("mcp_event", "s1", 1, wait=_WAIT))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        started = time.monotonic()
        await writer.append("mcp_event", "other", '"x"')
        await writer.append("mcp_event", "s1", '"b"')
        assert await asyncio.wait_for(waiting, _WAIT) == [(2, '"b"')]
        assert time.monotonic() - started < 2.0  # woken, not timed out
        # A waiter on a stream nobody appended to yet wakes too.
        waiting = asyncio.ensure_future(waiter.wait_after("mcp_event", "new", 0, wait=_WAIT))
        await asyncio.sleep(0.2)
        await writer.append("mcp_event", "new", '"first"')
        assert await asyncio.wait_for(waiting, _WAIT) == [(1, '"first"')]

    # ------------------------------------------------------------------ input

    async def test_values_are_kept_as_given(self, make_store: StateStoreFactory) -> None:
        """Values (and keys) come back exactly as given: Unicode, odd JSON, empty text."""
        store = await make_store()
        for value in (_UNICODE, "", " ", '{"a":1,  "a":2}', "[1.0000000000000001]"):
            await store.put("response", "r", value)
            assert await store.get("response", "r") == value
        await store.put("response", "ключ 🔑 /:*?", _UNICODE)
        assert await store.take("response", "ключ 🔑 /:*?") == _UNICODE
        await store.append("mcp_event", "поток 🔑", _UNICODE)
        assert await store.read_after("mcp_event", "поток 🔑") == [(1, _UNICODE)]

    async def test_large_values(self, make_store: StateStoreFactory) -> None:
        """Values above 1 MiB are kept whole, as records and as events."""
        store = await make_store()
        big = json.dumps({"text": "é🧪x" * (1024 * 1024 // 7)}, ensure_ascii=False)
        assert len(big.encode("utf-8")) > 1024 * 1024
        version = await store.put("response", "big", big)
        assert await store.read("response", "big") == StateRecord(big, version)
        assert await store.replace("response", "big", big + " ", version=version) is not None
        assert await store.take("response", "big") == big + " "
        await store.append("mcp_event", "big", big)
        assert await store.read_after("mcp_event", "big") == [(1, big)]

    async def test_bad_kinds_and_names_are_refused(self, make_store: StateStoreFactory) -> None:
        """Bad kinds, keys and stream names raise InvalidIdError from every method."""
        store = await make_store()
        for kind in _BAD_KINDS:
            for call in _calls(store, kind=kind):
                with pytest.raises(InvalidIdError, match="state kind"):
                    await call
        for name in _BAD_NAMES:
            for call in _calls(store, key=name):
                with pytest.raises(InvalidIdError, match=r"response (key|stream)"):
                    await call
        assert await store.read_after("response", "s") == []

    async def test_bad_values_are_refused(self, make_store: StateStoreFactory) -> None:
        """Values that are not text every store can hold raise SerializationError."""
        store = await make_store()
        for value in _BAD_VALUES:
            with pytest.raises(SerializationError):
                await store.put("response", "r", value)  # type: ignore[arg-type]
            with pytest.raises(SerializationError):
                await store.replace("response", "r", value, version=0)  # type: ignore[arg-type]
            with pytest.raises(SerializationError):
                await store.append("response", "s", value)  # type: ignore[arg-type]
        assert await store.get("response", "r") is None
        assert await store.read_after("response", "s") == []

    async def test_bad_numbers_are_refused(self, make_store: StateStoreFactory) -> None:
        """Bad ttls, versions, numbers, limits and waits raise StateStoreError."""
        store = await make_store()
        calls: list[Awaitable[object]] = []
        for ttl in _BAD_TTLS:
            calls.append(store.put("response", "r", "1", ttl=ttl))  # type: ignore[arg-type]
            calls.append(store.replace("response", "r", "1", version=0, ttl=ttl))  # type: ignore[arg-type]
            calls.append(store.append("response", "s", "1", ttl=ttl))  # type: ignore[arg-type]
        for version in (-1, True, 1.0, "1", None):
            calls.append(store.replace("response", "r", "1", version=version))  # type: ignore[arg-type]
        for after in (-1, True, 1.5, None):
            calls.append(store.read_after("response", "s", after))  # type: ignore[arg-type]
            calls.append(store.wait_after("response", "s", after, wait=1))  # type: ignore[arg-type]
        for limit in (0, -1, True, 2.0):
            calls.append(store.read_after("response", "s", 0, limit))  # type: ignore[arg-type]
        for wait in (0, -1, math.inf, math.nan, True, None):
            calls.append(store.wait_after("response", "s", 0, wait=wait))  # type: ignore[arg-type]
        for call in calls:
            with pytest.raises(StateStoreError) as caught:
                await call
            assert isinstance(caught.value, DaimonError)
        assert await store.get("response", "r") is None
        assert await store.read_after("response", "s") == []


def _calls(
    store: StateStore, *, kind: object = "response", key: object = "k"
) -> list[Awaitable[object]]:
    """Every method of ``store`` called with ``kind`` and ``key`` (as key or stream)."""
    k, n = kind, key
    return [
        store.put(k, n, "1"),  # type: ignore[arg-type]
        store.get(k, n),  # type: ignore[arg-type]
        store.read(k, n),  # type: ignore[arg-type]
        store.replace(k, n, "1", version=0),  # type: ignore[arg-type]
        store.take(k, n),  # type: ignore[arg-type]
        store.delete(k, n),  # type: ignore[arg-type]
        store.append(k, n, "1"),  # type: ignore[arg-type]
        store.read_after(k, n),  # type: ignore[arg-type]
        store.wait_after(k, n, 0, wait=0.1),  # type: ignore[arg-type]
    ]
