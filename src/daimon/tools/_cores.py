"""Which core the calling thread is on, and pinning another thread there for its wake-up (Linux).

A thread woken on another core that sits idle waits for that core to wake up, and its answer then
wakes the first core again. On this project's 2-core virtual machine (guest halt polling off) that
is most of a sync tool's hop on an idle machine: about 65 µs, against about 25 µs when the tool's
thread is woken on the event loop's own core (``benchmarks/sync_tools.py``; docs/benchmarks.md,
"Sync tools"). Where the kernel, the C library or the permissions do not allow it, nothing is
pinned.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

__all__ = ("core_reader", "own_cores", "pin", "unpin")


def core_reader() -> Callable[[], int] | None:
    """The C library's ``sched_getcpu``, or None where pinning a thread cannot help or work.

    None on a platform without ``sched_setaffinity``, for a process allowed one core only, and
    where the C library has no working ``sched_getcpu``. Loads ``ctypes``: call it once, lazily.
    """
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        return None
    import ctypes  # only in a process that runs a sync tool

    try:
        getcpu = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    getcpu.restype = ctypes.c_int
    getcpu.argtypes = ()
    current: Callable[[], int] = getcpu
    return current if current() >= 0 else None


def own_cores() -> frozenset[int] | None:
    """The cores the calling thread may run on, or None where the platform cannot tell."""
    return frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def pin(thread_id: int, core: int) -> bool:
    """Let the thread with this native id run on ``core`` only; False if the kernel refused."""
    try:
        os.sched_setaffinity(thread_id, (core,))
    except OSError:  # a core outside the thread's cpuset, a thread gone, no permission
        return False
    return True


def unpin(cores: frozenset[int]) -> None:
    """Give the calling thread back ``cores``, or the process's cores if those are not allowed."""
    try:
        os.sched_setaffinity(0, cores)
    except OSError:  # the cpuset shrank since the thread started
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, os.sched_getaffinity(os.getpid()))
