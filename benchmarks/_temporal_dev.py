"""What the Temporal benchmarks share: a dev server on free ports, and latency summaries."""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevServer(NamedTuple):
    address: str
    pid: int


@contextmanager
def dev_server() -> Iterator[DevServer]:
    """Start ``temporal server start-dev`` (the venv's CLI) on free ports, killed on exit."""
    port = free_port()
    command = [str(Path(sys.executable).parent / "temporal"), "server", "start-dev"]
    command += ["--ip", "127.0.0.1", "--headless", "--port", str(port), "--log-level", "error"]
    for flag in ("--ui-port", "--http-port", "--metrics-port"):
        command += [flag, str(free_port())]
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for(port)
        yield DevServer(f"127.0.0.1:{port}", process.pid)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the Temporal dev server did not start")


def summary(seconds: list[float]) -> dict[str, float]:
    """Median and 99th percentile, in milliseconds, and how many samples."""
    ordered = sorted(seconds)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50_ms": statistics.median(ordered) * 1e3, "p99_ms": p99 * 1e3, "n": len(ordered)}
