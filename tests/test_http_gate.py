"""One gate, three transports: the same security cases against the HTTP server, MCP and A2A.

Each case runs against each transport's app, built by its own public function (``create_app``,
``mcp_http_app`` around the official ``mcp`` SDK's streamable-HTTP app, ``a2a_app`` around the
official ``a2a-sdk`` app) and served by uvicorn on a free loopback port, so that a rule cannot
differ by transport. The last cases drive the gate directly, for what uvicorn never lets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="needs the server extra")
pytest.importorskip("mcp", reason="needs the mcp extra")
pytest.importorskip("a2a", reason="needs the a2a extra")

import httpx

from daimon import Agent, BuilderError, ChatRequest, ChatResponse
from daimon._http_gate import HostAllowList, HttpGate, default_hosts, hosts_for
from daimon.a2a import a2a_app
from daimon.mcp import mcp_http_app
from daimon.models import FunctionModel
from daimon.server import ServerSettings, create_app
from daimon.testing.servers import serving

TOKEN = "gate-token-0123456789"
LIMIT = 4096
A2A_HEADERS = {"a2a-version": "1.0"}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


def _agent() -> Agent:
    def model(request: ChatRequest) -> ChatResponse:
        return ChatResponse.reply(f"echo: {request.messages[-1].text}")

    return Agent(FunctionModel(model), name="echo")


def _server(port: int, host: str = "127.0.0.1", **options: Any) -> Any:
    if "allowed_hosts" in options:
        options["allowed_hosts"] = tuple(options["allowed_hosts"])
    if "allowed_origins" in options:
        options["allowed_origins"] = tuple(options["allowed_origins"])
    return create_app(_agent(), settings=ServerSettings(host=host, port=port, **options))


def _mcp(port: int, host: str = "127.0.0.1", **options: Any) -> Any:
    return mcp_http_app(_agent(), host=host, port=port, **options)


def _a2a(port: int, host: str = "127.0.0.1", **options: Any) -> Any:
    if host != "127.0.0.1":
        options.setdefault("url", "https://agents.example/")
    return a2a_app(_agent(), host=host, port=port, **options)


@dataclass(frozen=True)
class Transport:
    """A transport behind the gate, and a request it answers 200 once let through."""

    name: str
    build: Callable[..., Any]
    path: str
    message: dict[str, Any]
    """The JSON body of that request, with an empty string :meth:`body` pads."""
    pad: tuple[str, ...]
    """Where in ``message`` that string is."""
    errors: str
    """The shape of refusals: ``json`` or ``text``."""
    public: str | None = None
    """A path served without the token."""
    headers: dict[str, str] = field(default_factory=dict)

    def body(self, size: int = 200) -> bytes:
        """The request's body, exactly ``size`` bytes long."""
        empty = self._encode("")
        return self._encode("y" * (size - len(empty)))

    def _encode(self, filler: str) -> bytes:
        message = json.loads(json.dumps(self.message))
        inner = message
        for key in self.pad[:-1]:
            inner = inner[key]
        inner[self.pad[-1]] = filler
        return json.dumps(message, separators=(",", ":")).encode()

    def served(self, **options: Any) -> Any:
        """The transport's app built with ``options``, served on a free loopback port."""
        return serving(app_for_port=lambda port: self.build(port, **options))

    async def send(
        self, http: httpx.AsyncClient, base: str, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        """Send the request (``kw`` may replace its ``content``)."""
        kw.setdefault("content", self.body())
        sent = {"content-type": "application/json", **self.headers, **(headers or {})}
        return await http.post(base + self.path, headers=sent, **kw)


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "", "version": "1"},
    },
}
TRANSPORTS = [
    Transport("server", _server, "/prompt", {"input": ""}, ("input",), "json", "/health"),
    Transport(
        "mcp", _mcp, "/mcp", INITIALIZE, ("params", "clientInfo", "name"), "text", None, MCP_HEADERS
    ),
    Transport(
        "a2a",
        _a2a,
        "/",
        {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": ""}},
        ("params", "id"),
        "text",
        "/.well-known/agent-card.json",
        A2A_HEADERS,
    ),
]
each_transport = pytest.mark.parametrize("transport", TRANSPORTS, ids=lambda t: t.name)


def _assert_refused(transport: Transport, reply: httpx.Response, status: int, kind: str) -> None:
    """``reply`` is the gate's refusal, in the transport's error shape."""
    assert reply.status_code == status, reply.text
    assert reply.headers["connection"] == "close"
    if transport.errors == "json":
        assert reply.headers["content-type"] == "application/json"
        assert reply.json()["error"]["type"] == kind
    else:
        assert reply.headers["content-type"].startswith("text/plain")
        phrase = {401: "Unauthorized", 403: "Forbidden", 413: "Request Entity Too Large"}
        assert reply.text.startswith(f"{phrase[status]}: ")


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


# ------------------------------------------------------------------------------ Host


@each_transport
async def test_the_host_header_must_be_allowed(
    transport: Transport, http: httpx.AsyncClient
) -> None:
    async with transport.served() as base:
        port = base.rsplit(":", 1)[1]
        for good in ("127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}", "LOCALHOST:{port}"):
            host = good.format(port=port)
            assert (await transport.send(http, base, {"host": host})).status_code == 200, host
        for bad in (
            "attacker.example",
            "attacker.example:{port}",
            "127.0.0.1:1",  # the bound port is known: another is refused
            "localhost",
            "",
        ):
            reply = await transport.send(http, base, {"host": bad.format(port=port)})
            _assert_refused(transport, reply, 403, "forbidden")


@each_transport
async def test_allowed_hosts_take_names_ports_and_wildcards(
    transport: Transport, http: httpx.AsyncClient
) -> None:
    async with transport.served(allowed_hosts=["api.example.com", "*.internal:8080"]) as base:
        for good in (
            "api.example.com",
            "api.example.com:9",
            "API.example.com",
            "a.b.internal:8080",
        ):
            assert (await transport.send(http, base, {"host": good})).status_code == 200, good
        for bad in ("a.internal:8081", "a.internal", "internal:8080", "*.internal:8080"):
            reply = await transport.send(http, base, {"host": bad})
            _assert_refused(transport, reply, 403, "forbidden")
    async with transport.served(allowed_hosts=["*"]) as base:
        assert (await transport.send(http, base, {"host": "whatever"})).status_code == 200


@each_transport
@pytest.mark.parametrize("pattern", ["bad host", "a/b", "name:port", "*.", "*.x:y", ""])
def test_a_host_pattern_that_can_never_match_is_refused(transport: Transport, pattern: str) -> None:
    with pytest.raises(BuilderError):
        transport.build(8000, allowed_hosts=[pattern])


@each_transport
async def test_a_wildcard_bind_without_hosts(transport: Transport, http: httpx.AsyncClient) -> None:
    # The HTTP server refuses it; MCP and A2A (whose token is then required) leave Host
    # unchecked, and so never take a same-origin Origin on faith: its host may be the attacker's.
    if transport.name == "server":
        with pytest.raises(BuilderError, match="needs allowed_hosts"):
            transport.build(8000, host="0.0.0.0", token=TOKEN)
        return
    bearer = {"authorization": f"Bearer {TOKEN}"}
    async with transport.served(host="0.0.0.0", token=TOKEN) as base:
        port = base.rsplit(":", 1)[1]
        anyone = {**bearer, "host": f"attacker.example:{port}"}
        assert (await transport.send(http, base, anyone)).status_code == 200
        rebound = {**anyone, "origin": f"http://attacker.example:{port}"}
        _assert_refused(transport, await transport.send(http, base, rebound), 403, "forbidden")


# ------------------------------------------------------------------------------ Origin


@each_transport
async def test_a_browser_origin_must_be_listed_or_the_requests_own(
    transport: Transport, http: httpx.AsyncClient
) -> None:
    async with transport.served(allowed_origins=["https://app.example.com"]) as base:
        port = base.rsplit(":", 1)[1]
        for good in (
            "http://127.0.0.1:{port}",
            "https://app.example.com",
            "HTTPS://App.Example.com/",
        ):
            origin = good.format(port=port)
            assert (await transport.send(http, base, {"origin": origin})).status_code == 200
        for bad in (
            "http://attacker.example",
            "http://localhost:{port}",  # another origin than the Host the request names
            "http://127.0.0.1:1",  # another page on this machine
            "ftp://127.0.0.1:{port}",
            "null",
        ):
            reply = await transport.send(http, base, {"origin": bad.format(port=port)})
            _assert_refused(transport, reply, 403, "forbidden")


# ------------------------------------------------------------------------------ token


@each_transport
async def test_the_bearer_token_is_required_but_on_public_paths(
    transport: Transport, http: httpx.AsyncClient
) -> None:
    async with transport.served(token=TOKEN) as base:
        for auth in ({}, {"authorization": "Bearer nope"}, {"authorization": f"Basic {TOKEN}"}):
            reply = await transport.send(http, base, auth)
            _assert_refused(transport, reply, 401, "unauthorized")
            assert reply.headers["www-authenticate"] == "Bearer"
        right = {"authorization": f"Bearer {TOKEN}"}
        assert (await transport.send(http, base, right)).status_code == 200
        lowercase = {"authorization": f"bearer  {TOKEN}"}
        assert (await transport.send(http, base, lowercase)).status_code == 200
        if transport.public is not None:
            assert (await http.get(base + transport.public)).status_code == 200


@each_transport
async def test_tokens_are_compared_in_constant_time(
    transport: Transport, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    async with transport.served(token=TOKEN) as base:
        wrong = await transport.send(http, base, {"authorization": "Bearer x"})
        assert wrong.status_code == 401
        right = await transport.send(http, base, {"authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200
    assert len(compared) == 2
    # Digests of equal length: the time taken does not depend on how long the given token is.
    assert {len(a) for a, _ in compared} == {len(b) for _, b in compared} == {32}


@each_transport
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.com", ""])
def test_it_refuses_to_serve_beyond_loopback_without_a_token(
    transport: Transport, host: str
) -> None:
    with pytest.raises(BuilderError, match=f"refusing to serve on {host!r} without auth"):
        transport.build(8000, host=host)


@each_transport
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_token(transport: Transport, host: str) -> None:
    assert transport.build(8000, host=host) is not None


@each_transport
@pytest.mark.parametrize("token", ["", "has space", "tab\there", "tøken", "new\nline"])
def test_a_token_a_header_cannot_carry_is_refused(transport: Transport, token: str) -> None:
    with pytest.raises(BuilderError, match="non-empty string of visible ASCII"):
        transport.build(8000, token=token)


# ------------------------------------------------------------------------------ body


async def _raw(base: str, head: bytes, chunks: list[bytes], pause: float = 0.0) -> bytes:
    """Send ``head`` then ``chunks`` on a raw connection; whatever the server answered."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    received = bytearray()

    async def read() -> None:
        # Reading while sending: a reset after the answer must not lose what came before it.
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                received.extend(data)

    reading = asyncio.create_task(read())
    try:
        writer.write(head)
        for chunk in chunks:
            if reading.done():
                break
            writer.write(chunk)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            await asyncio.sleep(pause)
        await asyncio.wait_for(reading, 5)
    finally:
        writer.close()
    return bytes(received)


def _head(transport: Transport, base: str, length: str, **more: str) -> bytes:
    headers = {
        "Host": base.removeprefix("http://"),
        "Content-Type": "application/json",
        **transport.headers,
        **more,
        length.partition(":")[0]: length.partition(":")[2].strip(),
    }
    lines = [f"POST {transport.path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@each_transport
async def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_sent(
    transport: Transport,
) -> None:
    async with transport.served(max_body_bytes=LIMIT) as base:
        head = _head(transport, base, "Content-Length: 10000000")
        answer = await asyncio.wait_for(_raw(base, head, []), 2)  # no byte of the body is sent
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large"
    assert b"connection: close" in rest.lower()
    assert _too_large(transport) in rest


def _too_large(transport: Transport) -> bytes:
    """What a 413 refusal's body says, in the transport's error shape."""
    return b'"type":"payload_too_large"' if transport.errors == "json" else b"Too Large: the"


@each_transport
async def test_a_chunked_body_is_refused_once_it_passes_the_limit(transport: Transport) -> None:
    piece = b"x" * 1000
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    async with transport.served(max_body_bytes=LIMIT) as base:
        head = _head(transport, base, "Transfer-Encoding: chunked")
        # Ten chunks (10 kB) and never the final zero-length chunk: the answer comes anyway.
        answer = await _raw(base, head, [chunk] * 10, pause=0.01)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert _too_large(transport) in answer


@each_transport
async def test_bodies_within_the_limit_pass_whole(
    transport: Transport, http: httpx.AsyncClient
) -> None:
    body = transport.body(LIMIT)
    assert len(body) == LIMIT

    async def chunks() -> AsyncIterator[bytes]:
        yield body[:100]
        yield body[100:]

    async with transport.served(max_body_bytes=LIMIT) as base:
        assert (await transport.send(http, base, content=body)).status_code == 200
        assert (await transport.send(http, base, content=chunks())).status_code == 200
        too_big = await transport.send(http, base, content=transport.body(LIMIT + 1))
        _assert_refused(transport, too_big, 413, "payload_too_large")


@each_transport
async def test_without_the_token_a_large_body_gets_401_unread(transport: Transport) -> None:
    async with transport.served(token=TOKEN, max_body_bytes=LIMIT) as base:
        head = _head(transport, base, "Content-Length: 10000000")
        answer = await asyncio.wait_for(_raw(base, head, []), 3)
    assert answer.startswith(b"HTTP/1.1 401 ")


@each_transport
def test_the_limit_must_be_positive(transport: Transport) -> None:
    for limit in (0, -1, 1.5):
        with pytest.raises(BuilderError, match="max_body_bytes"):
            transport.build(8000, max_body_bytes=limit)


# ------------------------------------------------------------------------------ the rules


def test_the_default_hosts_follow_the_bind() -> None:
    assert default_hosts("127.0.0.1", 8000) == ("localhost:8000", "127.0.0.1:8000", "[::1]:8000")
    assert default_hosts("::1", None) == ("localhost", "127.0.0.1", "[::1]")
    assert default_hosts("10.0.0.5", 0) == ("localhost", "127.0.0.1", "[::1]", "10.0.0.5")
    assert default_hosts("fe80::1", 9) == ("localhost:9", "127.0.0.1:9", "[::1]:9", "[fe80::1]:9")
    for wildcard in ("0.0.0.0", "::", "[::]", ""):
        assert default_hosts(wildcard, 8000) is None
        assert hosts_for(wildcard, 8000, ()) is None
    assert hosts_for("0.0.0.0", 8000, ["api.example.com"]) == ("api.example.com",)


def test_host_patterns() -> None:
    allowed = HostAllowList(["Api.Example.com", "*.internal", "::1", "[::2]:80", "x:1"])
    for host in ("api.example.com:1", "a.internal:9", "[::1]", "[::1]:5", "[::2]:80", "x:1"):
        assert host in allowed, host
    for host in ("internal", "[::2]:81", "x:2", "x", "a b.internal", "example.com"):
        assert host not in allowed, host


# ------------------------------------------------------------------------------ the gate alone


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _call(gate: HttpGate, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await gate(scope, receive, send)
    return sent


def _scope(kind: str = "http", **headers: str) -> dict[str, Any]:
    raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return {"type": kind, "path": "/", "headers": raw}


@pytest.mark.parametrize("errors", ["json", "text"])
async def test_an_unreadable_content_length_is_400(errors: Any) -> None:
    gate = HttpGate(_ok, hosts=None, errors=errors)
    (start, body) = await _call(gate, _scope(content_length="ten"))
    assert start["status"] == 400
    assert (b"invalid_request" if errors == "json" else b"Bad Request: ") in body["body"]


async def test_a_refused_websocket_is_closed_with_policy_violation() -> None:
    gate = HttpGate(_ok, hosts=["localhost"], token=TOKEN)
    for scope in (_scope("websocket", host="evil"), _scope("websocket", host="localhost")):
        (close,) = await _call(gate, scope)
        assert (close["type"], close["code"]) == ("websocket.close", 1008)


async def test_lifespan_passes_through_untouched() -> None:
    gate = HttpGate(_ok, hosts=[], token=TOKEN)
    assert (await _call(gate, {"type": "lifespan"}))[0]["status"] == 200
