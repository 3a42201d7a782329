"""The app the uvicorn-workers test runs as ``uvicorn uvicorn_app:app --workers 2`` (not a test).

What a deployment writes: the served agent and its settings, the state store from the
environment (``DAIMON_STORE``), so every worker process of uvicorn shares it. For the test only,
each answer says which process gave it (``x-test-pid``).
"""

from __future__ import annotations

import os

from replica_app import agent
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

from daimon.server import ServerSettings, create_app

settings = ServerSettings(
    store=os.environ["DAIMON_STORE"],
    allowed_hosts=("127.0.0.1", "localhost"),  # any port: uvicorn's --port, not settings.port
)
app = create_app(agent, settings=settings)


async def _pid(request: Request, call_next: RequestResponseEndpoint) -> Response:
    response = await call_next(request)
    response.headers["x-test-pid"] = str(os.getpid())
    return response


app.add_middleware(BaseHTTPMiddleware, dispatch=_pid)
