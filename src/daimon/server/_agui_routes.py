"""The AG-UI routes: ``POST /agui`` and ``POST /agui/{agent}`` (see :mod:`daimon.server._agui`).

The AG-UI protocol's types (``ag_ui``, pydantic models) load on the first AG-UI request, not
when the app is made: a server that never meets an AG-UI client does not pay for them (about a
third of a second on this project's machine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import Response

from daimon.server._agents import ServedAgents
from daimon.server._run_log import RunLogs
from daimon.server._settings import ServerSettings
from daimon.server._state import ServerState

if TYPE_CHECKING:
    from daimon.server._agui import Endpoint

__all__ = ("add_agui_routes",)


def add_agui_routes(
    router: APIRouter,
    served: ServedAgents,
    settings: ServerSettings,
    state: ServerState,
    logs: RunLogs,
) -> None:
    """Add ``POST /agui`` and ``POST /agui/{agent}``: paused runs and streams in ``state``.

    They stay out of the OpenAPI document: the AG-UI spec defines their body and events.
    """
    made: list[Endpoint] = []

    def endpoint() -> Endpoint:
        if not made:
            from daimon.server._agui import Endpoint

            made.append(Endpoint(served, settings, state, logs))
        return made[0]

    @router.post("/agui", include_in_schema=False)
    async def agui_default(request: Request) -> Response:
        return await endpoint().answer(served.default, request)

    @router.post("/agui/{agent}", include_in_schema=False)
    async def agui(agent: str, request: Request) -> Response:
        return await endpoint().answer(agent, request)
