"""``uvicorn app:app --workers 2`` on a shared store: either process answers any request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests.server.replicas._fleet import HERE, free_port

pytestmark = [pytest.mark.service("redis"), pytest.mark.timeout(90)]


def test_uvicorn_worker_processes_share_what_the_server_remembers(
    tmp_path: Path, redis_url: str
) -> None:
    port = free_port()
    env = dict(os.environ, DAIMON_STORE=redis_url, REPLICA_TICKS="2", REPLICA_PACE="0.01")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "uvicorn", "uvicorn_app:app", "--workers", "2"]
    with open(tmp_path / "uvicorn.stderr", "wb") as stderr:
        process = subprocess.Popen(
            [*command, "--port", str(port), "--log-level", "warning"],
            cwd=HERE,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "uvicorn.stderr").read_text()
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "uvicorn was not ready in 60 s"
            time.sleep(0.2)
        first, second = _clients_on_two_processes(url)
        try:
            body = {"model": "replica", "input": "kept", "store": True}
            made = first.post("/v1/responses", json=body).json()
            assert made["status"] == "completed"
            read = second.get(f"/v1/responses/{made['id']}")
            assert read.status_code == 200 and read.json() == made
            assert read.headers["x-test-pid"] != first.get("/ready").headers["x-test-pid"]
        finally:
            first.close()
            second.close()
    finally:
        process.terminate()
        process.wait(30)


def _clients_on_two_processes(url: str) -> tuple[httpx.Client, httpx.Client]:
    """Two keep-alive clients whose connections two different uvicorn processes accepted."""
    first = httpx.Client(base_url=url, timeout=30)
    pid = first.get("/ready").headers["x-test-pid"]
    for _ in range(100):
        second = httpx.Client(base_url=url, timeout=30)
        if second.get("/ready").headers["x-test-pid"] != pid:
            return first, second
        second.close()
    first.close()
    raise AssertionError("100 new connections all went to one uvicorn process")
