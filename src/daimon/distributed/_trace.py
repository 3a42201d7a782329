"""W3C trace context carried by tasks, in ``AgentTask.metadata["traceparent"]``.

A worker runs each task under a child of the submitter's trace, readable through
:func:`current_traceparent` (an OpenTelemetry integration can start its span from it), and a task
submitted from inside a running task continues the same trace.
"""

from __future__ import annotations

import re
import secrets
from contextvars import ContextVar

__all__ = ("TRACEPARENT", "child_traceparent", "current_traceparent", "new_traceparent")

TRACEPARENT = "traceparent"
"""The metadata key that carries the W3C ``traceparent`` header value."""

_FORMAT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_CURRENT: ContextVar[str | None] = ContextVar("daimon_traceparent", default=None)


def new_traceparent() -> str:
    """A ``traceparent`` starting a new, sampled trace."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def child_traceparent(parent: str | None) -> str:
    """A ``traceparent`` for a new span under ``parent`` (a new trace if it is missing or invalid).

    Only version ``00`` is understood; an all-zero trace or span id is invalid, as the W3C
    specification says.
    """
    match = _FORMAT.match(parent.strip().lower()) if parent else None
    if match is None or set(match[1]) == {"0"} or set(match[2]) == {"0"}:
        return new_traceparent()
    return f"00-{match[1]}-{secrets.token_hex(8)}-{match[3]}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the task this code runs in, on a worker; otherwise ``None``."""
    return _CURRENT.get()
