from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import daimon
from daimon.core import BuilderError, SchemaVersionError, StateStore
from daimon.serverstate import check_state_store_url, state_store_from_url
from daimon.serverstate.sqlite import SCHEMA, SQLiteStateStore, path_from_url
from daimon.testing.state_store import StateStoreConformance, StateStoreFactory

_SRC = str(Path(daimon.__file__).resolve().parent.parent)


class TestSQLiteStateStore(StateStoreConformance):
    @pytest.fixture
    async def make_store(self, tmp_path: Path) -> AsyncIterator[StateStoreFactory]:
        handles: list[SQLiteStateStore] = []

        async def make() -> StateStore:  # a new connection on one file, as a process opens it
            handles.append(SQLiteStateStore(tmp_path / "state.db"))
            await handles[-1].setup()
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStateStore]:
    async with SQLiteStateStore(tmp_path / "state.db") as opened:
        yield opened


def _count(path: str, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _in_another_process(path: Path, code: str) -> subprocess.Popen[str]:
    """Run ``code`` (an async body using ``store``, a handle on ``path``) in a new process."""
    script = (
        "import asyncio, sys, time\n"
        "from daimon.serverstate.sqlite import SQLiteStateStore\n"
        "async def main():\n"
        f"    async with SQLiteStateStore({str(path)!r}) as store:\n"
        + "".join(f"        {line}\n" for line in code.splitlines())
        + "asyncio.run(main())\n"
    )
    env = os.environ | {"PYTHONPATH": _SRC}
    return subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )


async def test_it_is_a_state_store(store: SQLiteStateStore) -> None:
    assert isinstance(store, StateStore)


async def test_a_wait_wakes_on_an_append_by_another_process(
    store: SQLiteStateStore, tmp_path: Path
) -> None:
    await store.append("run", "s1", '"first"')
    writer = _in_another_process(
        tmp_path / "state.db",
        "await asyncio.sleep(0.5)\n"
        "print(time.time(), flush=True)\n"
        "await store.append('run', 's1', '\"from another process\"')",
    )
    try:
        started = time.monotonic()
        events = await store.wait_after("run", "s1", 1, wait=20)
        woken = time.time()
        assert events == [(2, '"from another process"')]
        assert time.monotonic() - started < 15  # woken, not timed out
        out, _ = await asyncio.to_thread(writer.communicate, timeout=30)
        assert writer.returncode == 0
        assert woken - float(out.split()[0]) < 1.0  # a poll away, not the wait's end
    finally:
        if writer.poll() is None:
            writer.kill()


async def test_takes_in_two_processes_give_each_record_once(
    store: SQLiteStateStore, tmp_path: Path
) -> None:
    keys = [f"run-{i}" for i in range(40)]
    for key in keys:
        await store.put("paused_run", key, f'"{key}"')
    body = (
        f"got = [await store.take('paused_run', k) for k in {keys!r}]\n"
        "print(' '.join(str(i) for i, v in enumerate(got) if v is not None))"
    )
    takers = [_in_another_process(tmp_path / "state.db", body) for _ in range(3)]
    outs = [await asyncio.to_thread(t.communicate, timeout=60) for t in takers]
    assert [t.returncode for t in takers] == [0, 0, 0]
    taken = sorted(int(i) for out, _ in outs for i in out.split())
    assert taken == list(range(len(keys)))


async def test_numbers_and_versions_are_unique_across_processes(
    store: SQLiteStateStore, tmp_path: Path
) -> None:
    body = (
        "numbers = [await store.append('run', 's', '1') for _ in range(30)]\n"
        "versions = [await store.put('response', 'r', '1') for _ in range(30)]\n"
        "print(' '.join(map(str, numbers)), '|', ' '.join(map(str, versions)))"
    )
    writers = [_in_another_process(tmp_path / "state.db", body) for _ in range(3)]
    outs = [(await asyncio.to_thread(w.communicate, timeout=60))[0] for w in writers]
    numbers = [n for out in outs for n in map(int, out.split("|")[0].split())]
    versions = [v for out in outs for v in map(int, out.split("|")[1].split())]
    assert sorted(numbers) == list(range(1, 91))
    assert len(set(versions)) == 90
    for out in outs:  # each process saw its own numbers and versions rise
        mine = [list(map(int, part.split())) for part in out.split("|")]
        assert all(part == sorted(part) for part in mine)
    assert [n for n, _ in await store.read_after("run", "s")] == list(range(1, 91))


async def test_tables_are_versioned(store: SQLiteStateStore) -> None:
    await store.put("response", "r", "1")
    with sqlite3.connect(store.path) as conn:
        rows = conn.execute("SELECT component, version FROM daimon_schema_versions").fetchall()
        assert rows == [("server_state", SCHEMA.version)] == [("server_state", 1)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    async with SQLiteStateStore(store.path) as again:  # set up again: nothing to do
        assert await again.get("response", "r") == "1"


async def test_tables_of_a_newer_daimon_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SQLiteStateStore(path):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE daimon_schema_versions SET version = 99")
    store = SQLiteStateStore(path)
    with pytest.raises(SchemaVersionError, match="version 99"):
        await store.get("response", "r")  # created on first use: checked there too
    await store.aclose()


async def test_prune_deletes_expired_rows(store: SQLiteStateStore) -> None:
    await store.put("response", "gone", "1", ttl=0.2)
    await store.put("response", "kept", "1")
    for _ in range(3):
        await store.append("mcp_event", "gone", "1", ttl=0.2)
    await store.append("mcp_event", "kept", "1", ttl=60)
    await asyncio.sleep(0.4)
    assert await store.prune() == 1 + 3 + 1
    assert _count(store.path, "daimon_state_records") == 1
    assert _count(store.path, "daimon_state_events") == 1
    assert await store.get("response", "kept") == "1"


async def test_a_stream_appended_after_expiry_drops_its_old_events(
    store: SQLiteStateStore,
) -> None:
    for _ in range(3):
        await store.append("mcp_event", "s", '"old"', ttl=0.2)
    await asyncio.sleep(0.4)
    number = await store.append("mcp_event", "s", '"new"')
    assert await store.read_after("mcp_event", "s") == [(number, '"new"')]
    assert _count(store.path, "daimon_state_events") == 1


async def test_waits_that_end_leave_nothing_behind(store: SQLiteStateStore) -> None:
    for i in range(3):
        assert await store.wait_after("mcp_event", f"s{i}", 0, wait=0.05) == []
    assert not store._waiters
    await asyncio.sleep(0.3)  # the poller stops once nobody waits
    assert store._poller is None or store._poller.done()


async def test_a_closed_handle_refuses_calls(tmp_path: Path) -> None:
    store = SQLiteStateStore(tmp_path / "state.db")
    await store.put("response", "r", "1")
    await store.aclose()
    await store.aclose()  # again: nothing to do
    with pytest.raises(daimon.core.DaimonError, match="closed"):
        await store.get("response", "r")


def test_urls_name_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert path_from_url("sqlite:///state.db") == "state.db"
    assert path_from_url("sqlite:///var/state.db") == "var/state.db"
    assert path_from_url("sqlite:////var/lib/state.db") == "/var/lib/state.db"
    assert path_from_url("SQLITE:///my%20state.db") == "my state.db"
    monkeypatch.chdir(tmp_path)
    store = state_store_from_url("sqlite:///state.db")
    assert isinstance(store, SQLiteStateStore) and store.path == "state.db"
    absolute = state_store_from_url(f"sqlite:///{tmp_path}/abs.db")
    assert isinstance(absolute, SQLiteStateStore) and absolute.path == f"{tmp_path}/abs.db"
    assert check_state_store_url("sqlite:///state.db") == "sqlite"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("sqlite://", "needs a database file"),
        ("sqlite:///", "needs a database file"),
        ("sqlite:///:memory:", "not shared"),
        ("sqlite:////var/dir/", "needs a database file"),
        ("sqlite://host/state.db", "not a host"),
        ("sqlite:///state.db?mode=ro", "no query"),
    ],
)
def test_urls_that_name_no_file_are_refused(url: str, says: str) -> None:
    for call in (path_from_url, check_state_store_url, state_store_from_url):
        with pytest.raises(BuilderError, match=says):
            call(url)


@pytest.mark.parametrize(
    "options",
    [
        {"busy_timeout": 0},
        {"poll_interval": -1},
        {"poll_interval": True},
        {"prune_every": float("inf")},
        {"synchronous": "SOMETIMES"},
    ],
)
def test_settings_are_checked(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(BuilderError):
        SQLiteStateStore(tmp_path / "state.db", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_a_memory_database_is_refused(path: str) -> None:
    with pytest.raises(BuilderError, match="not shared"):
        SQLiteStateStore(path)
