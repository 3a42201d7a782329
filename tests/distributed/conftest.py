"""Services for the broker tests: URLs, the Pub/Sub emulator and moto's SQS server."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def redis_url(service_url: dict[str, str]) -> str:
    return service_url["redis"]


@pytest.fixture
def nats_url(service_url: dict[str, str]) -> str:
    return service_url["nats"]


@pytest.fixture
def rabbitmq_url() -> str:
    host = os.environ.get("DAIMON_TEST_RABBITMQ_HOST", "127.0.0.1")
    port = os.environ.get("DAIMON_TEST_RABBITMQ_PORT", "5672")
    return f"amqp://guest:guest@{host}:{port}/"


# --- The Google Pub/Sub emulator: a private one per test session, on a free port.

PUBSUB_EMULATOR = os.environ.get(
    "DAIMON_PUBSUB_EMULATOR",
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator",
)
"""The emulator's start script (the Debian package google-cloud-cli-pubsub-emulator)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_pubsub_emulator(port: int) -> subprocess.Popen[bytes]:
    """Start the emulator on ``port`` and wait until it answers (about 2 s; it is Java)."""
    if not os.access(PUBSUB_EMULATOR, os.X_OK):
        pytest.fail(
            f"no Pub/Sub emulator at {PUBSUB_EMULATOR}: install google-cloud-cli-pubsub-emulator "
            "or point DAIMON_PUBSUB_EMULATOR at its cloud-pubsub-emulator script"
        )
    proc = subprocess.Popen(
        [PUBSUB_EMULATOR, "--host=127.0.0.1", f"--port={port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its script starts java: stop the whole group
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return proc
        except OSError:
            assert proc.poll() is None, f"the Pub/Sub emulator exited with {proc.returncode}"
            assert time.monotonic() < deadline, "the Pub/Sub emulator did not start"
            time.sleep(0.1)


def stop_pubsub_emulator(proc: subprocess.Popen[bytes]) -> None:
    """Stop the emulator's process group (the script and its java child)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class PubSubEmulators:
    """Starts and stops private emulators, for tests that restart one (a fixture hands it out)."""

    start = staticmethod(start_pubsub_emulator)
    stop = staticmethod(stop_pubsub_emulator)


@pytest.fixture(scope="session")
def pubsub_emulators() -> PubSubEmulators:
    """Starts and stops private Pub/Sub emulators."""
    return PubSubEmulators()


@pytest.fixture(scope="session")
def pubsub_emulator() -> Iterator[str]:
    """A Pub/Sub emulator for the session; its ``host:port``."""
    port = free_port()
    proc = start_pubsub_emulator(port)
    yield f"127.0.0.1:{port}"
    stop_pubsub_emulator(proc)


# --- moto's server: a local SQS service, one per test session (and private ones on request).

SQS_CREDENTIALS = {"aws_access_key_id": "test", "aws_secret_access_key": "test"}
"""moto accepts any credentials; botocore needs some."""


def start_moto_server(port: int) -> subprocess.Popen[bytes]:
    """Start moto's server on ``port`` (its own process group) and wait until it answers."""
    # The venv's own script first: pytest may run from .venv/bin without that folder on PATH.
    beside = Path(sys.executable).with_name("moto_server")
    binary = str(beside) if beside.exists() else shutil.which("moto_server")
    if binary is None:
        pytest.fail("moto_server is not installed: pip install -e '.[dev]' brings moto[server]")
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # so a test can pause its group (SIGSTOP) like an emulator's
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return proc
        except OSError:
            assert proc.poll() is None, f"moto_server exited with {proc.returncode}"
            assert time.monotonic() < deadline, "moto_server did not start"
            time.sleep(0.05)


def stop_moto_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a moto server started by :func:`start_moto_server`."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)  # a paused server cannot exit
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """moto's server for the session; its endpoint URL."""
    port = free_port()
    proc = start_moto_server(port)
    yield f"http://127.0.0.1:{port}"
    stop_moto_server(proc)


# --- Outages: private services that BrokerConformance's outage case stops and starts again.


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    """Return once ``port`` accepts connections; fail if ``proc`` exits or 30 s pass."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            assert proc.poll() is None, f"{what} exited with {proc.returncode}"
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.02)


class PrivateServer:
    """A service of its own (``argv`` on a free ``port``) that a test may stop and start again."""

    def __init__(self, what: str, argv: Callable[[int], list[str]]) -> None:
        self.what = what
        self.port = free_port()
        self._argv = argv
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (on the same port every time) and wait until it listens."""
        if shutil.which(self._argv(self.port)[0]) is None:
            pytest.fail(f"{self.what} is not installed ({self._argv(self.port)[0]})")
        self._proc = subprocess.Popen(
            self._argv(self.port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port(self.port, self._proc, self.what)

    def stop(self) -> None:
        """Stop it (SIGTERM: it writes what it holds to disk), waiting for it to exit."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateServer]:
    """A Redis of this test's own, durable (AOF, fsync always) so it can restart; started."""
    server = PrivateServer(
        "redis-server",
        lambda port: [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        ],
    )  # fmt: skip
    server.start()
    yield server
    server.stop()


@pytest.fixture
def private_nats(tmp_path: Path) -> Iterator[PrivateServer]:
    """A NATS server with JetStream of this test's own (file storage, so it can restart)."""
    server = PrivateServer(
        "nats-server",
        lambda port: [
            "nats-server",
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-sd",
            str(tmp_path),
        ],
    )
    server.start()
    yield server
    server.stop()


class ServiceOutage:
    """An :class:`~daimon.testing.brokers.Outage` from a handle factory and two service steps."""

    def __init__(
        self,
        make: Callable[..., Awaitable[Any]],
        stop: Callable[[], Awaitable[None] | None],
        start: Callable[[], Awaitable[None] | None],
    ) -> None:
        self._make = make
        self._stop = stop
        self._start = start

    async def open(self, **options: Any) -> Any:
        return await self._make(**options)

    async def stop(self) -> None:
        await _maybe_await(self._stop())

    async def start(self) -> None:
        await _maybe_await(self._start())


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if value is not None:
        await value


class ClosedPortOutage:
    """An outage of a shared service that no test may stop: while it lasts, handles get a port
    where nothing listens.

    ``make(url=..., **options)`` opens a handle on ``url`` (closed at teardown).
    """

    def __init__(self, make: Callable[..., Awaitable[Any]], url: str) -> None:
        self._make = make
        self._url = url
        self._closed_url = re.sub(r":\d+(?=/|$)", f":{free_port()}", url, count=1)
        self._down = False

    async def open(self, **options: Any) -> Any:
        return await self._make(url=self._closed_url if self._down else self._url, **options)

    async def stop(self) -> None:
        self._down = True

    async def start(self) -> None:
        self._down = False


class RestartableProcess:
    """A service process on a fixed free port, stopped and started by the given functions."""

    def __init__(
        self,
        start: Callable[[int], subprocess.Popen[bytes]],
        stop: Callable[[subprocess.Popen[bytes]], None],
    ) -> None:
        self.port = free_port()
        self._start, self._stop = start, stop
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._proc = self._start(self.port)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            self._stop(proc)
