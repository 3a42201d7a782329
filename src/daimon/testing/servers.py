"""An ASGI app served by uvicorn inside the test's own event loop.

:class:`daimon.testing.LoopbackServer` serves from a background thread; :func:`serving` serves
from the running loop, so a test can watch the app's tasks (cancellation, disconnects) directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

from daimon.core.optional import require

__all__ = ("serving",)


@contextlib.asynccontextmanager
async def serving(
    app: Any = None,
    *,
    app_for_port: Callable[[int], Any] | None = None,
    host: str = "127.0.0.1",
) -> AsyncIterator[str]:
    """Serve ``app`` on a free port of ``host`` until the block ends; yields ``http://host:port``.

    Give ``app_for_port`` instead of ``app`` when the app must know its own port (an A2A agent
    card names its URL): it is called with the port before serving starts.
    """
    if (app is None) == (app_for_port is None):
        raise TypeError("give exactly one of app and app_for_port")
    uvicorn = require("uvicorn", extra="server")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    served = app if app_for_port is None else app_for_port(port)
    config = uvicorn.Config(served, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
