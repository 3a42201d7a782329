"""Gemini models on the Gemini API or Vertex AI, through the ``google-genai`` SDK.

Needs the ``gemini`` extra (``pip install "daimon-agents[gemini]"``). The SDK's own retries are off:
wrap a model in :class:`~daimon.models.retry.RetryingModel` to retry. One class serves both
back ends: ``GeminiModel("gemini-2.5-flash")`` uses the Gemini API (``GEMINI_API_KEY`` or
``GOOGLE_API_KEY``), ``GeminiModel("gemini-2.5-flash", vertexai=True)`` uses Vertex AI
(``GOOGLE_CLOUD_PROJECT``, ``GOOGLE_CLOUD_LOCATION`` and Application Default Credentials, or an
``api_key`` for Vertex express mode); ``"vertex:<model>"`` model strings mean the latter.

Mapping notes:

* System messages become ``system_instruction``; tool results become ``function_response`` parts
  of a user turn, ``{"output": text}`` or, for a failed tool, ``{"error": text}``.
* Calls without an id from the API get a synthesized one. Thought signatures (on a function
  call's part, or a text part's) ride on the assistant message as
  :class:`~daimon.core.messages.Reasoning` items (``provider="gemini"``) and go back on the same
  part, streamed or not, so Gemini 3 tool turns round-trip through memory and checkpoints (see
  :mod:`daimon.models.gemini._mapping`). A conversation carrying tool calls made by another
  provider has no signatures, which Gemini 3 may refuse.
* Images, audio and documents (PDF, text) go as ``inline_data`` (bytes and ``data:`` URLs) or
  ``file_data`` (other URLs: ``gs://``, Files API URIs, or web URLs on models that fetch them),
  with the part's ``media_type``. Media a tool returns becomes a text stand-in in the function
  response.
* Prompt caching: Gemini caches repeated prefixes implicitly, and ``cached_content=`` (or a
  ``cached_content`` setting) reads an explicit cache; the request then sends no system
  instruction, tools or tool config (Gemini refuses them beside a cache). ``cached_tokens`` is
  ``cachedContentTokenCount``; hand-placed ``CachePoint`` parts are left out.
* Tools are sent as JSON Schema (``parameters_json_schema``) and ``response_format`` as
  ``response_json_schema`` with ``response_mime_type="application/json"``.
* Function calls stream whole (the Gemini API sends each one complete): one
  :class:`~daimon.core.events.ToolCallDelta` carries all the arguments.
* Usage: ``input_tokens`` is the prompt count (which includes cached tokens) plus tool-use prompt
  tokens; ``output_tokens`` counts thinking tokens too, as they are billed as output.
* ``settings`` whose key is a ``GenerateContentConfig`` field (``top_k``, ``thinking_config``,
  ``safety_settings``, ``seed``, ``cached_content``, ...) go to the config; ``timeout``
  (seconds, for this call alone), ``extra_headers`` and ``extra_body`` are HTTP options; any
  other key is sent as a raw JSON field of the request body.
* HTTP goes through ``httpx2`` (the SDK's own client library) even when ``aiohttp`` is installed,
  so timeouts and errors behave the same everywhere. Vertex mTLS client certificates are not set
  up by daimon: pass a ready ``client=`` for those.
"""

from __future__ import annotations

import functools
import os
import ssl
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
from daimon.models.gemini._mapping import (
    REQUEST_OPTIONS,
    ChunkDecoder,
    contents_to_wire,
    request_config,
    response_from_wire,
    retry_delay,
)

genai = require("google.genai", extra="gemini")
genai_errors = require("google.genai.errors", extra="gemini")
genai_types = require("google.genai.types", extra="gemini")
httpx2 = require("httpx2", extra="gemini")  # the SDK's HTTP client
auth_errors = require("google.auth.exceptions", extra="gemini")

__all__ = ("GeminiEmbeddingModel", "GeminiModel")

_SDK_ERRORS = (
    genai_errors.APIError,
    genai_errors.UnknownApiResponseError,
    httpx2.HTTPError,
    auth_errors.GoogleAuthError,
)


def _ssl_context() -> Any:
    # What the SDK would use itself: the CA files named by the environment, else the OS store.
    return _load_ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _load_ssl_context(cafile: str | None, capath: str | None) -> Any:
    # Loading CA certificates takes tens of milliseconds: one context serves every client.
    if cafile or capath:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    return httpx2.create_ssl_context()


def _client_factory(
    *,
    what: str,
    api_key: str | None,
    vertexai: bool,
    project: str | None,
    location: str | None,
    credentials: Any,
    base_url: str | None,
    api_version: str | None,
    timeout: float,
) -> Any:
    if not vertexai:
        api_key = api_key or os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY")
        if not api_key:
            raise BuilderError(
                f"{what} needs an API key: pass api_key= or set GEMINI_API_KEY (or "
                "GOOGLE_API_KEY), or use Vertex AI with vertexai=True"
            )
    elif not api_key:
        # Resolved here rather than by the SDK, which with a custom base_url and no explicit
        # project treats the URL as a bare gateway and leaves the model out of the path.
        project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
        location = location or os.environ.get("GOOGLE_CLOUD_LOCATION") or "global"
    if not timeout > 0:
        raise BuilderError(f"timeout must be a positive number of seconds, got {timeout!r}")

    def build() -> Any:
        context = _ssl_context()
        http_options = genai_types.HttpOptions(
            base_url=base_url,
            api_version=api_version,
            timeout=round(timeout * 1000),
            # One attempt: retries are RetryingModel's job. Setting them also stops the SDK from
            # sleeping 1-10 s and trying again after a connection error.
            retry_options=genai_types.HttpRetryOptions(attempts=1),
            # A transport of our own keeps the SDK on httpx2 even when aiohttp is installed;
            # "verify" and "ssl" hand the SDK our SSL context, so it loads no certificates.
            async_client_args={
                "transport": httpx2.AsyncHTTPTransport(verify=context),
                "verify": context,
                "ssl": context,
            },
        )
        if vertexai:
            return genai.Client(
                vertexai=True,
                api_key=api_key,
                project=project,
                location=location,
                credentials=credentials,
                http_options=http_options,
            )
        return genai.Client(api_key=api_key, http_options=http_options)

    return build


async def _close(client: Any) -> None:
    client.close()  # the SDK's sync HTTP client, never used by daimon
    await client.aio.aclose()


def _no_factory() -> Any:
    raise AssertionError("a model given a client never builds one")


def _status_of(exc: Any) -> int | None:
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) and code >= 400 else None


def _model_error(exc: Exception, provider: str) -> ModelError:
    """The :class:`ModelError` for an SDK error, keeping the provider's own message."""
    if isinstance(exc, genai_errors.APIError):
        status = _status_of(exc)
        message = exc.message or exc.status or str(exc)
        headers = getattr(exc.response, "headers", None)
        wait = retry_after(headers) if isinstance(headers, Mapping) else None
        if wait is None:
            wait = retry_delay(exc.details)
        return ModelError(
            f"{provider} returned HTTP {status}: {message}"
            if status
            else f"{provider} failed: {message}",
            status_code=status,
            retryable=is_retryable_status(status) if status else False,
            retry_after=wait,
            provider=provider,
        )
    if isinstance(exc, httpx2.TimeoutException):
        return ModelError(f"{provider} request timed out", retryable=True, provider=provider)
    if isinstance(exc, httpx2.TransportError | auth_errors.TransportError):
        return ModelError(f"could not reach {provider}: {exc}", retryable=True, provider=provider)
    if isinstance(exc, auth_errors.GoogleAuthError):
        return ModelError(f"{provider} credentials failed: {exc}", provider=provider)
    return ModelError(f"{provider} sent an invalid response: {exc}", provider=provider)


def _dump(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    data: dict[str, Any] = obj.model_dump(exclude_none=True, exclude={"sdk_http_response"})
    return data


class _Gemini(LoopClientsOwner):
    """Configuration shared by the chat and embedding models."""

    __slots__ = ("_clients", "model_name", "provider")

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None,
        vertexai: bool,
        project: str | None,
        location: str | None,
        credentials: Any,
        base_url: str | None,
        api_version: str | None,
        timeout: float,
        client: Any,
    ) -> None:
        if not model_name:
            raise BuilderError(f"{type(self).__name__} needs a model name")
        self.model_name = model_name
        self.provider = "vertex" if vertexai else "gemini"
        """The provider name errors report: ``"gemini"`` or ``"vertex"``."""
        factory = _no_factory
        if client is None:
            factory = _client_factory(
                what=type(self).__name__,
                api_key=api_key,
                vertexai=vertexai,
                project=project,
                location=location,
                credentials=credentials,
                base_url=base_url,
                api_version=api_version,
                timeout=timeout,
            )
        self._clients = LoopClients(factory, client, _close)

    async def _client(self) -> Any:
        try:
            return await self._clients.get()
        except (ValueError, OSError, auth_errors.GoogleAuthError) as exc:  # no credentials, ...
            raise ModelError(
                f"could not set up the {self.provider} client: {exc}", provider=self.provider
            ) from exc


class GeminiModel(_Gemini):
    """A Gemini chat model, on the Gemini API or on Vertex AI.

    Args:
        model_name: The model id, e.g. ``"gemini-2.5-flash"``.
        api_key: The Gemini API key; defaults to ``GOOGLE_API_KEY``, then ``GEMINI_API_KEY``.
            With ``vertexai=True``, a Vertex express-mode key (optional).
        vertexai: Use Vertex AI instead of the Gemini API.
        project: The Google Cloud project (Vertex); defaults to ``GOOGLE_CLOUD_PROJECT`` or the
            credentials' project.
        location: The Vertex region; defaults to ``GOOGLE_CLOUD_LOCATION``, else ``"global"``.
        credentials: ``google.auth`` credentials for Vertex; default: Application Default
            Credentials.
        base_url: Another endpoint (a proxy, a regional or private endpoint).
        api_version: The API version path segment; the SDK's default when not given.
        timeout: Seconds per call; a request's ``settings["timeout"]`` overrides it.
        client: A ready ``google.genai.Client`` to use instead of building one; you close it.
        cached_content: The name of a cached content (``cachedContents/...``, made with the
            SDK's ``client.caches.create``) every request reads its prefix from; its system
            instruction and tools are the cache's, so the request sends none of its own.
    """

    supports_json_schema: ClassVar[bool] = True
    """Agents with an ``output_type`` use ``response_json_schema`` with these models."""
    prompt_cache: ClassVar[str] = "auto"
    """Gemini caches repeated prefixes implicitly (2.5 models and later)."""
    __slots__ = ("_config_fields", "cached_content")

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        vertexai: bool = False,
        project: str | None = None,
        location: str | None = None,
        credentials: Any = None,
        base_url: str | None = None,
        api_version: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
        cached_content: str | None = None,
    ) -> None:
        self.cached_content = cached_content
        super().__init__(
            model_name,
            api_key=api_key,
            vertexai=vertexai,
            project=project,
            location=location,
            credentials=credentials,
            base_url=base_url,
            api_version=api_version,
            timeout=timeout,
            client=client,
        )
        self._config_fields = frozenset(genai_types.GenerateContentConfig.model_fields)

    def _call(self, request: ChatRequest) -> dict[str, Any]:
        system, contents = contents_to_wire(request.messages)
        config = request_config(request, system)
        # One HTTP request per call: no SDK-side tool execution, no automatic continuation.
        config["automatic_function_calling"] = {"disable": True}
        if "automatic_continuation" in self._config_fields:
            config["automatic_continuation"] = False
        http: dict[str, Any] = {}
        extra_body: dict[str, Any] = {}
        for key, value in (request.settings or {}).items():
            if key == "timeout":
                http["timeout"] = round(float(value) * 1000)
            elif key == "extra_headers":
                http["headers"] = dict(value)
            elif key == "extra_body":
                extra_body.update(value)
            elif key in REQUEST_OPTIONS:
                http[key] = value
            elif key in self._config_fields and key != "http_options":
                config[key] = value
            else:
                extra_body[key] = value
        if extra_body:
            http["extra_body"] = extra_body
        if http:
            config["http_options"] = http
        if self.cached_content and not config.get("cached_content"):
            config["cached_content"] = self.cached_content
        if config.get("cached_content"):
            # Gemini refuses these beside cached content: they live in the cache.
            for key in ("system_instruction", "tools", "tool_config"):
                config.pop(key, None)
        return {"model": self.model_name, "contents": contents, "config": config}

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        client = await self._client()
        try:
            response = await client.aio.models.generate_content(**self._call(request))
        except _SDK_ERRORS as exc:
            raise _model_error(exc, self.provider) from exc
        return response_from_wire(_dump(response), provider=self.provider)

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events; :class:`StreamClosedError` if the stream breaks off."""
        client = await self._client()
        provider = self.provider
        decoder = ChunkDecoder(provider=provider)
        stream: Any = None
        try:
            # The request goes out on the first iteration: errors before any chunk are errors
            # of the call, errors after one break the stream.
            stream = await client.aio.models.generate_content_stream(**self._call(request))
            async for chunk in stream:
                for event in decoder.feed(_dump(chunk)):
                    yield event
        except httpx2.TransportError as exc:  # also timeouts
            if not decoder.received:
                raise _model_error(exc, provider) from exc
            raise StreamClosedError(
                f"{provider} stream broke off: {exc}", provider=provider
            ) from exc
        except _SDK_ERRORS as exc:
            raise _model_error(exc, provider) from exc
        finally:
            if stream is not None:
                await stream.aclose()
        for event in decoder.finish():
            yield event

    def __repr__(self) -> str:
        suffix = ", vertexai=True" if self.provider == "vertex" else ""
        return f"GeminiModel({self.model_name!r}{suffix})"


class GeminiEmbeddingModel(_Gemini):
    """Embeddings from Gemini (``batchEmbedContents``) or Vertex AI (``predict``).

    Args:
        model_name: The model id, e.g. ``"gemini-embedding-001"``.
        dimensions: Length of each vector, sent as ``output_dimensionality``.
        task_type: Gemini's ``task_type`` (``"RETRIEVAL_DOCUMENT"``, ``"RETRIEVAL_QUERY"``, ...).
        batch_size: Most texts per request: 100 on the Gemini API; some Vertex models take 1.
        api_key: See :class:`GeminiModel`; so are ``vertexai``, ``project``, ``location``,
            ``credentials``, ``base_url``, ``api_version``, ``timeout`` and ``client``.
    """

    __slots__ = ("_batch_size", "_dimensions", "_task_type")

    def __init__(
        self,
        model_name: str,
        dimensions: int,
        *,
        task_type: str | None = None,
        batch_size: int = 100,
        api_key: str | None = None,
        vertexai: bool = False,
        project: str | None = None,
        location: str | None = None,
        credentials: Any = None,
        base_url: str | None = None,
        api_version: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
    ) -> None:
        check_positive("dimensions", dimensions)
        check_positive("batch_size", batch_size)
        super().__init__(
            model_name,
            api_key=api_key,
            vertexai=vertexai,
            project=project,
            location=location,
            credentials=credentials,
            base_url=base_url,
            api_version=api_version,
            timeout=timeout,
            client=client,
        )
        self._dimensions = dimensions
        self._task_type = task_type
        self._batch_size = batch_size

    @property
    def dimensions(self) -> int:
        """Length of every vector this model returns."""
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        client = await self._client()
        config: dict[str, Any] = {"output_dimensionality": self._dimensions}
        if self._task_type is not None:
            config["task_type"] = self._task_type
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                response = await client.aio.models.embed_content(
                    model=self.model_name, contents=batch, config=config
                )
            except _SDK_ERRORS as exc:
                raise _model_error(exc, self.provider) from exc
            embeddings = _dump(response).get("embeddings") or []
            if len(embeddings) != len(batch):
                raise ModelError(
                    f"{self.provider} returned {len(embeddings)} embeddings for {len(batch)} texts",
                    provider=self.provider,
                )
            for embedding in embeddings:
                vector = [float(x) for x in embedding.get("values") or ()]
                if len(vector) != self._dimensions:
                    raise ModelError(
                        f"{self.model_name} returned {len(vector)} dimensions, expected "
                        f"{self._dimensions}",
                        provider=self.provider,
                    )
                vectors.append(vector)
        return vectors

    def __repr__(self) -> str:
        return f"GeminiEmbeddingModel({self.model_name!r}, {self._dimensions})"
