"""The effect ledger under SIGKILL, on each real broker: runs submitted to a queue, two worker
processes killed at random (most kills while a tool call is running), the agent's checkpoints on
the broker's own service with a short lease (in Redis for RabbitMQ, where its broker keeps its
task store too). From what the workers logged durably, the runs' final checkpoints and the card
service's tables:

* no call whose result reached the checkpoint ever started again;
* no ``once`` call started twice (one in doubt reaches the model as UNKNOWN_OUTCOME instead);
* the card service applied each key's charge once, whatever it received;
* every run completed.

The workers run ``effect_worker.py`` (its docstring describes the log). ``DAIMON_FAULT_SCALE``
sets the numbers as in test_faults.py: ``ci`` (the default) and ``full`` both run the issue's
1,000 runs on 2 workers; ``full`` kills 20 times instead of 8; ``off`` leaves the test out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daimon.agent._effects import UNKNOWN_OUTCOME
from daimon.checkpoint import NatsKVCheckpoint, RedisCheckpoint
from daimon.core import AgentTask, CheckpointState, Role, TaskState

from ._fleet import (
    Fleet,
    Target,
    _drop_redis,
    nats_target,
    rabbitmq_target,
    redis_target,
    report,
    submit_all,
    wait_all_ended,
)

WORKER = Path(__file__).with_name("effect_worker.py")
SCALE = os.environ.get("DAIMON_FAULT_SCALE", "ci").lower()
RUNS, KILLS = 1000, (20 if SCALE == "full" else 8)
LEASE = 1.5
"""Seconds of the checkpoint's run lease and of the broker's task lease: a killed worker's runs
are taken over within about two seconds."""
POLICY = {"c-lookup": "repeatable", "c-notify": "once", "c-charge": "keyed"}
KILL_AT = ("c-notify", "c-charge", "c-lookup", None)
"""What each kill waits for, in turn: a worker running that call (None: any task in flight)."""

pytestmark = [
    pytest.mark.skipif(SCALE == "off", reason="DAIMON_FAULT_SCALE=off: fault tests left out"),
    pytest.mark.service("postgres"),
]


def postgres_dsn() -> str:
    host = os.environ.get("DAIMON_TEST_POSTGRES_HOST", "127.0.0.1")
    port = os.environ.get("DAIMON_TEST_POSTGRES_PORT", "5432")
    return f"postgresql://postgres@{host}:{port}/test"


@dataclass
class Setup:
    """A queue on the broker, and the agent's checkpoint store on the same service."""

    target: Target
    checkpoint: dict[str, Any]
    open_store: Callable[[], Any]
    drop_store: Callable[[], Any]


def redis_setup(url: str, target: Target | None = None) -> Setup:
    """Checkpoints in Redis: the Redis broker's service, and RabbitMQ's task store."""
    prefix = f"effkill-{uuid.uuid4().hex[:10]}:"
    return Setup(
        target or redis_target(url),
        {"kind": "redis", "url": url, "prefix": prefix, "lease": LEASE},
        lambda: RedisCheckpoint(url, prefix=prefix),
        lambda: _drop_redis(url, f"{prefix}*"),
    )


async def _drop_bucket(url: str, bucket: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await nc.jetstream().delete_key_value(bucket)
    finally:
        await nc.close()


def nats_setup(url: str) -> Setup:
    bucket = f"effkill_{uuid.uuid4().hex[:10]}"
    return Setup(
        nats_target(url),
        {"kind": "nats", "url": url, "bucket": bucket, "lease": LEASE},
        lambda: NatsKVCheckpoint(url, bucket=bucket),
        lambda: _drop_bucket(url, bucket),
    )


@pytest.fixture(
    params=[
        pytest.param("redis", marks=pytest.mark.service("redis")),
        pytest.param("nats", marks=pytest.mark.service("nats")),
        pytest.param(
            "rabbitmq", marks=[pytest.mark.service("rabbitmq"), pytest.mark.service("redis")]
        ),
    ]
)
async def setup(
    request: pytest.FixtureRequest, redis_url: str, nats_url: str, rabbitmq_url: str
) -> AsyncIterator[Setup]:
    made = {
        "redis": lambda: redis_setup(redis_url),
        "nats": lambda: nats_setup(nats_url),
        "rabbitmq": lambda: redis_setup(redis_url, rabbitmq_target(rabbitmq_url, redis_url)),
    }[request.param]()
    yield made
    await made.target.cleanup()
    await made.drop_store()


@pytest.fixture
async def card_service() -> AsyncIterator[tuple[str, str]]:
    """The card service's tables: every request received, and each key's one applied charge."""
    dsn, table = postgres_dsn(), f"effkill_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        await db.execute(
            f"CREATE TABLE {table}_received (key text NOT NULL, run text NOT NULL, "
            "execution text NOT NULL)"
        )
        await db.execute(
            f"CREATE TABLE {table}_applied (key text PRIMARY KEY, run text NOT NULL, "
            "execution text NOT NULL)"
        )
        try:
            yield dsn, table
        finally:
            for name in (f"{table}_received", f"{table}_applied"):
                await db.execute(f"DROP TABLE IF EXISTS {name}")


# --- Reading what happened.


@dataclass
class Call:
    """One call of one run: its executions, in the order they started, and what was recorded."""

    starts: list[tuple[int, str]] = field(default_factory=list)
    """(line, execution) of each start."""
    ends: set[str] = field(default_factory=set)
    saved: list[tuple[int, str]] = field(default_factory=list)
    """(line, execution) of the first save that held each execution's result."""
    result: str | None = None
    """The result in the run's final checkpoint."""


def calls_from(events: list[list[str]]) -> dict[tuple[str, str], Call]:
    calls: dict[tuple[str, str], Call] = defaultdict(Call)
    for line, event in enumerate(events):
        kind = event[0]
        if kind == "tstart":
            calls[event[1], event[2]].starts.append((line, event[3]))
        elif kind == "tend":
            calls[event[1], event[2]].ends.add(event[3])
        elif kind == "saved":
            calls[event[1], event[2]].saved.append((line, event[3]))
    return calls


def cut_short(events: list[list[str]]) -> Counter[str]:
    """Per killed worker (one that never logged its exit), its executions that never ended."""
    exited = {e[-1] for e in events if e[0] == "exit"}
    started = {(e[-1], e[3]) for e in events if e[0] == "tstart"}
    ended = {(e[-1], e[3]) for e in events if e[0] == "tend"}
    return Counter(pid for pid, _ in started - ended if pid not in exited)


def in_flight_calls(fleet: Fleet, call_id: str | None) -> Callable[[], dict[str, set[str]]]:
    """Per worker pid, its tool executions started and not ended (of ``call_id`` only, if set)."""

    def running() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for event in fleet.events():
            if event[0] in ("tstart", "tend") and call_id in (None, event[2]):
                started = found.setdefault(event[-1], set())
                entry = f"{event[1]}/{event[2]}/{event[3]}"
                (started.add if event[0] == "tstart" else started.discard)(entry)
        return found

    return running


def result_of(state: CheckpointState, call_id: str) -> str:
    texts = [m.text for m in state.messages if m.role is Role.TOOL and m.tool_call_id == call_id]
    assert len(texts) == 1, f"{state.run_id}: {len(texts)} results for {call_id}"
    return texts[0]


async def final_states(open_store: Callable[[], Any], runs: list[str]) -> dict[str, Any]:
    store = open_store()
    try:
        states = {}
        for start in range(0, len(runs), 100):
            chunk = runs[start : start + 100]
            for run, state in zip(
                chunk, await asyncio.gather(*(store.load(r) for r in chunk)), strict=True
            ):
                states[run] = state
        return states
    finally:
        await store.aclose()


async def card_rows(dsn: str, table: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    async with await psycopg.AsyncConnection.connect(dsn) as db:
        received = await (await db.execute(f"SELECT key, run FROM {table}_received")).fetchall()
        applied = await (await db.execute(f"SELECT key, run FROM {table}_applied")).fetchall()
    return [(r[0], r[1]) for r in received], [(r[0], r[1]) for r in applied]


async def until_done(fleet: Fleet, least: int, within: float) -> None:
    deadline = time.monotonic() + within
    while (done := fleet.done()) < least:
        assert time.monotonic() < deadline, f"{done} results in {within:.0f} s, not {least}"
        await asyncio.sleep(0.2)


# --- The test.


@pytest.mark.timeout(600)
async def test_killed_workers_never_repeat_a_recorded_or_once_call(
    setup: Setup,
    card_service: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dsn, table = card_service
    rng = random.Random(20261207)
    options = {"lease": LEASE, "max_deliver": 50}
    client = setup.target.open(**options)
    fleet = Fleet(
        setup.target,
        tmp_path / "events.log",
        workers=2,
        settings={
            "options": options,
            "concurrency": 16,
            "tool_time": [0.02, 0.06],
            "checkpoint": setup.checkpoint,
            "postgres": dsn,
            "table": table,
        },
        script=WORKER,
    )
    runs = [f"run-{n}" for n in range(RUNS)]
    share = RUNS // (KILLS + 2)
    mid_tool = 0
    started = time.monotonic()
    try:
        await submit_all(client, [AgentTask(task_id=r, input=r) for r in runs])
        await fleet.start()
        for n in range(1, KILLS + 1):
            await until_done(fleet, n * share + rng.randrange(share), within=120)
            aim = KILL_AT[(n - 1) % len(KILL_AT)]
            busy = fleet.busy if aim is None else in_flight_calls(fleet, aim)
            await fleet.kill_one(rng, busy=busy)
            mid_tool += aim is not None
        statuses = await wait_all_ended(client, runs, within=300)
    finally:
        await fleet.stop()
        await client.aclose()
    elapsed = time.monotonic() - started
    events = fleet.events()
    states = await final_states(setup.open_store, runs)
    received, applied = await card_rows(dsn, table)

    lost = [r for r in runs if statuses[r].state is not TaskState.COMPLETED]
    assert not lost, f"{len(lost)} runs did not complete: {[statuses[r] for r in lost[:5]]}"
    calls = calls_from(events)
    repeated_after_record: list[str] = []
    in_doubt: Counter[str] = Counter()
    again: Counter[str] = Counter()
    unknown_started = ended_in_doubt = 0
    for run in runs:
        state = states[run]
        assert state is not None and state.progress is not None, run
        assert state.progress.status == "completed", (run, state.progress)
        result = statuses[run].result
        assert result is not None and result.output == state.progress.text, run
        for call_id, policy in POLICY.items():
            call = calls[run, call_id]
            text = result_of(state, call_id)
            executions = [e for _, e in call.starts]
            again[policy] += max(len(executions) - 1, 0)
            recorded = text.partition(" ")[0].partition("@")[2]
            ended_in_doubt += sum(1 for e in executions if e in call.ends and e != recorded)
            if text == UNKNOWN_OUTCOME:
                assert policy == "once", f"{run} {call_id}: {text}"
                in_doubt[policy] += 1
                unknown_started += len(executions)
            else:
                assert recorded in executions, f"{run} {call_id}: {text} never started"
                assert recorded in call.ends, f"{run} {call_id}: {recorded} never ended"
                in_doubt[policy] += executions.index(recorded) > 0
                if executions[-1] != recorded:  # started again after the recorded one
                    repeated_after_record.append(
                        f"{run} {call_id}: started {executions}, its result from {recorded}"
                    )
            for line, execution in call.saved:  # a start after a save that held a result
                later = [e for at, e in call.starts if at > line]
                if later:
                    repeated_after_record.append(
                        f"{run} {call_id}: {later} started after {execution}'s result was saved"
                    )
    assert not repeated_after_record, repeated_after_record[:10]
    assert again["once"] == 0, f"{again['once']} once calls ran again"

    applied_per_run = Counter(run for _, run in applied)
    keys_per_run = {run: {key for key, r in received if r == run} for run in runs}
    assert sorted(applied_per_run) == sorted(runs), "a run's charge was never applied"
    assert max(applied_per_run.values()) == 1, "a charge applied twice"
    assert all(keys == {f"{r}:c-charge"} for r, keys in keys_per_run.items()), "a key changed"
    kills = sum(1 for e in events if e[0] == "start") - 2
    assert kills == KILLS
    cut = cut_short(events)
    assert len(cut) >= mid_tool, f"only {len(cut)} kills cut a tool call short, not {mid_tool}"
    report(
        capsys,
        f"[{setup.target.name}] {RUNS} runs, {KILLS} SIGKILLs ({len(cut)} mid-tool, cutting "
        f"{sum(cut.values())} executions short; lease "
        f"{LEASE:g}s): {RUNS - len(lost)}/{RUNS} completed; in doubt: "
        f"repeatable {in_doubt['repeatable']}, keyed {in_doubt['keyed']}, "
        f"once {in_doubt['once']} (UNKNOWN_OUTCOME; {unknown_started} had started); "
        f"{ended_in_doubt} executions ended but their result was never saved; "
        f"re-executions: repeatable {again['repeatable']}, keyed {again['keyed']}, once "
        f"{again['once']}, after a recorded result {len(repeated_after_record)}; card service: "
        f"{len(received)} received, {len(applied)} applied; {elapsed:.1f}s",
    )
