"""An MCP server protected by OAuth, written with the official SDK (its authorization server too).

``build(port)`` is the SDK's ``MCPServer`` with ``auth=AuthSettings(...)`` and an in-memory
``OAuthAuthorizationServerProvider``: dynamic registration, the authorization code grant with
PKCE (approved at once: no person), refresh and revocation. Tests read :class:`Approver` to see
what happened and revoke tokens through it.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class Approver:
    """The authorization server's state: clients, codes and tokens, all in memory."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.tokens: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.authorized = 0
        self.refreshed = 0
        self.lifetime = 3600  # seconds an access token lives
        self.grants: dict[str, str] = {}  # identity assertion grants an IdP issued -> resource

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.authorized += 1
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or ["mcp"],
            expires_at=time.time() + 300,
            client_id=str(client.client_id),
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        self.tokens[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, resource=resource
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access,
            expires_in=self.lifetime,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        code = authorization_code
        return self._issue(code.client_id, code.scopes, code.resource)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refreshed += 1
        del self.refresh[refresh_token.token]
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, None)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return self.tokens.get(token)

    async def revoke_token(self, token: Any) -> None:
        self.tokens.pop(token.token, None)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: Any
    ) -> OAuthToken:
        """SEP-990: an ID-JAG the (test) identity provider issued, for its resource."""
        resource = self.grants.pop(params.assertion, None)
        if resource is None:
            raise TokenError("invalid_grant", "unknown identity assertion grant")
        return self._issue(str(client.client_id), ["mcp"], resource)

    def revoke_all(self) -> None:
        """Revoke every access token (refresh tokens stay good)."""
        self.tokens.clear()


def build(port: int, approver: Approver) -> Any:
    """The protected server's ASGI app, for ``http://127.0.0.1:<port>``."""
    base = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "protected",
        auth_server_provider=approver,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["mcp"], default_scopes=["mcp"]
            ),
            revocation_options=RevocationOptions(enabled=True),
            required_scopes=["mcp"],
            identity_assertion_enabled=True,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """Answers once authorized."""
        return "an authorized client"

    return server.streamable_http_app()
