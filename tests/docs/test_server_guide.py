"""The server guide's route table lists every route the app serves, and nothing else."""

from __future__ import annotations

import re

from starlette.routing import Route

from daimon import Agent
from daimon.models import ScriptedModel
from daimon.server import ServerSettings, create_app

from .markdown import ROOT

GUIDE = ROOT / "docs" / "guides" / "server.md"
_ROUTE = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`]*)`")


def _table_routes() -> set[tuple[str, str]]:
    """``(method, path)`` of each route the first column of the guide's route table names."""
    text = GUIDE.read_text(encoding="utf-8")
    table = text[text.index("| route | what it does |") :].split("\n\n", 1)[0]
    cells = [row.split(" | ", 1)[0] for row in table.splitlines()[2:]]
    return {(found[1], found[2]) for cell in cells for found in _ROUTE.finditer(cell)}


def _served_routes() -> set[tuple[str, str]]:
    app = create_app(Agent(ScriptedModel(["hi"])), settings=ServerSettings(ui=True))
    return {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }


def test_the_route_table_lists_every_served_route() -> None:
    served, listed = _served_routes(), _table_routes()
    assert ("POST", "/agui/{agent}") in served
    assert sorted(served - listed) == []  # served, not in the guide
    assert sorted(listed - served) == []  # in the guide, not served
