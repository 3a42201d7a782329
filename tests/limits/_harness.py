"""The fleet tests' harness: the fake provider, ``daimon worker`` and ``daimon serve`` processes,
driving them, and the figures read from what the provider recorded.

Each part is a real process started as a user would (``python -m daimon.cli ...``), on free ports
and a queue of its own; :func:`fleet` stops them all (SIGTERM, then SIGKILL after a grace).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from daimon.core import TaskState
from daimon.distributed import broker_from_url, new_task, wait_for_task

HERE = Path(__file__).parent
PROVIDER_SCRIPT = HERE / "fake_provider.py"
PROVIDER_KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "DAIMON_MODEL", "DAIMON_BROKER")


@dataclass
class Provider:
    """The fake provider process and its root URL."""

    process: subprocess.Popen[str]
    url: str

    def records(self) -> list[dict[str, Any]]:
        """Every request it answered, accepted (200) or refused (429), in order."""
        records: list[dict[str, Any]] = httpx.get(f"{self.url}/_records", timeout=10).json()
        return records

    def limit(self, **config: Any) -> None:
        """Start afresh under these limits (``requests``, ``tokens``, ``period``): full
        buckets, no records."""
        httpx.post(f"{self.url}/_limits", json=config, timeout=10).raise_for_status()


@contextlib.contextmanager
def provider(**config: Any) -> Iterator[Provider]:
    """The fake provider on a free port, limited by ``config`` (see fake_provider.py)."""
    process = subprocess.Popen(
        [sys.executable, str(PROVIDER_SCRIPT), json.dumps(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip().isdigit(), f"the provider did not start: {process.communicate()[1]}"
        yield Provider(process, f"http://127.0.0.1:{int(line)}")
    finally:
        process.terminate()
        process.communicate(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Fleet:
    """``daimon worker`` and ``daimon serve`` processes on one queue and one provider."""

    folder: Path
    queue: str
    broker_url: str
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = field(default_factory=dict)

    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        return {**self.workers, **{name: proc for name, (proc, _) in self.servers.items()}}

    def stderr(self, name: str) -> str:
        """The last lines a process wrote on stderr (for failure messages)."""
        text = (self.folder / f"{name}.stderr").read_text(errors="replace")
        return "\n".join(text.splitlines()[-15:])

    def check_alive(self) -> None:
        for name, proc in self.processes().items():
            assert proc.poll() is None, f"{name} exited ({proc.returncode}):\n{self.stderr(name)}"


def _env(provider: Provider, model: str, name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROVIDER_KEYS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.update(FLEET_PROVIDER=provider.url, FLEET_PROCESS=name, FLEET_MODEL=model)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _spawn(fleet: Fleet, name: str, args: list[str], env: dict[str, str]) -> Any:
    with open(fleet.folder / f"{name}.stderr", "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "daimon.cli", *args],
            env=env,
            cwd=fleet.folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


@contextlib.contextmanager
def fleet(
    folder: Path,
    provider: Provider,
    broker_url: str,
    *,
    workers: int,
    replicas: int,
    limits: list[str],
    concurrency: int = 4,
) -> Iterator[Fleet]:
    """Start ``workers`` workers and ``replicas`` servers of ``fleet_app:agent``; stop them after.

    ``limits`` are the extra command-line options of each (``--limits ... --limits-store ...``).
    Every process of one fleet uses one model name (the limiter's key), unique to the fleet.
    """
    model = f"gpt-fleet-{uuid.uuid4().hex[:8]}"
    queue = f"limits-fleet-{uuid.uuid4().hex[:8]}"
    running = Fleet(folder, queue, broker_url)
    try:
        for i in range(workers):
            name = f"worker{i}"
            args = ["worker", "fleet_app:agent", "--broker", broker_url, "--queue", queue]
            args += ["--concurrency", str(concurrency), *limits]
            running.workers[name] = _spawn(running, name, args, _env(provider, model, name))
        for i in range(replicas):
            name, port = f"server{i}", free_port()
            args = ["serve", "fleet_app:agent", "--port", str(port), "--no-ui", *limits]
            proc = _spawn(running, name, args, _env(provider, model, name))
            running.servers[name] = (proc, port)
        yield running
    finally:
        _stop(running)
        _drop_queue(broker_url, queue)


def _drop_queue(url: str, queue: str) -> None:
    """Delete the Redis broker's keys of ``queue``."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"daimon:{{{queue}}}:*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _stop(fleet: Fleet) -> None:
    procs = fleet.processes()
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def until_ready(fleet: Fleet, within: float = 60.0) -> float:
    """Wait until every server answers ``GET /agents``; the seconds it took."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        for name, (_, port) in fleet.servers.items():
            while True:
                fleet.check_alive()
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"http://127.0.0.1:{port}/agents")).status_code == 200:
                        break
                assert time.monotonic() - started < within, f"{name} did not come up"
                await asyncio.sleep(0.2)
    return time.monotonic() - started


@dataclass
class Outcome:
    """What the callers saw: answers per path, and the failures' messages."""

    answered: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


async def drive(fleet: Fleet, *, tasks: int, prompts: int, callers: int = 8) -> Outcome:
    """Submit ``tasks`` to the workers and send ``prompts`` to the servers (spread over them,
    ``callers`` at once per server), all at the same time; wait for every answer."""
    outcome = Outcome()
    started = time.monotonic()
    broker = broker_from_url(fleet.broker_url, queue=fleet.queue)
    try:
        ids = [await broker.submit(new_task(f"task {i}: say ok")) for i in range(tasks)]
        ports = [port for _, port in fleet.servers.values()]
        shares = [range(i, prompts, len(ports)) for i in range(len(ports))]
        async with asyncio.TaskGroup() as group:
            for port, share in zip(ports, shares, strict=True):
                group.create_task(_prompt_all(port, list(share), callers, outcome))
            group.create_task(_collect(broker, ids, outcome))
    finally:
        await broker.aclose()
    outcome.seconds = time.monotonic() - started
    return outcome


async def _collect(broker: Any, ids: list[str], outcome: Outcome) -> None:
    for task_id in ids:
        status = await wait_for_task(broker, task_id, poll=0.2)
        if status.state is TaskState.COMPLETED and status.result is not None:
            outcome.answered["worker"] += 1
        else:
            outcome.failures.append(f"task {task_id}: {status.state} {status.error}")


async def _prompt_all(port: int, numbers: list[int], callers: int, outcome: Outcome) -> None:
    pending = iter(numbers)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=90) as client:

        async def caller() -> None:
            for n in pending:
                response = await client.post("/prompt", json={"input": f"prompt {n}: say ok"})
                if response.status_code == 200 and response.json().get("text") == "ok":
                    outcome.answered["server"] += 1
                else:
                    outcome.failures.append(f"prompt {n}: {response.status_code} {response.text}")

        async with asyncio.TaskGroup() as group:
            for _ in range(callers):
                group.create_task(caller())


@dataclass
class Figures:
    """What the provider saw, against its limit of ``requests`` per ``period``."""

    accepted: int
    refused: int
    span: float
    """Seconds from the first request to the last accepted one: the busy period."""
    throughput: float
    """Accepted requests per second beyond the first full bucket, as a fraction of the limit."""
    refused_by_process: dict[str, int]
    refused_at: list[float]
    """When each refusal came, in seconds from the first request."""

    def __str__(self) -> str:
        return (
            f"accepted {self.accepted}, refused {self.refused} "
            f"{dict(sorted(self.refused_by_process.items()))}, busy {self.span:.1f} s, "
            f"throughput {self.throughput:.0%} of the limit; refused at "
            f"{[round(t, 1) for t in self.refused_at[:20]]} s"
            + (" ..." if len(self.refused_at) > 20 else "")
        )


def figures(records: list[dict[str, Any]], *, requests: int, period: float) -> Figures:
    """The figures of ``records`` (the provider's), its limit ``requests`` per ``period``."""
    accepted = [r["t"] for r in records if r["status"] == 200]
    refused = Counter(r["process"] for r in records if r["status"] == 429)
    start = min((r["t"] for r in records), default=0.0)
    span = max(accepted) - start if accepted else 0.0
    refused_at = [r["t"] - start for r in records if r["status"] == 429]
    beyond = max(0, len(accepted) - requests)  # the bucket starts full: one burst for free
    rate = beyond / span / (requests / period) if span > 0 else 0.0
    return Figures(len(accepted), sum(refused.values()), span, rate, dict(refused), refused_at)


@contextlib.asynccontextmanager
async def timed(label: str, into: dict[str, float]) -> AsyncIterator[None]:
    """Record the seconds the block took under ``label``."""
    started = time.monotonic()
    try:
        yield
    finally:
        into[label] = time.monotonic() - started
