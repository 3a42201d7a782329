"""The server's gates, as plain ASGI middleware (no buffering of responses, no extra tasks).

Requests pass, in order:

1. :class:`HostOriginGuard`: the ``Host`` header must be an allowed name (defeats DNS
   rebinding: a page on ``attacker.example`` that resolves to 127.0.0.1 still sends
   ``Host: attacker.example``), and an ``Origin``, when a browser sends one, must be the server's
   own or an allowed one (403).
2. CORS, only when ``cors_origins`` is set (preflights are answered here, before auth).
3. :class:`RequestGate`: the bearer token, compared in constant time (401), then the body limit:
   a ``Content-Length`` over the limit is refused before any byte of the body is read, and a
   chunked body is counted as it arrives and refused as soon as it passes the limit (413).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from daimon.server._encode import dump_json
from daimon.server._errors import error_body

__all__ = ("HostOriginGuard", "RequestGate")

_GATED = frozenset({"http", "websocket"})
_HOST_CHARACTERS = re.compile(r"[a-z0-9.:\[\]-]+")


async def _reject(
    scope: Scope, send: Send, status: int, type: str, message: str, *extra: tuple[bytes, bytes]
) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    body = dump_json(error_body(type, message))
    # Close the connection after answering: a request body may follow that is never read.
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _split_host(host: str) -> tuple[str, str | None]:
    """``"name:port"`` -> ``("name", "port")``; IPv6 literals keep their brackets."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return host, None
        rest = host[end + 1 :]
        return host[: end + 1], rest[1:] if rest.startswith(":") else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep else (host, None)


class HostOriginGuard:
    """Refuses requests for a ``Host`` that is not allowed, or from a foreign ``Origin`` (403)."""

    __slots__ = ("_any_host", "_app", "_exact", "_names", "_origins", "_suffixes")

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str], origins: Iterable[str]) -> None:
        self._app = app
        allowed = {h.strip().lower() for h in hosts}
        self._any_host = "*" in allowed
        self._suffixes = tuple(_split_host(h[1:]) for h in allowed if h.startswith("*."))
        plain = [h for h in allowed if not h.startswith("*")]
        self._exact = frozenset(h for h in plain if _split_host(h)[1] is not None)
        self._names = frozenset(h for h in plain if _split_host(h)[1] is None)
        self._origins = frozenset(o.strip().lower().rstrip("/") for o in origins)

    def _host_allowed(self, host: str) -> bool:
        if self._any_host or host in self._exact:
            return True
        if not _HOST_CHARACTERS.fullmatch(host):
            return False
        name, port = _split_host(host)
        return name in self._names or any(
            name.endswith(suffix) and (wanted is None or port == wanted)
            for suffix, wanted in self._suffixes
        )

    def _origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self._origins:
            return True
        scheme, sep, authority = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and authority == host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _GATED:
            await self._app(scope, receive, send)
            return
        host = ""
        origin: str | None = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1").lower()
            elif key == b"origin":
                origin = value.decode("latin-1")
        if not self._host_allowed(host):
            await _reject(
                scope, send, 403, "forbidden", f"Host {host[:100]!r} is not an allowed host"
            )
            return
        if origin is not None and not self._origin_allowed(origin, host):
            await _reject(
                scope, send, 403, "forbidden", f"Origin {origin[:100]!r} is not an allowed origin"
            )
            return
        await self._app(scope, receive, send)


class RequestGate:
    """Checks the bearer token (when one is set), then bounds the request body."""

    __slots__ = ("_app", "_digest", "_max_bytes", "_public")

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body_bytes: int,
        public_paths: Iterable[str] = (),
    ) -> None:
        self._app = app
        # Digests of equal length: the comparison takes the same time whatever the token's length.
        self._digest = _sha256(token.encode("ascii")) if token is not None else None
        self._max_bytes = max_body_bytes
        self._public = frozenset(public_paths)

    def _authorized(self, value: bytes | None) -> bool:
        if value is None:
            return False
        scheme, _, credentials = value.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        assert self._digest is not None
        return hmac.compare_digest(_sha256(credentials.strip()), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _GATED:
            await self._app(scope, receive, send)
            return
        authorization: bytes | None = None
        length: bytes | None = None
        chunked = False
        for key, value in scope["headers"]:
            if key == b"authorization":
                authorization = value
            elif key == b"content-length":
                length = value
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        if (
            self._digest is not None
            and scope["path"] not in self._public
            and not self._authorized(authorization)
        ):
            what = "missing" if authorization is None else "invalid"
            await _reject(
                scope,
                send,
                401,
                "unauthorized",
                f"{what} bearer token: send 'Authorization: Bearer <token>'",
                (b"www-authenticate", b"Bearer"),
            )
            return
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = -1
            if declared < 0:
                await _reject(scope, send, 400, "invalid_request", "invalid Content-Length")
                return
            if declared > self._max_bytes:
                await self._too_large(scope, send)
                return
            if declared == 0 and not chunked:
                await self._app(scope, receive, send)
                return
        elif not chunked:
            await self._app(scope, receive, send)  # no body
            return
        # Read the body here, counting, so that no one downstream buffers more than the limit.
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before sending its request: nobody to answer
            chunk: bytes = message.get("body", b"")
            total += len(chunk)
            if total > self._max_bytes:
                await self._too_large(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self._app(scope, _Replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await _reject(
            scope,
            send,
            413,
            "payload_too_large",
            f"the request body is larger than the limit of {self._max_bytes} bytes",
        )


class _Replay:
    """A ``receive`` that hands out the body already read, then the client's later messages."""

    __slots__ = ("_body", "_receive")

    def __init__(self, body: bytes, receive: Receive) -> None:
        self._body: bytes | None = body
        self._receive = receive

    async def __call__(self) -> Message:
        body = self._body
        if body is None:
            return await self._receive()  # after the body: waits for http.disconnect
        self._body = None
        return {"type": "http.request", "body": body, "more_body": False}


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()
