"""A daimon MCP client for the conformance suite's client scenarios, daimon's public API only.

    MCP_CONFORMANCE_SCENARIO=tools_call python tests/mcp/conformance/client_app.py URL
    python tests/mcp/conformance/client_app.py --serve SOCKET

The suite starts a test server for each client scenario and runs a command with the server's
URL appended, the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for some, settings in
``MCP_CONFORMANCE_CONTEXT`` (JSON: client credentials, ...). Each scenario does what a daimon
user would: connect with :class:`daimon.mcp.MCPClient`, list the tools, call the one the
scenario is about. Exit status 1 (with the error on stderr) when the client fails.

Run with a URL, it is that command. Starting Python and importing the MCP SDK costs about a
CPU-second, 26 times over, so the test runs it once with ``--serve SOCKET`` instead: it then
runs each scenario ``client_launcher.py`` (standard library only, milliseconds to start) hands
it over a Unix socket, in this one process, and sends back its output and exit status.

Elicitation is answered by a user who accepts the form as shown (so the schema's defaults
fill it in); the ``auth/`` scenarios connect with :class:`daimon.mcp.MCPOAuth`, the browser
step done by :func:`daimon.mcp.approve_at_once` (the suite's authorization servers approve at
once). What daimon's client cannot do, it does not pretend to: ``baseline.yml`` lists those
scenarios and what daimon lacks for each.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx2

from daimon.core.errors import MCPError
from daimon.mcp import MCPClient, MCPOAuth, approve_at_once
from daimon.tools import Elicitation

# The client ID metadata document URL the suite's CIMD scenarios expect (SEP-991).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"

# The tool each scenario's server offers, and the arguments to call it with.
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}


async def accept_as_shown(message: str, schema: Any) -> Elicitation:
    """The user accepts the form without changing anything: the defaults stand."""
    return Elicitation("accept", {})


async def authorization_server(url: str) -> str:
    """The MCP server's authorization server, which its operator would tell a user: read here
    from the server's protected-resource metadata (RFC 9728), as the suite gives no issuer."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.netloc}"
    async with httpx2.AsyncClient(timeout=10) as http:
        for where in (f"/.well-known/oauth-protected-resource{parts.path}", ""):
            found = await http.get(origin + (where or "/.well-known/oauth-protected-resource"))
            if found.status_code == 200:
                return str(found.json()["authorization_servers"][0]).rstrip("/")
    raise MCPError(f"no protected-resource metadata at {origin}")


async def oauth(scenario: str, url: str, context: dict[str, Any]) -> MCPOAuth | None:
    """How the scenario's client authorizes: as the context says, else a user signing in."""
    if not scenario.startswith("auth/"):
        return None
    client_id, secret = context.get("client_id"), context.get("client_secret")
    if "idp_id_token" in context:
        return MCPOAuth.identity_assertion(
            str(client_id),
            str(secret),
            issuer=await authorization_server(url),
            id_token=str(context["idp_id_token"]),
            idp_token_endpoint=str(context["idp_token_endpoint"]),
            idp_client_id=context.get("idp_client_id"),
        )
    if "private_key_pem" in context:
        return MCPOAuth.private_key_jwt(
            str(client_id),
            str(context["private_key_pem"]),
            algorithm=str(context.get("signing_algorithm", "ES256")),
        )
    if scenario == "auth/client-credentials-basic":
        return MCPOAuth.client_credentials(str(client_id), str(secret))
    return MCPOAuth.authorization_code(
        approve_at_once,
        client_id=None if client_id is None else str(client_id),
        client_secret=None if secret is None else str(secret),
        client_metadata_url=CLIENT_METADATA_URL,
    )


async def run(scenario: str, url: str, context: dict[str, Any], say: Callable[[str], Any]) -> None:
    """Connect, list the tools, call the scenario's tool (or every tool the server lists)."""
    async with MCPClient.http(
        url,
        name=scenario,
        auth=await oauth(scenario, url, context),
        on_elicit=accept_as_shown,
        connect_timeout=20,
        call_timeout=20,
    ) as client:
        tools = await client.tools()
        say(f"tools: {[t.remote_name for t in tools]}")
        if scenario in CALLS:
            name, arguments = CALLS[scenario]
            output = await client.call_tool(name, arguments)
            say(f"{name}: {output.content}")
            if output.is_error:
                raise MCPError(f"{name} returned an error: {output.content}")
            return
        for listed in tools:  # the auth scenarios' servers offer a tool or two with no arguments
            output = await client.call_tool(listed.remote_name, {})
            say(f"{listed.remote_name}: {output.content}")


async def outcome(request: dict[str, Any]) -> dict[str, Any]:
    """Run one scenario; its exit status and output, as the command would give them."""
    said: list[str] = []
    scenario = str(request.get("scenario", ""))
    try:
        await run(scenario, str(request["url"]), dict(request.get("context") or {}), said.append)
    except MCPError as exc:
        return {"code": 1, "stdout": _lines(said), "stderr": f"{scenario}: {exc}\n"}
    except Exception:
        return {"code": 1, "stdout": _lines(said), "stderr": traceback.format_exc()}
    return {"code": 0, "stdout": _lines(said), "stderr": ""}


def _lines(said: list[str]) -> str:
    return "".join(line + "\n" for line in said)


async def serve(path: str) -> None:
    """Run scenarios handed over the Unix socket ``path`` until stdin closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            reply = await outcome(json.loads(await reader.readline()))
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_unix_server(handle, path)
    async with server:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)


def main() -> int:
    """Run the scenario named by the environment against the URL given (or ``--serve``)."""
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(serve(sys.argv[2]))
        return 0
    if len(sys.argv) != 2:
        print("usage: client_app.py SERVER_URL | --serve SOCKET", file=sys.stderr)
        return 2
    request = {
        "scenario": os.environ.get("MCP_CONFORMANCE_SCENARIO", ""),
        "url": sys.argv[1],
        "context": json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}"),
    }
    reply = asyncio.run(outcome(request))
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    return int(reply["code"])


if __name__ == "__main__":
    sys.exit(main())
