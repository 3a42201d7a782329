"""``daimon temporal worker module:agent --task-queue Q`` serves runs until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from temporalio.client import Client

from daimon.temporal import serving, start_run

from ._agents import arithmetic
from ._server import DevServer, free_port

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"


async def test_the_cli_worker_serves_an_agent_until_sigterm(
    client: Client, temporal_server: DevServer, task_queue: str
) -> None:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [
        sys.executable,
        "-m",
        "daimon.cli",
        "temporal",
        "worker",
        "_agents:arithmetic",
        "_agents:refunds",
        "--task-queue",
        task_queue,
        "--address",
        temporal_server.address,
    ]
    worker = subprocess.Popen(  # noqa: ASYNC220 - one process, read in a thread
        command, cwd=HERE, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert worker.stderr is not None
        ready = ""
        while "daimon temporal worker:" not in ready:
            ready = await asyncio.wait_for(asyncio.to_thread(worker.stderr.readline), 60)
            assert ready, "the worker exited before it was ready"
        assert f"arithmetic, refunds on {task_queue!r}" in ready
        run = await start_run(client, "arithmetic", "add 20 22", task_queue=task_queue)
        assert (await asyncio.wait_for(run.result(), 60)).text == "the sum is 42"
        worker.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(worker.wait, 30)
        assert code == 0, worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if worker.stderr is not None:
            worker.stderr.close()


async def test_temporal_serve_answers_http_prompts_with_workflow_runs(
    client: Client, temporal_server: DevServer, task_queue: str
) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "daimon.cli", "temporal", "serve", "arithmetic"]
    command += ["--task-queue", task_queue, "--address", temporal_server.address]
    command += ["--port", str(port)]
    server = subprocess.Popen(  # noqa: ASYNC220 - one process
        command, cwd=HERE, env=env, stderr=subprocess.DEVNULL
    )
    try:
        async with (
            serving(client, [arithmetic], task_queue=task_queue),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
        ):
            async with asyncio.timeout(60):
                while True:  # until the server listens
                    try:
                        health = await http.get("/health")
                        break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
            assert health.status_code == 200
            answer = await http.post("/prompt", json={"input": "add 30 12"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["text"] == "the sum is 42"
        run_id = answer.json()["run_id"]
        history = await client.get_workflow_handle(run_id).fetch_history()
        assert history.events  # the HTTP run was a workflow
    finally:
        server.send_signal(signal.SIGINT)
        await asyncio.to_thread(server.wait, 30)
