"""OpenAI models: Chat Completions or Responses, on OpenAI, Azure OpenAI or compatible servers.

Needs the ``openai`` extra (``pip install "daimon-agents[openai]"``). The SDK's own retries are off:
wrap a model in :class:`~daimon.models.retry.RetryingModel` to retry.

Chat Completions has no error flag on tool results: a failed tool's result text says so itself.

:class:`OpenAIResponsesModel` (``"openai-responses:<model>"``) and
:class:`AzureOpenAIResponsesModel` (``"azure-responses:<deployment>"``) speak the Responses API
(``client.responses.create``). They send the whole conversation each call and keep nothing on
OpenAI's side (``store=False``): a reasoning model's reasoning items come back with their
encrypted content, ride on the assistant message (:attr:`Message.reasoning
<daimon.core.messages.Message.reasoning>`) and are sent back with the next turns. Usage counts
cached input and reasoning output tokens.

Media: images (URL or bytes), PDFs (bytes; the Responses API also by URL) and text documents (sent
as text) on both APIs; audio (wav, mp3 bytes) on Chat Completions only. A part an API cannot take
is refused with :class:`~daimon.core.errors.UnsupportedContentError` before sending. Tool results
carry images and PDFs on the Responses API; Chat Completions tool messages are text, so media
there becomes a text stand-in.

Prompt caching is OpenAI's own (automatic for prompts of 1024 tokens or more); ``prompt_cache_key=``
is sent as ``prompt_cache_key`` to route requests with a shared prefix to the same cache. Cached
input is counted in ``Usage.cached_tokens`` and input written to the cache (``cache_write_tokens``,
billed apart from GPT-5.6 on) in ``Usage.cache_write_tokens``, on both APIs, streamed or not.

A tool without a description is sent without one (OpenAI's ``description`` is optional).

``settings`` of a request are sent as extra JSON fields of the request body (``top_p``, ``seed``,
``reasoning_effort``, ...), except ``timeout``, ``extra_headers`` and ``extra_query``, which are
options of the call (``timeout`` in seconds for this call alone).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.errors import BuilderError, ModelError, StreamClosedError
from daimon.core.events import StreamEvent
from daimon.core.optional import require
from daimon.kit.checks import check_positive
from daimon.kit.sdk_support import (
    LoopClients,
    LoopClientsOwner,
    is_retryable_status,
    rate_limits,
    retry_after,
    wire_body,
    with_rate_limits,
)
from daimon.models.openai import _responses
from daimon.models.openai._mapping import (
    REQUEST_OPTIONS,
    ChunkDecoder,
    as_dict,
    detail,
    request_body,
    response_from_wire,
)

openai = require("openai", extra="openai")

__all__ = (
    "AzureOpenAIModel",
    "AzureOpenAIResponsesModel",
    "OpenAIEmbeddingModel",
    "OpenAIModel",
    "OpenAIResponsesModel",
)

MaxTokensParam = Literal["max_completion_tokens", "max_tokens"]


def _client_factory(
    *,
    api_key: str | None,
    base_url: str | None,
    organization: str | None,
    timeout: float,
    what: str,
) -> Callable[[], Any]:
    key = api_key or os.environ.get("OPENAI_API_KEY")
    url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    if not key:
        if url is None:
            raise BuilderError(f"{what} needs an API key: pass api_key= or set OPENAI_API_KEY")
        key = "unused"  # OpenAI-compatible servers often want none, but the SDK insists on one

    def build() -> Any:
        return openai.AsyncOpenAI(
            api_key=key, base_url=url, organization=organization, timeout=timeout, max_retries=0
        )

    return build


def _azure_factory(
    *,
    endpoint: str | None,
    api_key: str | None,
    api_version: str | None,
    azure_ad_token_provider: Callable[[], Awaitable[str]] | None,
    timeout: float,
    what: str,
) -> Callable[[], Any]:
    endpoint = endpoint or os.environ.get("AZURE_OPENAI_ENDPOINT")
    api_key = api_key or os.environ.get("AZURE_OPENAI_API_KEY")
    api_version = api_version or os.environ.get("OPENAI_API_VERSION")
    if not endpoint:
        raise BuilderError(f"{what} needs an endpoint: pass endpoint= or set AZURE_OPENAI_ENDPOINT")
    if not api_key and azure_ad_token_provider is None:
        raise BuilderError(
            f"{what} needs credentials: pass api_key= (or set AZURE_OPENAI_API_KEY) or "
            "azure_ad_token_provider="
        )
    if not api_version:
        raise BuilderError(
            f"{what} needs an API version: pass api_version= or set OPENAI_API_VERSION"
        )

    def build() -> Any:
        return openai.AsyncAzureOpenAI(
            azure_endpoint=endpoint,
            api_key=api_key,
            azure_ad_token_provider=azure_ad_token_provider,
            api_version=api_version,
            timeout=timeout,
            max_retries=0,
        )

    return build


def _model_error(exc: Exception, provider: str) -> ModelError:
    """The :class:`ModelError` for an SDK error, keeping the provider's own message."""
    if isinstance(exc, openai.APIStatusError):
        status: int = exc.status_code
        headers = exc.response.headers
        error = ModelError(
            f"{provider} returned HTTP {status}: {detail(exc.body) or exc.message}",
            status_code=status,
            retryable=is_retryable_status(status),
            retry_after=retry_after(headers),
            provider=provider,
        )
        return with_rate_limits(error, headers)
    if isinstance(exc, openai.APITimeoutError):
        return ModelError(f"{provider} request timed out", retryable=True, provider=provider)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return ModelError(f"could not reach {provider}: {cause}", retryable=True, provider=provider)
    if isinstance(exc, openai.APIResponseValidationError):
        return ModelError(f"{provider} sent an invalid response: {exc}", provider=provider)
    if isinstance(exc, openai.APIError):  # an error event inside a stream
        body = exc.body if isinstance(exc.body, Mapping) else {}
        kind = f"{body.get('type') or ''} {body.get('code') or ''}"
        transient = any(word in kind for word in ("server_error", "rate_limit", "overloaded"))
        return ModelError(
            f"{provider} failed: {detail(exc.body) or exc.message}",
            retryable=transient,
            provider=provider,
        )
    return ModelError(f"{provider} failed: {exc}", provider=provider)


class _ChatCompletions(LoopClientsOwner):
    """What OpenAI and Azure OpenAI chat models share: the Chat Completions calls."""

    provider: ClassVar[str] = "openai"
    prompt_cache: ClassVar[str] = "auto"
    """OpenAI caches prompt prefixes itself (1024 tokens or more); there is no switch."""
    supports_json_schema: ClassVar[bool] = True
    """Agents with an ``output_type`` use ``response_format`` (JSON schema) with these models."""
    __slots__ = ("_clients", "_max_tokens_param", "model_name", "prompt_cache_key")

    def __init__(self, model_name: str, clients: LoopClients, max_tokens_param: str) -> None:
        if not model_name:
            raise BuilderError(f"{type(self).__name__} needs a model name")
        if max_tokens_param not in ("max_completion_tokens", "max_tokens"):
            raise BuilderError(f"unknown max_tokens_param {max_tokens_param!r}")
        self.model_name = model_name
        self._clients = clients
        self._max_tokens_param = max_tokens_param
        self.prompt_cache_key: str | None = None
        """Sent as ``prompt_cache_key``: requests sharing a key and a prefix share a cache."""

    def _call(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        body = request_body(
            request, max_tokens_param=self._max_tokens_param, provider=self.provider
        )
        if self.prompt_cache_key is not None:
            body["prompt_cache_key"] = self.prompt_cache_key
        messages = body.pop("messages")
        if stream:
            body["stream_options"] = {"include_usage": True}
        options: dict[str, Any] = {}
        for key, value in (request.settings or {}).items():
            if key == "extra_body":
                body.update(value)
            elif key in REQUEST_OPTIONS:
                options[key] = value
            else:
                body[key] = value
        return {
            "model": self.model_name,
            "messages": messages,
            "stream": stream,
            "extra_body": body,
            **options,
        }

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        client = await self._clients.get()
        try:
            raw = await client.chat.completions.with_raw_response.create(
                **self._call(request, stream=False)
            )
        except openai.OpenAIError as exc:
            raise _model_error(exc, self.provider) from exc
        return response_from_wire(
            wire_body(raw.content, self.provider),
            provider=self.provider,
            rate_limits=rate_limits(raw.headers),
        )

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events; :class:`StreamClosedError` if the stream breaks off."""
        client = await self._clients.get()
        provider = self.provider
        try:
            stream = await client.chat.completions.create(**self._call(request, stream=True))
        except openai.OpenAIError as exc:
            raise _model_error(exc, provider) from exc
        decoder = ChunkDecoder(provider=provider)
        async with stream:
            try:
                async for chunk in stream:
                    for event in decoder.feed(as_dict(chunk)):
                        yield event
            except openai.APIConnectionError as exc:  # also timeouts
                cause = exc.__cause__ or exc
                raise StreamClosedError(
                    f"{provider} stream broke off: {cause}", provider=provider
                ) from exc
            except openai.OpenAIError as exc:
                raise _model_error(exc, provider) from exc
        for event in decoder.finish(rate_limits(stream.response.headers)):
            yield event

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r})"


def _no_factory() -> Any:
    raise AssertionError("a model given a client never builds one")


class OpenAIModel(_ChatCompletions):
    """A chat model behind the OpenAI Chat Completions API.

    Args:
        model_name: The model id, e.g. ``"gpt-4o-mini"``.
        api_key: Defaults to ``OPENAI_API_KEY``; optional when ``base_url`` points at an
            OpenAI-compatible server that needs none.
        base_url: Defaults to ``OPENAI_BASE_URL``, else OpenAI's API.
        organization: The OpenAI organization id, if any.
        timeout: Seconds per call; a request's ``settings["timeout"]`` overrides it.
        client: A ready ``openai.AsyncOpenAI`` to use instead of building one; you close it.
        max_tokens_param: The body field for ``max_tokens``: OpenAI wants
            ``"max_completion_tokens"``, some compatible servers only know ``"max_tokens"``.
        prompt_cache_key: Sent as ``prompt_cache_key`` (requests sharing it and a prefix share a
            cache); ``None`` sends none.
    """

    __slots__ = ()

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
        max_tokens_param: MaxTokensParam = "max_completion_tokens",
        prompt_cache_key: str | None = None,
    ) -> None:
        factory = _no_factory
        if client is None:
            factory = _client_factory(
                api_key=api_key,
                base_url=base_url,
                organization=organization,
                timeout=timeout,
                what="OpenAIModel",
            )
        super().__init__(model_name, LoopClients(factory, client), max_tokens_param)
        self.prompt_cache_key = prompt_cache_key


class AzureOpenAIModel(_ChatCompletions):
    """A chat model deployed on Azure OpenAI, through Chat Completions.

    Args:
        deployment: The deployment name (Azure routes by it, not by model id).
        endpoint: ``https://<resource>.openai.azure.com``; defaults to ``AZURE_OPENAI_ENDPOINT``.
        api_key: Defaults to ``AZURE_OPENAI_API_KEY``; not needed with ``azure_ad_token_provider``.
        api_version: Defaults to ``OPENAI_API_VERSION``.
        azure_ad_token_provider: An async function returning an Entra ID token, instead of a key.
        timeout: Seconds per call; a request's ``settings["timeout"]`` overrides it.
        client: A ready ``openai.AsyncAzureOpenAI`` to use instead of building one; you close it.
    """

    provider: ClassVar[str] = "azure"
    __slots__ = ()

    def __init__(
        self,
        deployment: str,
        *,
        endpoint: str | None = None,
        api_key: str | None = None,
        api_version: str | None = None,
        azure_ad_token_provider: Callable[[], Awaitable[str]] | None = None,
        timeout: float = 60.0,
        client: Any = None,
        prompt_cache_key: str | None = None,
    ) -> None:
        factory = _no_factory
        if client is None:
            factory = _azure_factory(
                endpoint=endpoint,
                api_key=api_key,
                api_version=api_version,
                azure_ad_token_provider=azure_ad_token_provider,
                timeout=timeout,
                what=type(self).__name__,
            )
        super().__init__(deployment, LoopClients(factory, client), "max_completion_tokens")
        self.prompt_cache_key = prompt_cache_key


_REASONING_MODELS = ("o1", "o3", "o4", "gpt-5", "codex")


class _Responses(LoopClientsOwner):
    """What OpenAI and Azure OpenAI Responses models share: the ``responses.create`` calls."""

    provider: ClassVar[str] = "openai"
    prompt_cache: ClassVar[str] = "auto"
    """OpenAI caches prompt prefixes itself (1024 tokens or more); there is no switch."""
    supports_json_schema: ClassVar[bool] = True
    """Agents with an ``output_type`` use ``text.format`` (JSON schema) with these models."""
    __slots__ = ("_clients", "_include", "_store", "model_name", "prompt_cache_key")

    def __init__(
        self, model_name: str, clients: LoopClients, *, store: bool, keep_reasoning: bool | None
    ) -> None:
        if not model_name:
            raise BuilderError(f"{type(self).__name__} needs a model name")
        self.model_name = model_name
        self._clients = clients
        self._store = store
        self.prompt_cache_key: str | None = None
        """Sent as ``prompt_cache_key``: requests sharing a key and a prefix share a cache."""
        if keep_reasoning is None:
            keep_reasoning = model_name.lower().startswith(_REASONING_MODELS)
        self._include = ["reasoning.encrypted_content"] if keep_reasoning else None

    def _call(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        body = _responses.request_body(request, provider=self.provider)
        if self.prompt_cache_key is not None:
            body["prompt_cache_key"] = self.prompt_cache_key
        call: dict[str, Any] = {
            "model": self.model_name,
            "input": body.pop("input"),
            "stream": stream,
            "store": self._store,
        }
        if self._include:
            call["include"] = list(self._include)
        for key, value in (request.settings or {}).items():
            if key == "extra_body":
                body.update(value)
            elif key in REQUEST_OPTIONS:
                call[key] = value
            else:
                body[key] = value
        call["extra_body"] = body
        return call

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        client = await self._clients.get()
        try:
            raw = await client.responses.with_raw_response.create(
                **self._call(request, stream=False)
            )
        except openai.OpenAIError as exc:
            raise _model_error(exc, self.provider) from exc
        return _responses.response_from_wire(
            wire_body(raw.content, self.provider),
            provider=self.provider,
            rate_limits=rate_limits(raw.headers),
        )

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events; :class:`StreamClosedError` if the stream breaks off."""
        client = await self._clients.get()
        provider = self.provider
        try:
            stream = await client.responses.create(**self._call(request, stream=True))
        except openai.OpenAIError as exc:
            raise _model_error(exc, provider) from exc
        decoder = _responses.EventDecoder(provider=provider)
        async with stream:
            try:
                async for event in stream:
                    for out in decoder.feed(as_dict(event)):
                        yield out
            except openai.APIConnectionError as exc:  # also timeouts
                cause = exc.__cause__ or exc
                raise StreamClosedError(
                    f"{provider} stream broke off: {cause}", provider=provider
                ) from exc
            except openai.OpenAIError as exc:
                raise _model_error(exc, provider) from exc
        for out in decoder.finish(rate_limits(stream.response.headers)):
            yield out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r})"


class OpenAIResponsesModel(_Responses):
    """A chat model behind the OpenAI Responses API (``client.responses.create``).

    Args:
        model_name: The model id, e.g. ``"gpt-5-mini"``.
        api_key: Defaults to ``OPENAI_API_KEY``; optional when ``base_url`` points at a
            compatible server that needs none.
        base_url: Defaults to ``OPENAI_BASE_URL``, else OpenAI's API.
        organization: The OpenAI organization id, if any.
        timeout: Seconds per call; a request's ``settings["timeout"]`` overrides it.
        client: A ready ``openai.AsyncOpenAI`` to use instead of building one; you close it.
        store: Let OpenAI store the responses (``store``); daimon sends the whole conversation
            each call either way.
        keep_reasoning: Ask for reasoning items' encrypted content
            (``include=["reasoning.encrypted_content"]``), so they can be sent back on later
            turns; ``None`` asks for reasoning models (``o1``, ``o3``, ``o4``, ``gpt-5``, ...).
    """

    __slots__ = ()

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
        store: bool = False,
        keep_reasoning: bool | None = None,
        prompt_cache_key: str | None = None,
    ) -> None:
        factory = _no_factory
        if client is None:
            factory = _client_factory(
                api_key=api_key,
                base_url=base_url,
                organization=organization,
                timeout=timeout,
                what="OpenAIResponsesModel",
            )
        clients = LoopClients(factory, client)
        super().__init__(model_name, clients, store=store, keep_reasoning=keep_reasoning)
        self.prompt_cache_key = prompt_cache_key


class AzureOpenAIResponsesModel(_Responses):
    """A chat model deployed on Azure OpenAI, through the Responses API.

    Args:
        deployment: The deployment name, sent as the request's ``model``.
        endpoint: ``https://<resource>.openai.azure.com``; defaults to ``AZURE_OPENAI_ENDPOINT``.
        api_key: Defaults to ``AZURE_OPENAI_API_KEY``; not needed with ``azure_ad_token_provider``.
        api_version: Defaults to ``OPENAI_API_VERSION`` (the Responses API needs
            ``2025-03-01-preview`` or later).
        azure_ad_token_provider: An async function returning an Entra ID token, instead of a key.
        timeout: Seconds per call; a request's ``settings["timeout"]`` overrides it.
        client: A ready ``openai.AsyncAzureOpenAI`` to use instead of building one; you close it.
        store: As for :class:`OpenAIResponsesModel`.
        keep_reasoning: As for :class:`OpenAIResponsesModel`.
    """

    provider: ClassVar[str] = "azure"
    __slots__ = ()

    def __init__(
        self,
        deployment: str,
        *,
        endpoint: str | None = None,
        api_key: str | None = None,
        api_version: str | None = None,
        azure_ad_token_provider: Callable[[], Awaitable[str]] | None = None,
        timeout: float = 60.0,
        client: Any = None,
        store: bool = False,
        keep_reasoning: bool | None = None,
        prompt_cache_key: str | None = None,
    ) -> None:
        factory = _no_factory
        if client is None:
            factory = _azure_factory(
                endpoint=endpoint,
                api_key=api_key,
                api_version=api_version,
                azure_ad_token_provider=azure_ad_token_provider,
                timeout=timeout,
                what="AzureOpenAIResponsesModel",
            )
        clients = LoopClients(factory, client)
        super().__init__(deployment, clients, store=store, keep_reasoning=keep_reasoning)
        self.prompt_cache_key = prompt_cache_key


class OpenAIEmbeddingModel(LoopClientsOwner):
    """Embeddings from OpenAI (or a compatible server) through the embeddings API.

    Args:
        model_name: The model id, e.g. ``"text-embedding-3-small"``.
        dimensions: Length of each vector. Sent to the API for models that can shorten their
            vectors (``text-embedding-3-*``, or when ``send_dimensions`` is true).
        api_key: Defaults to ``OPENAI_API_KEY``.
        base_url: Defaults to ``OPENAI_BASE_URL``, else OpenAI's API.
        organization: The OpenAI organization id, if any.
        timeout: Seconds per call.
        client: A ready ``openai.AsyncOpenAI`` to use instead of building one; you close it.
        batch_size: Most texts sent in one request (OpenAI takes up to 2048).
        send_dimensions: Whether to send ``dimensions``; ``None`` decides by the model name.
    """

    __slots__ = ("_batch_size", "_clients", "_dimensions", "_send_dimensions", "model_name")

    def __init__(
        self,
        model_name: str,
        dimensions: int,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
        batch_size: int = 2048,
        send_dimensions: bool | None = None,
    ) -> None:
        if not model_name:
            raise BuilderError("OpenAIEmbeddingModel needs a model name")
        check_positive("dimensions", dimensions)
        check_positive("batch_size", batch_size)
        self.model_name = model_name
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._send_dimensions = (
            model_name.startswith("text-embedding-3")
            if send_dimensions is None
            else send_dimensions
        )
        factory = _no_factory
        if client is None:
            factory = _client_factory(
                api_key=api_key,
                base_url=base_url,
                organization=organization,
                timeout=timeout,
                what="OpenAIEmbeddingModel",
            )
        self._clients = LoopClients(factory, client)

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
            params: dict[str, Any] = {
                "model": self.model_name,
                "input": batch,
                "encoding_format": "float",
            }
            if self._send_dimensions:
                params["dimensions"] = self._dimensions
            try:
                response = await client.embeddings.create(**params)
            except openai.OpenAIError as exc:
                raise _model_error(exc, "openai") from exc
            data = sorted(as_dict(response).get("data") or [], key=lambda d: d.get("index", 0))
            if len(data) != len(batch):
                raise ModelError(
                    f"openai returned {len(data)} embeddings for {len(batch)} texts",
                    provider="openai",
                )
            for item in data:
                vector = [float(x) for x in item.get("embedding") or ()]
                if len(vector) != self._dimensions:
                    raise ModelError(
                        f"{self.model_name} returned {len(vector)} dimensions, expected "
                        f"{self._dimensions}",
                        provider="openai",
                    )
                vectors.append(vector)
        return vectors

    def __repr__(self) -> str:
        return f"OpenAIEmbeddingModel({self.model_name!r}, {self._dimensions})"
