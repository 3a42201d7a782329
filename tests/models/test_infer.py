"""infer_model: model strings to provider classes, loading only the provider asked for."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import daimon.models
from daimon import Agent, BuilderError, MissingDependencyError
from daimon.models import infer_model
from daimon.models.anthropic import AnthropicModel
from daimon.models.openai import AzureOpenAIModel, OpenAIModel
from daimon.models.prices import AS_OF, PRICES


def test_provider_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    openai = infer_model("openai:gpt-4o-mini", timeout=5.0)
    assert isinstance(openai, OpenAIModel)
    assert openai.model_name == "gpt-4o-mini"
    azure = infer_model(
        "azure:my-deployment", endpoint="https://x.openai.azure.com", api_key="k", api_version="v"
    )
    assert isinstance(azure, AzureOpenAIModel)
    assert azure.model_name == "my-deployment"
    assert isinstance(infer_model("anthropic:claude-haiku-4-5"), AnthropicModel)
    compatible = infer_model("openai-compatible:org/llama-3@http://127.0.0.1:9/v1")
    assert isinstance(compatible, OpenAIModel)
    assert compatible.model_name == "org/llama-3"


def test_agent_takes_a_model_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert isinstance(Agent(model="openai:gpt-4o-mini").model, OpenAIModel)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("gpt-4o", "must look like '<provider>:<model>'"),
        ("openai:", "must look like"),
        ("mystery:model", "unknown model provider 'mystery'.*anthropic, azure, bedrock"),
        ("openai-compatible:llama", "openai-compatible:<model>@<base_url>"),
    ],
)
def test_bad_strings(model: str, message: str) -> None:
    with pytest.raises(BuilderError, match=message):
        infer_model(model)


@pytest.mark.parametrize("prefix", ["gemini", "vertex", "bedrock", "ollama"])
def test_later_providers_are_listed_but_not_available_yet(prefix: str) -> None:
    if importlib.util.find_spec(f"daimon.models.{'gemini' if prefix == 'vertex' else prefix}"):
        pytest.skip(f"daimon.models has a {prefix} provider now")
    with pytest.raises(BuilderError, match=f"provider '{prefix}' is not available"):
        infer_model(f"{prefix}:some-model")


def test_local_without_its_extra_names_the_extra() -> None:
    if importlib.util.find_spec("llama_cpp") is not None:
        pytest.skip("llama-cpp-python is installed")
    with pytest.raises(MissingDependencyError, match=r"daimon\[local\]"):
        infer_model("local:smollm2")


def test_bad_settings_are_builder_errors() -> None:
    with pytest.raises(BuilderError, match="bad settings for OpenAIModel"):
        infer_model("openai:gpt-4o", api_key="k", temprature=0.3)


def test_importing_models_loads_no_sdk() -> None:
    code = (
        "import sys, daimon.models, daimon.testing\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('openai', 'anthropic', 'httpx2', 'starlette', 'uvicorn'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_lazy_names() -> None:
    assert daimon.models.AnthropicModel is AnthropicModel
    assert set(daimon.models.__all__) <= set(dir(daimon.models))
    assert list(daimon.models.__all__) == sorted(daimon.models.__all__)
    with pytest.raises(AttributeError):
        daimon.models.NoSuchModel  # noqa: B018


def test_price_table_data() -> None:
    from daimon.cost import ModelPrice, PriceTable

    table = PriceTable(
        {k: ModelPrice(input=i, output=o, cached_input=c) for k, (i, o, c) in PRICES.items()},
        as_of=AS_OF,
    )
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini")
    assert table.price("claude-sonnet-4-5-20250929") == table.price("claude-sonnet-4-5")
    assert table.price("gpt-5.4-mini") != table.price("gpt-5")
    assert table.price("claude-opus-4-9") is None
