"""Services for the broker tests: URLs, and fresh queue names that are cleaned up."""

from __future__ import annotations

import os

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
