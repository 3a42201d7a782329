"""The web playground and run inspector at ``/``: static files shipped in ``daimon/server/ui``.

The page holds no secret and needs none to load: its files are public paths, while every API
call it makes carries the bearer token the user typed (kept in ``sessionStorage``). The Host and
Origin checks apply to the page as to the API. Each file is sent with a strict
Content-Security-Policy (scripts, styles and connections from this origin only; no inline code)
and ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from starlette.responses import Response

from daimon.server._errors import error_response

__all__ = ("CONTENT_SECURITY_POLICY", "UI_FILES", "add_ui_routes", "ui_paths")

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Only this origin's scripts, styles and connections; no inline code, no framing."""

UI_FILES: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "agui.js": "text/javascript; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "files.js": "text/javascript; charset=utf-8",
    "sessions.js": "text/javascript; charset=utf-8",
    "timeline.js": "text/javascript; charset=utf-8",
    "flow.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
"""Every file the page loads, with its media type (nothing else is served from the folder)."""

_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cache-control": "no-cache",
}


def ui_paths() -> tuple[str, ...]:
    """The URL paths of the page and its files (served without the token: they hold no secret)."""
    return ("/", *(f"/ui/{name}" for name in UI_FILES))


def _read(name: str) -> bytes:
    return resources.files("daimon.server").joinpath("ui", name).read_bytes()


def add_ui_routes(router: APIRouter) -> None:
    """Serve the page at ``/`` and its files at ``/ui/<name>`` (not in the OpenAPI document)."""
    # Read once, when the app is built: a file missing from an installed package fails then.
    files = {name: _read(name) for name in UI_FILES}

    @router.get("/", include_in_schema=False)
    async def page() -> Response:
        return Response(files["index.html"], media_type=UI_FILES["index.html"], headers=_HEADERS)

    @router.get("/ui/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        body = files.get(name)
        if body is None:
            return error_response(404, "not_found", f"no UI file named {name[:100]!r}")
        return Response(body, media_type=UI_FILES[name], headers=_HEADERS)
