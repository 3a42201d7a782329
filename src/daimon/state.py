"""RunState: the run's context as hooks, middleware and system prompts see it.

It is :class:`~daimon.tools.RunContext` itself, the one per-run context (tools get a per-call view
of the same object); the name is kept for the hooks and middleware written against it.
"""

from __future__ import annotations

from daimon.tools._context import RunContext

__all__ = ("RunState",)

RunState = RunContext
"""The name hooks, middleware and system prompts have always used for :class:`RunContext`."""
