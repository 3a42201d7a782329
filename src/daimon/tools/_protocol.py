"""The Tool protocol: anything with these members can be given to an agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from daimon.core.tools import ToolOutput
from daimon.tools._context import RunContext

__all__ = ("Tool",)


@runtime_checkable
class Tool(Protocol):
    """A tool the model can call.

    Optional members, read with ``getattr`` when present: ``retry_policy`` (a
    :class:`~daimon.tools.ToolRetryPolicy`) and ``timeout`` (seconds).
    """

    @property
    def name(self) -> str:
        """The name the model calls it by."""
        ...

    @property
    def description(self) -> str:
        """What it does, for the model."""
        ...

    @property
    def parameters_schema(self) -> Mapping[str, Any]:
        """JSON Schema of its arguments object."""
        ...

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Run with already-validated arguments."""
        ...
