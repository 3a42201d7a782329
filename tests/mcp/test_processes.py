"""A stdio server never outlives its client: not after many connections, not after SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daimon.mcp import MCPClient

from .conftest import MINIMAL_SERVER, PYTHON, pids_in

CYCLES = 200
"""Connect/disconnect cycles per run; 1,000 were run once by hand with the same result."""

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts processes in /proc")


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists at all, zombie included."""
    return Path(f"/proc/{pid}").exists()


def _children() -> set[int]:
    me = os.getpid()
    found: set[int] = set()
    for task in Path(f"/proc/{me}/task").iterdir():
        found |= {int(p) for p in (task / "children").read_text().split()}
    return found


async def test_no_orphans_after_many_connect_disconnect_cycles(tmp_path: Path) -> None:
    before = _children()
    args = ["-I", "-S", str(MINIMAL_SERVER), "--pid-dir", str(tmp_path)]

    async def cycle() -> None:
        async with MCPClient.stdio(PYTHON, args) as client:
            assert (await client.call_tool("echo", {"text": "ok"})).content == "ok"

    for _ in range(CYCLES // 4):
        await asyncio.gather(*(cycle() for _ in range(4)))

    started = pids_in(tmp_path)
    assert len(started) == CYCLES
    assert [pid for pid in started if _alive(pid)] == []  # no orphans, no zombies
    assert _children() - before == set()


def test_servers_die_with_a_sigkilled_client(tmp_path: Path) -> None:
    script = Path(__file__).with_name("killed_client.py")
    client = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None
        assert client.stdout.readline().startswith("connected"), "the client did not connect"
        (guarded,) = pids_in(tmp_path / "guarded")
        (polite,) = pids_in(tmp_path / "polite")
        (stubborn,) = pids_in(tmp_path / "stubborn")
        assert all(_alive(pid) for pid in (guarded, polite, stubborn))

        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)

        deadline = time.monotonic() + 5
        while (_alive(guarded) or _alive(polite)) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The guard has the kernel kill the server; a polite server exits on its stdin's end.
        assert not _alive(guarded), "the guarded server outlived its SIGKILLed client"
        assert not _alive(polite), "the polite server outlived its SIGKILLed client"
        # Without the guard, a server that ignores the end of stdin is orphaned: the reason
        # die_with_parent exists (and is on by default).
        assert _alive(stubborn)
    finally:
        client.kill()
        client.wait()
        if client.stdout is not None:
            client.stdout.close()
        for directory in ("stubborn", "guarded", "polite"):
            for pid in pids_in(tmp_path / directory) if (tmp_path / directory).exists() else ():
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
