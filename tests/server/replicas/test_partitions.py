"""Streamed runs across hosts: a worker cut off the network, shorter and longer than its lease.

Each worker runs in a network namespace of its own, joined by a veth pair to a bridge on which a
Redis of the test's own listens (broker, run logs and checkpoints); a ``daimon serve --broker``
replica on the host takes the streamed runs. While the runs stream, worker 1's link goes down
for a while, then comes back. Every stream must end with its ``done`` event, its event ids
increasing (each once), no frame of a lost attempt after its successor's ``attempt`` frame, and
the tool (``effect="once"``) must have run exactly once per run. A cut shorter than the lease
runs no task twice; a longer one has worker 0 take worker 1's runs over.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from tests.server.replicas._fleet import HERE, Frame, Replica, free_port
from tests.server.replicas._netns import Host, Network, network, redis_server

import daimon

pytestmark = pytest.mark.timeout(90)

TICKS = 40
PACE = 0.1
RUNS = 4
ALL_TICKS = [*(f"t{n} " for n in range(TICKS)), "done"]


@dataclass
class Fleet:
    """A replica on the host, a worker in each namespace, on one Redis over the bridge."""

    folder: Path
    env: dict[str, str]
    redis: str
    lease: float
    queue: str = field(default_factory=lambda: f"q{uuid.uuid4().hex[:10]}")
    replicas: list[Replica] = field(default_factory=list[Replica])
    workers: dict[int, Host] = field(default_factory=dict[int, Host])
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list[subprocess.Popen[bytes]])

    def options(self) -> list[str]:
        return ["--store", f"{self.redis}/0", "--broker", f"{self.redis}/1", "--queue", self.queue]

    def replica(self) -> Replica:
        port = free_port()
        args = ["serve", "partition_app:agent", "--port", str(port), "--no-ui", *self.options()]
        member = Replica(f"replica{len(self.replicas)}", port, args, self.env, self.folder)
        self.replicas.append(member)
        return member.start()

    def worker(self, host: Host) -> subprocess.Popen[bytes]:
        """A ``daimon worker`` inside ``host``'s namespace (two tasks at a time)."""
        args = [
            *("worker", "partition_app:agent", *self.options()),
            *("--lease", str(self.lease), "--grace", "1", "--concurrency", "2"),
        ]
        name = f"worker{len(self.processes)}"
        with open(self.folder / f"{name}.stderr", "ab") as stderr:
            process = subprocess.Popen(
                host.command(sys.executable, "-m", "daimon.cli", *args),
                env=self.env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.processes.append(process)
        self.workers[process.pid] = host  # `ip netns exec` execs: the pid is the worker's
        return process

    def notes(self) -> list[str]:
        """The lines the tool ``record`` wrote (note and pid), one per run of it."""
        ledger = self.folder / "ledger.txt"
        return ledger.read_text().splitlines() if ledger.exists() else []

    def stderr(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
            for path in sorted(self.folder.glob("*.stderr"))
        )

    def stop(self) -> None:
        for member in self.replicas:
            if member.process is not None:
                member.stop(signal.SIGTERM, wait=15)
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@contextlib.contextmanager
def fleet(folder: Path, net: Network, redis: str, lease: float) -> Iterator[Fleet]:
    """One replica and a worker per host of ``net``, leases of ``lease`` seconds; all stopped
    after (the links healed first)."""
    env = dict(os.environ)
    here = [str(HERE), str(Path(daimon.__file__).parents[1])]  # this tree's daimon, from any cwd
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*here, env.get("PYTHONPATH")]))
    env.update(
        PYTHONUNBUFFERED="1",
        PARTITION_LEDGER=str(folder / "ledger.txt"),
        PARTITION_TICKS=str(TICKS),
        PARTITION_PACE=str(PACE),
        PARTITION_CHECKPOINT=f"{redis}/2",
        PARTITION_PREFIX=f"ckpt{uuid.uuid4().hex[:8]}:",
        PARTITION_RUN_LEASE=str(lease),
    )
    group = Fleet(folder, env, redis, lease)
    try:
        group.replica()
        for host in net.hosts:
            group.worker(host)
        yield group
    finally:
        for host in net.hosts:
            net.heal(host)
        group.stop()


class Reader(threading.Thread):
    """Reads a run's event stream in the background, each frame with the time it came; on a
    lost connection, reads on from the last id (``Last-Event-ID``)."""

    def __init__(self, url: str, body: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.frames: list[Frame] = []
        self.times: list[float] = []
        self.started = time.monotonic()
        self.reconnects = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        while True:
            try:
                self._read()
                return
            except httpx.TransportError as exc:
                self.reconnects += 1
                if self.reconnects > 3:
                    self.error = exc
                    return
            except BaseException as exc:
                self.error = exc
                return

    def _read(self) -> None:
        last = self.frames[-1].id if self.frames else None
        headers = {"last-event-id": last} if last else {}
        with httpx.stream("POST", self.url, json=self.body, headers=headers, timeout=30) as r:
            assert r.status_code == 200, r.read().decode()
            fields: dict[str, str] = {}
            for line in r.iter_lines():
                if line.startswith(":"):
                    continue
                if line == "":
                    if "data" in fields:
                        self.frames.append(
                            Frame(fields.get("id"), fields.get("event"), fields["data"])
                        )
                        self.times.append(time.monotonic())
                    fields = {}
                    continue
                name, _, value = line.partition(": ")
                fields[name] = value

    def when(self, event: str) -> float | None:
        """When the first ``event`` frame came (``time.monotonic()``)."""
        for frame, at in zip(self.frames, self.times, strict=True):
            if frame.event == event:
                return at
        return None


def ticks(frames: list[Frame]) -> list[str]:
    return [json.loads(f.data)["text"] for f in frames if f.event == "text_delta"]


def numbers(frames: list[Frame]) -> list[int]:
    return [int(f.id.rpartition(":")[2]) for f in frames if f.id is not None]


class StaleFrames(AssertionError):
    """A lost attempt's frame came after its successor's ``attempt`` frame."""


class StreamFailed(AssertionError):
    """A stream ended with an ``error`` event instead of ``done``."""


class RanTwice(AssertionError):
    """A task ran a second attempt though its worker's cut was shorter than the lease."""


def check_stream(reader: Reader, stderr: str) -> None:
    """The stream ended with ``done``, its ids increasing, the last attempt's deltas in order
    to the end; then (:class:`StaleFrames`) each earlier attempt's deltas in order too, and none
    of a lost attempt after its successor began."""
    frames = reader.frames
    assert reader.error is None and frames, f"{reader.body}: {reader.error}\n{stderr}"
    if frames[-1].event == "error":
        raise StreamFailed(f"{reader.body}: {frames[-3:]}")
    assert frames[-1].event == "done", f"{reader.body}: {frames[-3:]}\n{stderr}"
    ids = numbers(frames)  # every frame has an id, each id once, in order (a gap is allowed)
    assert len(ids) == len(frames) and ids == sorted(set(ids)), f"{reader.body}: {ids}"
    starts = [0, *(i for i, f in enumerate(frames) if f.event == "attempt")]
    tail = ticks(frames[starts[-1] :])
    rest = iter(tail)  # the last attempt streamed every delta from its first to "done", in order
    wanted = ALL_TICKS[ALL_TICKS.index(tail[0]) :]
    assert all(tick in rest for tick in wanted), f"{reader.body}: {tail}\n{stderr}"
    for begin, end in zip(starts, [*starts[1:], len(frames)], strict=True):
        part = ticks(frames[begin:end])
        first = ALL_TICKS.index(part[0]) if part else 0
        if part != ALL_TICKS[first : first + len(part)]:
            raise StaleFrames(f"{reader.body}: {part}")


def partition(
    folder: Path, *, lease: float, cut: float
) -> tuple[list[Reader], list[str], float, str]:
    """Start the runs, cut worker 1 off for ``cut`` seconds, heal; the readers (ended), the
    ledger's notes, when the cut began, and the fleet's stderr."""
    with (
        network(hosts=2) as net,
        redis_server(net.address, folder) as redis,
        fleet(folder, net, redis, lease) as group,
    ):
        url = f"{group.replicas[0].url}/prompt/stream"
        readers = [Reader(url, {"input": f"run{n}"}) for n in range(RUNS)]
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 20
        while any(len(ticks(r.frames)) < 3 for r in readers):  # every run streams
            assert time.monotonic() < deadline, f"runs did not start\n{group.stderr()}"
            assert all(r.is_alive() for r in readers), group.stderr()
            time.sleep(0.02)
        cut_at = time.monotonic()
        net.cut(net.hosts[1])
        time.sleep(cut)
        net.heal(net.hosts[1])
        for reader in readers:
            reader.join(max(5.0, 3 * lease + TICKS * PACE * 2))
        return readers, group.notes(), cut_at, group.stderr()


def report(readers: list[Reader], cut_at: float) -> str:
    lines = []
    for reader in readers:
        attempt = reader.when("attempt")
        done = reader.when("done")
        lines.append(
            f"{reader.body['input']}: "
            + (f"done {done - reader.started:.2f} s after its request" if done else "no done")
            + (f", attempt frame {attempt - cut_at:.2f} s after the cut" if attempt else "")
            + f", {len(reader.frames)} frames, {reader.reconnects} reconnects"
        )
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("lease", "cut", "taken_over"),
    [
        (6.0, 2.0, False),
        (10.0, 6.0, False),
        (2.0, 6.0, True),
    ],
    ids=["cut-2s-lease-6s", "cut-6s-lease-10s", "cut-6s-lease-2s"],
)
def test_a_worker_cut_off_mid_run_loses_no_run_and_runs_no_tool_twice(
    tmp_path: Path, lease: float, cut: float, taken_over: bool
) -> None:
    readers, notes, cut_at, stderr = partition(tmp_path, lease=lease, cut=cut)
    print(report(readers, cut_at))
    stale: list[StaleFrames] = []
    for reader in readers:
        try:
            check_stream(reader, stderr)
        except StaleFrames as exc:
            stale.append(exc)
    ran = sorted(note.split()[0] for note in notes)
    assert ran == [f"run{n}" for n in range(RUNS)], f"{notes}\n{stderr}"  # once per run
    attempts = [r for r in readers if r.when("attempt") is not None]
    if taken_over:  # worker 1 had two of the four runs (two slots a worker): both moved
        assert len(attempts) >= 2, f"{report(readers, cut_at)}\n{stderr}"
    elif attempts:  # the worker got back in time: nothing may run twice
        raise RanTwice(f"{report(readers, cut_at)}\n{stderr}")
    if stale:
        raise StaleFrames("\n".join(map(str, stale)))
