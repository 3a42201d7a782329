"""Amazon Bedrock models, through the Converse and ConverseStream APIs of ``aiobotocore``.

Needs the ``bedrock`` extra (``pip install "daimon-agents[bedrock]"``). botocore's own retries are
off: wrap a model in :class:`~daimon.models.retry.RetryingModel` to retry. Credentials come from
the AWS chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, SSO, instance and
container roles, ...) unless given; the region from ``region=``, ``AWS_REGION``,
``AWS_DEFAULT_REGION`` or the profile.

Mapping notes:

* System messages become ``system`` blocks; tool results become ``toolResult`` blocks of a user
  turn, with ``status: "error"`` for a failed tool. Turns of one role are merged (Converse wants
  them alternating) and empty text blocks dropped (Converse refuses them).
* Images must be bytes, ``data:`` URLs or ``s3://`` URLs, in png, jpeg, gif or webp; documents
  (PDF, text, Markdown, HTML, CSV) likewise, named from ``DocumentPart.name`` in the characters
  Converse allows. Converse cannot fetch web URLs and takes no audio: such a part is refused with
  :class:`~daimon.core.errors.UnsupportedContentError` before sending. Tool results carry images
  and documents; audio there becomes a text stand-in.
* Prompt caching: ``cachePoint`` blocks after the system blocks, the tools (Claude) and the last
  turn (``prompt_cache="auto"``, the default for the models AWS documents as caching: Claude 3.5
  Haiku, 3.7 Sonnet, Claude 4 and later, Nova Micro, Lite, Pro and Premier); hand-placed
  :class:`~daimon.core.messages.CachePoint` parts replace them.
* Reasoning (``settings={"thinking": ...}`` for Claude): ``reasoningContent`` blocks (text with
  its signature, or redacted content) ride on the assistant message
  (:attr:`Message.reasoning <daimon.core.messages.Message.reasoning>`, streamed as
  :class:`~daimon.core.events.ReasoningEvent`) and go back unchanged ahead of its text and
  ``toolUse`` blocks, as Claude requires of a tool-use turn with extended thinking on.
* A tool without a docstring goes without ``description`` (Converse wants it non-empty).
* ``tool_choice="none"``: Converse has no such mode, so the tools are left out; when the
  conversation already holds tool calls Converse requires the tool specs, and the model decides.
  ``"required"`` and a tool name work on the models that support them (Claude, Nova).
* ``supports_json_schema`` is ``False``: not every Bedrock model takes Converse's structured
  output, so agents ask for an ``output_type`` through a tool. A request that sets
  ``response_format`` itself is sent as ``outputConfig.textFormat`` (JSON schema).
* Usage: ``input_tokens`` adds cache reads and writes to Converse's ``inputTokens`` (which leaves
  them out); ``cached_tokens`` is the cache reads, ``cache_write_tokens`` the writes. Converse
  names no model in its answers: the response's ``model`` is the model id the model was built
  with.
* ``settings`` whose key is a Converse request field (``guardrailConfig``, ``performanceConfig``,
  ``serviceTier``, ``requestMetadata``, ...) are sent as that field, ``inferenceConfig``,
  ``outputConfig`` and ``additionalModelRequestFields`` merged with what daimon sends;
  ``timeout`` (seconds) bounds this call alone (each wait of a stream); any other key is a
  model-native field, sent inside ``additionalModelRequestFields`` (``top_k``, ``thinking``, ...).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import AsyncIterator, Sequence
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
    retry_after,
)
from daimon.models.bedrock._mapping import (
    ERROR_STATUS,
    MERGED_FIELDS,
    RETRYABLE_ERRORS,
    EventDecoder,
    caches_prompts,
    request_params,
    response_from_wire,
)

aio_session = require("aiobotocore.session", extra="bedrock")
aio_config = require("aiobotocore.config", extra="bedrock")
boto_errors = require("botocore.exceptions", extra="bedrock")
boto_loaders = require("botocore.loaders", extra="bedrock")
boto_session = require("botocore.session", extra="bedrock")
aiohttp = require("aiohttp", extra="bedrock")  # aiobotocore's HTTP client: raw errors mid-stream

__all__ = ("BedrockEmbeddingModel", "BedrockModel")

_SERVICE = "bedrock-runtime"
_STREAM_BREAKS = (aiohttp.ClientError, boto_errors.HTTPClientError, TimeoutError)
"""What a stream that breaks off raises once it has started."""


@functools.cache
def _loader() -> Any:
    # botocore's service data (endpoints, the bedrock-runtime model): parsed once per process and
    # shared by every session, which otherwise spends tens of milliseconds reading it again.
    return boto_loaders.create_loader(os.environ.get("AWS_DATA_PATH"))


def _model_error(exc: Exception) -> ModelError:
    """The :class:`ModelError` for a botocore error, keeping Bedrock's own message."""
    if isinstance(exc, boto_errors.ClientError):
        error = exc.response.get("Error") or {}
        code = str(error.get("Code") or "")
        message = str(error.get("Message") or exc)
        meta = exc.response.get("ResponseMetadata") or {}
        status = meta.get("HTTPStatusCode")
        if not isinstance(status, int) or status < 400:  # an exception event inside a stream
            status = ERROR_STATUS.get(code.lower())
        retryable = code.lower() in RETRYABLE_ERRORS or (
            status is not None and is_retryable_status(status)
        )
        return ModelError(
            f"bedrock returned HTTP {status} ({code}): {message}"
            if status
            else f"bedrock failed ({code}): {message}",
            status_code=status,
            retryable=retryable,
            retry_after=retry_after(meta.get("HTTPHeaders") or {}),
            provider="bedrock",
        )
    if isinstance(exc, boto_errors.ReadTimeoutError | boto_errors.ConnectTimeoutError):
        return ModelError("bedrock request timed out", retryable=True, provider="bedrock")
    if isinstance(exc, boto_errors.ConnectionError | boto_errors.HTTPClientError):
        return ModelError(f"could not reach bedrock: {exc}", retryable=True, provider="bedrock")
    if isinstance(exc, aiohttp.ClientError):
        return ModelError(f"could not reach bedrock: {exc}", retryable=True, provider="bedrock")
    # No credentials, no region, parameters botocore refuses: trying again will not help.
    return ModelError(f"bedrock failed: {exc}", provider="bedrock")


def _timed_out(timeout: float | None) -> ModelError:
    return ModelError(
        f"bedrock request timed out after {timeout:g}s", retryable=True, provider="bedrock"
    )


def _no_factory() -> Any:
    raise AssertionError("a model given a client never builds one")


async def _close(client: Any) -> None:
    await client.__aexit__(None, None, None)


class _Bedrock(LoopClientsOwner):
    """Configuration shared by the chat and embedding models."""

    __slots__ = ("_clients", "model_name")

    def __init__(
        self,
        model_name: str,
        *,
        region: str | None,
        base_url: str | None,
        profile: str | None,
        aws_access_key_id: str | None,
        aws_secret_access_key: str | None,
        aws_session_token: str | None,
        timeout: float,
        client: Any,
    ) -> None:
        what = type(self).__name__
        if not model_name:
            raise BuilderError(f"{what} needs a model id")
        if not timeout > 0:
            raise BuilderError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if (aws_access_key_id is None) != (aws_secret_access_key is None):
            raise BuilderError(f"{what} needs both aws_access_key_id and aws_secret_access_key")
        self.model_name = model_name
        if client is not None:
            self._clients = LoopClients(_no_factory, client, _close)
            return
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            try:
                region = boto_session.Session(profile=profile).get_config_variable("region")
            except boto_errors.BotoCoreError as exc:  # an unknown profile
                raise BuilderError(f"{what}: {exc}") from exc
        if not region:
            raise BuilderError(
                f"{what} needs an AWS region: pass region= or set AWS_REGION (or a profile's "
                "region)"
            )
        config = aio_config.AioConfig(
            # One attempt: retries are RetryingModel's job.
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=timeout,
            read_timeout=timeout,
        )

        async def factory() -> Any:
            # A session per event loop: refreshable credentials hold locks bound to one loop.
            session = aio_session.AioSession(profile=profile)
            session.register_component("data_loader", _loader())
            context = session.create_client(
                _SERVICE,
                region_name=region,
                endpoint_url=base_url,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                config=config,
            )
            return await context.__aenter__()

        self._clients = LoopClients(factory, None, _close)

    async def _client(self) -> Any:
        try:
            return await self._clients.get()
        except boto_errors.BotoCoreError as exc:
            raise _model_error(exc) from exc


class BedrockModel(_Bedrock):
    """A chat model on Amazon Bedrock, through Converse and ConverseStream.

    Args:
        model_name: The model or inference-profile id (or ARN), e.g.
            ``"us.anthropic.claude-sonnet-4-5-20250929-v1:0"`` or ``"amazon.nova-pro-v1:0"``.
        region: The AWS region; defaults to ``AWS_REGION``, ``AWS_DEFAULT_REGION``, then the
            profile's region.
        base_url: The ``bedrock-runtime`` endpoint URL, for a VPC endpoint or a proxy.
        profile: A named profile of the AWS config files; default: ``AWS_PROFILE`` or the chain.
        aws_access_key_id: Explicit credentials (with ``aws_secret_access_key`` and, for
            temporary ones, ``aws_session_token``); default: the AWS credential chain.
        timeout: Seconds to connect and between reads; a request's ``settings["timeout"]`` bounds
            one call.
        client: A ready ``aiobotocore`` ``bedrock-runtime`` client to use instead; you close it.
        prompt_cache: ``"auto"`` places ``cachePoint`` blocks after the system prompt, the tools
            (Claude only) and the conversation so far, unless the request holds hand-placed
            :class:`~daimon.core.messages.CachePoint` parts (then those); ``"off"`` sends none.
            Default: ``"auto"`` for the models AWS documents as caching (Claude 3.5 Haiku,
            3.7 Sonnet and Claude 4 on; Nova Micro, Lite, Pro and Premier), else ``"off"``.
    """

    supports_json_schema: ClassVar[bool] = False
    """Agents with an ``output_type`` ask for it through a tool, which every tool model takes."""
    __slots__ = ("_cache_tools", "_fields", "prompt_cache")

    def __init__(
        self,
        model_name: str,
        *,
        region: str | None = None,
        base_url: str | None = None,
        profile: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
        prompt_cache: CacheMode | None = None,
    ) -> None:
        self._cache_tools = "claude" in model_name.lower()
        if prompt_cache is None:
            prompt_cache = "auto" if caches_prompts(model_name) else "off"
        self.prompt_cache: CacheMode = cache_mode(prompt_cache)
        super().__init__(
            model_name,
            region=region,
            base_url=base_url,
            profile=profile,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            timeout=timeout,
            client=client,
        )
        self._fields: frozenset[str] | None = None

    def _call(self, request: ChatRequest, client: Any) -> tuple[dict[str, Any], float | None]:
        """The Converse parameters for ``request``, and its own timeout if it sets one."""
        if self._fields is None:
            shape = client.meta.service_model.operation_model("Converse").input_shape
            self._fields = frozenset(shape.members) - {"modelId", "messages"}
        params = request_params(request, cache=self.prompt_cache, cache_tools=self._cache_tools)
        timeout: float | None = None
        native: dict[str, Any] = {}
        for key, value in (request.settings or {}).items():
            if key == "timeout":
                timeout = float(value)
            elif key in MERGED_FIELDS:
                params[key] = {**value, **params.get(key, {})}
            elif key in self._fields:
                params[key] = value
            else:
                native[key] = value
        if native:
            params["additionalModelRequestFields"] = {
                **native,
                **params.get("additionalModelRequestFields", {}),
            }
        return {"modelId": self.model_name, **params}, timeout

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """Answer ``request`` in one piece."""
        client = await self._client()
        params, timeout = self._call(request, client)
        try:
            async with asyncio.timeout(timeout):
                response = await client.converse(**params)
        except (boto_errors.BotoCoreError, boto_errors.ClientError, aiohttp.ClientError) as exc:
            raise _model_error(exc) from exc
        except TimeoutError as exc:
            raise _timed_out(timeout) from exc
        return response_from_wire(response, model=self.model_name)

    async def generate_stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """Answer ``request`` as events; :class:`StreamClosedError` if the stream breaks off."""
        client = await self._client()
        params, timeout = self._call(request, client)
        try:
            async with asyncio.timeout(timeout):
                response = await client.converse_stream(**params)
        except (boto_errors.BotoCoreError, boto_errors.ClientError, aiohttp.ClientError) as exc:
            raise _model_error(exc) from exc
        except TimeoutError as exc:
            raise _timed_out(timeout) from exc
        stream = response["stream"]
        decoder = EventDecoder(model=self.model_name)
        events = aiter(stream)
        try:
            while True:
                try:
                    async with asyncio.timeout(timeout):
                        event = await anext(events)
                except StopAsyncIteration:
                    break
                except boto_errors.ClientError as exc:  # an exception event: throttling, ...
                    raise _model_error(exc) from exc
                except _STREAM_BREAKS as exc:
                    raise StreamClosedError(
                        f"bedrock stream broke off: {exc or type(exc).__name__}",
                        provider="bedrock",
                    ) from exc
                for out in decoder.feed(event):
                    yield out
        finally:
            stream.close()
        for out in decoder.finish():
            yield out

    def __repr__(self) -> str:
        return f"BedrockModel({self.model_name!r})"


class BedrockEmbeddingModel(_Bedrock):
    """Embeddings on Amazon Bedrock through InvokeModel: Titan and Cohere embedding models.

    Titan models embed one text per request (sent ``concurrency`` at a time); Cohere models take
    up to 96 texts per request.

    Args:
        model_name: E.g. ``"amazon.titan-embed-text-v2:0"`` (256, 512 or 1024 dimensions),
            ``"amazon.titan-embed-text-v1"`` (1536) or ``"cohere.embed-english-v3"`` (1024).
        dimensions: Length of each vector; sent to Titan v2, checked for every model.
        normalize: Whether Titan v2 returns unit vectors.
        input_type: Cohere's ``input_type`` (``"search_document"``, ``"search_query"``, ...).
        concurrency: Most Titan requests in flight at once.
        region: See :class:`BedrockModel`; so are ``base_url``, ``profile``, the credentials,
            ``timeout`` and ``client``.
    """

    __slots__ = ("_concurrency", "_dimensions", "_input_type", "_normalize")

    def __init__(
        self,
        model_name: str,
        dimensions: int,
        *,
        normalize: bool = True,
        input_type: str = "search_document",
        concurrency: int = 8,
        region: str | None = None,
        base_url: str | None = None,
        profile: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        timeout: float = 60.0,
        client: Any = None,
    ) -> None:
        check_positive("dimensions", dimensions)
        check_positive("concurrency", concurrency)
        family = model_name.rpartition("/")[2].split(".")
        known = any(part.startswith(("titan-embed", "embed-")) for part in family)
        if not known and not model_name.startswith("arn:"):  # a profile ARN names no model
            raise BuilderError(
                f"BedrockEmbeddingModel supports Titan and Cohere embedding models, not "
                f"{model_name!r}"
            )
        super().__init__(
            model_name,
            region=region,
            base_url=base_url,
            profile=profile,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            timeout=timeout,
            client=client,
        )
        self._dimensions = dimensions
        self._normalize = normalize
        self._input_type = input_type
        self._concurrency = concurrency

    @property
    def dimensions(self) -> int:
        """Length of every vector this model returns."""
        return self._dimensions

    @property
    def _cohere(self) -> bool:
        return "cohere." in self.model_name

    async def _invoke(self, client: Any, body: dict[str, Any]) -> Any:
        try:
            response = await client.invoke_model(
                modelId=self.model_name,
                body=json.dumps(body),
                contentType="application/json",
                accept="application/json",
            )
            async with response["body"] as stream:
                return json.loads(await stream.read())
        except (boto_errors.BotoCoreError, boto_errors.ClientError, aiohttp.ClientError) as exc:
            raise _model_error(exc) from exc
        except ValueError as exc:
            raise ModelError(f"bedrock sent invalid JSON: {exc}", provider="bedrock") from exc

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        client = await self._client()
        if self._cohere:
            found: list[Any] = []
            for start in range(0, len(texts), 96):
                batch = list(texts[start : start + 96])
                body = {
                    "texts": batch,
                    "input_type": self._input_type,
                    "embedding_types": ["float"],
                }
                embeddings = (await self._invoke(client, body)).get("embeddings")
                if isinstance(embeddings, dict):
                    embeddings = embeddings.get("float")
                if not isinstance(embeddings, list) or len(embeddings) != len(batch):
                    raise ModelError(
                        f"bedrock returned no embedding list for {len(batch)} texts",
                        provider="bedrock",
                    )
                found += embeddings
        else:
            limit = asyncio.Semaphore(self._concurrency)
            v2 = "titan-embed-text-v2" in self.model_name

            async def one(text: str) -> Any:
                body: dict[str, Any] = {"inputText": text}
                if v2:
                    body |= {"dimensions": self._dimensions, "normalize": self._normalize}
                async with limit:
                    return (await self._invoke(client, body)).get("embedding")

            found = list(await asyncio.gather(*(one(text) for text in texts)))
        vectors: list[list[float]] = []
        for embedding in found:
            vector = [float(x) for x in embedding or ()]
            if len(vector) != self._dimensions:
                raise ModelError(
                    f"{self.model_name} returned {len(vector)} dimensions, expected "
                    f"{self._dimensions}",
                    provider="bedrock",
                )
            vectors.append(vector)
        return vectors

    def __repr__(self) -> str:
        return f"BedrockEmbeddingModel({self.model_name!r}, {self._dimensions})"
