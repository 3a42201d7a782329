"""OAuth 2.1 for MCP servers over HTTP: :class:`MCPOAuth`, given as ``MCPClient.http(auth=...)``.

The MCP authorization spec is carried out by the SDK's OAuth client (``mcp.client.auth``),
which daimon configures and never re-implements: on a 401 it discovers the protected
resource's metadata (RFC 9728: the ``WWW-Authenticate`` hint, then the well-known paths) and
the authorization server's (RFC 8414 and OpenID discovery, with the 2025-03-26 fallbacks),
registers the client (a client ID metadata document when the server supports one and a URL is
given, else dynamic registration, unless the client is pre-registered), runs the
authorization code grant with PKCE (S256) and the RFC 8707 ``resource``, picks scopes
(``WWW-Authenticate``, else ``scopes_supported``), refreshes tokens, and steps the scope up
on ``403 insufficient_scope``. daimon adds the pieces a program supplies: the browser step
(``on_authorize``), a token store, and the machine-to-machine grants.

Tokens and secrets never appear in a ``repr`` or a log line of daimon's.
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import asyncio
import sys
import warnings
import webbrowser
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Literal, Protocol
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPDeprecationWarning

from daimon._http_gate import is_loopback
from daimon.core.errors import BuilderError, MCPError

__all__ = (
    "AuthorizeHandler",
    "MCPOAuth",
    "MCPTokenStore",
    "MemoryTokenStore",
    "approve_at_once",
    "sign_in_with_browser",
)

AuthorizeHandler = Callable[[str], Awaitable[str]]
"""The browser step: given the authorization URL, the URL the user's browser was sent back to
(the redirect URI, with ``code`` and ``state``)."""

DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"


class MCPTokenStore(Protocol):
    """Where an :class:`MCPOAuth` keeps tokens and registration (the SDK's ``TokenStorage``).

    Keep them as secrets: an access or refresh token is a credential.
    """

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, if any."""
        ...

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Store new tokens (after a grant or a refresh)."""
        ...

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The stored client registration, if any."""
        ...

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Store the client registration."""
        ...


class MemoryTokenStore:
    """Tokens and registration in memory, for one process's lifetime (the default store)."""

    __slots__ = ("_client", "_tokens")

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self._tokens: OAuthToken | None = None
        self._client = client_info

    def __repr__(self) -> str:
        return f"MemoryTokenStore(tokens={'set' if self._tokens else 'none'})"

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, if any."""
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Store new tokens."""
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The stored registration, if any."""
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Store the registration."""
        self._client = client_info


async def approve_at_once(url: str) -> str:
    """The browser step for authorization servers that approve without a person (tests, CI).

    Requests the authorization URL and returns where its redirect points. A real
    authorization server shows a sign-in page instead; use a handler that opens a browser.

    Raises:
        MCPError: The authorization server did not redirect.
    """
    async with httpx2.AsyncClient(follow_redirects=False, timeout=30.0) as http:
        response = await http.get(url)
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise MCPError(
            f"the authorization server answered {response.status_code} without a redirect; "
            "it needs a person: give MCPOAuth an on_authorize that opens a browser"
        )
    return str(location)


async def sign_in_with_browser(
    url: str,
    *,
    wait_seconds: float = 300.0,
    open_url: Callable[[str], object] | None = None,
) -> str:
    """The browser step for a person: open the sign-in page, wait for the redirect back.

    Prints the URL (to stderr, for a terminal without a browser), opens it with
    :mod:`webbrowser` (or ``open_url``), and listens once on the redirect URI's loopback
    address for the authorization server sending the browser back. The redirect URI must be
    ``http://`` on loopback (``MCPOAuth.authorization_code``'s default is).

    Raises:
        MCPError: The redirect URI is not on loopback, its port is taken, or no redirect came
            within ``wait_seconds``.
    """
    redirect = urlsplit(parse_qs(urlsplit(url).query).get("redirect_uri", [""])[0])
    host, port = redirect.hostname or "", redirect.port or 80
    if redirect.scheme != "http" or not is_loopback(host):
        raise MCPError("signing in with a browser needs an http:// redirect_uri on loopback")
    landed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    callback = partial(_one_redirect, landed, f"http://{redirect.netloc}", redirect.path or "/")
    try:
        listener = await asyncio.start_server(callback, host, port)
    except OSError as exc:
        raise MCPError(f"cannot listen for the sign-in redirect on {host}:{port}: {exc}") from exc
    async with listener:
        sys.stderr.write(f"Sign in to the MCP server: {url}\n")
        sys.stderr.flush()
        await asyncio.to_thread(open_url or webbrowser.open, url)
        try:
            return await asyncio.wait_for(landed, wait_seconds)
        except TimeoutError:
            raise MCPError(f"no sign-in within {wait_seconds:g}s") from None


async def _one_redirect(
    landed: asyncio.Future[str],
    origin: str,
    path: str,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Answer one HTTP request; a GET of the redirect path completes ``landed``."""
    try:
        request_line = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1")
        while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
            pass
        method, target, *_ = [*request_line.split(), "", ""]
        found = method == "GET" and urlsplit(target).path == path
        body = b"Signed in: you can close this window." if found else b"Not found."
        status = b"200 OK" if found else b"404 Not Found"
        writer.write(
            b"HTTP/1.1 "
            + status
            + b"\r\ncontent-type: text/plain\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )
        await writer.drain()
        if found and not landed.done():
            landed.set_result(origin + target)
    except (TimeoutError, ConnectionError):
        pass
    finally:
        writer.close()


def _callback_result(redirected_to: str) -> AuthorizationCodeResult:
    query = parse_qs(urlsplit(redirected_to).query)
    if "error" in query:
        reason = query.get("error_description", query["error"])[0]
        raise MCPError(f"the authorization server refused: {reason}")
    if "code" not in query:
        raise MCPError("the authorization redirect carries no code")
    return AuthorizationCodeResult(
        code=query["code"][0],
        state=query.get("state", [None])[0],
        iss=query.get("iss", [None])[0],
    )


def secure_endpoint(server_url: str) -> Callable[[httpx2.Request], Awaitable[None]]:
    """An httpx request hook refusing plain HTTP off loopback, except to the MCP server itself.

    The OAuth flow sends codes, verifiers, secrets and tokens to endpoints that metadata
    documents name; a document naming ``http://`` endpoints elsewhere would have them sent in
    clear. The MCP server's own origin is the user's choice and stays allowed.
    """
    own = urlsplit(server_url)

    async def check(request: httpx2.Request) -> None:
        url = request.url
        if url.scheme == "https" or is_loopback(url.host):
            return
        if (url.scheme, url.host, url.port) == (own.scheme, own.hostname, own.port):
            return
        raise MCPError(
            f"refusing to send an OAuth request to {url.scheme}://{url.host}: an authorization "
            "endpoint must be HTTPS unless it is on loopback"
        )

    return check


def _check_authorization_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme != "https" and not is_loopback(parts.hostname or ""):
        raise MCPError(
            f"refusing to send the user to {parts.scheme}://{parts.hostname}: an authorization "
            "endpoint must be HTTPS unless it is on loopback"
        )


class _Browser:
    """The SDK's redirect and callback handlers, around one ``on_authorize``."""

    __slots__ = ("_landed", "_on_authorize")

    def __init__(self, on_authorize: AuthorizeHandler) -> None:
        self._on_authorize = on_authorize
        self._landed: str | None = None

    async def redirect(self, url: str) -> None:
        _check_authorization_url(url)
        self._landed = await self._on_authorize(url)

    async def callback(self) -> AuthorizationCodeResult:
        landed, self._landed = self._landed, None
        if landed is None:
            raise MCPError("the authorization step returned no redirect URL")
        return _callback_result(landed)


class MCPOAuth:
    """How :class:`~daimon.mcp.MCPClient` authorizes with an MCP server (OAuth 2.1).

    Build one with :meth:`authorization_code` (a user signs in), :meth:`client_credentials`
    or :meth:`private_key_jwt` (a service, no user); pass it as ``MCPClient.http(url,
    auth=...)``. One ``MCPOAuth`` serves one server URL.
    """

    __slots__ = ("_build", "kind")

    def __init__(self, kind: str, build: Callable[[str], httpx2.Auth]) -> None:
        self.kind = kind
        self._build = build

    def __repr__(self) -> str:
        return f"MCPOAuth({self.kind})"

    def provider(self, server_url: str) -> httpx2.Auth:
        """The SDK's OAuth provider (an ``httpx2.Auth``) for ``server_url``."""
        return self._build(server_url)

    @classmethod
    def authorization_code(
        cls,
        on_authorize: AuthorizeHandler,
        *,
        redirect_uri: str = DEFAULT_REDIRECT_URI,
        client_name: str = "daimon",
        scope: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        client_metadata_url: str | None = None,
        token_store: MCPTokenStore | None = None,
    ) -> MCPOAuth:
        """A user signs in through a browser (authorization code with PKCE).

        Args:
            on_authorize: The browser step: opens the URL it is given and returns the URL
                the browser came back to (:func:`approve_at_once` for servers that need no
                person).
            redirect_uri: Where the authorization server sends the browser back.
            client_name: The name registered with the authorization server.
            scope: The scopes to ask for; by default the server's challenge decides.
            client_id: A client registered beforehand (no dynamic registration then).
            client_secret: Its secret, if it has one (sent with HTTP Basic).
            client_metadata_url: An HTTPS URL serving this client's metadata document, used
                as its client ID where the server supports that (instead of registering).
            token_store: Where tokens and the registration are kept (memory by default).

        Raises:
            BuilderError: ``client_metadata_url`` is not an HTTPS URL with a path, or a
                ``client_secret`` is given without a ``client_id``.
        """
        if client_secret is not None and client_id is None:
            raise BuilderError("MCPOAuth: a client_secret needs its client_id")
        metadata = OAuthClientMetadata(
            client_name=client_name,
            redirect_uris=[redirect_uri],  # type: ignore[list-item]  # pydantic parses it
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            scope=scope,
            token_endpoint_auth_method="client_secret_basic" if client_secret else "none",
        )
        registered = None
        if client_id is not None:
            registered = OAuthClientInformationFull(
                client_id=client_id,
                client_secret=client_secret,
                redirect_uris=[redirect_uri],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
                token_endpoint_auth_method="client_secret_basic" if client_secret else "none",
                scope=scope,
            )

        def build(server_url: str) -> httpx2.Auth:
            store = token_store if token_store is not None else MemoryTokenStore(registered)
            browser = _Browser(on_authorize)
            try:
                return OAuthClientProvider(
                    server_url,
                    metadata,
                    store,
                    redirect_handler=browser.redirect,
                    callback_handler=browser.callback,
                    client_metadata_url=client_metadata_url,
                )
            except ValueError as exc:
                raise BuilderError(f"MCPOAuth: {exc}") from exc

        if client_metadata_url is not None:
            build("https://check.invalid/mcp")  # its URL is checked now, not at connect
        return cls("authorization code", build)

    @classmethod
    def client_credentials(
        cls,
        client_id: str,
        client_secret: str,
        *,
        scope: str | None = None,
        issuer: str | None = None,
        method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic",
        token_store: MCPTokenStore | None = None,
    ) -> MCPOAuth:
        """A service authorizes as itself with a client ID and secret (no user).

        ``issuer`` names the authorization server the credentials belong to; the client
        then refuses any other the MCP server points at. Give it where it is known.
        """

        def build(server_url: str) -> httpx2.Auth:
            with warnings.catch_warnings():  # issuer=None: the SDK warns; daimon documents it
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                return ClientCredentialsOAuthProvider(
                    server_url,
                    token_store if token_store is not None else MemoryTokenStore(),
                    client_id,
                    client_secret,
                    token_endpoint_auth_method=method,
                    scope=scope,
                    issuer=issuer,
                )

        return cls("client credentials", build)

    @classmethod
    def private_key_jwt(
        cls,
        client_id: str,
        private_key_pem: str,
        *,
        algorithm: str = "ES256",
        scope: str | None = None,
        issuer: str | None = None,
        token_store: MCPTokenStore | None = None,
    ) -> MCPOAuth:
        """A service authorizes with a JWT signed by its private key (RFC 7523; no user)."""
        assertion = SignedJWTParameters(
            issuer=client_id,
            subject=client_id,
            signing_key=private_key_pem,
            signing_algorithm=algorithm,
        ).create_assertion_provider()

        def build(server_url: str) -> httpx2.Auth:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                return PrivateKeyJWTOAuthProvider(
                    server_url,
                    token_store if token_store is not None else MemoryTokenStore(),
                    client_id,
                    assertion,
                    scope=scope,
                    issuer=issuer,
                )

        return cls("private key JWT", build)

    @classmethod
    def identity_assertion(
        cls,
        client_id: str,
        client_secret: str,
        *,
        issuer: str,
        id_token: str | Callable[[], Awaitable[str]],
        idp_token_endpoint: str,
        idp_client_id: str | None = None,
        scope: str | None = None,
        method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic",
        token_store: MCPTokenStore | None = None,
    ) -> MCPOAuth:
        """Cross-app access (SEP-990): the user's enterprise sign-in stands for the sign-in.

        The user's ID token from the enterprise identity provider is exchanged there (RFC 8693)
        for an identity assertion grant (ID-JAG) naming the MCP server's authorization server
        and the MCP server; that grant is then exchanged at ``issuer`` for an access token
        (RFC 7523 jwt-bearer), the client authenticating with its ID and secret.

        Args:
            client_id: The client's ID at the MCP server's authorization server.
            client_secret: Its secret there.
            issuer: That authorization server's issuer: configured, never discovered, since
                the grant and the secret go there.
            id_token: The user's ID token, or a coroutine function giving the current one.
            idp_token_endpoint: The identity provider's token endpoint (HTTPS, or loopback).
            idp_client_id: The client's ID at the identity provider, when it wants one.
            scope: The scopes to ask for.
            method: How the client authenticates at ``issuer``'s token endpoint.
            token_store: Where tokens are kept (memory by default).

        Raises:
            BuilderError: ``idp_token_endpoint`` is plain HTTP off loopback.
        """
        _require_secure("the identity provider's token endpoint", idp_token_endpoint)
        exchange = _IdTokenExchange(id_token, idp_token_endpoint, idp_client_id)

        def build(server_url: str) -> httpx2.Auth:
            try:
                return IdentityAssertionOAuthProvider(
                    server_url,
                    token_store if token_store is not None else MemoryTokenStore(),
                    client_id,
                    client_secret,
                    issuer,
                    exchange.grant,
                    scope=scope,
                    token_endpoint_auth_method=method,
                )
            except ValueError as exc:
                raise BuilderError(f"MCPOAuth: {exc}") from exc

        build("https://check.invalid/mcp")  # a missing secret or issuer is refused now
        return cls("identity assertion", build)


_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
_ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


def _require_secure(what: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme != "https" and not (
        parts.scheme == "http" and is_loopback(parts.hostname or "")
    ):
        raise BuilderError(f"MCPOAuth: {what} must be HTTPS unless it is on loopback, got {url!r}")


class _IdTokenExchange:
    """RFC 8693 at the identity provider: the user's ID token for an ID-JAG (SEP-990)."""

    __slots__ = ("_client_id", "_endpoint", "_id_token")

    def __init__(
        self,
        id_token: str | Callable[[], Awaitable[str]],
        endpoint: str,
        client_id: str | None,
    ) -> None:
        self._id_token = id_token
        self._endpoint = endpoint
        self._client_id = client_id

    async def grant(self, audience: str, resource: str) -> str:
        """The ID-JAG for ``audience`` (the authorization server) and ``resource``."""
        token = self._id_token if isinstance(self._id_token, str) else await self._id_token()
        form = {
            "grant_type": _TOKEN_EXCHANGE,
            "subject_token": token,
            "subject_token_type": _ID_TOKEN,
            "requested_token_type": _ID_JAG,
            "audience": audience,
            "resource": resource,
        }
        if self._client_id is not None:
            form["client_id"] = self._client_id
        async with httpx2.AsyncClient(timeout=30.0, follow_redirects=False) as http:
            response = await http.post(self._endpoint, data=form)
        body = _json_object(response)
        granted = body.get("access_token")
        if response.status_code != 200 or not isinstance(granted, str):
            reason = body.get("error_description") or body.get("error") or response.status_code
            raise MCPError(f"the identity provider refused the token exchange: {reason}")
        if body.get("issued_token_type") != _ID_JAG:
            raise MCPError("the identity provider did not issue an identity assertion grant")
        return granted


def _json_object(response: httpx2.Response) -> dict[str, object]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
