"""Fixtures for the telemetry tests: an SDK tracer provider whose spans land in memory."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan


REMOTE_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
"""The trace id of a caller in another process (the W3C spec's example)."""
REMOTE_SPAN = "00f067aa0ba902b7"
"""That caller's span id."""
TRACEPARENT = f"00-{REMOTE_TRACE}-{REMOTE_SPAN}-01"
"""The ``traceparent`` header such a caller sends."""


class Spans:
    """The finished spans of a test, and ways to walk them."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def all(self) -> Sequence[ReadableSpan]:
        return self.exporter.get_finished_spans()

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.all if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.names()}"
        return found[0]

    def names(self) -> list[str]:
        return [s.name for s in self.all]

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None:
            return None
        return next((s for s in self.all if s.context.span_id == span.parent.span_id), None)

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        return [
            s for s in self.all if s.parent is not None and s.parent.span_id == span.context.span_id
        ]

    def tree(self, span: ReadableSpan) -> Any:
        """``(name, [subtrees...])``, children sorted by start time."""
        kids = sorted(self.children(span), key=lambda s: s.start_time or 0)
        return (span.name, [self.tree(k) for k in kids])

    def roots(self) -> list[ReadableSpan]:
        return [s for s in self.all if s.parent is None]


@pytest.fixture
def spans() -> Iterator[Spans]:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    collected = Spans()
    yield collected
    collected.provider.shutdown()
