"""A daimon MCP client for the conformance suite's client scenarios, daimon's public API only.

    MCP_CONFORMANCE_SCENARIO=tools_call python tests/mcp/conformance/client_app.py URL

The suite starts a test server for each client scenario and runs this program with the
server's URL appended, the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for some,
settings in ``MCP_CONFORMANCE_CONTEXT`` (JSON: client credentials, ...). Each scenario does what
a daimon user would: connect with :class:`daimon.mcp.MCPClient`, list the tools, call the one
the scenario is about. Exit status 1 (with the error on stderr) when the client fails.

What daimon's client cannot do yet, it does not pretend to: there is no OAuth (the ``auth/``
scenarios' servers answer 401 and the client gives up) and no elicitation handler.
``baseline.yml`` lists those scenarios and what daimon lacks for each.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from daimon.core.errors import MCPError
from daimon.mcp import MCPClient

# The tool each scenario's server offers, and the arguments to call it with.
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "sse-retry": ("test_reconnection", {}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
}


async def run(scenario: str, url: str, context: dict[str, Any]) -> None:
    """Connect, list the tools, call the scenario's tool (or every tool the server lists)."""
    async with MCPClient.http(url, name=scenario, connect_timeout=20, call_timeout=20) as client:
        tools = await client.tools()
        print(f"tools: {[t.remote_name for t in tools]}")
        if scenario in CALLS:
            name, arguments = CALLS[scenario]
            output = await client.call_tool(name, arguments)
            print(f"{name}: {output.content}")
            if output.is_error:
                raise MCPError(f"{name} returned an error: {output.content}")
            return
        for listed in tools:  # the auth scenarios' servers offer a tool or two with no arguments
            output = await client.call_tool(listed.remote_name, {})
            print(f"{listed.remote_name}: {output.content}")


def main() -> int:
    """Run the scenario named by the environment against the URL given."""
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    if len(sys.argv) != 2:
        print("usage: client_app.py SERVER_URL (MCP_CONFORMANCE_SCENARIO set)", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(scenario, sys.argv[1], context))
    except MCPError as exc:
        print(f"{scenario}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
