"""A2A 0.3 both ways, against the official a2a-sdk 0.3 itself (not the 1.x compatibility layer).

The 0.3 SDK lives in a virtualenv of its own (``scripts/a2a-legacy-setup``, which ``.ci/run``
calls); these tests run ``tests/a2a/legacy/peer_client.py`` and ``peer_server.py`` with its
python. Without it they skip on a laptop and FAIL when ``CI`` is set, like the MCP conformance
suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from daimon import AgentRunError
from daimon.a2a import RemoteA2AAgent, a2a_app

from .conftest import ROOT, free_port, serving, streaming_agent

LEGACY = ROOT / "tests" / "a2a" / "legacy"
TOKEN = "legacy-secret"


def _python() -> Path:
    base = os.environ.get("DAIMON_A2A_LEGACY_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "daimon" / "a2a-0.3"
    )
    python = Path(base) / "bin" / "python"
    if not python.exists():
        message = f"the A2A 0.3 peer is not installed at {base} (run scripts/a2a-legacy-setup)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}; CI is set: a missing peer is a failure", pytrace=False)
        pytest.skip(message)
    return python


async def _run_client(python: Path, base: str, transport: str) -> dict[str, object]:
    process = await asyncio.create_subprocess_exec(
        str(python),
        str(LEGACY / "peer_client.py"),
        base,
        transport,
        TOKEN,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    seen: dict[str, object] = json.loads(out)
    return seen


@pytest.mark.parametrize("transport", ["JSONRPC", "HTTP+JSON"])
async def test_the_0_3_sdk_client_against_a_daimon_server(transport: str) -> None:
    python = _python()
    agent = streaming_agent()
    async with serving(lambda port: a2a_app(agent, port=port, token=TOKEN)) as base:
        seen = await _run_client(python, base, transport)
    assert seen["card"] == {"url": f"{base}/", "transport": "JSONRPC"}
    whole = "Hello, you said: one two three"
    assert seen["streamed"] == {
        "chunks": ["Hello, ", "you said: one two three", whole],
        "state": "completed",
        "artifacts": [[whole]],
        "history": [["user", ["one two three"]]],
        "stored": [[whole]],
    }
    blocking = seen["blocking"]
    assert isinstance(blocking, dict)
    assert (blocking["state"], blocking["stored"]) == ("completed", [[whole]])
    assert blocking["history"] == [["user", ["one two three"]]]
    # the spec's errors: JSON-RPC codes, HTTP statuses
    expected = (-32001, -32002) if transport == "JSONRPC" else (404, 400)
    assert (seen["not_found"], seen["not_cancelable"]) == expected


@contextlib.asynccontextmanager
async def _legacy_server(python: Path) -> AsyncIterator[str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(python),
        str(LEGACY / "peer_server.py"),
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(600):
                if process.returncode is not None:
                    assert process.stderr is not None
                    error = (await process.stderr.read()).decode()
                    pytest.fail(f"the 0.3 peer did not start: {error}")
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(f"{base}/.well-known/agent-card.json")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the 0.3 peer never answered")
        yield base
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), 10)


async def test_remote_a2a_agent_detects_and_speaks_0_3_to_the_0_3_sdk_server() -> None:
    python = _python()
    async with _legacy_server(python) as base, RemoteA2AAgent(base) as remote:
        assert remote.interface is not None
        assert (remote.interface.protocol_binding, remote.interface.protocol_version) == (
            "JSONRPC",
            "0.3.0",
        )
        deltas = [e.text async for e in remote.prompt_stream("hi") if hasattr(e, "text")]
        assert deltas == ["legacy ", "says: ", "hi"]
        assert (await remote.prompt("again")).text == "legacy says: again"
        with pytest.raises(AgentRunError, match="legacy no can do"):
            await remote.prompt("fail")
