"""The one HTTP gate in front of everything daimon serves: the HTTP server, MCP and A2A.

Plain ASGI and the standard library only (no response buffering, no extra tasks), so that every
transport can wrap its app in it without importing another's. A request passes, in order:

1. ``Host`` must match the allow-list (403). This defeats DNS rebinding: a page on
   ``attacker.example`` whose name resolves to 127.0.0.1 still sends ``Host: attacker.example``.
   Patterns are ``name`` (any port), ``name:port``, ``*.suffix`` (subdomains only, optionally
   ``*.suffix:port``) and ``*`` (any); without a list (a wildcard bind that names no host) the
   header is not checked, and the token alone guards the door.
2. An ``Origin``, which only browsers send, must be a listed origin or the request's own origin
   (``http(s)://`` plus its ``Host``) on a checked ``Host`` (403).
3. A transport's own layer, if any (the HTTP server's CORS: preflights carry no token).
4. With a token, ``Authorization: Bearer <token>`` on every path but the public ones (401),
   compared in constant time. A session id is never accepted in its place.
5. The body: a ``Content-Length`` over the limit is refused before any byte is read, a chunked
   body as soon as it passes the limit (413); an unreadable ``Content-Length`` gets 400.

A refusal closes the connection (a body may follow that is never read) and is written in the
transport's error shape (``errors="json"``: ``{"error": {"type", "message"}}``, or ``"text"``);
on a websocket it is a close with code 1008.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from http import HTTPStatus
from typing import Any, Literal

from daimon.core.errors import BuilderError

__all__ = (
    "DEFAULT_MAX_BODY_BYTES",
    "ErrorStyle",
    "HostAllowList",
    "HttpGate",
    "check_exposure",
    "check_limit",
    "check_token",
    "default_hosts",
    "hosts_for",
    "is_loopback",
)

# Plain ASGI types (as Starlette spells them): the gate must not need Starlette.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
ErrorStyle = Literal["json", "text"]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The largest request body accepted unless a transport is told otherwise (1 MiB)."""

_GATED = frozenset({"http", "websocket"})
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})
_HOST_CHARACTERS = re.compile(r"[a-z0-9.:\[\]-]+")
_PORT = re.compile(r"[0-9]{1,5}")


# ------------------------------------------------------------------------------ rules


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (``localhost``, 127.0.0.0/8, ``::1``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_token(token: object) -> None:
    """Refuse a token that a header cannot carry whole: empty, or not visible ASCII.

    Raises:
        BuilderError: The token is unusable.
    """
    if token is not None and (
        not isinstance(token, str) or not token or not all("\x21" <= c <= "\x7e" for c in token)
    ):
        raise BuilderError(
            "the bearer token must be a non-empty string of visible ASCII characters (no spaces)"
        )


def check_exposure(bind: str, token: str | None) -> None:
    """Refuse an unusable token, and a server bound off loopback without one.

    Raises:
        BuilderError: The token is unusable, or the server would be open to the network
            without authentication.
    """
    check_token(token)
    if token is None and not is_loopback(bind):
        raise BuilderError(
            f"refusing to serve on {bind!r} without authentication: that address is reachable "
            "from other machines. Set a token (clients send 'Authorization: Bearer <token>'), "
            "or bind a loopback address such as 127.0.0.1"
        )


def check_limit(max_body_bytes: object) -> None:
    """Refuse a body limit that is not a positive integer.

    Raises:
        BuilderError: The limit is unusable.
    """
    if type(max_body_bytes) is not int or max_body_bytes < 1:
        raise BuilderError(f"max_body_bytes must be a positive integer, got {max_body_bytes!r}")


def default_hosts(bind: str, port: int | None) -> tuple[str, ...] | None:
    """The ``Host`` values a server bound to ``bind`` accepts by default.

    The loopback names, plus the bound address when it is a specific one, each with ``port``
    (any port when it is ``None`` or 0: unknown, or chosen by the system). ``None`` for a
    wildcard bind (``0.0.0.0``, ``::``): the names clients will use cannot be guessed.
    """
    bound = bind.strip().lower()
    if bound in _WILDCARD_BINDS:
        return None
    suffix = f":{port}" if port else ""
    names = [f"{name}{suffix}" for name in _LOOPBACK_NAMES]
    bound = _bracketed(bound)
    if bound not in _LOOPBACK_NAMES:
        names.append(f"{bound}{suffix}")
    return tuple(names)


def hosts_for(bind: str, port: int | None, extra: Iterable[str]) -> tuple[str, ...] | None:
    """:func:`default_hosts` plus ``extra``; ``None`` (not checked) when both are empty."""
    defaults = default_hosts(bind, port)
    more = tuple(extra)
    if defaults is None and not more:
        return None
    return (*(defaults or ()), *more)


def _bracketed(host: str) -> str:
    """A bare IPv6 literal as a ``Host`` header spells it (``::1`` -> ``[::1]``)."""
    return f"[{host}]" if host.count(":") > 1 and not host.startswith("[") else host


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


class HostAllowList:
    """The ``Host`` values allowed: ``name``, ``name:port``, ``*.suffix[:port]`` or ``*``."""

    __slots__ = ("_any", "_exact", "_names", "_suffixes")

    def __init__(self, patterns: Iterable[str]) -> None:
        """Parse ``patterns`` (case-insensitive; a bare IPv6 address is bracketed).

        Raises:
            BuilderError: A pattern can never match a ``Host`` header.
        """
        allowed = {_bracketed(p.strip().lower()) for p in patterns}
        for pattern in allowed:
            _check_pattern(pattern)
        self._any = "*" in allowed
        self._suffixes = tuple(_split_host(p[1:]) for p in allowed if p.startswith("*."))
        plain = [p for p in allowed if not p.startswith("*")]
        self._exact = frozenset(p for p in plain if _split_host(p)[1] is not None)
        self._names = frozenset(p for p in plain if _split_host(p)[1] is None)

    def __contains__(self, host: object) -> bool:
        if not isinstance(host, str):
            return False
        host = host.lower()
        if self._any or host in self._exact:
            return True
        if not _HOST_CHARACTERS.fullmatch(host):
            return False
        name, port = _split_host(host)
        return name in self._names or any(
            name.endswith(suffix) and (wanted is None or port == wanted)
            for suffix, wanted in self._suffixes
        )


def _check_pattern(pattern: str) -> None:
    if pattern == "*":
        return
    name, port = _split_host(pattern[1:] if pattern.startswith("*.") else pattern)
    if (
        not name.strip(".")
        or not _HOST_CHARACTERS.fullmatch(name)
        or (port is not None and not _PORT.fullmatch(port))
    ):
        raise BuilderError(
            f"allowed host {pattern!r} is not a host name, name:port, *.domain[:port] or *"
        )


# ------------------------------------------------------------------------------ refusals


def _error_body(style: ErrorStyle, status: int, kind: str, message: str) -> tuple[bytes, bytes]:
    """The content type and body of a refusal, in the transport's error shape."""
    if style == "json":
        body = {"error": {"type": kind, "message": message}}
        return b"application/json", json.dumps(body, separators=(",", ":")).encode("ascii")
    text = f"{HTTPStatus(status).phrase}: {message}"
    return b"text/plain; charset=utf-8", text.encode("utf-8", "replace")


async def _refuse(
    style: ErrorStyle,
    scope: Scope,
    send: Send,
    status: int,
    kind: str,
    message: str,
    *extra: tuple[bytes, bytes],
) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
        return
    content_type, body = _error_body(style, status, kind, message)
    # Close the connection after answering: a request body may follow that is never read.
    headers = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------------ the gate


class HttpGate:
    """ASGI middleware enforcing the rules of this module's description."""

    __slots__ = ("_hosts", "_inner", "_origins", "_style")

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: Iterable[str] | None,
        origins: Iterable[str] = (),
        token: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        public_paths: Iterable[str] = (),
        errors: ErrorStyle = "json",
        before_auth: Callable[[ASGIApp], ASGIApp] | None = None,
    ) -> None:
        """Wrap ``app``.

        Args:
            app: The ASGI app behind the gate.
            hosts: ``Host`` patterns (see :class:`HostAllowList`); ``None``: not checked.
            origins: Browser origins (``scheme://host[:port]``) allowed besides the request's
                own.
            token: The bearer token every request but the public paths' must carry.
            max_body_bytes: The largest request body let through.
            public_paths: Paths served without the token.
            errors: The shape of refusals: ``"json"`` or ``"text"``.
            before_auth: Wraps the token and body checks in a layer of the transport's own,
                run after the ``Host`` and ``Origin`` checks (the HTTP server's CORS).

        Raises:
            BuilderError: A host pattern or the token is unusable, or the limit is not positive.
        """
        check_token(token)
        check_limit(max_body_bytes)
        self._hosts = HostAllowList(hosts) if hosts is not None else None
        self._origins = frozenset(o.strip().lower().rstrip("/") for o in origins)
        self._style: ErrorStyle = errors
        checks = _TokenAndBody(app, token, max_body_bytes, frozenset(public_paths), errors)
        self._inner: ASGIApp = checks if before_auth is None else before_auth(checks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _GATED:
            await self._inner(scope, receive, send)  # lifespan: nothing to check
            return
        host = ""
        origin: str | None = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1").lower()
            elif key == b"origin":
                origin = value.decode("latin-1")
        if self._hosts is not None and host not in self._hosts:
            message = f"Host {host[:100]!r} is not an allowed host"
            await _refuse(self._style, scope, send, 403, "forbidden", message)
            return
        if origin is not None and not self._origin_allowed(origin, host):
            message = f"Origin {origin[:100]!r} is not an allowed origin"
            await _refuse(self._style, scope, send, 403, "forbidden", message)
            return
        await self._inner(scope, receive, send)

    def _origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self._origins:
            return True
        if self._hosts is None:
            # An unchecked Host may be the attacker's own name: "same origin" proves nothing.
            return False
        scheme, sep, authority = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and authority == host


class _TokenAndBody:
    """The token check (when one is set), then the body limit."""

    __slots__ = ("_digest", "_max_bytes", "_public", "_style", "app")

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        max_bytes: int,
        public: frozenset[str],
        style: ErrorStyle,
    ) -> None:
        self.app = app
        # Digests of equal length: the comparison takes the same time whatever the token's length.
        self._digest = _sha256(token.encode("ascii")) if token is not None else None
        self._max_bytes = max_bytes
        self._public = public
        self._style: ErrorStyle = style

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _GATED:
            await self.app(scope, receive, send)
            return
        headers = _Headers(scope)
        if not self._authorized(scope, headers.authorization):
            what = "missing" if headers.authorization is None else "invalid"
            message = f"{what} bearer token: send 'Authorization: Bearer <token>'"
            bearer = (b"www-authenticate", b"Bearer")
            await _refuse(self._style, scope, send, 401, "unauthorized", message, bearer)
            return
        if scope["type"] != "http" or (headers.length is None and not headers.chunked):
            await self.app(scope, receive, send)  # no body
            return
        declared = headers.declared_length()
        if declared is not None and declared < 0:
            message = "invalid Content-Length"
            await _refuse(self._style, scope, send, 400, "invalid_request", message)
        elif declared is not None and declared > self._max_bytes:
            await self._too_large(scope, send)
        elif declared == 0 and not headers.chunked:
            await self.app(scope, receive, send)
        else:
            await self._bounded(scope, receive, send)

    def _authorized(self, scope: Scope, value: bytes | None) -> bool:
        if self._digest is None or scope["path"] in self._public:
            return True
        if value is None:
            return False
        scheme, _, credentials = value.strip().partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(
            _sha256(credentials.strip()), self._digest
        )

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body here, counting, so that no one downstream buffers more than the limit."""
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
        await self.app(scope, _Replay(b"".join(chunks), receive), send)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        message = f"the request body is larger than the limit of {self._max_bytes} bytes"
        await _refuse(self._style, scope, send, 413, "payload_too_large", message)


class _Headers:
    """The request headers the token and body checks read."""

    __slots__ = ("authorization", "chunked", "length")

    def __init__(self, scope: Scope) -> None:
        self.authorization: bytes | None = None
        self.length: bytes | None = None
        self.chunked = False
        for key, value in scope["headers"]:
            if key == b"authorization":
                self.authorization = value
            elif key == b"content-length":
                self.length = value
            elif key == b"transfer-encoding":
                self.chunked = b"chunked" in value.lower()

    def declared_length(self) -> int | None:
        """The ``Content-Length``; ``None`` without one, -1 when it is not a number."""
        if self.length is None:
            return None
        try:
            return max(int(self.length), -1)
        except ValueError:
            return -1


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
