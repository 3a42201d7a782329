"""Shared test configuration.

``@pytest.mark.service("redis")`` marks a test that needs a running service. Before the test runs,
the hook below opens a TCP connection to the service's port: when nothing answers, the test is
skipped on a laptop, but FAILS when the ``CI`` environment variable is set, so a CI run whose
service is down can never pass by skipping. ``DAIMON_TEST_<NAME>_HOST`` / ``_PORT`` override where
a service is looked for.
"""

from __future__ import annotations

import os
import socket

import pytest

SERVICES: dict[str, tuple[str, int]] = {
    "redis": ("127.0.0.1", 6379),
    "nats": ("127.0.0.1", 4222),
    "postgres": ("127.0.0.1", 5432),
    "rabbitmq": ("127.0.0.1", 5672),
    "mysql": ("127.0.0.1", 3306),
    "mqtt": ("127.0.0.1", 1883),
}
"""Where each known service listens: name -> (host, port)."""


def service_address(name: str) -> tuple[str, int]:
    """The host and port of a known service, after environment overrides."""
    host, port = SERVICES[name]
    prefix = f"DAIMON_TEST_{name.upper()}_"
    return os.environ.get(prefix + "HOST", host), int(os.environ.get(prefix + "PORT", port))


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers("service"):
        if len(marker.args) != 1 or marker.args[0] not in SERVICES:
            pytest.fail(
                f"@pytest.mark.service needs one of {sorted(SERVICES)}, got {marker.args!r}",
                pytrace=False,
            )
        name = marker.args[0]
        host, port = service_address(name)
        if not _reachable(host, port):
            message = f"service {name!r} is not reachable at {host}:{port}"
            if os.environ.get("CI"):
                pytest.fail(f"{message} (CI is set: a missing service is a failure)", pytrace=False)
            pytest.skip(message)


@pytest.fixture
def service_url() -> dict[str, str]:
    """URLs of the services tests may use, by name (mark the test with ``service`` too)."""
    redis_host, redis_port = service_address("redis")
    nats_host, nats_port = service_address("nats")
    return {
        "redis": f"redis://{redis_host}:{redis_port}/0",
        "nats": f"nats://{nats_host}:{nats_port}",
    }
