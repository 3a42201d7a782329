"""Secure by default, what is the HTTP server's own: every route behind the token, the OpenAPI
document, CORS, the settings. The gate's rules, shared with MCP and A2A (Host, Origin, the
token, the body limit), are tested against all three in ``tests/test_http_gate.py``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn

from daimon import BuilderError
from daimon.server import ServerSettings, create_app, serve

from .conftest import TOKEN, Calls, LiveServer, echo

Live = Callable[..., LiveServer]


def _every_operation(server: LiveServer) -> list[tuple[str, str]]:
    operations = []
    for path, methods in server.app.openapi()["paths"].items():
        for method in methods:
            operations.append(
                (method.upper(), path.replace("{session_id}", "s").replace("{model_id}", "echo"))
            )
    return operations


def test_every_route_but_health_needs_the_token(live: Live) -> None:
    server = live(echo(Calls()), token=TOKEN)
    client = server.client()
    operations = _every_operation(server)
    assert len(operations) >= 10
    for method, path in operations:
        body: dict[str, Any] | None = {"input": "x"} if path.startswith("/prompt") else None
        if path == "/v1/chat/completions":
            body = {"model": "echo", "messages": [{"role": "user", "content": "x"}]}
        if path == "/v1/responses":
            body = {"model": "echo", "input": "x"}
        if "{response_id}" in path:  # a background response of its own: cancel answers it too
            made = client.post(
                "/v1/responses",
                json={"model": "echo", "input": "x", "background": True},
                headers={"authorization": f"Bearer {TOKEN}"},
            )
            path = path.replace("{response_id}", made.json()["id"])
        if "{stream}" in path:  # a stream of its own, named by its first event's id
            with client.stream(
                "POST",
                "/prompt/stream",
                json={"input": "x"},
                headers={"authorization": f"Bearer {TOKEN}"},
            ) as reply:
                first = next(line for line in reply.iter_lines() if line.startswith("id: "))
            path = path.replace("{stream}", first.removeprefix("id: ").rpartition(":")[0])
        missing = client.request(method, path, json=body)
        wrong = client.request(method, path, json=body, headers={"authorization": "Bearer nope"})
        scheme = client.request(
            method, path, json=body, headers={"authorization": f"Basic {TOKEN}"}
        )
        right = client.request(
            method, path, json=body, headers={"authorization": f"Bearer {TOKEN}"}
        )
        if path == "/health":
            assert missing.status_code == 200
            continue
        for reply in (missing, wrong, scheme):
            assert reply.status_code == 401, (method, path, reply.text)
            assert reply.headers["www-authenticate"] == "Bearer"
            assert reply.json()["error"]["type"] == "unauthorized"
        assert right.status_code in (200, 204), (method, path, right.text)
    assert "missing bearer token" in client.get("/agents").json()["error"]["message"]


def test_the_openapi_document_declares_bearer_auth(live: Live) -> None:
    server = live(echo(Calls()), token=TOKEN)
    document = (
        server.client(headers={"authorization": f"Bearer {TOKEN}"}).get("/openapi.json").json()
    )
    assert document["components"]["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer"}
    }
    assert document["paths"]["/prompt"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in document["paths"]["/health"]["get"]


def test_configured_hosts_and_wildcards(live: Live) -> None:
    server = live(echo(Calls()), allowed_hosts=("api.example.com", "*.internal:8080"))
    client = server.client()
    assert client.get("/health", headers={"host": "api.example.com"}).status_code == 200
    assert client.get("/health", headers={"host": "api.example.com:9"}).status_code == 200
    assert client.get("/health", headers={"host": "a.b.internal:8080"}).status_code == 200
    assert client.get("/health", headers={"host": "a.internal:8081"}).status_code == 403
    assert client.get("/health", headers={"host": "*.internal:8080"}).status_code == 403
    assert client.get("/health").status_code == 403  # 127.0.0.1 is not in this list
    anything = live(echo(Calls()), allowed_hosts=("*",))
    assert anything.client().get("/health", headers={"host": "whatever"}).status_code == 200


def test_cors_is_off_unless_configured(live: Live) -> None:
    server = live(echo(Calls()), allowed_origins=("https://app.example.com",))
    client = server.client()
    headers = {"origin": "https://app.example.com", "access-control-request-method": "POST"}
    preflight = client.options("/prompt", headers=headers)
    assert "access-control-allow-origin" not in preflight.headers
    reply = client.post(
        "/prompt", json={"input": "x"}, headers={"origin": "https://app.example.com"}
    )
    assert "access-control-allow-origin" not in reply.headers


def test_cors_when_configured_answers_preflights_before_auth(live: Live) -> None:
    server = live(echo(Calls()), token=TOKEN, cors_origins=("https://app.example.com",))
    client = server.client()
    headers = {
        "origin": "https://app.example.com",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    preflight = client.options("/prompt", headers=headers)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example.com"
    reply = client.post(
        "/prompt",
        json={"input": "x"},
        headers={"origin": "https://app.example.com", "authorization": f"Bearer {TOKEN}"},
    )
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == "https://app.example.com"
    foreign = client.options("/prompt", headers={**headers, "origin": "https://evil.example"})
    assert foreign.status_code == 403


def test_bodies_within_the_limit_pass_whole(live: Live) -> None:
    server = live(echo(Calls()), max_body_bytes=4096)
    client = server.client()
    prefix, suffix = b'{"input": "', b'"}'
    body = prefix + b"y" * (4096 - len(prefix) - len(suffix)) + suffix
    assert len(body) == 4096
    reply = client.post("/prompt", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 200
    assert reply.json()["text"].startswith("echo: yyyy")

    def chunks() -> Any:
        yield prefix
        yield b"z" * 100
        yield suffix

    chunked = client.post("/prompt", content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 200
    assert chunked.json()["text"] == f"echo: {'z' * 100} (1 messages)"
    too_big = client.post(
        "/prompt", content=body + b" ", headers={"content-type": "application/json"}
    )
    assert too_big.status_code == 413


# ------------------------------------------------------------------------- exposure


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.com", ""])
def test_refuses_to_serve_beyond_loopback_without_a_token(host: str) -> None:
    with pytest.raises(BuilderError, match="without authentication"):
        ServerSettings(host=host)
    with pytest.raises(BuilderError, match="without authentication"):
        serve(echo(Calls()), host=host)


def test_a_wildcard_address_needs_the_allowed_host_names() -> None:
    with pytest.raises(BuilderError, match="needs allowed_hosts"):
        ServerSettings(host="0.0.0.0", token=TOKEN)
    settings = ServerSettings(host="0.0.0.0", token=TOKEN, allowed_hosts=("api.example.com",))
    assert settings.host_allowlist == frozenset({"api.example.com"})
    specific = ServerSettings(host="10.0.0.5", token=TOKEN, port=9000)
    assert "10.0.0.5:9000" in specific.host_allowlist
    assert "localhost:9000" in specific.host_allowlist


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_needs_no_token(host: str) -> None:
    assert ServerSettings(host=host).is_loopback


def test_the_process_exits_with_a_clear_message_instead_of_binding() -> None:
    script = (
        "from daimon import Agent\n"
        "from daimon.models import FunctionModel\n"
        "from daimon.server import serve\n"
        "serve(Agent(FunctionModel(lambda r: 'hi')), host='0.0.0.0', port=1)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0
    assert "refusing to serve on '0.0.0.0' without authentication" in result.stderr


def test_serve_defaults_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    configs: list[uvicorn.Config] = []

    def run(self: uvicorn.Server, sockets: object = None) -> None:
        configs.append(self.config)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    serve(echo(Calls()))
    serve(
        echo(Calls()),
        host="0.0.0.0",
        port=9001,
        token=TOKEN,
        settings=ServerSettings(allowed_hosts=("*",)),
    )
    default, exposed = configs
    assert (default.host, default.port) == ("127.0.0.1", 8000)
    assert default.server_header is False
    assert default.proxy_headers is False
    assert (exposed.host, exposed.port) == ("0.0.0.0", 9001)


@pytest.mark.parametrize(
    "options",
    [
        {"port": -1},
        {"port": 70000},
        {"token": ""},
        {"token": "has space"},
        {"max_body_bytes": 0},
        {"request_timeout": 0},
        {"request_timeout": float("inf")},
        {"heartbeat_interval": -1},
        {"allowed_hosts": ["list", "not", "tuple"]},
        {"cors_origins": ("",)},
    ],
)
def test_unusable_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(BuilderError):
        ServerSettings(**options)


def test_unusable_agents_are_refused() -> None:
    with pytest.raises(BuilderError, match="at least one agent"):
        create_app({})
    with pytest.raises(BuilderError, match="not usable in a URL"):
        create_app({"a/b": echo(Calls())})
    with pytest.raises(BuilderError, match="not an Agent"):
        create_app({"a": "agent"})  # type: ignore[dict-item]
    with pytest.raises(BuilderError, match="serve an Agent"):
        create_app([echo(Calls())])  # type: ignore[arg-type]
