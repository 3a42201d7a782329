"""Runs answered in one piece: bounded by the request timeout, cancelled when the client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.types import Receive

from daimon.core.cancel import CancelToken
from daimon.core.errors import RunCancelled
from daimon.core.errors import TimeoutError as RunTimeoutError

__all__ = ("ClientDisconnected", "WATCH_AFTER", "run_supervised")

T = TypeVar("T")

WATCH_AFTER = 0.25
"""Seconds a run goes before the client's connection is watched. Watching takes a task per
request, which quick runs would pay for nothing; a client that left earlier is still seen then."""


class ClientDisconnected(Exception):
    """The client went away before its run finished (the run was cancelled)."""


async def run_supervised(
    start: Callable[[CancelToken], Awaitable[T]], receive: Receive, seconds: float
) -> T:
    """Await ``start(token)`` until it finishes, times out, or the client disconnects.

    On a timeout or a disconnect the run's token is cancelled and so is the waiting task, wherever
    it waits (as :func:`asyncio.timeout` does it: the cancellation is taken back once handled),
    so no further model or tool call starts.

    Raises:
        daimon.TimeoutError: The run took longer than ``seconds``.
        ClientDisconnected: The client disconnected first.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    token = CancelToken()
    stopped: list[str] = []
    watcher: list[asyncio.Task[None]] = []

    def stop(reason: str) -> None:
        if not stopped:
            stopped.append(reason)
            token.cancel(reason)
            task.cancel()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        stop("client disconnected")

    deadline = loop.call_later(seconds, stop, "timeout")
    watching = loop.call_later(WATCH_AFTER, lambda: watcher.append(loop.create_task(watch())))
    try:
        return await start(token)
    except (asyncio.CancelledError, RunCancelled):
        # Ours if we asked for it and nobody else did (a server shutting down cancels too).
        if not stopped or task.uncancel() > 0:
            raise
        if stopped[0] == "timeout":
            raise RunTimeoutError(seconds, "the run") from None
        raise ClientDisconnected from None
    finally:
        deadline.cancel()
        watching.cancel()
        if watcher:
            watcher[0].cancel()
