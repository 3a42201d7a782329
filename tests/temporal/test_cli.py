"""``daimon temporal worker module:agent --task-queue Q`` serves runs until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

from daimon.temporal import start_run

from ._server import DevServer

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
