"""How a run's failure is named to clients, without any web library (workers use it too).

:func:`describe_failure` gives the HTTP status, the stable error type and the message of a run
that raised; :class:`RunLost` is the failure of a run whose replica stopped.
"""

from __future__ import annotations

import logging

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

__all__ = ("RunLost", "describe_failure")

logger = logging.getLogger("daimon.server")


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
