"""Reading the calling thread's core and pinning a thread there, on the real kernel."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from daimon.tools import _cores

linux_only = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="thread affinity is Linux's"
)


@linux_only
def test_the_reader_gives_a_core_this_process_may_use() -> None:
    reader = _cores.core_reader()
    if len(os.sched_getaffinity(0)) < 2:
        assert reader is None  # nothing to gain on one core
        return
    assert reader is not None
    assert reader() in os.sched_getaffinity(0)


@linux_only
def test_a_pinned_thread_runs_on_that_core_only_until_it_unpins_itself() -> None:
    cores = _cores.own_cores()
    assert cores == frozenset(os.sched_getaffinity(0))
    core = min(cores)
    pinned = threading.Event()
    seen: dict[str, set[int]] = {}
    ids: list[int] = []

    def body() -> None:
        ids.append(threading.get_native_id())
        assert pinned.wait(10)
        seen["pinned"] = os.sched_getaffinity(0)
        _cores.unpin(cores)
        seen["unpinned"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=body)
    thread.start()
    while not ids:
        threading.Event().wait(0.001)
    assert _cores.pin(ids[0], core)
    pinned.set()
    thread.join(10)
    assert seen == {"pinned": {core}, "unpinned": set(cores)}


@linux_only
def test_pinning_a_thread_that_does_not_exist_is_refused() -> None:
    assert not _cores.pin(2**22 + 12345, 0)  # above the kernel's pid_max limit


@linux_only
def test_a_process_allowed_one_core_pins_nothing_and_still_runs_sync_tools() -> None:
    script = """
import asyncio, os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from daimon.tools import _cores
from daimon.tools._threads import ToolThreads
assert _cores.core_reader() is None
pool = ToolThreads()
async def main():
    assert await pool.submit(sum, ([1, 2],), {}) == 3
    assert await pool.submit(sum, ([3, 4],), {}) == 7
    return pool._place
assert asyncio.run(main()) is False
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
