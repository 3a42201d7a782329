"""The Temporal tests' dev server (one per session) and a client of it per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from temporalio.client import Client

from daimon.temporal import connect

from ._server import DevServer


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[DevServer]:
    server = DevServer()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
async def client(temporal_server: DevServer) -> AsyncIterator[Client]:
    yield await connect(temporal_server.address)


@pytest.fixture
def task_queue() -> str:
    return f"test-{uuid.uuid4().hex}"
