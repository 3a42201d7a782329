"""``daimon serve`` replicas as real processes sharing a state store (Redis or PostgreSQL).

A stream left on one replica is finished on another with ``Last-Event-ID``; a replica killed
while it runs a stream ends its readers' streams with an error instead of leaving them hanging;
SIGTERM lets a running stream finish; ``/ready`` says when the store cannot be reached.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from tests.server.replicas._fleet import Frame, free_port, read_frames, replicas

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.service("postgres")),
        pytest.param("redis", marks=pytest.mark.service("redis")),
    ]
)
def store_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


def ticks(frames: list[Frame]) -> list[str]:
    """The text the stream's deltas carried, delta by delta."""
    import json

    return [json.loads(f.data)["text"] for f in frames if f.event == "text_delta"]


def numbers(frames: list[Frame]) -> list[int]:
    return [int(f.id.rpartition(":")[2]) for f in frames if f.id is not None]


def test_a_stream_left_on_one_replica_is_finished_on_the_other(
    tmp_path: Path, store_url: str
) -> None:
    with replicas(tmp_path, store_url, 2) as group:
        body = {"input": "left-on-a"}
        first = read_frames(f"{group[0].url}/prompt/stream", body, stop_after=3)
        assert first[-1].id is not None
        rest = read_frames(f"{group[1].url}/prompt/stream", body, last_event_id=first[-1].id)
        frames = first + rest
        assert numbers(frames) == list(range(1, len(frames) + 1))  # each once, in order
        assert ticks(frames) == [*(f"t{n} " for n in range(20)), "done"]
        assert frames[-1].event == "done"
        assert group.notes() == ["left-on-a"]  # the tool ran once, on a


def test_a_killed_replica_ends_its_streams_with_an_error_not_a_hang(
    tmp_path: Path, postgres_url: str
) -> None:
    with replicas(tmp_path, postgres_url, 2, REPLICA_PACE="0.3") as group:
        body = {"input": "killed"}
        first = read_frames(f"{group[0].url}/prompt/stream", body, stop_after=2)
        group[0].stop(signal.SIGKILL)
        started = time.monotonic()
        assert first[-1].id is not None
        rest = read_frames(f"{group[1].url}/prompt/stream", body, last_event_id=first[-1].id)
        assert rest[-1].event == "error"
        assert "stopped before its run ended" in rest[-1].data
        assert time.monotonic() - started < 20
        assert group.notes() == []  # the run died before its tool


def test_sigterm_lets_a_running_stream_finish(tmp_path: Path, postgres_url: str) -> None:
    with replicas(tmp_path, postgres_url, 1, REPLICA_PACE="0.1") as group:
        frames: list[Frame] = []
        reader = threading.Thread(
            target=lambda: frames.extend(
                read_frames(f"{group[0].url}/prompt/stream", {"input": "drained"})
            )
        )
        reader.start()
        time.sleep(0.8)  # a few deltas in
        # uvicorn drains, shuts the app down, then ends by the signal it was sent.
        assert group[0].stop(signal.SIGTERM) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in group[0].stderr()
        reader.join(10)
        assert frames and frames[-1].event == "done"
        assert ticks(frames)[-1] == "done" and group.notes() == ["drained"]


def test_ready_says_when_the_store_cannot_be_reached(tmp_path: Path) -> None:
    port, dead = free_port(), free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "daimon.cli", "serve", "replica_app:agent", "--no-ui"),
            *("--port", str(port), "--store", f"redis://127.0.0.1:{dead}"),
        ],
        cwd=Path(__file__).parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None and time.monotonic() < deadline
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            break
        assert health.status_code == 200
        ready = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=10)
        assert ready.status_code == 503
        assert "the state store cannot be reached" in ready.json()["error"]["message"]
    finally:
        process.terminate()
        process.wait(15)
