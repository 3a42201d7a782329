"""Running parallel work under a cancel token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from daimon.core.cancel import CancelToken
from daimon.core.errors import RunCancelled

__all__ = ("cancellable", "first_error")


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of a (possibly nested) exception group."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


@contextmanager
def cancellable(cancel: CancelToken | None) -> Iterator[None]:
    """Let ``cancel`` interrupt the current task while it waits inside the block.

    Wrap an ``asyncio.TaskGroup``: cancelling the token cancels the waiting task, so the group
    cancels every child and waits for them, and the block raises :class:`RunCancelled`. When a
    child fails instead, the group's first error is raised on its own (not as a group).
    """
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - always called from a coroutine
        raise RuntimeError("cancellable() needs a running task")
    detach = cancel.on_cancel(task.cancel) if cancel is not None else None
    try:
        yield
    except asyncio.CancelledError:
        # Our own cancel request is undone; any other (the caller's) still propagates.
        if cancel is not None and cancel.cancelled and task.uncancel() == 0:
            raise RunCancelled(cancel.reason) from None
        raise
    except BaseExceptionGroup as group:
        if cancel is not None and cancel.cancelled:
            if task.cancelling():
                task.uncancel()
            raise RunCancelled(cancel.reason) from None
        error = first_error(group)
        if not isinstance(error, Exception):
            raise
        raise error from error.__cause__
    finally:
        if detach is not None:
            detach()
