"""Models: test models shipped with daimon, and (lazily) one module per provider or local runtime.

Chat and embedding models both live here: a provider's in its module (``openai``, ``gemini``,
...), the local ones in ``local`` (mistral.rs or llama.cpp) and ``onnx`` (all-MiniLM-L6-v2 on
onnxruntime).
``import daimon.models`` imports no provider SDK: provider classes load on first use, and
:func:`infer_model` imports only the provider a model string names.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from daimon.core.errors import BuilderError, MissingDependencyError
from daimon.core.lazy import lazy_exports
from daimon.core.protocols import Model
from daimon.models.function import FunctionModel
from daimon.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from daimon.models.anthropic import AnthropicModel
    from daimon.models.bedrock import BedrockEmbeddingModel, BedrockModel
    from daimon.models.fallback import FallbackModel
    from daimon.models.gemini import GeminiEmbeddingModel, GeminiModel
    from daimon.models.local import LlamaCppModel, LocalModel
    from daimon.models.ollama import OllamaEmbeddingModel, OllamaModel
    from daimon.models.onnx import OnnxEmbeddingModel
    from daimon.models.openai import (
        AzureOpenAIModel,
        AzureOpenAIResponsesModel,
        OpenAIEmbeddingModel,
        OpenAIModel,
        OpenAIResponsesModel,
    )
    from daimon.models.retry import RetryingModel

__all__ = (
    "AnthropicModel",
    "AzureOpenAIModel",
    "AzureOpenAIResponsesModel",
    "BedrockEmbeddingModel",
    "BedrockModel",
    "FallbackModel",
    "FunctionModel",
    "GeminiEmbeddingModel",
    "GeminiModel",
    "LlamaCppModel",
    "LocalModel",
    "OllamaEmbeddingModel",
    "OllamaModel",
    "OnnxEmbeddingModel",
    "OpenAIEmbeddingModel",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "RetryingModel",
    "ScriptedModel",
    "infer_model",
)

_LAZY = {
    "AnthropicModel": "daimon.models.anthropic",
    "AzureOpenAIModel": "daimon.models.openai",
    "AzureOpenAIResponsesModel": "daimon.models.openai",
    "BedrockEmbeddingModel": "daimon.models.bedrock",
    "BedrockModel": "daimon.models.bedrock",
    "FallbackModel": "daimon.models.fallback",
    "GeminiEmbeddingModel": "daimon.models.gemini",
    "GeminiModel": "daimon.models.gemini",
    "LlamaCppModel": "daimon.models.local",
    "LocalModel": "daimon.models.local",
    "OllamaEmbeddingModel": "daimon.models.ollama",
    "OllamaModel": "daimon.models.ollama",
    "OnnxEmbeddingModel": "daimon.models.onnx",
    "OpenAIEmbeddingModel": "daimon.models.openai",
    "OpenAIModel": "daimon.models.openai",
    "OpenAIResponsesModel": "daimon.models.openai",
    "RetryingModel": "daimon.models.retry",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)


def _model_at_url(rest: str) -> tuple[str, dict[str, Any]]:
    """``<model>@<base_url>`` for OpenAI-compatible servers."""
    model, at, url = rest.partition("@")
    if not (model and at and url):
        raise BuilderError(
            f"an OpenAI-compatible model string is 'openai-compatible:<model>@<base_url>', "
            f"got {rest!r} after the prefix"
        )
    return model, {"base_url": url}


def _local_options(rest: str) -> tuple[str, dict[str, Any]]:
    """``<name or path>[?runtime=<runtime>]`` for local models."""
    model, _, query = rest.partition("?")
    options: dict[str, Any] = {}
    for pair in filter(None, query.split("&")):
        key, equals, value = pair.partition("=")
        if key != "runtime" or not equals or not value:
            raise BuilderError(
                f"a local model string takes only '?runtime=<name>', got {'?' + query!r}"
            )
        options["runtime"] = value
    return model, options


@dataclass(frozen=True, slots=True)
class _Provider:
    module: str
    cls: str
    extra: str
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Constructor arguments this prefix implies (the caller's win)."""
    parse: Callable[[str], tuple[str, dict[str, Any]]] | None = None
    """Splits the text after the prefix into the model name and constructor arguments."""


_PROVIDERS: Mapping[str, _Provider] = MappingProxyType(
    {
        "anthropic": _Provider("daimon.models.anthropic", "AnthropicModel", "anthropic"),
        "azure": _Provider("daimon.models.openai", "AzureOpenAIModel", "openai"),
        "bedrock": _Provider("daimon.models.bedrock", "BedrockModel", "bedrock"),
        "gemini": _Provider("daimon.models.gemini", "GeminiModel", "gemini"),
        "local": _Provider("daimon.models.local", "LocalModel", "local", parse=_local_options),
        "ollama": _Provider("daimon.models.ollama", "OllamaModel", "ollama"),
        "openai": _Provider("daimon.models.openai", "OpenAIModel", "openai"),
        "openai-compatible": _Provider(
            "daimon.models.openai",
            "OpenAIModel",
            "openai",
            defaults=MappingProxyType({"max_tokens_param": "max_tokens"}),
            parse=_model_at_url,
        ),
        "openai-responses": _Provider("daimon.models.openai", "OpenAIResponsesModel", "openai"),
        "azure-responses": _Provider("daimon.models.openai", "AzureOpenAIResponsesModel", "openai"),
        "vertex": _Provider(
            "daimon.models.gemini",
            "GeminiModel",
            "gemini",
            defaults=MappingProxyType({"vertexai": True}),
        ),
    }
)
"""Model-string prefix to the provider class that serves it; modules load only when asked."""


def infer_model(model: str, **settings: Any) -> Model:
    """The model a ``"<provider>:<model>"`` string names, built with ``settings``.

    For example ``"openai:gpt-4o-mini"``, ``"openai-responses:gpt-5-mini"`` (the Responses
    API), ``"azure:<deployment>"``, ``"azure-responses:<deployment>"``,
    ``"anthropic:claude-sonnet-4-5"`` or ``"openai-compatible:<model>@<base_url>"``;
    ``settings`` are the provider class's keyword arguments (``api_key=``, ``timeout=``, ...).

    Raises:
        BuilderError: The string names no known provider, or one this version lacks.
        MissingDependencyError: The provider's SDK is not installed; the message names the extra.
    """
    prefix, colon, rest = model.partition(":")
    known = ", ".join(_PROVIDERS)
    if not colon or not prefix or not rest:
        raise BuilderError(
            f"model string {model!r} must look like '<provider>:<model>'; providers: {known}"
        )
    provider = _PROVIDERS.get(prefix)
    if provider is None:
        raise BuilderError(f"unknown model provider {prefix!r} in {model!r}; providers: {known}")
    if importlib.util.find_spec(provider.module) is None:
        raise BuilderError(f"provider {prefix!r} is not available in this version of daimon")
    try:
        module = importlib.import_module(provider.module)
    except MissingDependencyError:
        raise
    except ImportError as exc:
        raise MissingDependencyError(exc.name or provider.module, provider.extra) from exc
    cls = getattr(module, provider.cls, None)
    if cls is None:
        raise BuilderError(f"provider {prefix!r} is not available in this version of daimon")
    name, implied = provider.parse(rest) if provider.parse else (rest, {})
    kwargs = {**provider.defaults, **implied, **settings}
    try:
        inspect.signature(cls).bind(name, **kwargs)
    except TypeError as exc:
        raise BuilderError(f"bad settings for {provider.cls}: {exc}") from None
    built: Model = cls(name, **kwargs)
    return built
