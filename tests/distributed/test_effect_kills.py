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
Measured on 2 busy CPUs: 25 to 40 s per broker at ``ci``, 30 to 40 s at ``full`` (60 s each
with the three brokers' tests running at once).
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
                executing = found.setdefault(event[-1], set())
                entry = f"{event[1]}/{event[2]}/{event[3]}"
                (executing.add if event[0] == "tstart" else executing.discard)(entry)
        return found

    return running


def result_of(state: CheckpointState, call_id: str) -> str:
    """The call's one result in the run's messages."""
    texts = [m.text for m in state.messages if m.role is Role.TOOL and m.tool_call_id == call_id]
    assert len(texts) == 1, f"{state.run_id}: {len(texts)} results for {call_id}"
    return texts[0]


async def final_states(open_store: Callable[[], Any], runs: list[str]) -> dict[str, Any]:
    """Each run's newest checkpoint, read on a handle of the test's own."""
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
    """(key, run) of every charge the card service received, and of each it applied."""
    async with await psycopg.AsyncConnection.connect(dsn) as db:
        received = await (await db.execute(f"SELECT key, run FROM {table}_received")).fetchall()
        applied = await (await db.execute(f"SELECT key, run FROM {table}_applied")).fetchall()
    return [(r[0], r[1]) for r in received], [(r[0], r[1]) for r in applied]


async def until_done(fleet: Fleet, least: int, within: float) -> None:
    """As :meth:`Fleet.until_done`, reading the (longer) log less often."""
    deadline = time.monotonic() + within
    while (done := fleet.done()) < least:
        assert time.monotonic() < deadline, f"{done} results in {within:.0f} s, not {least}"
        await asyncio.sleep(0.2)


@dataclass
class Tally:
    """What the runs' calls did, checked call by call against the log and the final state."""

    in_doubt: Counter[str] = field(default_factory=Counter)
    """Calls in doubt after a kill, by policy (an execution, or an intent, whose result was
    never saved)."""
    again: Counter[str] = field(default_factory=Counter)
    """Executions beyond a call's first, by policy."""
    unknown_started: int = 0
    """Executions of the ``once`` calls the model was told are UNKNOWN_OUTCOME."""
    ended_unsaved: int = 0
    """Executions that ended but whose result no save kept (the kill came between)."""
    repeated_after_record: list[str] = field(default_factory=list)

    def check(self, state: CheckpointState, call_id: str, call: Call) -> None:
        """Tally one call; note it when it started again after its result was saved."""
        policy, run = POLICY[call_id], state.run_id
        text = result_of(state, call_id)
        executions = [e for _, e in call.starts]
        recorded = text.partition(" ")[0].partition("@")[2]
        self.again[policy] += max(len(executions) - 1, 0)
        self.ended_unsaved += sum(1 for e in executions if e in call.ends and e != recorded)
        if text == UNKNOWN_OUTCOME:
            self.in_doubt[policy] += 1
            self.unknown_started += len(executions)
        else:
            assert recorded in executions, f"{run} {call_id}: {text} never started"
            assert recorded in call.ends, f"{run} {call_id}: {text} never ended"
            self.in_doubt[policy] += executions.index(recorded) > 0
            if executions[-1] != recorded:  # started again after the recorded one
                self.repeated_after_record.append(
                    f"{run} {call_id}: started {executions}, its result from {recorded}"
                )
        for line, execution in call.saved:  # a start after a save that held a result
            if later := [e for at, e in call.starts if at > line]:
                self.repeated_after_record.append(
                    f"{run} {call_id}: {later} started after {execution}'s result was saved"
                )

    def summary(self) -> str:
        doubt, again = self.in_doubt, self.again
        return (
            f"in doubt: repeatable {doubt['repeatable']}, keyed {doubt['keyed']}, once "
            f"{doubt['once']} (UNKNOWN_OUTCOME; {self.unknown_started} of them had started); "
            f"{self.ended_unsaved} executions ended but no save kept their result; "
            f"re-executions: repeatable {again['repeatable']}, keyed {again['keyed']}, once "
            f"{again['once']}, after a saved result {len(self.repeated_after_record)}"
        )


def check_ledger(state: CheckpointState, call_id: str, executions: list[str]) -> None:
    """The run's effect ledger agrees with the log: status, and an intent per execution."""
    record, text = state.effects.get(call_id), result_of(state, call_id)
    if POLICY[call_id] == "repeatable":
        assert record is None, f"{state.run_id}: a repeatable call in the ledger: {record}"
        return
    assert record is not None, f"{state.run_id}: {call_id} missing from the ledger"
    if text == UNKNOWN_OUTCOME:
        assert POLICY[call_id] == "once", f"{state.run_id} {call_id}: {text}"
        assert record.status == "in_doubt", record
    else:
        assert record.status == "completed", record
    assert record.attempts >= len(executions), (record, executions)
    if POLICY[call_id] == "once":
        assert record.attempts == 1, record


def check_card_service(
    runs: list[str], received: list[tuple[str, str]], applied: list[tuple[str, str]]
) -> None:
    """Each run's charge was applied once, under the one key every attempt sent."""
    applied_per_run = Counter(run for _, run in applied)
    assert sorted(applied_per_run) == sorted(runs), "a run's charge was never applied"
    assert max(applied_per_run.values()) == 1, "a charge applied twice"
    keys: dict[str, set[str]] = defaultdict(set)
    for key, run in received:
        keys[run].add(key)
    changed = {run: k for run, k in keys.items() if k != {f"{run}:c-charge"}}
    assert not changed, f"a call's idempotency key changed between attempts: {changed}"


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
    tally = Tally()
    calls = calls_from(events)
    for run in runs:
        state = states[run]
        assert state is not None and state.progress is not None, run
        assert state.progress.status == "completed", (run, state.progress)
        result = statuses[run].result
        assert result is not None and result.output == state.progress.text, run
        for call_id in POLICY:
            tally.check(state, call_id, calls[state.run_id, call_id])
    assert not tally.repeated_after_record, tally.repeated_after_record[:10]
    assert tally.again["once"] == 0, f"{tally.again['once']} once calls ran again"
    for run in runs:  # the ledger agrees with the log
        for call_id in POLICY:
            call = calls[run, call_id]
            check_ledger(states[run], call_id, [e for _, e in call.starts])
    check_card_service(runs, received, applied)
    kills = sum(1 for e in events if e[0] == "start") - 2
    assert kills == KILLS
    cut = cut_short(events)
    assert len(cut) >= mid_tool, f"only {len(cut)} kills cut a tool call short, not {mid_tool}"
    report(
        capsys,
        f"[{setup.target.name}] {RUNS} runs, {KILLS} SIGKILLs ({len(cut)} mid-tool, cutting "
        f"{sum(cut.values())} executions short; lease {LEASE:g}s): {RUNS - len(lost)}/{RUNS} "
        f"completed; {tally.summary()}; card service: {len(received)} received, "
        f"{len(applied)} applied; {elapsed:.1f}s",
    )
