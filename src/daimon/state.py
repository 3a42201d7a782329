"""RunState: the live state of one run, as hooks and middleware see it."""

from __future__ import annotations

from typing import Any

from daimon.core.cancel import CancelToken
from daimon.core.chat import Usage
from daimon.core.messages import Message

__all__ = ("RunState",)


class RunState:
    """The state of one run. The agent loop owns and updates it; hooks should only read it."""

    __slots__ = (
        "agent_name",
        "cancel",
        "cost",
        "deps",
        "iteration",
        "messages",
        "run_id",
        "session_id",
        "usage",
    )

    def __init__(
        self,
        *,
        run_id: str,
        agent_name: str,
        messages: list[Message],
        session_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> None:
        self.run_id = run_id
        self.agent_name = agent_name
        self.messages = messages
        """The conversation as the model sees it: system, history, prompt and this run's turns."""
        self.session_id = session_id
        self.deps = deps
        self.cancel = cancel
        self.iteration = 0
        """Model calls made so far."""
        self.usage = Usage()
        self.cost = 0.0

    def __repr__(self) -> str:
        return (
            f"RunState(run_id={self.run_id!r}, iteration={self.iteration}, "
            f"messages={len(self.messages)}, usage={self.usage!r}, cost={self.cost!r})"
        )
