"""DBOS's method on PostgreSQL itself: checkpointed runs through a PostgresBroker, with their
checkpoints (and effect ledgers) in a PostgresCheckpoint, both on a private PostgreSQL server
that is SIGKILLed (every process of it, then restarted on the same data directory and port:
crash recovery) or SIGSTOPped, every 3 to 8 s, for 0.5 to 3 s; meanwhile the two worker
processes are SIGKILLed 5 times, mid-tool.

The agent (a FunctionModel) calls a ``once`` tool and a ``keyed`` tool per run. Each execution
is logged durably (an fsync'd file) and the keyed one goes to a deduping card service on the
shared PostgreSQL, which no chaos touches (see ``effect_worker.py``). At the end: no run
lost, none with a wrong result, none stuck (all complete before a deadline), no call started
again after its result was saved, no ``once`` call started twice, each charge applied once.

The issue's 1,000 runs take about 60 s on 2 busy CPUs, so every scale runs them all;
``DAIMON_FAULT_SCALE=off`` leaves the test out (as test_faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import signal
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daimon.agent._effects import UNKNOWN_OUTCOME
from daimon.checkpoint.postgres import PostgresCheckpoint
from daimon.core import AgentTask, CheckpointState, Role, TaskState, TaskStatus
from daimon.distributed.brokers.postgres import PostgresBroker

from ._fleet import Fleet, Target, report
from ._postgres import PrivatePostgres

WORKER = Path(__file__).with_name("effect_worker.py")
SCALE = os.environ.get("DAIMON_FAULT_SCALE", "ci").lower()
RUNS = 1000
WORKER_KILLS = 5
LEASE = 2.0
"""Seconds of the broker's task lease and of the checkpoint's run lease."""
DEADLINE = 300.0
"""Seconds every run gets to complete, from the first submit: a run not done by then is stuck."""
POLICY = {"c-notify": "once", "c-charge": "keyed"}
PREFIX = "chaos_"

pytestmark = [
    pytest.mark.skipif(SCALE == "off", reason="DAIMON_FAULT_SCALE=off: fault tests left out"),
    pytest.mark.service("postgres"),  # the card service: the shared server, never disturbed
]


# --- A private server that crashes and stalls.


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (PostgreSQL's backends and auxiliary processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie counts: it holds no port and no shared memory)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class ChaosPostgres(PrivatePostgres):
    """A private server that :meth:`crash` kills outright and :meth:`pause` freezes."""

    def __init__(self) -> None:
        super().__init__()
        self._frozen: list[int] = []

    def _postmaster(self) -> int:
        assert self._proc is not None and self._proc.poll() is None, "postgres is not running"
        return self._proc.pid

    def crash(self) -> None:
        """SIGKILL the postmaster and every process it started, at once (as a power cut would,
        the kernel's page cache aside); return when all are gone."""
        postmaster = self._postmaster()
        os.kill(postmaster, signal.SIGSTOP)  # it forks no more: the list below is complete
        family = [postmaster, *_children(postmaster)]
        _signal_all(family, signal.SIGKILL)
        assert self._proc is not None
        self._proc.wait()
        self._proc = None
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in family):
            assert time.monotonic() < deadline, "postgres processes outlived SIGKILL"
            time.sleep(0.01)

    def pause(self) -> None:
        """SIGSTOP the postmaster and every process it started: the server stalls, sockets open."""
        postmaster = self._postmaster()
        os.kill(postmaster, signal.SIGSTOP)
        self._frozen = [postmaster, *_children(postmaster)]
        _signal_all(self._frozen, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT what :meth:`pause` stopped."""
        frozen, self._frozen = self._frozen, []
        _signal_all(frozen[::-1], signal.SIGCONT)


@pytest.fixture
def chaos_pg() -> Iterator[ChaosPostgres]:
    server = ChaosPostgres()
    try:
        server.start()
        yield server
    finally:
        server.resume()
        server.remove()


@dataclass
class Chaos:
    """Outages of the server, every 3 to 8 s, each 0.5 to 3 s: crashes and stalls in turn."""

    server: ChaosPostgres
    rng: random.Random
    crashes: int = 0
    stalls: int = 0
    down: float = 0.0
    """Seconds the server was out, in all."""
    recoveries: list[float] = field(default_factory=list)
    """Seconds each restart after a crash took (crash recovery included)."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _one_at_a_time: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self) -> None:
        """Outages on the clock until :meth:`stop`."""
        crash = self.rng.random() < 0.5
        while not await self._rest(self.rng.uniform(3.0, 8.0)):
            await self.outage(crash)
            crash = not crash

    async def outage(self, crash: bool) -> None:
        """One outage now (after the one in progress, if any): a crash or a stall."""
        async with self._one_at_a_time:
            seconds = self.rng.uniform(0.5, 3.0)
            if crash:
                await asyncio.to_thread(self.server.crash)
                await asyncio.sleep(seconds)
                started = time.monotonic()
                await asyncio.to_thread(self.server.start)
                self.recoveries.append(time.monotonic() - started)
                self.crashes += 1
            else:
                self.server.pause()
                await asyncio.sleep(seconds)
                self.server.resume()
                self.stalls += 1
            self.down += seconds

    async def _rest(self, seconds: float) -> bool:
        """Wait ``seconds``; whether :meth:`stop` was called meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()


# --- The card service and the workers.


@pytest.fixture
async def card_service(postgres_url: str) -> AsyncIterator[str]:
    """The card service's tables on the shared server: every request, and each key's charge."""
    table = f"pgchaos_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
        await db.execute(
            f"CREATE TABLE {table}_received (key text NOT NULL, run text NOT NULL, "
            "execution text NOT NULL)"
        )
        await db.execute(
            f"CREATE TABLE {table}_applied (key text PRIMARY KEY, run text NOT NULL, "
            "execution text NOT NULL)"
        )
        try:
            yield table
        finally:
            for name in (f"{table}_received", f"{table}_applied"):
                await db.execute(f"DROP TABLE IF EXISTS {name}")


@dataclass
class ChaosFleet(Fleet):
    """Worker processes running ``effect_worker.py``; busy means a tool execution in flight."""

    def busy(self) -> dict[str, set[str]]:
        running: dict[str, set[str]] = {}
        for event in self.events():
            if event[0] in ("tstart", "tend"):
                started = running.setdefault(event[-1], set())
                entry = f"{event[1]}/{event[2]}/{event[3]}"
                (started.add if event[0] == "tstart" else started.discard)(entry)
        return running


async def _patiently(call: Callable[[], Any], within: float = 60.0) -> Any:
    """``await call()``, tried again while the server is out (at most ``within`` seconds)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await call()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def submit_all(client: PostgresBroker, runs: list[str]) -> None:
    for start in range(0, len(runs), 50):
        chunk = runs[start : start + 50]
        tasks = [AgentTask(task_id=r, input=r) for r in chunk]
        await asyncio.gather(*(_patiently(functools.partial(client.submit, t)) for t in tasks))


async def until_all_ended(
    client: PostgresBroker, runs: list[str], deadline: float
) -> dict[str, TaskStatus]:
    """Every run's final status; fails when some are still not ended at ``deadline``."""
    ended: dict[str, TaskStatus] = {}
    while len(ended) < len(runs):
        todo = [r for r in runs if r not in ended][:200]
        with contextlib.suppress(Exception):  # the server is out: look again later
            statuses = await asyncio.gather(*(client.status(r) for r in todo))
            for run, status in zip(todo, statuses, strict=True):
                if status.state in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED):
                    ended[run] = status
        if len(ended) < len(runs):
            assert time.monotonic() < deadline, (
                f"stuck: {len(runs) - len(ended)} runs not ended by the deadline, e.g. "
                f"{[r for r in runs if r not in ended][:5]}"
            )
            await asyncio.sleep(0.5)
    return ended


async def until_done(fleet: Fleet, least: int, deadline: float) -> None:
    while (done := fleet.done()) < least:
        assert time.monotonic() < deadline, f"stuck: {done} results by the deadline, not {least}"
        await asyncio.sleep(0.2)


async def final_states(url: str, runs: list[str]) -> dict[str, CheckpointState | None]:
    async with PostgresCheckpoint(url, prefix=PREFIX) as store:
        states: dict[str, CheckpointState | None] = {}
        for start in range(0, len(runs), 50):
            chunk = runs[start : start + 50]
            loaded = await asyncio.gather(*(store.load(r) for r in chunk))
            states.update(zip(chunk, loaded, strict=True))
        return states


async def card_rows(url: str, table: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The card service's requests ``(key, run)``, and its applied charges: key -> execution."""
    async with await psycopg.AsyncConnection.connect(url) as db:
        received = await (await db.execute(f"SELECT key, run FROM {table}_received")).fetchall()
        applied = await (await db.execute(f"SELECT key, execution FROM {table}_applied")).fetchall()
    return [(k, r) for k, r in received], dict(applied)


# --- Reading what happened.


@dataclass
class Call:
    """One call of one run: its executions in the order they started, and what was saved."""

    starts: list[tuple[int, str]] = field(default_factory=list)
    """(line, execution) of each start."""
    ends: set[str] = field(default_factory=set)
    saved: list[tuple[int, str]] = field(default_factory=list)
    """(line, execution) of each save that returned holding an execution's result."""


def calls_from(events: list[list[str]]) -> dict[tuple[str, str], Call]:
    calls: dict[tuple[str, str], Call] = defaultdict(Call)
    for line, event in enumerate(events):
        if event[0] == "tstart":
            calls[event[1], event[2]].starts.append((line, event[3]))
        elif event[0] == "tend":
            calls[event[1], event[2]].ends.add(event[3])
        elif event[0] == "saved":
            calls[event[1], event[2]].saved.append((line, event[3]))
    return calls


def result_of(state: CheckpointState, call_id: str) -> str:
    texts = [m.text for m in state.messages if m.role is Role.TOOL and m.tool_call_id == call_id]
    assert len(texts) == 1, f"{state.run_id}: {len(texts)} results for {call_id}"
    return texts[0]


@dataclass
class Tally:
    """What each run's calls did, checked against the log, the ledger and the card service."""

    in_doubt: Counter[str] = field(default_factory=Counter)
    """Calls found started with no saved result, by policy."""
    again: Counter[str] = field(default_factory=Counter)
    """Executions beyond a call's first, by policy."""
    unknown_started: int = 0
    """Executions of ``once`` calls the model was then told are UNKNOWN_OUTCOME."""
    violations: list[str] = field(default_factory=list)

    def check(self, state: CheckpointState, call_id: str, call: Call, applied: str | None) -> None:
        policy, run = POLICY[call_id], state.run_id
        text = result_of(state, call_id)
        executions = [e for _, e in call.starts]
        record = state.effects.get(call_id)
        self.again[policy] += max(len(executions) - 1, 0)
        if record is None:
            self.violations.append(f"{run} {call_id}: missing from the effect ledger")
            return
        if text == UNKNOWN_OUTCOME:
            self.in_doubt[policy] += 1
            self.unknown_started += len(executions)
            if policy != "once" or record.status != "in_doubt":
                self.violations.append(f"{run} {call_id}: unknown outcome, ledger {record}")
        else:
            self._check_recorded(run, call_id, text, call, record.status)
            self.in_doubt[policy] += record.attempts > 1
        if policy == "once" and (len(executions) > 1 or record.attempts != 1):
            self.violations.append(f"{run} once call started {executions}, ledger {record}")
        if policy == "keyed":
            got = text.partition(" applied:")[2]
            if text != UNKNOWN_OUTCOME and got != applied:
                self.violations.append(
                    f"{run}: result {text!r}, the card service applied {applied}"
                )
        for line, execution in call.saved:
            if later := [e for at, e in call.starts if at > line]:
                self.violations.append(
                    f"{run} {call_id}: {later} started after {execution}'s result was saved"
                )

    def _check_recorded(self, run: str, call_id: str, text: str, call: Call, status: str) -> None:
        executions = [e for _, e in call.starts]
        recorded = text.partition(" ")[0].partition("@")[2]
        if recorded not in executions or recorded not in call.ends or status != "completed":
            self.violations.append(f"{run} {call_id}: result {text!r} ({status}), ran {executions}")
        elif executions[-1] != recorded:
            self.violations.append(f"{run} {call_id}: started {executions} after {recorded}")

    def summary(self) -> str:
        doubt, again = self.in_doubt, self.again
        return (
            f"in doubt: once {doubt['once']} (UNKNOWN_OUTCOME; {self.unknown_started} had "
            f"started), keyed {doubt['keyed']} (run again, same key); re-executions: keyed "
            f"{again['keyed']}, once {again['once']}, of a saved result 0"
        )


def check_card_service(
    runs: list[str], received: list[tuple[str, str]], applied: dict[str, str]
) -> None:
    """Each run's charge was applied once, under the one key every attempt sent."""
    keys: dict[str, set[str]] = defaultdict(set)
    for key, run in received:
        keys[run].add(key)
    changed = {run: k for run, k in keys.items() if k != {f"{run}:c-charge"}}
    assert not changed, f"a call's idempotency key changed between attempts: {changed}"
    assert sorted(applied) == sorted(f"{run}:c-charge" for run in runs), "a charge never applied"


# --- The test.


@pytest.mark.timeout(480)
async def test_runs_survive_postgres_crashes_stalls_and_worker_kills(
    chaos_pg: ChaosPostgres,
    card_service: str,
    postgres_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = random.Random(20261207)
    url = f"{chaos_pg.url}?connect_timeout=2"
    queue = f"chaos-{uuid.uuid4().hex[:8]}"
    options = {
        "queue": queue,
        "prefix": PREFIX,
        "lease": LEASE,
        "max_deliver": 1000,  # lost attempts are what this test makes: losing none is the point
        "connect_timeout": 2.0,
    }
    target = Target("postgres", url, options, lambda: asyncio.sleep(0))
    client = PostgresBroker(url, **options)  # type: ignore[arg-type]
    fleet = ChaosFleet(
        target,
        tmp_path / "events.log",
        workers=2,
        script=WORKER,
        settings={
            "concurrency": 16,
            "tool_time": [0.02, 0.06],
            "checkpoint": {"kind": "postgres", "url": url, "prefix": PREFIX, "lease": LEASE},
            "tools": ["notify", "charge"],
            "postgres": postgres_url,
            "table": card_service,
        },
    )
    chaos = Chaos(chaos_pg, rng)
    runs = [f"run-{n}" for n in range(RUNS)]
    share = RUNS // (WORKER_KILLS + 2)
    started = time.monotonic()
    deadline = started + DEADLINE
    outages = None
    try:
        await submit_all(client, runs)
        await fleet.start()
        outages = asyncio.create_task(chaos.run())
        for n in range(1, WORKER_KILLS + 1):
            await until_done(fleet, n * share + rng.randrange(share), deadline)
            await fleet.kill_one(rng, within=120)
            if n in (1, 3):  # on top of the clock's: a crash and a stall however fast the runs go
                await chaos.outage(crash=n == 1)
        statuses = await until_all_ended(client, runs, deadline)
        elapsed = time.monotonic() - started
    finally:
        chaos.stop()
        if outages is not None:
            await outages
        await fleet.stop()
        await client.aclose()
    events = fleet.events()
    states = await final_states(url, runs)
    received, applied = await card_rows(postgres_url, card_service)

    lost = [r for r in runs if statuses[r].state is not TaskState.COMPLETED]
    assert not lost, f"{len(lost)} runs lost: {[(r, statuses[r]) for r in lost[:5]]}"
    tally, calls, wrong = Tally(), calls_from(events), []
    for run in runs:
        state, result = states[run], statuses[run].result
        if state is None or state.progress is None or state.progress.status != "completed":
            wrong.append(f"{run}: final checkpoint {state and state.progress}")
            continue
        texts = [result_of(state, c) for c in POLICY]
        if (
            result is None
            or result.output != state.progress.text
            or result.output != " | ".join(texts)
        ):
            wrong.append(f"{run}: result {result and result.output!r}, checkpoint {texts}")
        for call_id in POLICY:
            tally.check(state, call_id, calls[run, call_id], applied.get(f"{run}:{call_id}"))
    assert not wrong, f"{len(wrong)} wrong results: {wrong[:5]}"
    assert not tally.violations, f"{len(tally.violations)}: {tally.violations[:10]}"
    check_card_service(runs, received, applied)
    claims = sum(1 for e in events if e[0] == "claim")
    assert sum(1 for e in events if e[0] == "start") - 2 == WORKER_KILLS
    assert chaos.crashes + chaos.stalls >= 2, "the server never went out: the run was too short"
    recovery = max(chaos.recoveries, default=0.0)
    report(
        capsys,
        f"[postgres chaos] {RUNS} runs: {RUNS - len(lost)} completed, 0 lost, 0 wrong, 0 stuck "
        f"in {elapsed:.1f}s (deadline {DEADLINE:g}s); {WORKER_KILLS} worker SIGKILLs mid-tool; "
        f"server: {chaos.crashes} SIGKILLs (restart up to {recovery:.1f}s), {chaos.stalls} "
        f"SIGSTOPs, {chaos.down:.1f}s out in all; {claims} deliveries; {tally.summary()}; "
        f"card service: {len(received)} requests, {len(applied)} applied",
    )
