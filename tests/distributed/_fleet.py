"""The fault tests' harness: a broker queue to test (:class:`Target`), worker processes killed
and replaced at will (:class:`Fleet`), and reading what they logged.

Shared by test_faults.py and test_effect_kills.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from daimon.core import AgentTask, TaskState, TaskStatus
from daimon.distributed import Broker, broker_from_url

PROCS = Path(__file__).with_name("_procs.py")


@dataclass
class Target:
    """A broker to test: how worker processes and the test itself reach one fresh queue."""

    name: str
    url: str
    options: dict[str, Any]
    cleanup: Callable[[], Awaitable[None]]

    def open(self, **extra: Any) -> Broker:
        return broker_from_url(self.url, **{**self.options, **extra})


async def _drop_redis(url: str, pattern: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=pattern)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def _drop_nats(url: str, stream: str, bucket: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for name in (stream, f"{stream}_DEAD"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_key_value(bucket)
    finally:
        await nc.close()


def redis_target(url: str) -> Target:
    queue = f"fault-{uuid.uuid4().hex[:10]}"
    return Target(
        "redis",
        url,
        {"queue": queue},
        lambda: _drop_redis(url, f"daimon:{{{queue}}}:*"),
    )


def nats_target(url: str) -> Target:
    tag = uuid.uuid4().hex[:10]
    stream, bucket = f"FAULT_{tag}", f"fault_{tag}"
    return Target(
        "nats", url, {"stream": stream, "bucket": bucket}, lambda: _drop_nats(url, stream, bucket)
    )


async def _drop_rabbitmq(url: str, redis_url: str, queue: str) -> None:
    import aio_pika

    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.delay", f"{queue}.dead"):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")
    await _drop_redis(redis_url, f"daimon:{{{queue}}}:*")


def rabbitmq_target(url: str, redis_url: str) -> Target:
    queue = f"fault.{uuid.uuid4().hex[:10]}"
    return Target(
        "rabbitmq",
        url,
        {"queue": queue, "store": redis_url},
        lambda: _drop_rabbitmq(url, redis_url, queue),
    )


# --- Worker processes.


@dataclass
class Fleet:
    """Worker processes on one queue, killed and replaced at will."""

    target: Target
    log: Path
    workers: int
    settings: dict[str, Any]
    procs: list[asyncio.subprocess.Process] = field(default_factory=list)
    stderr: Any = None
    script: Path = PROCS
    """The worker program, run as ``python SCRIPT CONFIG_JSON``."""

    def __post_init__(self) -> None:
        # Workers' stderr, for debugging (SIGUSR1 makes a worker print where its tasks are).
        self.stderr = open(self.log.with_suffix(".stderr"), "ab")  # noqa: SIM115

    def config(self) -> str:
        return json.dumps(
            {
                "url": self.target.url,
                "options": {**self.target.options, **self.settings.get("options", {})},
                "log": str(self.log),
                **{k: v for k, v in self.settings.items() if k != "options"},
            }
        )

    async def spawn(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(self.script),
            self.config(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
        )
        self.procs.append(proc)
        return proc

    async def start(self) -> None:
        for _ in range(self.workers):
            await self.spawn()

    def alive(self) -> list[asyncio.subprocess.Process]:
        return [p for p in self.procs if p.returncode is None]

    def busy(self) -> dict[str, set[str]]:
        """Tasks in flight per worker pid (claimed, not yet settled), from the log."""
        running: dict[str, set[str]] = {}
        for event in self.events():
            kind, task_id, pid = event[0], event[1], event[-1]
            if kind == "claim":
                running.setdefault(pid, set()).add(task_id)
            elif kind in ("done", "refused", "fail", "release"):
                running.get(pid, set()).discard(task_id)
        return running

    def done(self) -> int:
        """How many results the broker accepted, from the log."""
        return sum(1 for event in self.events() if event[0] == "done")

    async def until_done(self, least: int, within: float) -> None:
        """Return once the broker accepted ``least`` results; fail after ``within`` seconds."""
        deadline = time.monotonic() + within
        while (done := self.done()) < least:
            assert time.monotonic() < deadline, f"{done} results in {within:.0f} s, not {least}"
            await asyncio.sleep(0.05)

    async def kill_one(
        self,
        rng: random.Random,
        within: float = 60.0,
        busy: Callable[[], dict[str, set[str]]] | None = None,
    ) -> set[str]:
        """SIGKILL a random worker that has tasks in flight, and start another; those tasks.

        The victim is stopped (SIGSTOP) before its log is read again, so that what it had in
        flight is what it had when it died: one that settled all its tasks in between is let
        go on (SIGCONT) and another is picked. Never an idle worker: on a loaded machine a
        fresh worker takes seconds to start, so a kill waits for one that runs tasks (at most
        ``within`` seconds). ``busy`` says what each worker (by pid) has in flight, from the log
        (default :meth:`busy`: its tasks); a caller may look for something narrower, such as a
        tool call started and not finished.
        """
        in_flight = busy or self.busy
        deadline = time.monotonic() + within
        while True:
            running = in_flight()
            victims = [p for p in self.alive() if running.get(str(p.pid))]
            if victims:
                victim = rng.choice(victims)
                _stop(victim)
                lost = in_flight().get(str(victim.pid), set())
                if lost:
                    break
                victim.send_signal(signal.SIGCONT)
            assert time.monotonic() < deadline, f"no worker ran a task for {within:.0f} s"
            await asyncio.sleep(0.05)
        victim.kill()
        await victim.wait()
        await self.spawn()
        return lost

    async def replace_dead(self) -> int:
        """Start a worker for each one that died by itself; how many."""
        dead = [p for p in self.procs if p.returncode is not None]
        for proc in dead:
            self.procs.remove(proc)
            await self.spawn()
        return len(dead)

    async def stop(self, within: float = 30.0) -> None:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), within)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        self.stderr.close()

    def events(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [line.split() for line in self.log.read_text().splitlines() if line]


def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGSTOP ``proc`` and return once it is stopped (or dead): all it logged is in the file.

    A few milliseconds at most, so the test's event loop may wait for it.
    """
    proc.send_signal(signal.SIGSTOP)
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rpartition(")")[2].split()[0] not in ("T", "t", "Z", "X"):
        assert time.monotonic() < deadline, f"worker {proc.pid} did not stop"
        time.sleep(0.001)


def count(events: list[list[str]], kind: str) -> Counter[str]:
    return Counter(e[1] for e in events if e[0] == kind)


async def submit_all(broker: Broker, tasks: list[AgentTask]) -> None:
    for start in range(0, len(tasks), 50):
        await asyncio.gather(*(broker.submit(t) for t in tasks[start : start + 50]))


async def wait_all_ended(broker: Broker, ids: list[str], within: float) -> dict[str, TaskStatus]:
    ended: dict[str, TaskStatus] = {}
    deadline = time.monotonic() + within
    while len(ended) < len(ids):
        todo = [i for i in ids if i not in ended]
        for start in range(0, len(todo), 100):
            chunk = todo[start : start + 100]
            for task_id, status in zip(
                chunk, await asyncio.gather(*(broker.status(i) for i in chunk)), strict=True
            ):
                if status.state in (TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED):
                    ended[task_id] = status
        if len(ended) < len(ids):
            if time.monotonic() >= deadline:
                late = [i for i in ids if i not in ended][:10]
                states = [await broker.status(i) for i in late]
                raise AssertionError(f"{len(ids) - len(ended)} task(s) never ended: {states}")
            await asyncio.sleep(0.5)
    return ended


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n{line}")
