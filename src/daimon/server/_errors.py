"""Error bodies: every failure answers ``{"error": {"type": ..., "message": ...}}``.

``type`` is a stable identifier: a snake_case word for a problem with the request
(``invalid_json``, ``invalid_request``, ``unauthorized``, ``forbidden``, ``not_found``,
``method_not_allowed``, ``payload_too_large``, ``approval_required``) and the daimon exception's
class name for a failed run (``TimeoutError``, ``ModelError``, ``MaxIterationsError``, ...).
Unexpected exceptions answer 500 ``internal_error`` and are logged, never echoed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.responses import Response

from daimon.core.errors import (
    AgentRunError,
    ApprovalRequiredError,
    CheckpointConflictError,
    ClientToolError,
    DaimonError,
    GuardrailBlockedError,
    InvalidIdError,
    ModelError,
)
from daimon.core.errors import (
    TimeoutError as RunTimeoutError,
)
from daimon.server._encode import dump_json

__all__ = ("RunLost", "describe_failure", "error_body", "error_response")

logger = logging.getLogger("daimon.server")


def error_body(
    type: str, message: str, details: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The JSON value of an error answer."""
    error: dict[str, Any] = {"type": type, "message": message}
    if details:
        error["details"] = list(details)
    return {"error": error}


def error_response(
    status: int,
    type: str,
    message: str,
    *,
    details: Sequence[Mapping[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A JSON error answer."""
    return Response(
        dump_json(error_body(type, message, details)),
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


class RunLost(RuntimeError):
    """The replica running a stream's run stopped (killed, or cut off) before the run ended."""


def describe_failure(exc: BaseException) -> tuple[int, str, str]:
    """The HTTP status, error type and message for a run that raised ``exc``."""
    if isinstance(exc, RunLost):
        return 503, "RunLost", str(exc)
    if isinstance(exc, RunTimeoutError):
        return 504, "TimeoutError", str(exc)
    if isinstance(exc, ApprovalRequiredError):
        return 409, "approval_required", str(exc)
    if isinstance(exc, CheckpointConflictError):  # another process runs (or ran) the run
        return 409, type(exc).__name__, str(exc)
    if isinstance(exc, (GuardrailBlockedError, InvalidIdError, ClientToolError)):
        return 400, type(exc).__name__, str(exc)
    if isinstance(exc, ModelError):
        return 502, type(exc).__name__, str(exc)
    if isinstance(exc, (AgentRunError, DaimonError)):
        return 500, type(exc).__name__, str(exc)
    logger.error("run failed with an unexpected error", exc_info=exc)
    return 500, "internal_error", "internal server error"
