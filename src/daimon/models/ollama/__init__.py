"""Ollama models through the native API (``/api/chat``, ``/api/embed``) of the ``ollama`` package.

Needs the ``ollama`` extra (``pip install "daimon-agents[ollama]"``). The server is ``base_url``,
else ``OLLAMA_HOST``, else ``http://127.0.0.1:11434``; ``api_key`` (or ``OLLAMA_API_KEY``) is sent
as a bearer token, for ollama.com or a server behind a proxy. Local models cost nothing: daimon's
price table has no entry for them.

Mapping notes:

* Ollama gives tool calls no ids: daimon makes them up (see :mod:`daimon.models.ollama._mapping`)
  and sends tool results back by tool name (``tool_name``), in the order of the calls.
* Tool results have no error flag in Ollama's format: a failed tool's text says so itself.
* Images must be bytes or ``data:`` URLs (Ollama cannot fetch URLs); a user message's text parts
  are joined into its ``content``.
* Ollama has no tool choice: ``"none"`` sends no tools, a tool name sends that tool alone, and
  ``"required"`` cannot be enforced.
* Tool schemas go through the ``ollama`` package's ``Tool`` type, which keeps, per property,
  ``type``, ``description``, ``enum`` and ``items`` (what Ollama's server reads), not nested
  ``properties`` or ``anyOf``.
* ``response_format`` is sent as ``format`` (a JSON schema); ``temperature`` and ``max_tokens``
  as the ``temperature`` and ``num_predict`` options.
* Usage: Ollama reports no prompt-cache hits, so ``cached_tokens`` is always 0.
* Tool calls and thinking: each call arrives whole, so a stream gives it one
  :class:`~daimon.core.events.ToolCallDelta`; ``thinking`` text is not part of the answer.
* ``settings``: ``think``, ``keep_alive``, ``logprobs``, ``top_logprobs`` and ``format`` are
  arguments of the chat call, ``options`` is merged with daimon's, ``timeout`` (seconds) bounds
  this call alone (each wait of a stream), and any other key is a model option (``num_ctx``,
  ``top_k``, ``seed``, ...).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ModelError, StreamClosedError
from daimon.core.events import StreamEvent
from daimon.core.optional import require
from daimon.kit.checks import check_positive
from daimon.kit.sdk_support import (
    LoopClients,
    LoopClientsOwner,
    is_retryable_status,
    retry_after,
)
from daimon.models.ollama._mapping import (
    CHAT_ARGUMENTS,
    ChunkDecoder,
    chat_arguments,
    response_from_wire,
)

ollama = require("ollama", extra="ollama")
httpx = require("httpx", extra="ollama")  # the package's HTTP client: raw errors pass through

__all__ = ("OllamaEmbeddingModel", "OllamaModel")

_ERROR_HEADERS: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "daimon_ollama_error_headers", default=None
)
"""The headers of the latest error response in this task: ``ollama.ResponseError`` drops them,
and ``Retry-After`` is among them."""


async def _remember_error_headers(response: Any) -> None:
    if response.status_code >= 400:
        _ERROR_HEADERS.set(response.headers)


def _model_error(exc: BaseException, *, timeout: float | None = None) -> ModelError:
    """The :class:`ModelError` for an ``ollama`` or ``httpx`` error, keeping Ollama's message."""
    if isinstance(exc, ollama.ResponseError):
        status = exc.status_code if exc.status_code >= 400 else None
        headers = _ERROR_HEADERS.get() if status else None
        return ModelError(
            f"ollama returned HTTP {status}: {exc.error}"
            if status
            else f"ollama failed: {exc.error}",
            status_code=status,
            retryable=is_retryable_status(status) if status else False,
            retry_after=retry_after(headers) if headers is not None else None,
            provider="ollama",
        )
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        after = f" after {timeout:g}s" if timeout else ""
        return ModelError(f"ollama request timed out{after}", retryable=True, provider="ollama")
    if isinstance(exc, ConnectionError | httpx.TransportError):
        # ollama raises the builtin ConnectionError for a refused connection.
        return ModelError(f"could not reach ollama: {exc}", retryable=True, provider="ollama")
    return ModelError(f"ollama failed: {exc}", provider="ollama")


_ERRORS = (ollama.ResponseError, httpx.HTTPError, ConnectionError, TimeoutError, ValueError)
"""What a call may raise: ``ValueError`` covers bad JSON and chunks the package cannot read."""


def _dump(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    data: dict[str, Any] = obj.model_dump(exclude_none=True)
    return data


async def _close(client: Any) -> None:
    await client.close()


def _no_factory() -> Any:
    raise AssertionError("a model given a client never builds one")


class _Ollama(LoopClientsOwner):
    """Configuration shared by the chat and embedding models."""

    __slots__ = ("_clients", "model_name")

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        client: Any,
    ) -> None:
        if not model_name:
            raise BuilderError(f"{type(self).__name__} needs a model name")
        if not timeout > 0:
            raise BuilderError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.model_name = model_name
        factory = _no_factory
        if client is None:
            headers = {"authorization": f"Bearer {api_key}"} if api_key else None

            def factory() -> Any:
                return ollama.AsyncClient(
                    host=base_url,  # None: OLLAMA_HOST, else the local default
                    timeout=timeout,
                    headers=headers,
                    event_hooks={"response": [_remember_error_headers]},
                )

        self._clients = LoopClients(factory, client, _close)


class OllamaModel(_Ollama):
    """A chat model served by Ollama, through ``/api/chat``.

    Args:
        model_name: The model tag, e.g. ``"llama3.2"`` or ``"qwen3:8b"``.
        base_url: The server; defaults to ``OLLAMA_HOST``, else ``http://127.0.0.1:11434``.
        api_key: A bearer token; defaults to ``OLLAMA_API_KEY`` (none for a local server).
        timeout: Seconds to connect and between reads. The default is generous because the
            first call to a model waits while Ollama loads it; a request's ``settings["timeout"]``
            bounds one call.
        client: A ready ``ollama.AsyncClient`` to use instead of building one; you close it.
    """

    supports_json_schema: ClassVar[bool] = True
    """Agents with an ``output_type`` use ``format`` (a JSON schema) with these models."""
    __slots__ = ()

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        client: Any = None,
    ) -> None:
        super().__init__(
            model_name, base_url=base_url, api_key=api_key, timeout=timeout, client=client
        )

    def _call(self, request: ChatRequest, *, stream: bool) -> tuple[dict[str, Any], float | None]:
        """The chat arguments for ``request``, and its own timeout if it sets one."""
        arguments = chat_arguments(request)
        options: dict[str, Any] = {}
        timeout: float | None = None
        for key, value in (request.settings or {}).items():
            if key == "timeout":
                timeout = float(value)
            elif key == "options":
                options.update(value)
            elif key in CHAT_ARGUMENTS:
                arguments[key] = value
            else:
                options[key] = value
        if options:
            arguments["options"] = {**options, **arguments.get("options", {})}
        return {"model": self.model_name, "stream": stream, **arguments}, timeout

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        client = await self._clients.get()
        arguments, timeout = self._call(request, stream=False)
        _ERROR_HEADERS.set(None)
        try:
            async with asyncio.timeout(timeout):
                response = await client.chat(**arguments)
        except _ERRORS as exc:
            raise _model_error(exc, timeout=timeout) from exc
        return response_from_wire(_dump(response))

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events; :class:`StreamClosedError` if the stream breaks off."""
        client = await self._clients.get()
        arguments, timeout = self._call(request, stream=True)
        _ERROR_HEADERS.set(None)
        decoder = ChunkDecoder()
        chunks: Any = None
        try:
            async with asyncio.timeout(timeout):
                chunks = await client.chat(**arguments)
            while True:
                # The request goes out on the first read: errors before any chunk are errors of
                # the call, errors after one break the stream.
                try:
                    async with asyncio.timeout(timeout):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except (httpx.TransportError, TimeoutError) as exc:
                    if not decoder.received:
                        raise
                    raise StreamClosedError(
                        f"ollama stream broke off: {exc or type(exc).__name__}", provider="ollama"
                    ) from exc
                for event in decoder.feed(_dump(chunk)):
                    yield event
        except _ERRORS as exc:
            raise _model_error(exc, timeout=timeout) from exc
        finally:
            if chunks is not None:
                await chunks.aclose()
        for event in decoder.finish():
            yield event

    def __repr__(self) -> str:
        return f"OllamaModel({self.model_name!r})"


class OllamaEmbeddingModel(_Ollama):
    """Embeddings from Ollama, through ``/api/embed``.

    Args:
        model_name: The model tag, e.g. ``"nomic-embed-text"`` or ``"embeddinggemma"``.
        dimensions: Length of each vector; checked, and sent when ``send_dimensions`` is true.
        send_dimensions: Ask the server to shorten vectors to ``dimensions`` (models that can).
        truncate: Whether the server cuts texts longer than the model's context.
        batch_size: Most texts sent in one request.
        base_url: See :class:`OllamaModel`; so are ``api_key``, ``timeout`` and ``client``.
    """

    __slots__ = ("_batch_size", "_dimensions", "_send_dimensions", "_truncate")

    def __init__(
        self,
        model_name: str,
        dimensions: int,
        *,
        send_dimensions: bool = False,
        truncate: bool = True,
        batch_size: int = 256,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 300.0,
        client: Any = None,
    ) -> None:
        check_positive("dimensions", dimensions)
        check_positive("batch_size", batch_size)
        super().__init__(
            model_name, base_url=base_url, api_key=api_key, timeout=timeout, client=client
        )
        self._dimensions = dimensions
        self._send_dimensions = send_dimensions
        self._truncate = truncate
        self._batch_size = batch_size

    @property
    def dimensions(self) -> int:
        """Length of every vector this model returns."""
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        client = await self._clients.get()
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            _ERROR_HEADERS.set(None)
            try:
                response = await client.embed(
                    model=self.model_name,
                    input=batch,
                    truncate=self._truncate,
                    dimensions=self._dimensions if self._send_dimensions else None,
                )
            except _ERRORS as exc:
                raise _model_error(exc) from exc
            embeddings = _dump(response).get("embeddings") or []
            if len(embeddings) != len(batch):
                raise ModelError(
                    f"ollama returned {len(embeddings)} embeddings for {len(batch)} texts",
                    provider="ollama",
                )
            for embedding in embeddings:
                vector = [float(x) for x in embedding]
                if len(vector) != self._dimensions:
                    raise ModelError(
                        f"{self.model_name} returned {len(vector)} dimensions, expected "
                        f"{self._dimensions}",
                        provider="ollama",
                    )
                vectors.append(vector)
        return vectors

    def __repr__(self) -> str:
        return f"OllamaEmbeddingModel({self.model_name!r}, {self._dimensions})"
