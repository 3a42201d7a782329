"""The broker service: a gRPC server that keeps queues and task records in SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from daimon.core.codec import dumps, loads
from daimon.core.errors import BuilderError, DaimonError, SerializationError
from daimon.core.optional import require
from daimon.distributed.brokers.grpc._store import SqliteTaskQueue
from daimon.distributed.brokers.grpc._wire import (
    ERROR_KEY,
    MAX_MESSAGE,
    SERVICE,
    ClaimReply,
    ClaimRequest,
    DeadLettersReply,
    DeadLettersRequest,
    DecideRequest,
    HeartbeatRequest,
    Reply,
    SettleRequest,
    StatusReply,
    SubmitRequest,
    TaskRef,
)
from daimon.kit.task_records import check_dead_letter_limit

grpc = require("grpc", extra="grpc")

__all__ = ("GrpcBrokerServer",)

_log = logging.getLogger("daimon.distributed")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
_MAX_WAIT = 30.0
R = TypeVar("R")


class GrpcBrokerServer:
    """Serves task queues over gRPC, kept durably in one SQLite file.

    Clients are :class:`~daimon.distributed.brokers.grpc.GrpcBroker` handles; run it with
    ``daimon broker serve grpc --db tasks.db`` or in a program::

        async with GrpcBrokerServer("tasks.db", port=50051) as server:
            await server.wait_closed()

    Args:
        path: The SQLite file (created if missing); its queues survive a restart.
        host: Address to bind; anything but loopback needs a ``token``.
        port: Port to listen on (``0``: any free port, see :attr:`port`).
        token: Bearer token clients must send (metadata ``authorization: Bearer <token>``).
        synchronous: SQLite's ``synchronous``: ``FULL`` (a submit survives power loss),
            ``NORMAL`` (survives a crash of this process) or ``OFF``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 50051,
        token: str | None = None,
        synchronous: str = "FULL",
    ) -> None:
        if host not in _LOOPBACK and not token:
            raise BuilderError(f"binding {host!r} exposes the broker: give it a token")
        self._path = Path(path)
        self._host = host
        self._port = port
        self._token = token
        self._synchronous = synchronous
        self._pool: ThreadPoolExecutor | None = None
        self._queue: SqliteTaskQueue | None = None
        self._server: Any = None
        self._wakeups: dict[str, asyncio.Event] = {}

    @property
    def port(self) -> int:
        """The port it listens on (known once started)."""
        return self._port

    @property
    def target(self) -> str:
        """``host:port``, for a client's URL ``grpc://host:port``."""
        return f"{self._host}:{self._port}"

    async def __aenter__(self) -> GrpcBrokerServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the database and start listening."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="daimon-grpc-broker")
        self._queue = await self._run(
            lambda: SqliteTaskQueue(self._path, synchronous=self._synchronous)
        )
        handlers = {
            "Submit": self._method(SubmitRequest, self._submit),
            "Status": self._method(TaskRef, self._status),
            "Cancel": self._method(TaskRef, self._cancel),
            "Claim": self._method(ClaimRequest, self._claim),
            "Heartbeat": self._method(HeartbeatRequest, self._heartbeat),
            "Settle": self._method(SettleRequest, self._settle),
            "DeadLetters": self._method(DeadLettersRequest, self._dead_letters),
            "Decide": self._method(DecideRequest, self._decide),
        }
        server = grpc.aio.server(
            options=(
                ("grpc.max_send_message_length", MAX_MESSAGE),
                ("grpc.max_receive_message_length", MAX_MESSAGE),
            )
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = server.add_insecure_port(f"{self._host}:{self._port}")
        if port == 0:
            raise DaimonError(f"could not listen on {self._host}:{self._port}")
        await server.start()
        self._server, self._port = server, port

    async def stop(self, grace: float | None = 1.0) -> None:
        """Stop listening (calls in progress get ``grace`` seconds) and close the database."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self._queue is not None:
            queue, self._queue = self._queue, None
            await self._run(queue.close)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    async def wait_closed(self) -> None:
        """Wait until the server stops."""
        if self._server is not None:
            await self._server.wait_for_termination()

    async def _run(self, call: Callable[[], R]) -> R:
        """Run a database call on the database's thread."""
        assert self._pool is not None
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def _db(self) -> SqliteTaskQueue:
        if self._queue is None:
            raise DaimonError("the broker server is stopped")
        return self._queue

    def _method(self, request_type: type[Any], handle: Callable[[Any], Awaitable[Any]]) -> Any:
        async def call(body: bytes, context: Any) -> bytes:
            if self._token is not None:
                sent = dict(context.invocation_metadata()).get("authorization", "")
                if not hmac.compare_digest(str(sent), f"Bearer {self._token}"):
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a wrong or no token")
            try:
                reply = await handle(loads(body, request_type))
                return dumps(reply).encode("utf-8")
            except KeyError as exc:
                code, name, detail = grpc.StatusCode.NOT_FOUND, "KeyError", str(exc.args[0])
            except (SerializationError, BuilderError) as exc:
                code, name, detail = grpc.StatusCode.INVALID_ARGUMENT, type(exc).__name__, str(exc)
            except DaimonError as exc:
                code, name, detail = grpc.StatusCode.UNAVAILABLE, type(exc).__name__, str(exc)
            except Exception as exc:
                _log.exception("the broker service failed a call")
                code, name, detail = grpc.StatusCode.INTERNAL, type(exc).__name__, str(exc)
            await context.abort(code, detail, trailing_metadata=((ERROR_KEY, name),))
            raise AssertionError("unreachable: abort raises")  # pragma: no cover

        return grpc.unary_unary_rpc_method_handler(call)

    def _wake(self, queue: str) -> None:
        event = self._wakeups.pop(queue, None)
        if event is not None:
            event.set()

    async def _submit(self, request: SubmitRequest) -> Reply:
        db = self._db()
        created = await self._run(lambda: db.submit(request.queue, request.task))
        if created:
            self._wake(request.queue)
        return Reply(flag=created)

    async def _status(self, request: TaskRef) -> StatusReply:
        db = self._db()
        return StatusReply(
            status=await self._run(lambda: db.status(request.queue, request.task_id))
        )

    async def _cancel(self, request: TaskRef) -> Reply:
        db = self._db()
        return Reply(flag=await self._run(lambda: db.cancel(request.queue, request.task_id)))

    async def _claim(self, request: ClaimRequest) -> ClaimReply:
        db, queue = self._db(), request.queue
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(request.wait, 0.0), _MAX_WAIT)
        while True:
            wakeup = self._wakeups.setdefault(queue, asyncio.Event())
            task = await self._run(
                lambda: db.claim(queue, lease=request.lease, max_deliver=request.max_deliver)
            )
            if task is not None:
                return ClaimReply(task=task)
            now = loop.time()
            if now >= deadline:
                return ClaimReply()
            pause = deadline - now
            visible = await self._run(lambda: db.next_visible(queue))
            if visible is not None:
                pause = min(pause, max(visible - time.time(), 0.005))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), pause)

    async def _heartbeat(self, request: HeartbeatRequest) -> Reply:
        db = self._db()
        outcome = await self._run(
            lambda: db.heartbeat(
                request.queue, request.task_id, request.attempt, lease=request.lease
            )
        )
        return Reply(outcome=outcome)

    async def _settle(self, request: SettleRequest) -> Reply:
        db = self._db()
        outcome = await self._run(
            lambda: db.settle(
                request.queue,
                request.task_id,
                request.attempt,
                request.action,
                max_deliver=request.max_deliver,
                result=request.result,
                error=request.error,
                delay=max(request.delay, 0.0),
                paused=request.paused,
            )
        )
        if outcome in ("requeued", "released"):
            self._wake(request.queue)
        return Reply(outcome=outcome)

    async def _decide(self, request: DecideRequest) -> Reply:
        db = self._db()
        decided = await self._run(
            lambda: db.decide(request.queue, request.task_id, request.decisions)
        )
        if decided:
            self._wake(request.queue)
        return Reply(flag=decided)

    async def _dead_letters(self, request: DeadLettersRequest) -> DeadLettersReply:
        db, limit = self._db(), check_dead_letter_limit(request.limit)
        return DeadLettersReply(
            letters=await self._run(lambda: db.dead_letters(request.queue, limit))
        )
