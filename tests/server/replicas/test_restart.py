"""Every replica restarted: what the server remembers is still there (PostgreSQL, Redis).

A stored response is read, a run paused for a client's tool is finished, and a background
response whose run died with its replica reads as failed (a run lives in the replica that
started it), never as running forever.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.server.replicas._fleet import Replicas, replicas

pytestmark = pytest.mark.timeout(120)

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look something up on the client.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.service("postgres")),
        pytest.param("redis", marks=pytest.mark.service("redis")),
    ]
)
def store_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


def create(url: str, **body: Any) -> dict[str, Any]:
    reply = httpx.post(f"{url}/v1/responses", json={"model": "replica", **body}, timeout=30)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def restart(group: Replicas) -> None:
    for member in group.members:
        member.stop(signal.SIGKILL)
    for member in group.members:  # side by side, as in replicas()
        member.launch()
    for member in group.members:
        member.wait_ready()


def test_what_the_server_remembers_survives_a_restart_of_every_replica(
    tmp_path: Path, store_url: str
) -> None:
    with replicas(tmp_path, store_url, 2, REPLICA_TICKS="4", REPLICA_PACE="0.01") as group:
        a, b = group[0].url, group[1].url
        stored = create(a, input="kept", store=True)
        assert stored["status"] == "completed"
        paused = create(a, input="ask", tools=[LOOKUP])
        call = next(item for item in paused["output"] if item["type"] == "function_call")

        restart(group)

        again = httpx.get(f"{b}/v1/responses/{stored['id']}", timeout=10).json()
        assert again == stored
        follow = create(b, input="more", previous_response_id=stored["id"], store=True)
        assert follow["status"] == "completed"
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "42"}
        finished = create(
            a, input=[output], previous_response_id=paused["id"], tools=[LOOKUP], store=True
        )
        assert finished["status"] == "completed"
        assert finished["output"][-1]["content"][0]["text"].endswith("done")


def test_a_background_run_lost_in_a_restart_reads_as_failed(
    tmp_path: Path, postgres_url: str
) -> None:
    with replicas(tmp_path, postgres_url, 2, REPLICA_PACE="5") as group:
        started = create(group[0].url, input="long", background=True, store=True)
        assert started["status"] in ("queued", "in_progress")
        group[0].stop(signal.SIGKILL)
        url = f"{group[1].url}/v1/responses/{started['id']}"
        deadline = time.monotonic() + 20  # the dead replica's "alive" record expires first
        while (body := httpx.get(url, timeout=10).json())["status"] in ("queued", "in_progress"):
            assert time.monotonic() < deadline, "still in progress long after its replica died"
            time.sleep(0.5)
        assert body["status"] == "failed"
        assert "stopped before it ended" in body["error"]["message"]
        assert group.notes() == []
