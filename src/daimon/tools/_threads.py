"""The worker threads sync tools run in: kept warm, reached with one queue put and one wake-up.

``asyncio.to_thread`` does the same job through ``concurrent.futures``: a ``Future``, a work item,
and a second future chained onto an asyncio one, whose bookkeeping the worker does while holding
the GIL the event loop is waiting for. Measured with ``benchmarks/sync_tools.py`` on a loaded
2-core machine (docs/benchmarks.md, "Sync tools"): 47-74 µs a hop through ``to_thread``, 46-69 µs
through a warm dedicated ``ThreadPoolExecutor``, 26-35 µs here; a ReAct run with a sync tool
1.9-2.4x the same run with an async tool, against 2.7-3.0x through ``to_thread``.

A tool call still always runs off the event loop: a slow sync tool never blocks it. Like
``to_thread``, the call runs in a copy of the caller's context (budgets, trace context), and a
call the caller stops waiting for (a timeout, a cancellation) runs on to its end in its thread.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import os
import threading
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeAlias

__all__ = ("ToolThreads", "run_in_thread")

_Job: TypeAlias = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
    dict[str, Any],
]
_Inbox: TypeAlias = "SimpleQueue[_Job | None]"


class ToolThreads:
    """A pool of daemon threads that grows on demand up to ``max_workers`` and stays warm.

    An idle worker waits on its own queue, so handing it a call wakes exactly that thread; when
    every worker is busy and the pool is full, calls wait in a backlog, in order. At interpreter
    exit, calls still running are waited for (as ``concurrent.futures`` does); calls still in the
    backlog are dropped, since no event loop is left to take their results.

    Args:
        max_workers: Threads at most; the same default as ``ThreadPoolExecutor``'s.
    """

    __slots__ = ("_backlog", "_closing", "_idle", "_lock", "_max", "_threads")

    def __init__(self, max_workers: int | None = None) -> None:
        self._max = max_workers if max_workers is not None else min(32, (os.cpu_count() or 1) + 4)
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Inbox] = []  # last in, first out: the warmest thread goes next
        self._backlog: deque[_Job] = deque()
        self._threads: list[threading.Thread] = []
        self._closing = False

    def submit(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> asyncio.Future[Any]:
        """Start ``function(*args, **kwargs)`` in a worker; a future of the running loop for it."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        job: _Job = (loop, future, contextvars.copy_context(), function, args, kwargs)
        with self._lock:
            if self._idle:
                self._idle.pop().put(job)
            elif len(self._threads) < self._max:
                self._start(job)
            else:
                self._backlog.append(job)
        return future

    def _start(self, job: _Job) -> None:
        thread = threading.Thread(
            target=self._work,
            args=(SimpleQueue(), job),
            name=f"daimon-tool-{len(self._threads)}",
            daemon=True,
        )
        self._threads.append(thread)
        thread.start()

    def _work(self, inbox: _Inbox, job: _Job | None) -> None:
        while job is not None:
            _run(job)
            job = None  # hold no tool's arguments or result while idle
            with self._lock:
                if self._closing:
                    return
                if self._backlog:
                    job = self._backlog.popleft()
                    continue
                self._idle.append(inbox)
            job = inbox.get()

    def close(self) -> None:
        """Stop the idle workers and wait for the busy ones to finish the call they are running."""
        with self._lock:
            self._closing = True
            self._backlog.clear()
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for inbox in idle:
            inbox.put(None)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()


def _run(job: _Job) -> None:
    loop, future, context, function, args, kwargs = job
    error: BaseException | None = None
    result: Any = None
    try:
        result = context.run(function, *args, **kwargs)
    except StopIteration as exc:  # an asyncio future refuses it; to_thread hangs forever on it
        error = RuntimeError(f"the tool raised StopIteration: {exc}")
        error.__cause__ = exc
    except BaseException as exc:  # the caller's task re-raises it, whatever it is
        error = exc
    with contextlib.suppress(RuntimeError):  # the loop closed while the call ran: nobody waits
        loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the caller stopped waiting (a timeout or a cancellation)
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_POOL = ToolThreads()
atexit.register(_POOL.close)
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=_POOL._reset)


def run_in_thread(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> asyncio.Future[Any]:
    """Run a sync function in one of the shared tool threads; await the future for its result."""
    return _POOL.submit(function, args, kwargs)
