"""Error bodies: every failure answers ``{"error": {"type": ..., "message": ...}}``.

``type`` is a stable identifier: a snake_case word for a problem with the request
(``invalid_json``, ``invalid_request``, ``unauthorized``, ``forbidden``, ``not_found``,
``method_not_allowed``, ``payload_too_large``, ``approval_required``) and the daimon exception's
class name for a failed run (``TimeoutError``, ``ModelError``, ``MaxIterationsError``, ...).
Unexpected exceptions answer 500 ``internal_error`` and are logged, never echoed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from starlette.responses import Response

from daimon.server._encode import dump_json
from daimon.server._failures import RunLost, describe_failure

__all__ = ("RunLost", "describe_failure", "error_body", "error_response")


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
