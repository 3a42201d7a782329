"""A served flow on ``daimon worker`` processes: a worker killed mid-flow runs nothing twice.

A flow's nodes prompt agents with fresh run ids and no effect ledger, so another worker taking
the run over would run its side effects again: it ends the stream with ``RunLost`` instead,
and the client sends the prompt again.
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
from pathlib import Path

import httpx
import pytest
from tests.server.replicas._fleet import HERE, Frame, Replica, free_port, stream_frames

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.service("postgres"),
    pytest.mark.service("redis"),
]


@contextlib.contextmanager
def flow_fleet(folder: Path, store: str, broker: str) -> Iterator[tuple[Replica, list[int]]]:
    """One replica and two workers of ``flow_app:flow``; the workers' pids. Stopped after."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env.update(PYTHONUNBUFFERED="1", REPLICA_LEDGER=str(folder / "ledger.txt"))
    queue = f"q{uuid.uuid4().hex[:10]}"
    shared = ("--store", store, "--broker", broker, "--queue", queue)
    workers: list[subprocess.Popen[bytes]] = []
    replica: Replica | None = None
    try:
        for n in range(2):
            with open(folder / f"worker{n}.stderr", "ab") as stderr:
                args = ["worker", "flow_app:flow", *shared, "--lease", "2", "--grace", "1"]
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "daimon.cli", *args],
                        env=env,
                        cwd=folder,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                    )
                )
        args = ["serve", "flow_app:flow", "--port", str(free_port()), "--no-ui", *shared]
        replica = Replica("replica", int(args[3]), args, env, folder).start()
        yield replica, [w.pid for w in workers]
    finally:
        if replica is not None and replica.process is not None:
            replica.stop(signal.SIGTERM, wait=15)
        for process in workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in workers:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def notes(folder: Path) -> list[str]:
    ledger = folder / "ledger.txt"
    return ledger.read_text().splitlines() if ledger.exists() else []


def test_a_worker_killed_mid_flow_ends_the_stream_with_run_lost_and_runs_nothing_twice(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    with flow_fleet(tmp_path, postgres_url, redis_url) as (replica, pids):
        frames: list[Frame] = []

        def read() -> None:
            for frame in stream_frames(f"{replica.url}/prompt/stream", {"input": "slow"}):
                frames.append(frame)

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 20
        while len(frames) < 3:  # the first node ran and ended; the second started (and waits)
            assert time.monotonic() < deadline, f"the flow's second node never started: {frames}"
            time.sleep(0.05)
        ((prompt, pid),) = (note.split() for note in notes(tmp_path))
        assert prompt == "slow" and int(pid) in pids
        os.kill(int(pid), signal.SIGKILL)
        reader.join(30)
        assert not reader.is_alive(), "the stream did not end"
        events = [(f.event, json.loads(f.data)) for f in frames]
        assert [e for e, _ in events[:3]] == ["node_started", "node_finished", "node_started"]
        kind, data = events[-1]
        assert (kind, data["error_type"]) == ("error", "RunLost"), events
        assert "is not run again, as its tools could run twice" in data["message"]
        assert len(notes(tmp_path)) == 1  # the other worker took the task and ran nothing
        other = httpx.post(f"{replica.url}/prompt", json={"input": "y"}, timeout=30)
        assert other.status_code == 200, other.text
        assert other.json()["text"] == "after recorded y"  # the fleet goes on
