"""FallbackModel: tries backup models when the primary one is down."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ModelError
from daimon.core.events import StreamEvent
from daimon.core.protocols import Model
from daimon.kit.lifecycle import AsyncClosing

__all__ = ("FallbackModel",)

_log = logging.getLogger("daimon.models.fallback")


class FallbackModel(AsyncClosing):
    """Answers with the first of several models that does not fail transiently.

    The next model is tried only on a retryable :class:`ModelError` (rate limits, timeouts, lost
    connections, 5xx): a request the provider rejects (400, 401, ...) raises at once, as it would
    fail everywhere. When every model fails, the last error raises. A stream falls back only
    while it has yielded nothing.

    Put a :class:`~daimon.models.retry.RetryingModel` around each model to retry before falling
    back, or around the FallbackModel to retry the whole chain.

    Args:
        models: The primary model first, then the backups in order.
    """

    __slots__ = ("models",)

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise BuilderError("FallbackModel needs at least one model")
        self.models: tuple[Model, ...] = tuple(models)
        """The models, in the order they are tried."""

    @property
    def model_name(self) -> str:
        """The primary model's name (responses name the model that answered)."""
        return self.models[0].model_name

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """The first answer from a model that does not fail transiently."""
        last = len(self.models) - 1
        for index, model in enumerate(self.models):
            try:
                return await model.generate(request)
            except ModelError as exc:
                if not exc.retryable or index == last:
                    raise
                self._log_fallback(model, exc)
        raise AssertionError("unreachable")  # pragma: no cover

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """The first model's stream that starts without failing transiently."""
        last = len(self.models) - 1
        for index, model in enumerate(self.models):
            started = False
            try:
                async for event in model.generate_stream(request):
                    started = True
                    yield event
                return
            except ModelError as exc:
                if started or not exc.retryable or index == last:
                    raise
                self._log_fallback(model, exc)

    def _log_fallback(self, model: Model, error: ModelError) -> None:
        _log.warning("model %s failed, falling back: %s", model.model_name, error)

    async def aclose(self) -> None:
        """Close every model that can be closed."""
        for model in self.models:
            aclose = getattr(model, "aclose", None)
            if aclose is not None:
                await aclose()

    def __repr__(self) -> str:
        return f"FallbackModel({list(self.models)!r})"
