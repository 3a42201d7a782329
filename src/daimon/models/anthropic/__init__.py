"""Anthropic models: Claude through the Messages API.

Needs the ``anthropic`` extra (``pip install "daimon-agents[anthropic]"``). The SDK's own retries
are off: wrap a model in :class:`~daimon.models.retry.RetryingModel` to retry.

Mapping notes:

* System messages become the top-level ``system`` text; tool results become ``tool_result``
  blocks of a user turn (consecutive results share one turn), with ``is_error`` kept.
* ``response_format`` is sent as ``output_config.format`` (Anthropic's JSON-schema structured
  output). Models that predate it answer with a 400: for those, ask for structured output
  through a tool instead.
* Tool-call arguments that were not a JSON object (kept raw by daimon) go back to the API as
  ``{"raw_arguments": "<the model's text>"}``, as ``tool_use`` input must be an object.
* ``temperature`` is sent only when the request sets it: newer Claude models reject it.
* ``usage.input_tokens`` counts cache reads and cache writes too (Anthropic reports them apart);
  ``cached_tokens`` is the cache reads, ``cache_write_tokens`` the writes.
* Prompt caching (``prompt_cache="auto"``, the default): ``cache_control`` breakpoints on the last
  tool, the system text and the last block of the conversation; with caching on, the system
  prompt and user text go as blocks on every turn so the request prefix is byte-stable.
  Hand-placed :class:`~daimon.core.messages.CachePoint` parts replace the automatic ones.
* Media: images (bytes, ``data:`` or web URL), PDFs (bytes or URL) and inline text documents;
  tool results carry images and documents (audio becomes a text stand-in). Audio in a user
  message is refused with :class:`~daimon.core.errors.UnsupportedContentError` before sending.
* Thinking (``settings={"thinking": ...}``): ``thinking`` blocks (with their signatures) and
  ``redacted_thinking`` blocks ride on the assistant message
  (:attr:`Message.reasoning <daimon.core.messages.Message.reasoning>`, streamed as
  :class:`~daimon.core.events.ReasoningEvent`) and go back unchanged ahead of its text and
  ``tool_use`` blocks, as the API requires of a tool-use turn with extended thinking on.
* Empty fields are left out: a tool without a docstring goes without ``description``, an
  empty tool result without ``content``, and empty text parts of a user message are dropped
  (the API refuses empty text blocks). A failed tool's empty result says that it failed, as
  the API refuses an error without content.
* ``settings`` are sent as extra JSON fields of the request body (``top_k``, ``thinking``,
  ``metadata``, ...), except ``timeout``, ``extra_headers`` and ``extra_query``, which are
  options of the call (``timeout`` in seconds for this call alone). An ``output_config``
  setting is merged with the one ``response_format`` makes.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ModelError, StreamClosedError
from daimon.core.events import StreamEvent
from daimon.core.optional import require
from daimon.kit.checks import check_positive
from daimon.kit.media import CacheMode, cache_mode
from daimon.kit.sdk_support import (
    LoopClients,
    LoopClientsOwner,
    is_retryable_status,
    rate_limits,
    retry_after,
    wire_body,
    with_rate_limits,
)
from daimon.models.anthropic._mapping import (
    ERROR_STATUS,
    REQUEST_OPTIONS,
    EventDecoder,
    request_body,
    response_from_wire,
)

anthropic = require("anthropic", extra="anthropic")
httpx2 = require("httpx2", extra="anthropic")  # the SDK's HTTP client: raw errors mid-stream

__all__ = ("AnthropicModel",)


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    data: dict[str, Any] = obj.model_dump(warnings=False)
    return data


def _error_fields(body: object) -> tuple[str | None, str | None]:
    """The error's ``type`` and ``message`` from an Anthropic error body."""
    error = body.get("error", body) if isinstance(body, Mapping) else None
    if not isinstance(error, Mapping):
        return None, body if isinstance(body, str) and body else None
    kind, message = error.get("type"), error.get("message")
    return (str(kind) if kind else None), (str(message) if message else None)


def _model_error(exc: Exception) -> ModelError:
    """The :class:`ModelError` for an SDK error, keeping Anthropic's own message."""
    if isinstance(exc, anthropic.APIStatusError):
        kind, message = _error_fields(exc.body)
        status: int = exc.status_code
        if status < 400:  # an error event inside a 200 stream: its type says what happened
            status = ERROR_STATUS.get(kind or "", 500)
        headers = exc.response.headers
        error = ModelError(
            f"anthropic returned HTTP {status}: {message or exc.message}",
            status_code=status,
            retryable=is_retryable_status(status),
            retry_after=retry_after(headers),
            provider="anthropic",
        )
        return with_rate_limits(error, headers)
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelError("anthropic request timed out", retryable=True, provider="anthropic")
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc
        return ModelError(
            f"could not reach anthropic: {cause}", retryable=True, provider="anthropic"
        )
    return ModelError(f"anthropic failed: {exc}", provider="anthropic")


def _no_factory() -> Any:
    raise AssertionError("a model given a client never builds one")


class AnthropicModel(LoopClientsOwner):
    """A Claude model behind the Anthropic Messages API.

    Args:
        model_name: The model id, e.g. ``"claude-sonnet-4-5"``.
        api_key: Defaults to ``ANTHROPIC_API_KEY``.
        base_url: Defaults to ``ANTHROPIC_BASE_URL``, else Anthropic's API.
        timeout: Seconds per call; a request's ``settings["timeout"]`` overrides it.
        max_tokens_default: ``max_tokens`` for requests that set none (the API requires one).
        client: A ready ``anthropic.AsyncAnthropic`` to use instead of building one; you close it.
        prompt_cache: ``"auto"`` places ``cache_control`` breakpoints on the tools, the system
            prompt and the conversation so far, unless the request holds hand-placed
            :class:`~daimon.core.messages.CachePoint` parts (then those); ``"off"`` sends none.
    """

    provider: ClassVar[str] = "anthropic"
    supports_json_schema: ClassVar[bool] = True
    """Agents with an ``output_type`` use native structured output (``output_config``)."""
    __slots__ = ("_clients", "_max_tokens", "model_name", "prompt_cache")

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_tokens_default: int = 4096,
        client: Any = None,
        prompt_cache: CacheMode = "auto",
    ) -> None:
        if not model_name:
            raise BuilderError("AnthropicModel needs a model name")
        self.prompt_cache: CacheMode = cache_mode(prompt_cache)
        check_positive("max_tokens_default", max_tokens_default)
        factory = _no_factory
        if client is None:
            key = api_key or os.environ.get("ANTHROPIC_API_KEY")
            url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
            if not key:
                raise BuilderError(
                    "AnthropicModel needs an API key: pass api_key= or set ANTHROPIC_API_KEY"
                )

            def factory() -> Any:
                return anthropic.AsyncAnthropic(
                    api_key=key, base_url=url, timeout=timeout, max_retries=0
                )

        self.model_name = model_name
        self._max_tokens = max_tokens_default
        self._clients = LoopClients(factory, client)

    def _call(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        body = request_body(request, max_tokens=self._max_tokens, cache=self.prompt_cache)
        messages, max_tokens = body.pop("messages"), body.pop("max_tokens")
        options: dict[str, Any] = {}
        for key, value in (request.settings or {}).items():
            if key == "extra_body":
                body.update(value)
            elif key in REQUEST_OPTIONS:
                options[key] = value
            elif key == "output_config" and "output_config" in body:
                body["output_config"] = {**value, **body["output_config"]}
            else:
                body[key] = value
        return {
            "model": self.model_name,
            "messages": messages,
            "max_tokens": max_tokens,
            "stream": stream,
            "extra_body": body,
            **options,
        }

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        client = await self._clients.get()
        try:
            raw = await client.messages.with_raw_response.create(
                **self._call(request, stream=False)
            )
            content = await raw.read()
        except anthropic.AnthropicError as exc:
            raise _model_error(exc) from exc
        return response_from_wire(wire_body(content, "anthropic"), rate_limits(raw.headers))

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events; :class:`StreamClosedError` if the stream breaks off."""
        client = await self._clients.get()
        try:
            stream = await client.messages.create(**self._call(request, stream=True))
        except anthropic.AnthropicError as exc:
            raise _model_error(exc) from exc
        decoder = EventDecoder()
        async with stream:
            try:
                async for event in stream:
                    for out in decoder.feed(_as_dict(event)):
                        yield out
            except (httpx2.TransportError, anthropic.APIConnectionError) as exc:
                cause = exc.__cause__ or exc
                raise StreamClosedError(
                    f"anthropic stream broke off: {cause}", provider="anthropic"
                ) from exc
            except anthropic.AnthropicError as exc:
                raise _model_error(exc) from exc
        for out in decoder.finish(rate_limits(stream.response.headers)):
            yield out

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model_name!r})"
