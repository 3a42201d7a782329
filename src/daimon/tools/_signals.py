"""Control-flow signals a tool raises to talk to the model."""

from __future__ import annotations

__all__ = ("ModelRetry",)


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
