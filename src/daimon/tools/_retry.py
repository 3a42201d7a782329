"""How often, and how patiently, a failing tool is tried again."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daimon.core.errors import BuilderError
from daimon.tools._signals import ModelRetry

__all__ = ("ToolRetryPolicy",)

RetryOn = Callable[[BaseException], bool] | tuple[type[BaseException], ...]


def _is_exception_type(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRetryPolicy:
    """Retries for a tool that raised: how many, which errors, and the backoff between tries.

    Give it to :func:`~daimon.tools.tool` for one tool, or to the agent as the default for all.
    :class:`~daimon.tools.ModelRetry` and cancellation are never retried.

    Example::

        ToolRetryPolicy(max_retries=3, retry_on=(ConnectionError, TimeoutError))
    """

    max_retries: int = 2
    """Tries after the first one; ``0`` disables retries."""
    initial_backoff: float = 0.1
    """Seconds to wait before the first retry (before jitter)."""
    max_backoff: float = 10.0
    """Upper bound on any one wait, in seconds."""
    multiplier: float = 2.0
    """Growth of the wait from one retry to the next (at least 1)."""
    jitter: bool = True
    """Wait a random time between 0 and the computed backoff ("full jitter")."""
    retry_on: Callable[[BaseException], bool] | tuple[type[BaseException], ...] = field(
        default=(Exception,)
    )
    """Exception types to retry, or a predicate deciding per exception."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise BuilderError(f"max_retries must be an int, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise BuilderError(f"max_retries must be >= 0, got {self.max_retries}")
        for name in ("initial_backoff", "max_backoff"):
            value: Any = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise BuilderError(f"{name} must be a number >= 0, got {value!r}")
        multiplier: Any = self.multiplier
        if (
            isinstance(multiplier, bool)
            or not isinstance(multiplier, int | float)
            or not (1 <= multiplier < math.inf)
        ):
            raise BuilderError(f"multiplier must be a finite number >= 1, got {self.multiplier!r}")
        retry_on: Any = self.retry_on
        if _is_exception_type(retry_on):
            # A lone class is callable, so it would pass as a predicate; treat it as (class,).
            object.__setattr__(self, "retry_on", (retry_on,))
        elif isinstance(retry_on, tuple):
            bad = [t for t in retry_on if not _is_exception_type(t)]
            if bad:
                raise BuilderError(f"retry_on must hold exception types, got {bad[0]!r}")
        elif not callable(retry_on):
            raise BuilderError(
                f"retry_on must be a tuple of exception types or a predicate, got {retry_on!r}"
            )

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether a tool that raised ``exc`` should be tried again."""
        if isinstance(exc, ModelRetry | asyncio.CancelledError):
            return False
        if isinstance(self.retry_on, tuple):
            return isinstance(exc, self.retry_on)
        return bool(self.retry_on(exc))

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (``1`` for the first retry).

        Exponential (``initial_backoff * multiplier ** (attempt - 1)``), capped at
        ``max_backoff``, then, with ``jitter``, a uniform draw between 0 and that value.
        """
        try:
            delay = self.initial_backoff * self.multiplier ** max(attempt - 1, 0)
        except OverflowError:
            delay = self.max_backoff
        delay = min(delay, self.max_backoff)
        if self.jitter:
            # Imported on the first retry, not with daimon: most processes never retry a tool.
            from random import uniform

            return uniform(0.0, delay)  # jitter, not cryptography
        return delay
