"""The HTTP gate in front of a served agent: Host, Origin, then the bearer token.

1. ``Host`` must name an allowed host (403): a page on ``attacker.example`` whose name resolves to
   127.0.0.1 still sends ``Host: attacker.example``, which defeats DNS rebinding.
2. An ``Origin``, which only browsers send, must be an allowed origin or an http(s) origin on an
   allowed host (403).
3. With a token, ``Authorization: Bearer <token>`` on every request except the public paths (401),
   compared in constant time. A session id is never accepted in its place.

Shared by ``daimon.mcp`` and ``daimon.a2a`` (which may not import each other); imported only by
their servers, so Starlette loads only with them.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from daimon.core.errors import BuilderError

__all__ = ("Guard", "check_exposure", "host_name", "hosts_for", "is_loopback")

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


class Guard:
    """ASGI middleware refusing requests for other hosts, from foreign origins or without token."""

    __slots__ = ("_app", "_digest", "_hosts", "_origins", "_public")

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        hosts: frozenset[str] | None,
        origins: Iterable[str] = (),
        public_paths: Iterable[str] = (),
    ) -> None:
        self._app = app
        # Equal-length digests: the comparison takes the same time whatever is presented.
        self._digest = _sha256(token.encode()) if token is not None else None
        self._hosts = hosts
        self._origins = frozenset(o.strip().rstrip("/").lower() for o in origins)
        self._public = frozenset(public_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        refusal = self._refusal(Headers(scope=scope), scope.get("path", ""))
        if refusal is None:
            await self._app(scope, receive, send)
            return
        status, text = refusal
        headers = {"WWW-Authenticate": 'Bearer realm="daimon"'} if status == 401 else {}
        await PlainTextResponse(text, status_code=status, headers=headers)(scope, receive, send)

    def _refusal(self, headers: Headers, path: str) -> tuple[int, str] | None:
        if self._hosts is not None and host_name(headers.get("host", "")) not in self._hosts:
            return 403, "Forbidden: Host not allowed"
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin):
            return 403, "Forbidden: Origin not allowed"
        if self._digest is not None and path not in self._public:
            scheme, _, presented = headers.get("authorization", "").partition(" ")
            valid = scheme.lower() == "bearer" and hmac.compare_digest(
                _sha256(presented.strip().encode()), self._digest
            )
            if not valid:
                return 401, "Unauthorized: a valid bearer token is required"
        return None

    def _origin_allowed(self, origin: str) -> bool:
        if origin.strip().rstrip("/").lower() in self._origins:
            return True
        parts = urlsplit(origin.strip().lower())
        return (
            parts.scheme in ("http", "https")
            and self._hosts is not None
            and (parts.hostname or "") in self._hosts
        )


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (``localhost``, 127.0.0.0/8, ``::1``)."""
    bare = host.strip("[]").lower()
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, what: str) -> None:
    """Refuse a server bound off loopback without a token (or with an empty one).

    Raises:
        BuilderError: It would be open to the network without authentication.
    """
    if token is not None and not token.strip():
        raise BuilderError(f"the {what} bearer token must not be empty")
    if token is None and not is_loopback(host):
        raise BuilderError(
            f"refusing to serve {what} on {host!r} without authentication: give a bearer token "
            "(token=...), or bind a loopback address such as 127.0.0.1"
        )


def hosts_for(host: str, extra: Iterable[str]) -> frozenset[str] | None:
    """Host names the ``Host`` header may carry; ``None`` when it cannot be known (not checked).

    A loopback bind allows the loopback names, a specific address or name allows itself, a
    wildcard bind (``0.0.0.0``, ``::``) only what ``extra`` names; always plus ``extra``.
    """
    names = {h.strip().strip("[]").lower() for h in extra}
    bind = host.strip("[]").lower()
    if is_loopback(bind):
        names |= _LOOPBACK_NAMES
    elif bind not in _WILDCARDS:
        names.add(bind)
    elif not names:
        return None
    return frozenset(names)


def host_name(header: str) -> str:
    """The host name of a ``Host`` header, without port or brackets (``[::1]:80`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header
