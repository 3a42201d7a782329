"""Lifecycles written once: ``async with`` over ``aclose()``, set-up once, serving until cancelled.

Every resource in daimon has one lifecycle: ``async with`` and an ``aclose()`` that is safe to
call again. A class writes ``aclose`` (and ``setup`` for :class:`SetupOnEnter`); these bases add
``__aenter__`` and ``__aexit__``. Both are slotted, so slotted subclasses stay slotted.
:func:`serve_until_cancelled` runs a web server so that cancelling it shuts it down gracefully.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Self

__all__ = ("AsyncClosing", "Once", "SetupOnEnter", "serve_until_cancelled")


class AsyncClosing:
    """``async with obj`` gives ``obj`` and awaits ``obj.aclose()`` on the way out."""

    __slots__ = ()

    async def aclose(self) -> None:
        """Release what this holds; safe to call again."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class SetupOnEnter(AsyncClosing):
    """Like :class:`AsyncClosing`, and entering awaits ``obj.setup()`` first."""

    __slots__ = ()

    async def setup(self) -> None:
        """Create what this needs; safe to call again."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.setup()
        return self


class Once:
    """Runs an async set-up once, however many callers ask for it at the same time.

    A set-up that raises is tried again by the next caller; :meth:`reset` makes the next
    caller run it again (after the resource was closed).
    """

    __slots__ = ("_done", "_lock")

    def __init__(self) -> None:
        self._done = False
        self._lock: asyncio.Lock | None = None  # made on first use: inside a running loop

    async def run(self, setup: Callable[[], Awaitable[object]]) -> None:
        """Await ``setup()`` unless it has succeeded already (waiting for a caller running it)."""
        if self._done:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self._done:
                await setup()
                self._done = True

    def reset(self) -> None:
        """Have the next :meth:`run` set up again."""
        self._done = False


async def serve_until_cancelled(server: Any) -> None:
    """Run a uvicorn ``Server`` (anything with ``serve()`` and ``should_exit``) until it stops.

    Cancelled from outside, it first shuts down as on SIGTERM (closes the socket, drains the
    requests in flight), then lets the cancellation through.
    """
    serving = asyncio.ensure_future(server.serve())
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        server.should_exit = True
        await asyncio.wait({serving})
        raise
