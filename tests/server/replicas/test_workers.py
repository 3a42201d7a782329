"""Streamed runs on workers: ``daimon serve --broker`` replicas and ``daimon worker`` processes.

The replicas submit each ``/prompt/stream`` run to a Redis broker; workers run it and write its
events to the PostgreSQL store the replicas read. A killed replica loses no run (any other
streams it on); a killed worker's run is taken over by another, from its checkpoint, the
stream saying so with an ``attempt`` event; a cancelled stream stops its run on the worker.
``/prompt`` runs on a worker too.
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

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.service("postgres"),
    pytest.mark.service("redis"),
]


@dataclass
class Fleet:
    """Replicas and workers on one broker queue and one store, and the ledger of their tool."""

    folder: Path
    env: dict[str, str]
    store: str
    broker: str
    queue: str
    replicas: list[Replica] = field(default_factory=list[Replica])
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list[subprocess.Popen[bytes]])

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.txt"

    def notes(self) -> list[str]:
        """The lines the tool ``record`` wrote (note and pid), one per run of it."""
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    def replica(self) -> Replica:
        (member,) = self.start_replicas(1)
        return member

    def start_replicas(self, count: int) -> list[Replica]:
        """``count`` more replicas, started side by side; once all are ready."""
        started = []
        for _ in range(count):
            port = free_port()
            args = [
                *("serve", "replica_app:agent", "--port", str(port), "--no-ui"),
                *("--store", self.store, "--broker", self.broker, "--queue", self.queue),
            ]
            name = f"replica{len(self.replicas)}"
            member = Replica(name, port, args, self.env, self.folder).launch()
            self.replicas.append(member)
            started.append(member)
        return [member.wait_ready() for member in started]

    def worker(self) -> subprocess.Popen[bytes]:
        args = [
            *("worker", "worker_app:agent", "--broker", self.broker, "--queue", self.queue),
            *("--store", self.store, "--lease", "2", "--grace", "1"),
        ]
        with open(self.folder / f"worker{len(self.workers)}.stderr", "ab") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "daimon.cli", *args],
                env=self.env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        self.workers.append(process)
        return process

    def stderr(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
            for path in sorted(self.folder.glob("*.stderr"))
        )


@contextlib.contextmanager
def fleet(
    folder: Path, store: str, broker: str, checkpoint_prefix: str, **env: str
) -> Iterator[Fleet]:
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), base.get("PYTHONPATH")]))
    base.update(
        PYTHONUNBUFFERED="1",
        REPLICA_LEDGER=str(folder / "ledger.txt"),
        REPLICA_PACE="0.1",
        WORKER_CHECKPOINT=store,
        WORKER_PREFIX=checkpoint_prefix,
    )
    base.update(env)
    group = Fleet(folder, base, store, broker, f"q{uuid.uuid4().hex[:10]}")
    try:
        yield group
    finally:
        for member in group.replicas:
            if member.process is not None:
                member.stop(signal.SIGTERM, wait=15)
        for process in group.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in group.workers:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


class Reader(threading.Thread):
    """Reads an event stream in the background, frame by frame, until it ends or breaks."""

    def __init__(self, url: str, body: dict[str, object], last_event_id: str | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.body, self.last_event_id = url, body, last_event_id
        self.frames: list[Frame] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        headers = {"last-event-id": self.last_event_id} if self.last_event_id else {}
        try:
            with httpx.stream("POST", self.url, json=self.body, headers=headers, timeout=30) as r:
                assert r.status_code == 200, r.read().decode()
                fields: dict[str, str] = {}
                for line in r.iter_lines():
                    if line.startswith(":"):
                        continue
                    if line == "":
                        if "data" in fields:
                            frame = Frame(fields.get("id"), fields.get("event"), fields["data"])
                            self.frames.append(frame)
                        fields = {}
                        continue
                    name, _, value = line.partition(": ")
                    fields[name] = value
        except BaseException as exc:
            self.error = exc

    def wait_for(self, test: object, timeout: float = 20.0) -> None:
        """Wait until ``test(frames)`` holds."""
        deadline = time.monotonic() + timeout
        while not test(self.frames):  # type: ignore[operator]
            assert time.monotonic() < deadline, f"waited in vain; frames: {self.frames[-5:]}"
            assert self.is_alive() or test(self.frames), f"stream ended: {self.error}"  # type: ignore[operator]
            time.sleep(0.02)


def ticks(frames: list[Frame]) -> list[str]:
    return [json.loads(f.data)["text"] for f in frames if f.event == "text_delta"]


def numbers(frames: list[Frame]) -> list[int]:
    return [int(f.id.rpartition(":")[2]) for f in frames if f.id is not None]


def deltas(count: int) -> object:
    return lambda frames: len(ticks(frames)) >= count


ALL_TICKS = [*(f"t{n} " for n in range(20)), "done"]


@pytest.fixture
def urls(postgres_url: str, redis_url: str, postgres_prefix: str) -> tuple[str, str, str]:
    return postgres_url, redis_url, postgres_prefix


def test_a_replica_killed_mid_stream_loses_nothing_the_client_goes_on_on_another(
    tmp_path: Path, urls: tuple[str, str, str]
) -> None:
    with fleet(tmp_path, *urls) as group:
        a, b = group.start_replicas(2)
        group.worker(), group.worker()
        body = {"input": "kill-a"}
        first = Reader(f"{a.url}/prompt/stream", body)
        first.start()
        first.wait_for(deltas(3))
        a.stop(signal.SIGKILL)
        first.join(10)
        kept = list(first.frames)
        assert kept[-1].id is not None
        rest = Reader(f"{b.url}/prompt/stream", body, last_event_id=kept[-1].id)
        rest.run()
        assert rest.error is None, f"{rest.error}\n{group.stderr()}"
        frames = kept + rest.frames
        assert numbers(frames) == list(range(1, len(frames) + 1)), group.stderr()  # each once
        assert ticks(frames) == ALL_TICKS
        assert frames[-1].event == "done"
        assert [note.split()[0] for note in group.notes()] == ["kill-a"]  # the tool ran once
        answer = httpx.post(f"{b.url}/prompt", json={"input": "whole"}, timeout=30)
        assert answer.status_code == 200, answer.text  # /prompt runs on a worker too
        assert answer.json()["text"] == "".join(ALL_TICKS[10:])  # the last turn's text
        assert [note.split()[0] for note in group.notes()] == ["kill-a", "whole"]


def test_a_worker_killed_mid_run_the_other_takes_it_over_and_the_stream_says_so(
    tmp_path: Path, urls: tuple[str, str, str]
) -> None:
    with fleet(tmp_path, *urls) as group:
        replica = group.replica()
        workers = {w.pid: w for w in (group.worker(), group.worker())}
        reader = Reader(f"{replica.url}/prompt/stream", {"input": "kill-worker"})
        started = time.monotonic()
        reader.start()
        reader.wait_for(deltas(1))
        first_event = time.monotonic() - started
        reader.wait_for(deltas(12))  # the tool ran, and the next turn streams
        (note,) = group.notes()
        running = workers[int(note.split()[1])]
        running.send_signal(signal.SIGKILL)
        killed = len(reader.frames)
        reader.join(30)
        assert reader.error is None, f"{reader.error}\n{group.stderr()}"
        frames = reader.frames
        events = [f.event for f in frames]
        assert "attempt" in events[killed - 1 :], group.stderr()
        attempt = events.index("attempt")
        assert json.loads(frames[attempt].data)["attempt"] >= 2  # 3 when 2 met the run's lease
        assert events.count("attempt") == 1
        assert numbers(frames) == list(range(1, len(frames) + 1))
        # before the attempt: the lost one's deltas; after it, its last turn again, to the end
        after = ticks(frames[attempt:])
        assert after == ALL_TICKS[10:], "\n".join(
            [str(f) for f in frames[attempt - 2 :]] + [group.stderr()]
        )
        assert ticks(frames[:attempt]) == ALL_TICKS[: len(ticks(frames[:attempt]))]
        assert events[-1] == "done"
        assert [n.split()[0] for n in group.notes()] == ["kill-worker"]  # the tool ran once
        print(f"first event {first_event * 1000:.0f} ms after the request")


def test_a_stream_cancelled_through_a_replica_stops_its_run_on_the_worker(
    tmp_path: Path, urls: tuple[str, str, str]
) -> None:
    with fleet(tmp_path, *urls, REPLICA_TICKS="40") as group:
        a, b = group.start_replicas(2)
        group.worker()
        reader = Reader(f"{a.url}/prompt/stream", {"input": "cancel-me"})
        reader.start()
        reader.wait_for(deltas(1))
        stream = (reader.frames[0].id or "").rpartition(":")[0]
        cancelled = httpx.delete(f"{b.url}/prompt/stream/{stream}", timeout=10)
        assert cancelled.status_code == 204, cancelled.text
        reader.join(10)
        assert reader.error is None
        last = reader.frames[-1]
        assert last.event == "error"
        assert json.loads(last.data)["error_type"] == "RunCancelled"
        time.sleep(3.0)  # the tool would have run 2 s in: the worker stopped the run before
        assert group.notes() == [], group.stderr()
        unknown = httpx.delete(f"{b.url}/prompt/stream/nosuchstream", timeout=10)
        assert unknown.status_code == 404


# --- Responses on workers: the worker writes the response's events and keeps it as it changes.


def poll_response(url: str, response_id: str, seconds: float = 30.0) -> dict[str, object]:
    """The response once it is no longer queued or in progress (or as it is after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        body: dict[str, object] = httpx.get(f"{url}/v1/responses/{response_id}", timeout=10).json()
        if body.get("status") not in ("queued", "in_progress") or time.monotonic() > deadline:
            return body
        time.sleep(0.1)


def output_text(body: dict[str, object]) -> str:
    items = body["output"]
    assert isinstance(items, list)
    return "".join(part["text"] for item in items for part in item.get("content", []))


def test_a_background_response_on_a_worker_outlives_a_restart_of_every_replica(
    tmp_path: Path, urls: tuple[str, str, str]
) -> None:
    with fleet(tmp_path, *urls) as group:
        a, b = group.start_replicas(2)
        group.worker()
        body = {"model": "replica", "input": "bg", "background": True}
        started = httpx.post(f"{a.url}/v1/responses", json=body, timeout=10).json()
        assert started["status"] == "queued", started
        deadline = time.monotonic() + 20
        while not group.notes():  # half-way: the tool ran on the worker
            assert time.monotonic() < deadline, group.stderr()
            time.sleep(0.05)
        for replica in (a, b):
            replica.stop(signal.SIGKILL)
        c = group.replica()
        finished = poll_response(c.url, str(started["id"]))
        assert finished["status"] == "completed", f"{finished}\n{group.stderr()}"
        assert output_text(finished) == "".join(ALL_TICKS)
        assert [note.split()[0] for note in group.notes()] == ["bg"]  # the tool ran once


def test_a_response_streamed_from_a_killed_worker_goes_on_on_the_other(
    tmp_path: Path, urls: tuple[str, str, str]
) -> None:
    with fleet(tmp_path, *urls) as group:
        replica = group.replica()
        workers = {w.pid: w for w in (group.worker(), group.worker())}
        body = {"model": "replica", "input": "kill-worker", "stream": True}
        reader = Reader(f"{replica.url}/v1/responses", body)
        reader.start()
        reader.wait_for(lambda frames: len(response_deltas(frames)) >= 12)
        (note,) = group.notes()
        workers[int(note.split()[1])].send_signal(signal.SIGKILL)
        reader.join(30)
        assert reader.error is None, f"{reader.error}\n{group.stderr()}"
        events = [json.loads(frame.data) for frame in reader.frames]
        numbers = [event["sequence_number"] for event in events]
        assert numbers == list(range(len(numbers))), group.stderr()  # numbered on, each once
        assert [e["type"] for e in events].count("response.created") == 1
        assert events[-1]["type"] == "response.completed", events[-3:]
        assert output_text(events[-1]["response"]).endswith("".join(ALL_TICKS[10:]))
        assert [n.split()[0] for n in group.notes()] == ["kill-worker"]  # the tool ran once


def response_deltas(frames: list[Frame]) -> list[str]:
    return [json.loads(f.data)["delta"] for f in frames if f.event == "response.output_text.delta"]
