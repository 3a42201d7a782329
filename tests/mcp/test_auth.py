"""MCPClient with OAuth 2.1 against an MCP server and authorization server of the official SDK."""

from __future__ import annotations

import asyncio
import logging
import socket
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp.shared.auth import OAuthClientInformationFull
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daimon.core.errors import BuilderError, MCPError
from daimon.mcp import (
    MCPClient,
    MCPOAuth,
    MemoryTokenStore,
    approve_at_once,
    sign_in_with_browser,
)
from daimon.testing.servers import serving

from .conftest import load

OAUTH_SERVER = Path(__file__).with_name("oauth_server.py")


def _protected() -> tuple[Any, Any]:
    module = load(OAUTH_SERVER)
    approver = module.Approver()
    return approver, lambda port: module.build(port, approver)


async def test_a_user_signs_in_once_and_the_tokens_are_kept_and_refreshed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    approver, app = _protected()
    store = MemoryTokenStore()
    seen: list[str] = []

    async def browser(url: str) -> str:
        seen.append(url)
        return await approve_at_once(url)

    auth = MCPOAuth.authorization_code(browser, token_store=store)
    caplog.set_level(logging.DEBUG)
    async with serving(app_for_port=app) as base:
        async with MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy") as client:
            assert (await client.call_tool("whoami", {})).content == "an authorized client"
        assert approver.authorized == 1 and len(approver.clients) == 1  # registered itself
        (url,) = seen
        assert "code_challenge_method=S256" in url and "resource=" in url
        tokens = await store.get_tokens()
        assert tokens is not None and tokens.access_token in approver.tokens

        # a revoked access token: the server answers 401 and the user signs in again
        approver.revoke_all()
        async with MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy") as client:
            assert (await client.call_tool("whoami", {})).content == "an authorized client"
        assert approver.authorized == 2
        renewed = await store.get_tokens()
        assert renewed is not None and renewed.access_token != tokens.access_token

        # an access token that expires is refreshed, with no sign-in
        approver.lifetime = 1
        approver.revoke_all()
        async with MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy") as client:
            await asyncio.sleep(1.5)  # past the token's lifetime
            assert (await client.call_tool("whoami", {})).content == "an authorized client"
        assert (approver.authorized, approver.refreshed) == (3, 1)

    secrets = {tokens.access_token, renewed.access_token, str(tokens.refresh_token)}
    logged = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("daimon"))
    assert not any(secret in logged for secret in secrets)
    assert "token" not in repr(auth).lower() and "set" in repr(store)


async def test_a_refused_sign_in_is_a_clear_error() -> None:
    approver, app = _protected()

    async def refuse(url: str) -> str:
        return "http://127.0.0.1:33418/callback?error=access_denied&error_description=nope"

    async with serving(app_for_port=app) as base:
        client = MCPClient.http(
            f"{base}/mcp", auth=MCPOAuth.authorization_code(refuse), protocol="legacy"
        )
        with pytest.raises(MCPError, match="the authorization server refused: nope"):
            await client.connect()
    assert approver.tokens == {}


def _metadata_app(issuer_path: str, authorize: str, token: str = "{base}/token") -> Any:
    """A server whose authorization-server metadata is forged: a wrong issuer, or endpoints."""

    def build(port: int) -> Any:
        base = f"http://127.0.0.1:{port}"

        async def mcp(request: Request) -> Response:
            hint = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
            return Response(status_code=401, headers={"www-authenticate": hint})

        async def resource(request: Request) -> Response:
            return JSONResponse({"resource": f"{base}/mcp", "authorization_servers": [base]})

        async def server(request: Request) -> Response:
            return JSONResponse(
                {
                    "issuer": base + issuer_path,
                    "authorization_endpoint": authorize.format(base=base),
                    "token_endpoint": token.format(base=base),
                    "registration_endpoint": f"{base}/register",
                    "response_types_supported": ["code"],
                    "code_challenge_methods_supported": ["S256"],
                }
            )

        async def register(request: Request) -> Response:
            sent = await request.json()
            return JSONResponse({**sent, "client_id": "forged"}, status_code=201)

        return Starlette(
            routes=[
                Route("/register", register, methods=["POST"]),
                Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]),
                Route("/.well-known/oauth-protected-resource/mcp", resource),
                Route("/.well-known/oauth-authorization-server", server),
                Route("/.well-known/openid-configuration", server),
            ]
        )

    return build


async def test_an_authorization_server_with_a_mismatched_issuer_is_refused() -> None:
    signed_in: list[str] = []

    async def browser(url: str) -> str:
        signed_in.append(url)
        return url

    app = _metadata_app("/elsewhere", "{base}/authorize")
    async with serving(app_for_port=app) as base:
        auth = MCPOAuth.authorization_code(browser)
        client = MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy")
        with pytest.raises(MCPError, match="issuer mismatch"):
            await client.connect()
    assert signed_in == []  # the user was never sent anywhere


def test_oauth_settings_that_cannot_work_are_refused_at_once() -> None:
    with pytest.raises(BuilderError, match="a client_secret needs its client_id"):
        MCPOAuth.authorization_code(approve_at_once, client_secret="s")
    with pytest.raises(BuilderError, match="client_metadata_url must be a valid HTTPS URL"):
        MCPOAuth.authorization_code(approve_at_once, client_metadata_url="http://x.example/c")
    with pytest.raises(BuilderError, match="a token or auth, not both"):
        MCPClient.http(
            "http://127.0.0.1:1/mcp", token="t", auth=MCPOAuth.client_credentials("i", "s")
        )
    assert repr(MCPOAuth.client_credentials("id", "secret")) == "MCPOAuth(client credentials)"


async def test_an_authorization_endpoint_off_loopback_without_https_is_refused() -> None:
    signed_in: list[str] = []

    async def browser(url: str) -> str:
        signed_in.append(url)
        return url

    app = _metadata_app("", "http://login.example/authorize")  # the token endpoint is fine
    async with serving(app_for_port=app) as base:
        auth = MCPOAuth.authorization_code(browser)
        client = MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy")
        with pytest.raises(MCPError, match="must be HTTPS unless it is on loopback"):
            await client.connect()
    assert signed_in == []


async def test_a_token_endpoint_off_loopback_without_https_is_never_sent_the_code() -> None:
    async def browser(url: str) -> str:
        state = parse_qs(urlsplit(url).query)["state"][0]
        return f"http://127.0.0.1:33418/callback?code=secret-code&state={state}"

    app = _metadata_app("", "{base}/authorize", token="http://tokens.example/token")
    async with serving(app_for_port=app) as base:
        auth = MCPOAuth.authorization_code(browser)
        client = MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy")
        with pytest.raises(MCPError, match=r"OAuth request to http://tokens\.example"):
            await client.connect()


JAG = "urn:ietf:params:oauth:token-type:id-jag"


def _identity_provider(approver: Any, seen: list[dict[str, str]]) -> Any:
    """A stand-in enterprise identity provider: RFC 8693 from the user's ID token to an ID-JAG."""

    async def token(request: Request) -> Response:
        form = dict(await request.form())
        seen.append({key: str(value) for key, value in form.items()})
        if form.get("subject_token") != "the-users-id-token":
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        grant = f"jag-{len(seen)}"
        approver.grants[grant] = str(form["resource"])
        return JSONResponse({"access_token": grant, "issued_token_type": JAG, "token_type": "N_A"})

    return Starlette(routes=[Route("/token", token, methods=["POST"])])


async def test_cross_app_access_exchanges_the_users_id_token_for_an_access_token() -> None:
    approver, app = _protected()
    approver.clients["app"] = OAuthClientInformationFull(
        client_id="app",
        client_secret="s3cret",
        redirect_uris=None,
        grant_types=["urn:ietf:params:oauth:grant-type:jwt-bearer"],
        token_endpoint_auth_method="client_secret_basic",
    )
    seen: list[dict[str, str]] = []
    async with (
        serving(_identity_provider(approver, seen)) as idp,
        serving(app_for_port=app) as base,
    ):
        auth = MCPOAuth.identity_assertion(
            "app",
            "s3cret",
            issuer=base,
            id_token="the-users-id-token",
            idp_token_endpoint=f"{idp}/token",
            idp_client_id="app-at-idp",
        )
        async with MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy") as client:
            assert (await client.call_tool("whoami", {})).content == "an authorized client"
        (exchange,) = seen
        assert exchange["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
        assert exchange["requested_token_type"] == JAG
        assert (exchange["audience"], exchange["resource"]) == (base, f"{base}/mcp")
        assert exchange["client_id"] == "app-at-idp"
        assert approver.authorized == 0  # nobody signed in at the MCP server's own server

        wrong = MCPOAuth.identity_assertion(
            "app", "s3cret", issuer=base, id_token="forged", idp_token_endpoint=f"{idp}/token"
        )
        with pytest.raises(MCPError, match="refused the token exchange: invalid_grant"):
            await MCPClient.http(f"{base}/mcp", auth=wrong, protocol="legacy").connect()


def test_cross_app_access_settings_that_cannot_work_are_refused_at_once() -> None:
    settings: dict[str, Any] = {"issuer": "https://as.example", "id_token": "t"}
    with pytest.raises(BuilderError, match="must be HTTPS unless it is on loopback"):
        MCPOAuth.identity_assertion(
            "app", "s", idp_token_endpoint="http://idp.example/token", **settings
        )
    with pytest.raises(BuilderError, match="client_secret is required"):
        MCPOAuth.identity_assertion(
            "app", "", idp_token_endpoint="https://idp.example/token", **settings
        )


async def test_a_person_signs_in_with_a_browser_that_comes_back_to_a_loopback_listener(
    capsys: pytest.CaptureFixture[str],
) -> None:
    approver, app = _protected()
    assert approver.authorized == 0
    visits: list[asyncio.Task[Any]] = []

    def browser(url: str) -> None:  # a browser: follows the redirects to the callback
        async def visit() -> int:
            async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as http:
                return (await http.get(url)).status_code

        visits.append(loop.create_task(visit()))

    loop = asyncio.get_running_loop()
    port = _free_port()
    auth = MCPOAuth.authorization_code(
        partial(sign_in_with_browser, open_url=browser),
        redirect_uri=f"http://127.0.0.1:{port}/callback",
    )
    async with (
        serving(app_for_port=app) as base,
        MCPClient.http(f"{base}/mcp", auth=auth, protocol="legacy") as client,
    ):
        assert (await client.call_tool("whoami", {})).content == "an authorized client"
    assert [await visit for visit in visits] == [200]  # the browser was told it is done
    assert approver.authorized == 1
    assert "Sign in to the MCP server: http://127.0.0.1:" in capsys.readouterr().err


async def test_signing_in_with_a_browser_needs_a_loopback_redirect_and_a_visit() -> None:
    elsewhere = "https://as.example/authorize?redirect_uri=https%3A%2F%2Fapp.example%2Fcb"
    with pytest.raises(MCPError, match="redirect_uri on loopback"):
        await sign_in_with_browser(elsewhere, open_url=lambda url: None)
    port = _free_port()
    nobody = f"https://as.example/authorize?redirect_uri=http%3A%2F%2F127.0.0.1%3A{port}%2Fcb"
    with pytest.raises(MCPError, match=r"no sign-in within 0\.2s"):
        await sign_in_with_browser(nobody, wait_seconds=0.2, open_url=lambda url: None)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
