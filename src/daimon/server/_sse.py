"""Server-sent event streams that end cleanly, stay alive, and stop their run when the client goes.

:class:`EventStreamResponse` runs a *source* (an async iterator of ready-made SSE frames, given a
:class:`~daimon.core.cancel.CancelToken`) in its own task and writes its frames to the client:

- a comment line (``: ping``) goes out whenever nothing else was sent for ``heartbeat`` seconds,
  so proxies do not take a slow tool for a dead connection;
- the stream always ends with a frame that tells success from failure: the source's own last
  frame, or ``on_error(exc)`` when the source raised, or ``on_error(TimeoutError)`` when the run
  passed its deadline;
- when the client disconnects, the run is cancelled at once: its token is cancelled and its task
  is cancelled wherever it waits, so no tool call starts afterwards, and every task the stream
  made is awaited before the response returns (nothing leaks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from daimon._run_logs import sse_frame
from daimon.core.cancel import CancelToken
from daimon.core.errors import TimeoutError as RunTimeoutError

__all__ = ("EventStreamResponse", "HEARTBEAT", "sse_frame")

HEARTBEAT = b": ping\n\n"
"""The comment frame sent to keep an idle stream alive (clients ignore comments)."""

_BUFFER = 64  # frames held for a slow client before the run waits for it
_PING = object()
_END = object()

Source = Callable[[CancelToken], AsyncGenerator[bytes, None]]


class EventStreamResponse(Response):
    """A ``text/event-stream`` response fed by a cancellable source (see the module docstring)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        source: Source,
        *,
        on_error: Callable[[BaseException], bytes],
        heartbeat: float,
        timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status_code = 200
        self.background = None
        self._source = source
        self._on_error = on_error
        self._heartbeat = heartbeat
        self._timeout = timeout
        self.init_headers(
            {"cache-control": "no-store", "x-accel-buffering": "no", **(headers or {})}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _Stream(self, receive, send).run()


class _Stream:
    """The state of one streamed response: its run, its writer, its watchers."""

    __slots__ = (
        "_last_sent",
        "_loop",
        "_producer",
        "_queue",
        "_receive",
        "_response",
        "_send",
        "_stopped",
        "_token",
    )

    def __init__(self, response: EventStreamResponse, receive: Receive, send: Send) -> None:
        self._response = response
        self._receive = receive
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._token = CancelToken()
        self._queue: asyncio.Queue[object] = asyncio.Queue(_BUFFER)
        self._stopped: str | None = None
        self._last_sent = self._loop.time()
        self._producer: asyncio.Task[None] | None = None

    async def run(self) -> None:
        response = self._response
        await self._send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": response.raw_headers,
            }
        )
        self._last_sent = self._loop.time()
        self._producer = producer = asyncio.create_task(self._produce())
        watcher = asyncio.create_task(self._watch())
        beat = asyncio.create_task(self._beat())
        deadline = self._loop.call_later(response._timeout, self._stop, "timeout")
        try:
            await self._write()
        except OSError:  # servers of ASGI 2.4 and later raise on sending to a closed connection
            self._stop("disconnected")
        finally:
            deadline.cancel()
            watcher.cancel()
            beat.cancel()
            if not producer.done():
                self._stop("the response ended")
            # Reap every task, so none outlives the response.
            await asyncio.gather(producer, watcher, beat, return_exceptions=True)

    async def _write(self) -> None:
        queue, send = self._queue, self._send
        while True:
            item = await queue.get()
            if self._stopped is not None or item is _END:
                break
            body = HEARTBEAT if item is _PING else item
            assert isinstance(body, bytes)
            await send({"type": "http.response.body", "body": body, "more_body": True})
            self._last_sent = self._loop.time()
        if self._stopped == "disconnected":
            return  # nobody to tell
        if self._stopped == "timeout":
            error = RunTimeoutError(self._response._timeout, "the run")
            await send(
                {
                    "type": "http.response.body",
                    "body": self._response._on_error(error),
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _produce(self) -> None:
        frames = self._response._source(self._token)
        queue = self._queue
        try:
            try:
                async for frame in frames:
                    await queue.put(frame)
            finally:
                await frames.aclose()  # a source stopped at a yield finishes (and its run) now
        except Exception as exc:
            if self._stopped is None:
                await queue.put(self._response._on_error(exc))
        if self._stopped is None:
            await queue.put(_END)

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._stop("disconnected")
                return

    async def _beat(self) -> None:
        interval = self._response._heartbeat
        queue = self._queue
        while True:
            delay = self._last_sent + interval - self._loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            # A full queue means frames are flowing anyway.
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(_PING)
            self._last_sent = self._loop.time()

    def _stop(self, reason: str) -> None:
        """Stop the stream: cancel the run (token and task) and wake the writer."""
        producer = self._producer
        if self._stopped is not None or (reason == "timeout" and producer and producer.done()):
            return
        self._stopped = reason
        self._token.cancel(reason)
        if producer is not None:
            producer.cancel()
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_END)
