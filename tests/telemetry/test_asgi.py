"""The trace-context ASGI middleware: the caller's context for the whole request, then gone.

Driven with real ASGI calls (the streamed body included) and OpenTelemetry's own propagators;
what a request sees is the span context current inside the app.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry import baggage, context, trace

from daimon.telemetry._asgi import TraceContextMiddleware

from .conftest import REMOTE_SPAN, REMOTE_TRACE, TRACEPARENT


def _seen() -> dict[str, Any]:
    """The trace id, span id and ``tenant`` baggage current here (ids in hex, None if none)."""
    span = trace.get_current_span().get_span_context()
    return {
        "trace": f"{span.trace_id:032x}" if span.is_valid else None,
        "span": f"{span.span_id:016x}" if span.is_valid else None,
        "tenant": baggage.get_baggage("tenant"),
    }


class Streamer:
    """An ASGI app streaming three chunks, noting the trace context it sees at each step."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.seen: list[dict[str, Any]] = []
        self.fail_after = fail_after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.seen.append(_seen())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            if self.fail_after == i:
                raise RuntimeError("the app failed mid-stream")
            await asyncio.sleep(0)  # give other tasks a turn between chunks
            self.seen.append(_seen())
            await send({"type": "http.response.body", "body": b"x", "more_body": i < 2})


def _scope(*headers: tuple[str, str], kind: str = "http") -> dict[str, Any]:
    raw = [(name.encode(), value.encode()) for name, value in headers]
    return {"type": kind, "method": "GET", "path": "/", "headers": raw}


async def _call(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await TraceContextMiddleware(app)(scope, receive, send)
    return sent


async def test_the_whole_streamed_response_runs_in_the_caller_s_trace() -> None:
    app = Streamer()
    sent = await _call(app, _scope(("traceparent", TRACEPARENT), ("baggage", "tenant=acme")))

    assert len(sent) == 4
    assert app.seen == [{"trace": REMOTE_TRACE, "span": REMOTE_SPAN, "tenant": "acme"}] * 4
    assert _seen() == {"trace": None, "span": None, "tenant": None}  # detached after


async def test_header_names_in_any_case_and_repeated_list_headers_are_read() -> None:
    seen: list[tuple[dict[str, Any], object]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((_seen(), baggage.get_baggage("region")))

    headers = (("TraceParent", TRACEPARENT), ("baggage", "tenant=acme"), ("Baggage", "region=eu"))
    await _call(app, _scope(*headers))
    assert seen == [({"trace": REMOTE_TRACE, "span": REMOTE_SPAN, "tenant": "acme"}, "eu")]


async def test_the_context_is_detached_when_the_app_fails() -> None:
    app = Streamer(fail_after=1)
    with pytest.raises(RuntimeError, match="mid-stream"):
        await _call(app, _scope(("traceparent", TRACEPARENT), ("baggage", "tenant=acme")))
    assert app.seen[0]["trace"] == REMOTE_TRACE
    assert _seen() == {"trace": None, "span": None, "tenant": None}


async def test_the_context_is_detached_when_the_request_is_cancelled() -> None:
    entered = asyncio.Event()
    seen: list[dict[str, Any]] = []

    async def hanging(scope: Any, receive: Any, send: Any) -> None:
        seen.append(_seen())
        entered.set()
        await asyncio.Event().wait()

    async def request() -> None:
        try:
            await _call(hanging, _scope(("traceparent", TRACEPARENT)))
        except asyncio.CancelledError:
            seen.append(_seen())  # the same task, once the middleware has unwound
            raise

    task = asyncio.create_task(request())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    inside = {"trace": REMOTE_TRACE, "span": REMOTE_SPAN, "tenant": None}
    assert seen == [inside, {"trace": None, "span": None, "tenant": None}]


async def test_a_span_in_front_already_in_the_caller_s_trace_stays_the_parent() -> None:
    """An instrumented ASGI stack in front continued the trace: its span is not skipped."""
    front = trace.SpanContext(
        int(REMOTE_TRACE, 16), 0x1111111111111111, is_remote=False, trace_flags=trace.TraceFlags(1)
    )
    app = Streamer()
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(front)))
    try:
        await _call(app, _scope(("traceparent", TRACEPARENT), ("baggage", "tenant=acme")))
    finally:
        context.detach(token)
    assert app.seen[0] == {"trace": REMOTE_TRACE, "span": "1111111111111111", "tenant": "acme"}


@pytest.mark.parametrize(
    "headers",
    [
        (("traceparent", "not a traceparent"),),
        (("traceparent", f"00-{'0' * 32}-{REMOTE_SPAN}-01"),),
        (("traceparent", TRACEPARENT), ("traceparent", f"00-{'1' * 32}-{REMOTE_SPAN}-01")),
    ],
    ids=["garbage", "zero-trace-id", "two-traceparents"],
)
async def test_a_malformed_or_ambiguous_traceparent_means_no_parent(
    headers: tuple[tuple[str, str], ...],
) -> None:
    app = Streamer()
    sent = await _call(app, _scope(*headers))
    assert sent[0]["status"] == 200
    assert app.seen[0] == {"trace": None, "span": None, "tenant": None}


async def test_requests_without_trace_headers_and_other_scopes_pass_unchanged() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["type"], _seen()))

    await _call(app, _scope(("accept", "text/plain")))
    await _call(app, _scope(("traceparent", TRACEPARENT), kind="websocket"))
    await _call(app, {"type": "lifespan"})
    nothing = {"trace": None, "span": None, "tenant": None}
    assert seen == [("http", nothing), ("websocket", nothing), ("lifespan", nothing)]


BLOCKED = textwrap.dedent(
    """
    import asyncio, importlib.abc, json, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] == "opentelemetry":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    from daimon.telemetry._asgi import TraceContextMiddleware

    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})

    async def send(message):
        sent.append(message["status"])

    scope = {"type": "http", "headers": [(b"traceparent", b"00-%s-%s-01" % (b"1" * 32, b"2" * 16))]}
    asyncio.run(TraceContextMiddleware(app)(scope, None, send))
    loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "starlette")))
    print(json.dumps({"sent": sent, "loaded": loaded}))
    """
)


def test_without_opentelemetry_requests_pass_and_nothing_is_imported() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"sent": [204], "loaded": []}
