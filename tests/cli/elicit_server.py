"""A stdio MCP server written with the official SDK whose ``book`` tool asks the user a form.

Not a test module: the CLI tests start it with ``daimon chat --mcp "<python> elicit_server.py"``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel, Field


class Booking(BaseModel):
    """The form: a string, an integer with a default, a boolean and a choice with a default."""

    name: str = Field(description="Who the room is for")
    nights: int = 2
    breakfast: bool
    room: Literal["single", "double", "suite"] = "double"


def ask_booking() -> Elicit[Booking]:
    """Resolves ``book``'s argument by asking the user (works in either protocol era)."""
    return Elicit("Booking details?", Booking)


server = MCPServer("booking")


@server.tool()
async def book(result: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
    """Book a room, asking the user for the details."""
    if result.action != "accept":
        return f"no booking ({result.action})"
    data = result.data
    return f"{data.name} {data.nights} nights breakfast={data.breakfast} room={data.room}"


if __name__ == "__main__":
    server.run()
