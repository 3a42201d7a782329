"""The gRPC binding of a daimon A2A server: A2A 1.0 and 0.3 services on one grpc.aio server.

Both services (``lf.a2a.v1.A2AService`` for 1.0, ``a2a.v1.A2AService`` for 0.3) are the SDK's
handlers over the same request handler as the HTTP bindings, so a task started over one binding
can be read, cancelled or resubscribed over another. The gate is the HTTP one's rules: a bearer
token in the ``authorization`` metadata when a token is set (checked in constant time; a call
without it ends ``UNAUTHENTICATED`` before any handler runs) and messages bounded in size.
Needs ``grpcio`` (the ``grpc`` extra).
"""

from __future__ import annotations

from daimon.a2a import _sdk  # noqa: F401  # isort: skip - first: names the extra

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from daimon.core.optional import require

grpc = require("grpc", extra="grpc")
aio = require("grpc.aio", extra="grpc")

from a2a.compat.v0_3 import a2a_v0_3_pb2_grpc  # noqa: E402
from a2a.compat.v0_3.grpc_handler import CompatGrpcHandler  # noqa: E402
from a2a.server.request_handlers import GrpcHandler, RequestHandler  # noqa: E402
from a2a.types import a2a_pb2_grpc  # noqa: E402

__all__ = ("grpc_server",)


_ServerInterceptor: Any = aio.ServerInterceptor  # grpc has no type hints


class _BearerGate(_ServerInterceptor):  # type: ignore[misc]
    """Ends every call without ``authorization: Bearer <token>`` as ``UNAUTHENTICATED``."""

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(token.encode()).digest()

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: Any,
    ) -> Any:
        handler = await continuation(details)
        metadata = details.invocation_metadata or ()
        given = next((str(v) for k, v in metadata if k.lower() == "authorization"), "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            hashlib.sha256(value.strip().encode()).digest(), self._digest
        ):
            return handler
        return _refusal(handler)


def _refusal(handler: Any | None) -> Any:
    """A handler of ``handler``'s shape that ends the call ``UNAUTHENTICATED``."""

    async def deny(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")

    async def deny_stream(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")
        yield  # pragma: no cover - abort raises

    if handler is None:
        return grpc.unary_unary_rpc_method_handler(deny)
    kinds = {
        "unary_unary": grpc.unary_unary_rpc_method_handler,
        "unary_stream": grpc.unary_stream_rpc_method_handler,
        "stream_unary": grpc.stream_unary_rpc_method_handler,
        "stream_stream": grpc.stream_stream_rpc_method_handler,
    }
    for kind, make in kinds.items():
        if getattr(handler, kind, None) is not None:
            behaviour = deny_stream if kind.endswith("_stream") else deny
            return make(
                behaviour,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return grpc.unary_unary_rpc_method_handler(deny)  # pragma: no cover


def grpc_server(
    handler: RequestHandler,
    *,
    host: str,
    port: int,
    token: str | None,
    max_message_bytes: int,
) -> tuple[Any, int]:
    """A grpc.aio server with both A2A services, bound (not started); and the port it got."""
    options = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.so_reuseport", 0),
    ]
    interceptors = [_BearerGate(token)] if token is not None else []
    server = aio.server(interceptors=interceptors, options=options)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)  # type: ignore[no-untyped-call]
    a2a_v0_3_pb2_grpc.add_A2AServiceServicer_to_server(  # type: ignore[no-untyped-call]
        CompatGrpcHandler(handler), server
    )
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    bound = server.add_insecure_port(f"{shown}:{port}")
    return server, bound
