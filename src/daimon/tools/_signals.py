"""Control-flow signals a tool raises to talk to the model."""

from __future__ import annotations

from typing import Any

__all__ = ("EndRun", "ModelRetry")


class ModelRetry(Exception):  # a signal, not an error; the name says what it asks
    """Raised by a tool to ask the model to try again, e.g. with different arguments.

    Not a :class:`~daimon.core.errors.DaimonError` and never retried: the model receives
    ``message`` as the tool's error result and decides what to do next.

    Example::

        @tool
        def get_user(user_id: int) -> str:
            if user_id not in USERS:
                raise ModelRetry(f"no user {user_id}; call list_users to see valid ids")
            return USERS[user_id]
    """

    message: str
    """What the model is told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EndRun(Exception):  # a signal, not an error: the run ends successfully
    """Raised by a tool to end the run at once, with this tool's result as the run's result.

    The run returns an ``AgentResponse`` whose ``output`` is ``output`` and whose ``text`` is
    ``text`` (or ``output`` as text); no further model call is made. Other calls of the same turn
    that are still running are cancelled. Multi-agent handoffs and output tools build on it.
    """

    output: Any
    text: str | None

    def __init__(self, output: Any = None, *, text: str | None = None) -> None:
        super().__init__(text if text is not None else repr(output))
        self.output = output
        self.text = text
