"""A daimon broker service over gRPC: the server keeps the queues, workers and clients call it.

The service (:class:`GrpcBrokerServer`) keeps every queue and task record in one SQLite file,
so a restart loses no submitted task; it leases tasks to workers with the same rules as every
daimon broker (attempt fencing, heartbeats, hand-back, retries up to ``max_deliver`` then a
dead letter, cancellation). Clients and workers use :class:`GrpcBroker` with
``grpc://host:port?queue=...``. The wire is unary gRPC calls with versioned JSON bodies
(:mod:`daimon.core.codec`), so no protobuf code is generated; see ``_wire.py``.

Run the service with ``daimon broker serve grpc --db tasks.db --port 50051`` or
``python -m daimon.distributed.brokers.grpc --db tasks.db --port 50051``.
"""

from __future__ import annotations

from daimon.distributed.brokers.grpc._client import GrpcBroker, GrpcBrokerError
from daimon.distributed.brokers.grpc._server import GrpcBrokerServer

__all__ = ("GrpcBroker", "GrpcBrokerError", "GrpcBrokerServer", "serve")


async def serve(
    path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 50051,
    token: str | None = None,
    synchronous: str = "FULL",
) -> None:
    """Run a broker service until cancelled (or until the process gets SIGINT/SIGTERM)."""
    server = GrpcBrokerServer(path, host=host, port=port, token=token, synchronous=synchronous)
    await server.start()
    try:
        await server.wait_closed()
    finally:
        await server.stop()
