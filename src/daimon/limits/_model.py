"""LimitedModel: a model whose calls wait their turn under a :class:`Limiter`'s shared limits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from daimon.core.chat import ChatRequest, ChatResponse, Usage
from daimon.core.errors import BuilderError, ModelError
from daimon.core.events import Done, RateLimitWait, StreamEvent, UsageEvent
from daimon.core.limits import Remaining
from daimon.core.messages import Message, TextPart
from daimon.core.protocols import Model
from daimon.core.tools import ToolSpec
from daimon.kit.lifecycle import AsyncClosing
from daimon.limits._limiter import Limiter, Slot

__all__ = ("LimitedModel", "estimate_tokens", "watching_waits")

DEFAULT_OUTPUT_TOKENS = 1024
"""Output tokens reserved for a request that sets no ``max_tokens``."""

DEFAULT_PAUSE = 1.0
"""Seconds every call on the key holds back after a 429 that gave no ``Retry-After``."""

_BYTES_PER_TOKEN = 4
_PART_BYTES = 512 * _BYTES_PER_TOKEN
"""An image, audio or document part counts as 512 tokens (an estimate: providers differ)."""

_FORWARDED = frozenset({"load", "prompt_cache", "provider", "supports_json_schema"})
"""The wrapped model's attributes that agents and the CLI read, passed through."""

_spec_bytes: dict[int, tuple[ToolSpec, int]] = {}

OnWait = Callable[[str, float], None]

_watchers: ContextVar[tuple[OnWait, ...]] = ContextVar("daimon_limit_watchers", default=())


@contextmanager
def watching_waits(watcher: OnWait) -> Iterator[None]:
    """Tell ``watcher`` the key and seconds of each wait of a model call made in this block.

    For what watches one call (a run's stream, a telemetry span); the :class:`Limiter`'s own
    ``on_wait`` sees every call.
    """
    before = _watchers.get()
    token = _watchers.set((*before, watcher))
    try:
        yield
    finally:
        try:
            _watchers.reset(token)
        except ValueError:  # a stream read on from another task's context
            _watchers.set(before)


def estimate_tokens(request: ChatRequest) -> tuple[int, int]:
    """Input and output tokens to reserve for ``request``: an estimate, not a bound.

    Input: the UTF-8 bytes of the messages' text, tool calls, tools' schemas and the response
    format, divided by 4 (at least 1). Output: ``request.max_tokens``, else 1,024.
    """
    total = _messages_bytes(request.messages)
    for spec in request.tools:
        total += _tool_bytes(spec)
    form = request.response_format
    if form is not None:
        total += _utf8(form.name) + _json_bytes(form.schema)
    output = request.max_tokens
    return max(1, total // _BYTES_PER_TOKEN), output if output else DEFAULT_OUTPUT_TOKENS


def _messages_bytes(messages: Sequence[Message]) -> int:
    total = 0
    for message in messages:
        content = message.content
        if isinstance(content, str):
            total += _utf8(content)
        else:
            for part in content:
                total += _utf8(part.text) if isinstance(part, TextPart) else _PART_BYTES
        for call in message.tool_calls:
            total += _utf8(call.id) + _utf8(call.name) + _utf8(call.arguments_json)
        if message.tool_call_id is not None:
            total += _utf8(message.tool_call_id)
    return total


def _tool_bytes(spec: ToolSpec) -> int:
    """A tool's name, description and schema, counted once per spec object."""
    found = _spec_bytes.get(id(spec))
    if found is not None and found[0] is spec:
        return found[1]
    size = _utf8(spec.name) + _utf8(spec.description) + _json_bytes(spec.parameters)
    if len(_spec_bytes) >= 1024:
        _spec_bytes.clear()
    _spec_bytes[id(spec)] = (spec, size)
    return size


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def _json_bytes(value: Mapping[str, Any]) -> int:
    return _utf8(json.dumps(value, ensure_ascii=False, default=_plain))


def _plain(value: object) -> object:
    return dict(value) if isinstance(value, Mapping) else str(value)


class LimitedModel(AsyncClosing):
    """Wraps a model so that each call waits its turn under a :class:`Limiter`'s limits.

    A call reserves one request and its estimated tokens (:func:`estimate_tokens`) under
    ``key``, waiting while the limits are reached (the longest-waiting call goes first; after
    ``max_wait`` it fails with :class:`~daimon.core.errors.RateLimitedError`), then settles with
    the usage the provider reported. The output estimate is the request's ``max_tokens``, else
    1,024: OpenAI counts ``max_tokens`` against its tokens-per-minute limit when it admits a
    request and gives none of it back, so set ``max_tokens`` to what you expect rather than the
    default; for such providers a call's settle keeps its reserved output tokens
    (``charges_max_tokens``: by default for OpenAI and Azure OpenAI models).

    What the provider says teaches every process sharing the limiter: a 429 holds the key back
    for its ``Retry-After`` (1 s when it gave none) and is raised again; rate-limit headers
    (``ChatResponse.rate_limits``, ``Done.rate_limits``, ``ModelError.rate_limits``) lower the
    buckets to what the provider says is left.

    Put a :class:`~daimon.models.retry.RetryingModel` outside it,
    ``RetryingModel(LimitedModel(model, limiter))``, so that each retry waits its turn again.

    A streamed call that waited yields :class:`~daimon.core.events.RateLimitWait` before its
    first event (not before: a stream that fails before any event can still be retried).

    Args:
        model: The model to wrap.
        limiter: The limits, shared by every model (and process) that uses them.
        key: Whose limits the calls count against (an API key, a tenant); the model's name by
            default.
        charges_max_tokens: Whether the provider counts ``max_tokens`` against its limit and
            gives back none of it when the answer is shorter; ``None``: as its provider does.
    """

    __slots__ = ("charges_max_tokens", "key", "limiter", "model")

    def __init__(
        self,
        model: Model,
        limiter: Limiter,
        *,
        key: str | None = None,
        charges_max_tokens: bool | None = None,
    ) -> None:
        if not (hasattr(model, "generate") and hasattr(model, "generate_stream")):
            raise BuilderError(f"LimitedModel wraps a Model, not {type(model).__name__}")
        if not isinstance(limiter, Limiter):
            raise BuilderError(f"limiter must be a Limiter, got {type(limiter).__name__}")
        if key is not None and (not isinstance(key, str) or not key):
            raise BuilderError(f"key must be a non-empty string or None, got {key!r}")
        self.model = model
        """The wrapped model."""
        self.limiter = limiter
        self.key: str = key if key is not None else model.model_name
        if charges_max_tokens is None:
            charges_max_tokens = getattr(model, "provider", None) in _CHARGING_MAX_TOKENS
        self.charges_max_tokens = bool(charges_max_tokens)

    @property
    def model_name(self) -> str:
        """The wrapped model's name."""
        return self.model.model_name

    def __getattr__(self, name: str) -> Any:
        if name in _FORWARDED:
            return getattr(self.model, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """The wrapped model's answer, once the limits let the call go."""
        key, limiter = self.key, self.limiter
        input_tokens, output_tokens = estimate_tokens(request)
        try:
            async with limiter.slot(
                key, input_tokens=input_tokens, output_tokens=output_tokens
            ) as slot:
                _tell(slot)
                try:
                    response = await self.model.generate(request)
                except ModelError as exc:
                    _refused(slot, exc)
                    raise
                _settle(slot, response.usage, self.charges_max_tokens)
        except ModelError as exc:
            await self._learn_from(exc)
            raise
        if response.rate_limits is not None:
            await _learn(limiter, key, response.rate_limits)
        return response

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """The wrapped model's stream, once the limits let the call go."""
        key, limiter = self.key, self.limiter
        input_tokens, output_tokens = estimate_tokens(request)
        remaining: Remaining | None = None
        try:
            async with limiter.slot(
                key, input_tokens=input_tokens, output_tokens=output_tokens
            ) as slot:
                _tell(slot)
                wait = RateLimitWait(key=key, waited=slot.waited) if slot.waited > 0 else None
                try:
                    async for event in self.model.generate_stream(request):
                        if wait is not None:
                            yield wait
                            wait = None
                        kind = type(event)
                        if kind is UsageEvent:
                            _settle(slot, event.usage, self.charges_max_tokens)  # type: ignore[union-attr]
                        elif kind is Done:
                            remaining = event.rate_limits  # type: ignore[union-attr]
                        yield event
                except ModelError as exc:
                    _refused(slot, exc)
                    raise
        except ModelError as exc:
            await self._learn_from(exc)
            raise
        finally:
            if remaining is not None:
                await _learn(limiter, key, remaining)

    async def _learn_from(self, error: ModelError) -> None:
        """Pass on what a failed call's provider said: a 429's pause, its rate-limit headers."""
        remaining = getattr(error, "rate_limits", None)
        pause = None
        if error.status_code == 429:
            pause = error.retry_after if error.retry_after is not None else DEFAULT_PAUSE
        if not isinstance(remaining, Remaining):
            remaining = None
        elif (empty := _until_reset(remaining)) is not None:
            pause = max(pause or 0.0, empty)
        if pause is not None or remaining is not None:
            await self.limiter.learn(self.key, pause=pause, remaining=remaining)

    async def aclose(self) -> None:
        """Close the wrapped model, when it can be closed (the limiter is the caller's)."""
        aclose = getattr(self.model, "aclose", None)
        if aclose is not None:
            await aclose()

    def __repr__(self) -> str:
        return f"LimitedModel({self.model!r}, key={self.key!r})"


_CHARGING_MAX_TOKENS = frozenset({"openai", "azure"})
"""Providers that count ``max_tokens`` at admission and give none of it back."""


def _until_reset(remaining: Remaining) -> float | None:
    """Seconds until the provider's window resets, when it says something has run out.

    The provider's own limit may be lower than the configured one: its buckets refill at its
    rate, not ours, so once one is empty nobody should call before it resets.
    """
    left = (remaining.requests, remaining.input_tokens, remaining.output_tokens, remaining.tokens)
    if remaining.reset is None or not any(n is not None and n <= 0 for n in left):
        return None
    return remaining.reset


async def _learn(limiter: Limiter, key: str, remaining: Remaining) -> None:
    """Lower the shared buckets to what remains, pausing the key when something ran out."""
    await limiter.learn(key, pause=_until_reset(remaining), remaining=remaining)


def _tell(slot: Slot) -> None:
    """Tell this context's watchers that the call waited, if it did."""
    if slot.waited > 0:
        for watcher in _watchers.get():
            watcher(slot.key, slot.waited)


def _settle(slot: Slot, usage: Usage, charges_max_tokens: bool) -> None:
    """Settle with the usage the provider reported (none reported: the estimate stands).

    A provider that charges ``max_tokens`` keeps the reserved output tokens of a shorter answer.
    """
    if usage.input_tokens or usage.output_tokens:
        output = usage.output_tokens
        if charges_max_tokens:
            output = max(output, slot.ticket.output_tokens)
        slot.settle(usage.input_tokens, output)


def _refused(slot: Slot, error: ModelError) -> None:
    """A 429 used no tokens (the request still counts); other failures keep the estimate."""
    if error.status_code == 429:
        slot.settle(0, 0)
