"""infer_model: model strings to provider classes, loading only the provider asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

import daimon.models
from daimon import Agent, BuilderError, MissingDependencyError
from daimon.models import infer_model
from daimon.models.anthropic import AnthropicModel
from daimon.models.openai import AzureOpenAIModel, OpenAIModel


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


def test_every_provider_prefix_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    from daimon.models.bedrock import BedrockModel
    from daimon.models.gemini import GeminiModel
    from daimon.models.ollama import OllamaModel

    monkeypatch.setenv("GEMINI_API_KEY", "g-env")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    gemini = infer_model("gemini:gemini-2.5-flash")
    assert isinstance(gemini, GeminiModel) and gemini.model_name == "gemini-2.5-flash"
    vertex = infer_model("vertex:gemini-2.5-pro", project="p", location="us-central1")
    assert isinstance(vertex, GeminiModel) and vertex.provider == "vertex"
    bedrock = infer_model("bedrock:anthropic.claude-haiku-4-5", region="eu-west-1")
    assert isinstance(bedrock, BedrockModel)
    assert isinstance(infer_model("ollama:llama3.2"), OllamaModel)


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the SDK hidden, building the model names the extra that installs it."""

    class Block:
        def find_spec(self, name: str, *args: object) -> None:
            if name.split(".")[0] in ("mistralrs", "llama_cpp"):  # both local runtimes
                raise ImportError(f"blocked {name}")

    for name in [
        m
        for m in sys.modules
        if m.split(".")[0] in ("mistralrs", "llama_cpp") or m.startswith("daimon.models.local")
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Block(), *sys.meta_path])
    with pytest.raises(MissingDependencyError, match=r"daimon-agents\[local\]"):
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
