"""The app factory and the runner: ``create_app`` builds the ASGI app, ``serve`` runs it."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp

from daimon._http_gate import HttpGate
from daimon.core.protocols import Broker
from daimon.server._agents import Servable, ServedAgents
from daimon.server._agui_routes import add_agui_routes
from daimon.server._errors import error_response
from daimon.server._openai_compat import add_openai_routes
from daimon.server._openai_responses import add_responses_routes
from daimon.server._routes import add_native_routes
from daimon.server._run_log import RunLogs
from daimon.server._settings import ServerSettings
from daimon.server._state import ServerState
from daimon.server._ui import add_ui_routes, ui_paths
from daimon.telemetry._asgi import TraceContextMiddleware

__all__ = ("create_app", "serve")

logger = logging.getLogger("daimon.server")

_HTTP_ERROR_TYPES = {
    400: "invalid_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


def create_app(
    agents: Servable | Mapping[str, Servable], *, settings: ServerSettings | None = None
) -> FastAPI:
    """The ASGI app serving ``agents`` (one agent, or several by name; the first is the default).

    A graph, DAG or workflow is served too, wrapped in :class:`~daimon.server.ServedFlow` (which
    says how a prompt becomes its input and its result the answer; bare flows get its defaults).

    The app is a :class:`fastapi.FastAPI`: run it with any ASGI server, or with :func:`serve`.
    Its gates (host and origin allowlist, bearer token, body limit) wrap every route, including
    any added later. A request let through runs in the W3C trace context its headers carry
    (``traceparent``, ``tracestate``, ``baggage``), so an instrumented agent's run continues the
    caller's trace.

    Raises:
        BuilderError: The agents or the settings are unusable (see :class:`ServerSettings`).
    """
    settings = settings if settings is not None else ServerSettings()
    served = ServedAgents(agents)
    status = {"ready": False}
    state = ServerState(settings.store)
    broker, own_broker = _broker_for(settings)
    logs = RunLogs(
        state,
        timeout=settings.request_timeout,
        grace=settings.stream_grace,
        retention=settings.stream_retention,
        broker=broker,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await _start(state, logs)
        status["ready"] = True
        try:
            yield
        finally:
            status["ready"] = False
            await logs.aclose(settings.drain_timeout)
            if own_broker and broker is not None:
                await broker.aclose()
            await state.aclose()

    app = FastAPI(
        title=settings.title,
        summary="daimon agents over HTTP",
        version="1",
        docs_url=None,  # the interactive pages load scripts from a CDN: not by default
        redoc_url=None,
        lifespan=lifespan,
    )
    add_native_routes(app.router, served, settings, lambda: status["ready"], state, logs)
    add_openai_routes(app.router, served, settings, int(time.time()), state)
    add_responses_routes(app.router, served, settings, state, logs)
    add_agui_routes(app.router, served, settings, state, logs)
    public = settings.public_paths
    if settings.ui:
        add_ui_routes(app.router)
        public = (*public, *ui_paths())
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
    _add_gates(app, settings, public)
    app.state.daimon_settings = settings
    app.state.daimon_state = state
    app.state.daimon_logs = logs
    return app


def _add_gates(app: FastAPI, settings: ServerSettings, public: tuple[str, ...]) -> None:
    """Wrap every route in the gates ``settings`` describe (``public`` paths need no token).

    The gate checks Host and Origin, then lets CORS answer preflights (which carry no token),
    then checks the token and the body; only a request let through continues the caller's
    trace (its traceparent, tracestate and baggage headers).
    """
    app.add_middleware(TraceContextMiddleware)
    app.add_middleware(
        HttpGate,
        hosts=settings.host_allowlist,
        origins=(*settings.allowed_origins, *settings.cors_origins),
        token=settings.token,
        max_body_bytes=settings.max_body_bytes,
        public_paths=public,
        errors="json",
        before_auth=_cors(settings.cors_origins),
    )
    if settings.token is not None:
        _document_bearer_auth(app, settings.public_paths)


async def _start(state: ServerState, logs: RunLogs) -> None:
    """Open the store and start the run logs' watchers, or say why the store cannot be used."""
    problem = await state.check()
    if problem is None:
        await logs.open()
    else:  # /ready says so until it can be reached; the watchers start with a first stream
        logger.warning("%s", problem)


_TASK_STORE_SCHEMES = frozenset({"amqp", "amqps", "sqs", "pubsub", "sb"})
"""Brokers that keep their tasks' states in a store given to them (a Redis URL)."""


def _broker_for(settings: ServerSettings) -> tuple[Broker | None, bool]:
    """The broker ``settings`` name, and whether the server made it (and closes it).

    A broker that keeps task states in a store of its own (RabbitMQ, SQS, Pub/Sub, Service Bus)
    is given the server's store URL for that, as ``daimon worker --store`` gives it.
    """
    broker = settings.broker
    if not isinstance(broker, str):
        return broker, False
    from daimon.distributed import broker_from_url

    options: dict[str, Any] = {}
    if settings.queue is not None:
        options["queue"] = settings.queue
    scheme = broker.partition(":")[0].lower()
    if scheme in _TASK_STORE_SCHEMES and isinstance(settings.store, str):
        options["store"] = settings.store
    return broker_from_url(broker, **options), True


def _cors(origins: tuple[str, ...]) -> Callable[[ASGIApp], ASGIApp] | None:
    """CORS for ``origins``, to run inside the gate before the token check; none when empty."""
    if not origins:
        return None
    return functools.partial(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["authorization", "content-type"],
    )


def _document_bearer_auth(app: FastAPI, public: tuple[str, ...]) -> None:
    """Say in the OpenAPI document that every operation but the public ones needs the token."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes["bearer"] = {"type": "http", "scheme": "bearer"}
        for path, operations in document.get("paths", {}).items():
            if path not in public:
                for operation in operations.values():
                    operation["security"] = [{"bearer": []}]
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def serve(
    agents: Servable | Mapping[str, Servable],
    *,
    host: str | None = None,
    port: int | None = None,
    token: str | None = None,
    settings: ServerSettings | None = None,
    log_level: str = "info",
    shutdown_timeout: float | None = None,
) -> None:
    """Serve ``agents`` over HTTP with uvicorn until interrupted (Ctrl+C).

    ``host`` (default ``127.0.0.1``), ``port`` (default 8000) and ``token`` override the same
    fields of ``settings``. Binding anything but loopback without a token is refused.

    Args:
        agents: One agent or flow, or several by name (the first answers requests that name
            none).
        host: The address to bind.
        port: The port to bind.
        token: The bearer token clients must send.
        settings: Everything else: allowlists, limits, timeouts (see :class:`ServerSettings`).
        log_level: uvicorn's log level.
        shutdown_timeout: Seconds open requests get to finish on shutdown (SIGTERM) before they
            are cancelled; by default ``settings.drain_timeout``.

    Raises:
        BuilderError: The agents or the settings are unusable, for example a public address
            without a token.
    """
    import uvicorn

    settings = settings if settings is not None else ServerSettings()
    changes: dict[str, Any] = {"host": host, "port": port, "token": token}
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    app = create_app(agents, settings=settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        server_header=False,
        proxy_headers=False,  # trust no X-Forwarded-* unless a deployment says so
        timeout_graceful_shutdown=math.ceil(
            settings.drain_timeout if shutdown_timeout is None else shutdown_timeout
        ),
    )
    uvicorn.Server(config).run()


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = exc.errors()
    details = [
        {"loc": list(p.get("loc", ())), "msg": str(p.get("msg", "")), "type": p.get("type")}
        for p in problems[:20]
    ]
    if any(p.get("type") == "json_invalid" for p in problems):
        reason = next(str(p.get("ctx", {}).get("error", "")) for p in problems)
        return error_response(400, "invalid_json", f"the body is not valid JSON: {reason}")
    summary = "; ".join(
        f"{'.'.join(str(part) for part in d['loc'])}: {d['msg']}" for d in details[:5]
    )
    return error_response(422, "invalid_request", summary, details=details)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    kind = _HTTP_ERROR_TYPES.get(exc.status_code, "http_error")
    headers = {k.lower(): v for k, v in exc.headers.items()} if exc.headers else {}
    if exc.status_code == 405:
        # Starlette names the methods of the first route for the path only: list them all.
        path = request.url.path
        allowed: set[str] = set()
        for route in request.app.router.routes:
            regex: re.Pattern[str] | None = getattr(route, "path_regex", None)
            if regex is not None and regex.match(path):
                allowed |= getattr(route, "methods", None) or set()
        headers["allow"] = ", ".join(sorted(allowed))
    return error_response(exc.status_code, kind, str(exc.detail), headers=headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal server error")
