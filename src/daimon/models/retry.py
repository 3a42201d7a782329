"""RetryingModel: retries a model's transient failures with backoff."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ModelError
from daimon.core.events import StreamEvent
from daimon.core.protocols import Model
from daimon.kit.checks import check_positive
from daimon.kit.lifecycle import AsyncClosing

__all__ = ("RetryingModel",)

_log = logging.getLogger("daimon.models.retry")


class RetryingModel(AsyncClosing):
    """Wraps a model to retry the errors its provider marks retryable.

    Rate limits, timeouts, lost connections and 5xx answers (``ModelError.retryable``) are tried
    again, after an exponential backoff with full jitter, or after the provider's
    ``retry_after`` when it gave one. A ``retry_after`` longer than ``max_retry_after`` fails at
    once: waiting that long is rarely what a caller wants. Other errors raise at once.

    A stream is retried only while it has yielded nothing: once events reached the caller, a
    retry would repeat them.

    Args:
        model: The model to wrap.
        max_attempts: Calls in all, the first included.
        initial_backoff: Seconds before the first retry (before jitter); doubled each time.
        max_backoff: Longest backoff, in seconds.
        max_retry_after: Longest ``retry_after`` honoured, in seconds.
        jitter: Wait a random time up to the backoff (full jitter) rather than the backoff.
    """

    __slots__ = (
        "_initial_backoff",
        "_jitter",
        "_max_attempts",
        "_max_backoff",
        "_max_retry_after",
        "model",
    )

    def __init__(
        self,
        model: Model,
        *,
        max_attempts: int = 4,
        initial_backoff: float = 0.5,
        max_backoff: float = 20.0,
        max_retry_after: float = 60.0,
        jitter: bool = True,
    ) -> None:
        check_positive("max_attempts", max_attempts)
        seconds: dict[str, object] = {
            "initial_backoff": initial_backoff,
            "max_backoff": max_backoff,
            "max_retry_after": max_retry_after,
        }
        for name, value in seconds.items():
            if not (isinstance(value, int | float) and value >= 0):
                raise BuilderError(f"{name} must be a number >= 0, got {value!r}")
        self.model = model
        """The wrapped model."""
        self._max_attempts = max_attempts
        self._initial_backoff = float(initial_backoff)
        self._max_backoff = float(max_backoff)
        self._max_retry_after = float(max_retry_after)
        self._jitter = jitter

    @property
    def model_name(self) -> str:
        """The wrapped model's name."""
        return self.model.model_name

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """The wrapped model's answer, retrying transient failures."""
        attempt = 1
        while True:
            try:
                return await self.model.generate(request)
            except ModelError as exc:
                await self._wait_or_raise(exc, attempt)
            attempt += 1

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """The wrapped model's stream, retried while it has yielded nothing."""
        attempt = 1
        while True:
            started = False
            try:
                async for event in self.model.generate_stream(request):
                    started = True
                    yield event
                return
            except ModelError as exc:
                if started:
                    raise
                await self._wait_or_raise(exc, attempt)
            attempt += 1

    async def _wait_or_raise(self, error: ModelError, attempt: int) -> None:
        """Sleep before the next attempt, or re-raise ``error`` when there should be none."""
        if not error.retryable or attempt >= self._max_attempts:
            raise error
        if error.retry_after is not None:
            if error.retry_after > self._max_retry_after:
                raise error
            delay = error.retry_after
        else:
            delay = min(self._max_backoff, self._initial_backoff * 2 ** (attempt - 1))
            if self._jitter:
                delay = random.uniform(0, delay)
        _log.warning(
            "model %s failed (attempt %d of %d), retrying in %.2fs: %s",
            self.model_name,
            attempt,
            self._max_attempts,
            delay,
            error,
        )
        await asyncio.sleep(delay)

    async def aclose(self) -> None:
        """Close the wrapped model, when it can be closed."""
        aclose = getattr(self.model, "aclose", None)
        if aclose is not None:
            await aclose()

    def __repr__(self) -> str:
        return f"RetryingModel({self.model!r}, max_attempts={self._max_attempts})"
