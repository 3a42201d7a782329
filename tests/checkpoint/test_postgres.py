"""PostgresCheckpoint on the real PostgreSQL: the conformance kit, then what is Postgres's own."""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import psycopg_pool
import pytest

from daimon.checkpoint.postgres import PostgresCheckpoint, _split
from daimon.core import (
    BuilderError,
    CheckpointConflictError,
    CheckpointCorruptError,
    CheckpointState,
    DaimonError,
    SchemaVersionError,
    SerializationError,
    codec,
)
from daimon.kit import checkpoint_records as _base
from daimon.testing.checkpoint import CheckpointConformance, sample_state

pytestmark = pytest.mark.service("postgres")


class TestPostgresCheckpoint(CheckpointConformance):
    @pytest.fixture
    async def make_checkpoint(self, postgres_url: str, postgres_prefix: str) -> AsyncIterator[Any]:
        handles: list[PostgresCheckpoint] = []

        async def make(**options: Any) -> PostgresCheckpoint:
            handles.append(
                PostgresCheckpoint.from_url(postgres_url, prefix=postgres_prefix, **options)
            )
            return handles[-1]

        yield make
        for handle in handles:
            await handle.aclose()


# ------------------------------------------------------------------------------ Postgres's own


@pytest.fixture
async def store(postgres_url: str, postgres_prefix: str) -> AsyncIterator[PostgresCheckpoint]:
    async with PostgresCheckpoint.from_url(postgres_url, prefix=postgres_prefix) as checkpoint:
        yield checkpoint


async def sql(url: str, query: str, *params: object) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own (as an operator or an attacker would)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(query, params or None)
        return await cursor.fetchall() if cursor.description else []


async def test_rows_hold_the_state_as_json_with_its_digest(
    store: PostgresCheckpoint, postgres_url: str
) -> None:
    await store.save(sample_state("r", 1))
    [(seq, fmt, digest, state)] = await sql(
        postgres_url,
        f"SELECT seq, format, sha256, state::text FROM {store.prefix}checkpoints "
        "WHERE run_id = 'r'",
    )
    assert (seq, fmt) == (1, 1)
    assert state == codec.dumps(sample_state("r", 1))  # byte for byte, NUL escape and all
    assert len(digest) == 64
    assert await sql(postgres_url, f"SELECT to_regclass('{store.prefix}schema_versions')") != [
        (None,)
    ]


async def test_a_damaged_newest_row_falls_back_to_the_previous(
    store: PostgresCheckpoint, postgres_url: str
) -> None:
    table = f"{store.prefix}checkpoints"
    previous = CheckpointState(run_id="r", iteration=1)
    await store.save(previous)
    await store.save(sample_state("r", 2))
    [(state, digest, saved_at)] = await sql(
        postgres_url, f"SELECT state::text, sha256, saved_at FROM {table} WHERE seq = 2"
    )
    tampered = [
        ("state", state.replace('"iteration": 2', '"iteration": 3')),
        ("state", state.replace("session-1", "session-2")),
        ("sha256", "0" * 64),
        ("sha256", digest[:-1]),
        ("saved_at", 1),
        ("format", 2),
    ]
    assert all(value != state for column, value in tampered if column == "state")
    for column, value in tampered:
        await sql(postgres_url, f"UPDATE {table} SET {column} = %s WHERE seq = 2", value)
        assert await store.load("r") == previous, column
        await sql(
            postgres_url,
            f"UPDATE {table} SET state = %s::json, sha256 = %s, saved_at = %s, format = 1 "
            "WHERE seq = 2",
            state,
            digest,
            saved_at,
        )
    assert await store.load("r") == sample_state("r", 2)  # restored: intact again
    await sql(postgres_url, f"UPDATE {table} SET seq = 3 WHERE seq = 2")  # moved: its digest fails
    assert await store.load("r") == previous
    await sql(postgres_url, f"DELETE FROM {table} WHERE seq = 1")
    with pytest.raises(CheckpointCorruptError, match="no intact checkpoint"):
        await store.load("r")
    assert await store.history("r") == []


async def test_code_reviving_payloads_raise_serialization_error(
    store: PostgresCheckpoint, postgres_url: str, reviving_payload: bytes
) -> None:
    """A row forged with a valid digest around a code-reviving payload never revives it."""
    await store.save(CheckpointState(run_id="r"))
    saved_at = int(time.time() * 1000)
    digest = hashlib.sha256(b"2:%d:" % saved_at + reviving_payload).hexdigest()
    insert = (
        f"INSERT INTO {store.prefix}checkpoints (run_id, seq, saved_at, format, sha256, "
        "save_id, state) VALUES ('r', 2, %s, 1, %s, gen_random_uuid(), %s::json)"
    )
    try:
        text = reviving_payload.decode("utf-8")
    except UnicodeDecodeError:  # pickle: the json column cannot even hold it
        with pytest.raises(psycopg.errors.DataError):
            await sql(postgres_url, insert, saved_at, digest, reviving_payload.decode("latin-1"))
        return
    await sql(postgres_url, insert, saved_at, digest, text)
    with pytest.raises(SerializationError) as caught:
        await store.load("r")
    assert not isinstance(caught.value, CheckpointCorruptError)


async def test_a_save_replayed_after_a_lost_reply_is_not_a_conflict(
    store: PostgresCheckpoint,
) -> None:
    """A save retried after its reply was lost finds its own row; a twin's equal record does not."""
    record = _base.encode(CheckpointState(run_id="r", iteration=1), 1, 1_700_000_000_000)
    digest, payload = _split(record, 1, 1_700_000_000_000)
    params = {
        "run": "r",
        "seq": 1,
        "expected": None,
        "saved_at": 1_700_000_000_000,
        "format": 1,
        "sha256": digest,
        "save_id": uuid.uuid4(),
        "state": payload,
        "token": None,
        "keep": None,
        "ttl_ms": None,
    }
    assert await store._rows("save", params) == [(True, None, True)]
    assert await store._rows("save", params) == [(True, 1, True)]  # the replay
    twin = {**params, "save_id": uuid.uuid4()}  # byte-equal record, another saver
    assert await store._rows("save", twin) == [(False, 1, True)]
    assert [s.iteration for s in await store.history("r")] == [1]


async def test_concurrent_savers_on_separate_pools_exactly_one_wins_each_round(
    postgres_url: str, postgres_prefix: str
) -> None:
    handles = [PostgresCheckpoint(postgres_url, prefix=postgres_prefix) for _ in range(6)]
    try:
        await handles[0].save(CheckpointState(run_id="r", iteration=0))
        winners: list[int] = []
        for round_ in range(1, 16):
            for handle in handles:
                await handle.load("r")
            claim = CheckpointState(run_id="r", iteration=round_)  # byte-equal twins
            outcomes = await asyncio.gather(
                *(h.save(claim) for h in handles), return_exceptions=True
            )
            won = [n for n, o in enumerate(outcomes) if o is None]
            assert len(won) == 1, outcomes
            assert all(isinstance(o, CheckpointConflictError) for o in outcomes if o is not None)
            winners += won
        assert [s.iteration for s in await handles[0].history("r")] == list(range(16))
    finally:
        for handle in handles:
            await handle.aclose()


async def test_the_database_clock_fences_a_holder_whose_lease_it_expired(
    postgres_url: str, postgres_prefix: str
) -> None:
    """A holder whose own clock says its lease lives is refused by the save statement itself once
    the database expired the lease and another holder took it."""
    holder = PostgresCheckpoint(postgres_url, prefix=postgres_prefix)
    taker = PostgresCheckpoint(postgres_url, prefix=postgres_prefix)
    leases = f"{postgres_prefix}checkpoint_leases"
    try:
        lease = await holder.acquire("r")
        await holder.save(CheckpointState(run_id="r", iteration=1))
        await sql(postgres_url, f"UPDATE {leases} SET expires_at = now() - interval '1 second'")
        with pytest.raises(CheckpointConflictError, match="expired or was taken over"):
            await holder.save(CheckpointState(run_id="r", iteration=2))  # expired: refused too
        taken = await taker.acquire("r")
        assert taken.token > lease.token
        assert holder.fence("r") == lease  # by its own clock the lease still lives
        with pytest.raises(CheckpointConflictError, match="expired or was taken over"):
            await holder.save(CheckpointState(run_id="r", iteration=2))
        with pytest.raises(CheckpointConflictError):
            await holder.renew(lease)
        assert [s.iteration for s in await taker.history("r")] == [1]
        await taker.load("r")
        await taker.save(CheckpointState(run_id="r", iteration=2))
        await holder.delete("r")  # delete ends the lease too
        assert await sql(postgres_url, f"SELECT count(*) FROM {leases}") == [(0,)]
        with pytest.raises(CheckpointConflictError, match="expired or was taken over"):
            await taker.save(CheckpointState(run_id="r", iteration=3))
    finally:
        await holder.aclose()
        await taker.aclose()


async def test_a_takeover_waits_for_a_save_in_flight(
    postgres_url: str, postgres_prefix: str
) -> None:
    """The save holds the lease row while it writes: a takeover starting meanwhile waits for it,
    then the new holder loads what the old one saved."""
    holder = PostgresCheckpoint(postgres_url, prefix=postgres_prefix, lease=1.0)
    taker = PostgresCheckpoint(postgres_url, prefix=postgres_prefix)
    try:
        lease = await holder.acquire("r")
        await holder.save(CheckpointState(run_id="r", iteration=1))
        async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
            # Hold the row the next save writes, so that the save stalls holding the lease row.
            await blocker.execute(
                f"INSERT INTO {postgres_prefix}checkpoints (run_id, seq, saved_at, format, sha256,"
                " save_id, state) VALUES ('r', 2, 0, 1, '', gen_random_uuid(), '{}')"
            )
            saving = asyncio.ensure_future(holder.save(CheckpointState(run_id="r", iteration=2)))
            await asyncio.sleep(max(0, lease.expires_at - time.time() * 1000) / 1000 + 0.1)
            taking = asyncio.ensure_future(taker.acquire("r"))
            await asyncio.sleep(0.3)
            assert not taking.done()  # waits on the save's share lock of the lease row
            await blocker.rollback()
        await saving  # the save committed (its lease was live when it took the row)
        await taking
        assert await taker.load("r") == CheckpointState(run_id="r", iteration=2)
    finally:
        await holder.aclose()
        await taker.aclose()


async def _blocked_backend(killer: Any, name: str) -> int:
    """The pid of the connection named ``name`` once it waits on a lock."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cursor = await killer.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (name,),
        )
        row = await cursor.fetchone()
        if row:
            return int(row[0])
        await asyncio.sleep(0.005)
    raise AssertionError(f"no connection named {name!r} waited on a lock within 10 s")


async def _kill_mid_save(
    url: str, prefix: str, name: str, store: PostgresCheckpoint, state: CheckpointState, kills: int
) -> None:
    """Save ``state``, terminating the saving backend ``kills`` times in the middle of its
    statement (while it waits on the row another transaction holds), then let it through."""
    seq = store._seen.get(state.run_id, 0) + 1
    async with (
        await psycopg.AsyncConnection.connect(url) as blocker,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as killer,
    ):
        await blocker.execute(
            f"INSERT INTO {prefix}checkpoints (run_id, seq, saved_at, format, sha256, save_id, "
            "state) VALUES (%s, %s, 0, 1, '', gen_random_uuid(), '{}')",
            (state.run_id, seq),
        )
        saving = asyncio.ensure_future(store.save(state))
        try:
            for _ in range(kills):
                pid = await _blocked_backend(killer, name)
                await killer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        finally:
            await blocker.rollback()
            await asyncio.wait({saving})
    await saving


@pytest.mark.parametrize("kills", [1, 3])
async def test_a_killed_connection_loses_no_acknowledged_save_and_writes_no_half_record(
    postgres_url: str, postgres_prefix: str, kills: int
) -> None:
    """Every fifth save's backend is terminated mid-statement (``pg_terminate_backend``).

    Killed once, the save is tried again on a fresh connection and succeeds; killed on every
    try (3), it raises psycopg's ``OperationalError`` and leaves nothing. Every acknowledged save
    is kept, and every row in the table is an intact record.
    """
    name = f"daimon-test-{uuid.uuid4().hex[:12]}"
    url = f"{postgres_url}?application_name={name}"
    acknowledged: list[int] = []
    failures: list[Exception] = []
    async with PostgresCheckpoint(url, prefix=postgres_prefix) as store:
        for iteration in range(30):
            state = CheckpointState(run_id="r", iteration=iteration)
            try:
                if iteration % 5 == 0:
                    await _kill_mid_save(postgres_url, postgres_prefix, name, store, state, kills)
                else:
                    await store.save(state)
            except psycopg.OperationalError as exc:
                failures.append(exc)
                await store.load("r")
            else:
                acknowledged.append(iteration)
        history = [s.iteration for s in await store.history("r")]
    assert history == acknowledged
    assert len(failures) == (0 if kills == 1 else 6)
    [(rows,)] = await sql(postgres_url, f"SELECT count(*) FROM {postgres_prefix}checkpoints")
    assert rows == len(acknowledged)  # no half or orphan row: each one decoded above


async def test_a_database_newer_than_this_daimon_is_refused_at_setup(
    postgres_url: str, postgres_prefix: str
) -> None:
    async with PostgresCheckpoint(postgres_url, prefix=postgres_prefix):
        pass
    await sql(
        postgres_url,
        f"UPDATE {postgres_prefix}schema_versions SET version = 99 WHERE component = 'checkpoint'",
    )
    store = PostgresCheckpoint(postgres_url, prefix=postgres_prefix)
    try:
        with pytest.raises(SchemaVersionError, match="checkpoint tables are at version 99"):
            await store.load("r")
    finally:
        await store.aclose()


async def test_a_pool_passed_in_is_used_and_left_open(
    postgres_url: str, postgres_prefix: str
) -> None:
    pool = psycopg_pool.AsyncConnectionPool(postgres_url, min_size=1, max_size=2, open=False)
    try:
        async with PostgresCheckpoint(pool, prefix=postgres_prefix) as store:
            await store.save(CheckpointState(run_id="r", iteration=1))
        assert not pool.closed
        async with pool.connection() as conn:
            cursor = await conn.execute(f"SELECT count(*) FROM {postgres_prefix}checkpoints")
            assert await cursor.fetchone() == (1,)
    finally:
        await pool.close()


@pytest.mark.parametrize("bad", [{"prefix": "Bad-Prefix"}, {"prefix": ""}, {"max_size": 0}])
def test_bad_options_are_refused_at_construction(postgres_url: str, bad: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        PostgresCheckpoint(postgres_url, **bad)


def test_a_url_or_a_pool_is_required() -> None:
    with pytest.raises(BuilderError, match="PostgreSQL"):
        PostgresCheckpoint("")
    with pytest.raises(BuilderError, match="AsyncConnectionPool"):
        PostgresCheckpoint(42)


async def test_aclose_is_idempotent_and_final(postgres_url: str, postgres_prefix: str) -> None:
    store = PostgresCheckpoint(postgres_url, prefix=postgres_prefix)
    await store.save(CheckpointState(run_id="r", iteration=1))
    await store.aclose()
    await store.aclose()
    with pytest.raises(DaimonError, match="closed"):
        await store.load("r")
