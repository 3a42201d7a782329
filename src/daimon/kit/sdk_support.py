"""What every SDK-backed model plugin needs: retry hints, loop-bound clients, stop reasons, usage.

Part of the backend kit (:mod:`daimon.kit`): the pieces provider plugins share live here rather
than being copied into each provider package.
"""

from __future__ import annotations

import asyncio
import email.utils
import inspect
import json
import re
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from daimon.core.chat import StopReason, Usage
from daimon.core.errors import ModelError
from daimon.core.limits import Remaining
from daimon.core.tools import ToolSpec
from daimon.kit.lifecycle import AsyncClosing

__all__ = (
    "LoopClients",
    "LoopClientsOwner",
    "cache_exclusive_usage",
    "is_retryable_status",
    "rate_limits",
    "rate_limits_of",
    "retry_after",
    "stop_reason",
    "tool_definition",
    "wire_body",
    "with_rate_limits",
)


def tool_definition(spec: ToolSpec, schema_field: str, schema: object = None) -> dict[str, Any]:
    """A function as providers declare one: name, description, the schema under ``schema_field``.

    The description is left out when the tool has none: providers refuse ``""`` (Bedrock's
    minimum length is 1) or read it as a description that says nothing. ``schema`` replaces the
    plain JSON Schema for a provider that wraps it.
    """
    definition: dict[str, Any] = {"name": spec.name}
    if spec.description:
        definition["description"] = spec.description
    definition[schema_field] = dict(spec.parameters) if schema is None else schema
    return definition


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth retrying: timeouts, conflicts, rate limits, 5xx."""
    return status in (408, 409, 429) or status >= 500


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


_OPENAI = "x-ratelimit-"
_ANTHROPIC = "anthropic-ratelimit-"
_OPENAI_RESETS = (f"{_OPENAI}reset-requests", f"{_OPENAI}reset-tokens")
_OPENAI_NAMES = (f"{_OPENAI}remaining-requests", f"{_OPENAI}remaining-tokens", *_OPENAI_RESETS)
"""The sign that a response has them first: every OpenAI and Azure response says it."""
_ANTHROPIC_KINDS = ("requests", "input-tokens", "output-tokens", "tokens")
_ANTHROPIC_RESETS = tuple(f"{_ANTHROPIC}{kind}-reset" for kind in _ANTHROPIC_KINDS)
_ANTHROPIC_NAMES = (*(f"{_ANTHROPIC}{k}-remaining" for k in _ANTHROPIC_KINDS), *_ANTHROPIC_RESETS)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def rate_limits(headers: Mapping[str, str]) -> Remaining | None:
    """What a provider's rate-limit headers say is left, or ``None`` when it sent none.

    OpenAI (and Azure OpenAI): ``x-ratelimit-remaining-requests``/``-tokens`` and
    ``x-ratelimit-reset-requests``/``-tokens`` (Go durations such as ``"6m0s"``). Anthropic:
    ``anthropic-ratelimit-requests-remaining``, ``-input-tokens-remaining``,
    ``-output-tokens-remaining``, ``-tokens-remaining`` and their ``-reset`` (RFC 3339 times).
    ``reset`` is when what ran out comes back (else the latest of the resets given); ``extra``
    keeps the headers read. Only those
    are looked up (every response has them: a lookup per name is cheaper than a pass over all).
    """
    get = headers.get
    found = _found(get, _OPENAI_NAMES)
    if found:
        requests = _count(found.get(f"{_OPENAI}remaining-requests"))
        tokens = _count(found.get(f"{_OPENAI}remaining-tokens"))
        resets = [_duration(found.get(name)) for name in _OPENAI_RESETS]
        return Remaining(
            requests=requests,
            tokens=tokens,
            reset=_reset(zip((requests, tokens), resets, strict=True)),
            extra=found,
        )
    found = _found(get, _ANTHROPIC_NAMES)
    if not found:
        return None
    now = time.time()
    counts = [_count(found.get(f"{_ANTHROPIC}{kind}-remaining")) for kind in _ANTHROPIC_KINDS]
    resets = [_until(found.get(name), now) for name in _ANTHROPIC_RESETS]
    requests, input_tokens, output_tokens, tokens = counts
    return Remaining(
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        tokens=tokens,
        reset=_reset(zip(counts, resets, strict=True)),
        extra=found,
    )


def _reset(limits: Iterable[tuple[int | None, float | None]]) -> float | None:
    """When what ran out comes back (the latest such reset), else the latest reset of all."""
    pairs = list(limits)
    empty = [reset for left, reset in pairs if left is not None and left <= 0]
    return _latest(empty) if any(r is not None for r in empty) else _latest(r for _, r in pairs)


def _found(get: Callable[[str], str | None], names: Sequence[str]) -> dict[str, str]:
    """The headers of ``names`` that were sent; none when the first of them (the sign) was not."""
    found: dict[str, str] = {}
    for index, name in enumerate(names):
        value = get(name)
        if value is not None:
            found[name] = value
        elif index == 0:
            return found
    return found


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return max(0, int(float(value)))
    except ValueError:
        return None


def _duration(value: str | None) -> float | None:
    """Seconds in a Go duration (``"6m0s"``, ``"1.5s"``, ``"20ms"``); ``None`` if unreadable."""
    if not value:
        return None
    parts = _DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value.strip():
        try:
            return max(0.0, float(value))  # a bare number of seconds
        except ValueError:
            return None
    return sum(float(number) * _UNIT[unit] for number, unit in parts)


def _until(value: str | None, now: float) -> float | None:
    """Seconds from ``now`` until an RFC 3339 time; ``None`` if unreadable."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def _latest(resets: Iterable[float | None]) -> float | None:
    known = [r for r in resets if r is not None]
    return max(known) if known else None


def wire_body(content: bytes, provider: str) -> dict[str, Any]:
    """A response's JSON object, read straight from its bytes (a raw response's ``content``).

    Cheaper than the SDK's typed model and its ``model_dump`` (a fifth of a call's client-side
    time); the mappers read the wire format with ``.get`` either way.

    Raises:
        ModelError: The body is not a JSON object.
    """
    try:
        data = json.loads(content)
    except ValueError as exc:
        raise ModelError(f"{provider} sent an invalid response: {exc}", provider=provider) from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ModelError(f"{provider} sent an invalid response: a JSON {kind}", provider=provider)
    return data


def rate_limits_of(error: BaseException) -> Remaining | None:
    """The rate limits a :class:`ModelError` carries (set by :func:`with_rate_limits`)."""
    found = getattr(error, "rate_limits", None)
    return found if isinstance(found, Remaining) else None


def with_rate_limits(error: ModelError, headers: Mapping[str, str]) -> ModelError:
    """``error``, carrying what the response's rate-limit headers said as ``rate_limits``."""
    error.rate_limits = rate_limits(headers)
    return error


def stop_reason(
    table: Mapping[str, StopReason], reason: str | None, *, has_calls: bool
) -> StopReason:
    """Why a turn stopped: ``table[reason]`` (``END_TURN`` when unknown or absent).

    A turn that made tool calls and ended normally is ``TOOL_USE``: several providers (Ollama,
    Gemini, OpenAI-compatible servers) end a tool-calling turn with a plain "stop".
    """
    stop = table.get(reason or "", StopReason.END_TURN)
    return StopReason.TOOL_USE if has_calls and stop is StopReason.END_TURN else stop


def cache_exclusive_usage(
    usage: Mapping[str, Any] | None, *, input: str, output: str, read: str, written: str
) -> Usage:
    """Usage from counts whose input (key ``input``) leaves out cache reads and writes.

    The counts under ``read`` and ``written`` are added back to the input; ``read`` is also the
    cached count and ``written`` the cache-write count. No counts at all is one request with no
    tokens.
    """
    if not usage:
        return Usage(requests=1)
    cache_read = usage.get(read) or 0
    cache_written = usage.get(written) or 0
    return Usage(
        input_tokens=(usage.get(input) or 0) + cache_read + cache_written,
        output_tokens=usage.get(output) or 0,
        cached_tokens=cache_read,
        cache_write_tokens=cache_written,
        requests=1,
    )


async def _close_client(client: Any) -> None:
    await client.close()


class LoopClients:
    """SDK clients, one per event loop (connection pools belong to the loop that opened them).

    Each client is closed by :meth:`aclose`, or else when its event loop shuts down
    (``asyncio.run`` and ``asyncio.Runner`` finalize async generators, and a guard generator
    closes the client then), so no connection outlives its loop.

    Args:
        factory: Makes a client; may be a coroutine function.
        given: A client supplied by the user: always returned, never closed.
        close: Closes a client (default: ``await client.close()``).
    """

    __slots__ = ("_client", "_close", "_factory", "_given", "_guard", "_loop")

    def __init__(
        self,
        factory: Callable[[], Any],
        given: Any = None,
        close: Callable[[Any], Awaitable[None]] = _close_client,
    ) -> None:
        self._factory = factory
        self._given = given
        self._close = close
        self._client: Any = None
        self._guard: AsyncGenerator[None] | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    async def get(self) -> Any:
        """The client for the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is None or self._loop() is not loop:
            client = self._factory()
            if inspect.isawaitable(client):
                client = await client
            guard = _close_with_loop(client, self._close)
            await anext(guard)  # the loop now tracks the guard, and finalizes it at shutdown
            self._client, self._guard, self._loop = client, guard, weakref.ref(loop)
        return self._client

    async def aclose(self) -> None:
        """Close the client built for the running loop, if any."""
        guard, loop = self._guard, self._loop
        self._client = self._guard = self._loop = None
        if guard is not None and loop is not None and loop() is asyncio.get_running_loop():
            await guard.aclose()


async def _close_with_loop(
    client: Any, close: Callable[[Any], Awaitable[None]]
) -> AsyncGenerator[None]:
    try:
        yield
    finally:
        await close(client)


class LoopClientsOwner(AsyncClosing):
    """A base for SDK-backed models: ``aclose`` and ``async with`` over their :class:`LoopClients`.

    Subclasses set ``_clients`` (and give it a slot).
    """

    __slots__ = ()

    _clients: LoopClients

    async def aclose(self) -> None:
        """Close the HTTP client this model opened (not one it was given). Idempotent."""
        await self._clients.aclose()
