"""The worker threads sync tools run in: kept warm, reached with one queue put and one wake-up.

``asyncio.to_thread`` does the same job through ``concurrent.futures``: a ``Future``, a work item,
and a second future chained onto an asyncio one, whose bookkeeping the worker does while holding
the GIL the event loop is waiting for. Measured with ``benchmarks/sync_tools.py`` on a loaded
2-core machine (docs/benchmarks.md, "Sync tools"): 47-74 µs a hop through ``to_thread``, 46-69 µs
through a warm dedicated ``ThreadPoolExecutor``, 26-35 µs here; a ReAct run with a sync tool
1.9-2.4x the same run with an async tool, against 2.7-3.0x through ``to_thread``.

On an idle machine most of a hop is waking another core (``_cores``), so on Linux a warm worker is
woken on the event loop's core: the loop is about to wait for it, so that core is free. The pin is
for the wake-up only: the worker's first act is to take back the cores it may run on, so the call
itself runs wherever the kernel puts it (a tool that releases the GIL can use another core, and
calls made together still run in parallel). Idle, this took a hop from about 100 µs to 40.

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
from typing import Any, TypeAlias

from daimon.tools import _cores

__all__ = ("ToolThreads", "run_in_thread")

_Job: TypeAlias = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
    dict[str, Any],
]


class _Worker:
    """One worker thread: its doorbell, the call handed to it, and the cores it takes back.

    The doorbell is a pipe: ``os.write`` lets go of the GIL while it wakes the worker, so a worker
    woken on the caller's core finds the GIL free instead of preempting a thread that holds it
    (through a ``SimpleQueue`` a hand-over took about three context switches instead of one).
    """

    __slots__ = ("_bell", "_ring", "cores", "job", "pinned", "thread", "thread_id")

    def __init__(self, pool: ToolThreads, first: _Job) -> None:
        self._bell, self._ring = os.pipe()
        self.job: _Job | None = None
        self.thread_id = 0
        self.cores: frozenset[int] | None = None
        self.pinned = False
        self.thread = threading.Thread(
            target=pool._work,
            args=(self, first),
            name=f"daimon-tool-{len(pool._workers)}",
            daemon=True,
        )

    def started(self) -> None:
        """Called on the worker's own thread before its first call."""
        self.thread_id = threading.get_native_id()
        self.cores = _cores.own_cores()

    def hand(self, job: _Job | None) -> None:
        """Give the waiting worker its next call (None: stop)."""
        self.job = job
        os.write(self._ring, b"\0")

    def wait(self) -> _Job | None:
        """Called on the worker's own thread: wait for the next call, then run on any core."""
        os.read(self._bell, 1)
        job, self.job = self.job, None
        if self.pinned and self.cores is not None:
            _cores.unpin(self.cores)
        self.pinned = False
        return job

    def close(self) -> None:
        """Close the doorbell (its thread has ended, or belongs to the parent of a fork)."""
        os.close(self._bell)
        os.close(self._ring)


class ToolThreads:
    """A pool of daemon threads that grows on demand up to ``max_workers`` and stays warm.

    An idle worker waits on its own doorbell, so handing it a call wakes exactly that thread; when
    every worker is busy and the pool is full, calls wait in a backlog, in order. At interpreter
    exit, calls still running are waited for (as ``concurrent.futures`` does); calls still in the
    backlog are dropped, since no event loop is left to take their results.

    Args:
        max_workers: Threads at most; the same default as ``ThreadPoolExecutor``'s.
        wake_on_loop_core: Wake an idle worker on the core of the thread that hands it a call
            (Linux; see the module's docstring). ``False`` lets the kernel choose.
    """

    __slots__ = (
        "_backlog",
        "_closing",
        "_current_core",
        "_idle",
        "_lock",
        "_max",
        "_place",
        "_workers",
    )

    def __init__(self, max_workers: int | None = None, *, wake_on_loop_core: bool = True) -> None:
        self._max = max_workers if max_workers is not None else min(32, (os.cpu_count() or 1) + 4)
        self._place = wake_on_loop_core
        self._workers: list[_Worker] = []
        self._reset()

    def _reset(self) -> None:
        for worker in self._workers:  # after a fork: the parent's threads are not in the child
            worker.close()
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # last in, first out: the warmest thread goes next
        self._backlog: deque[_Job] = deque()
        self._workers = []
        self._closing = False
        self._current_core: Callable[[], int] | None = None  # looked up at the first wake-up

    def submit(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> asyncio.Future[Any]:
        """Start ``function(*args, **kwargs)`` in a worker; a future of the running loop for it."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        job: _Job = (loop, future, contextvars.copy_context(), function, args, kwargs)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                if len(self._workers) < self._max:
                    self._start(job)
                else:
                    self._backlog.append(job)
        if worker is not None:
            self._wake(worker, job)
        return future

    def _wake(self, worker: _Worker, job: _Job) -> None:
        if self._place:
            if self._current_core is None:
                self._current_core = _cores.core_reader()
                self._place = self._current_core is not None
            if self._current_core is not None:
                worker.pinned = _cores.pin(worker.thread_id, self._current_core())
        worker.hand(job)

    def _start(self, job: _Job) -> None:
        worker = _Worker(self, job)
        self._workers.append(worker)
        worker.thread.start()

    def _work(self, worker: _Worker, job: _Job | None) -> None:
        worker.started()
        try:
            while job is not None:
                outcome = _call(job)
                with self._lock:
                    closing = self._closing
                    following = self._backlog.popleft() if self._backlog and not closing else None
                    if following is None and not closing:
                        self._idle.append(worker)  # before the result: a caller may hand it more
                _post(job, *outcome)  # the last step before waiting: see _Worker
                job = None  # hold no tool's arguments or result while idle
                del outcome
                if closing:
                    return
                job = following if following is not None else worker.wait()
        finally:
            worker.close()

    def close(self) -> None:
        """Stop the idle workers and wait for the busy ones to finish the call they are running."""
        with self._lock:
            self._closing = True
            self._backlog.clear()
            idle, self._idle = self._idle, []
            workers = list(self._workers)
        for worker in idle:
            worker.hand(None)
        for worker in workers:
            if worker.thread is not threading.current_thread():
                worker.thread.join()


def _call(job: _Job) -> tuple[Any, BaseException | None]:
    _, _, context, function, args, kwargs = job
    try:
        return context.run(function, *args, **kwargs), None
    except StopIteration as exc:  # an asyncio future refuses it; to_thread hangs forever on it
        error = RuntimeError(f"the tool raised StopIteration: {exc}")
        error.__cause__ = exc
        return None, error
    except BaseException as exc:  # the caller's task re-raises it, whatever it is
        return None, exc


def _post(job: _Job, result: Any, error: BaseException | None) -> None:
    loop, future = job[0], job[1]
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
