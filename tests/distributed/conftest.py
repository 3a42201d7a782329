"""Services for the broker tests: URLs, and fresh queue names that are cleaned up."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

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
