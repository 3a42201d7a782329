"""OnnxEmbeddingModel: all-MiniLM-L6-v2 on onnxruntime, checked against sentence-transformers."""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from daimon.core import BuilderError, EmbeddingModel, MissingDependencyError, ModelError

if TYPE_CHECKING:
    from daimon.models.onnx import OnnxEmbeddingModel

REFERENCE = Path(__file__).parents[1] / "data" / "minilm_reference.json"


# Every test here needs the embed extra and MiniLM's tokenizer: the shared ``minilm`` fixture
# (tests/conftest.py) skips without them on a laptop but FAILS when CI is set.
pytestmark = pytest.mark.usefixtures("minilm")


@pytest.fixture
def model(minilm: OnnxEmbeddingModel) -> OnnxEmbeddingModel:
    return minilm


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def test_vectors_match_the_reference_model(model: OnnxEmbeddingModel) -> None:
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    vectors = await model.embed(reference["sentences"])
    assert len(vectors) == len(reference["vectors"]) == 20
    pairs = zip(reference["sentences"], vectors, reference["vectors"], strict=True)
    for sentence, ours, theirs in pairs:
        assert len(ours) == 384
        assert _cosine(ours, theirs) > 0.99, sentence[:40]


async def test_similar_sentences_are_closer(model: OnnxEmbeddingModel) -> None:
    cat, kitten, stocks = await model.embed(
        ["A cat sits on the mat.", "A kitten is resting on a rug.", "Stock markets fell today."]
    )
    assert _cosine(cat, kitten) > 0.5 > _cosine(cat, stocks)


def test_vectors_have_unit_length_and_384_dimensions(model: OnnxEmbeddingModel) -> None:
    assert model.dimensions == 384
    for vector in model.embed_sync(["one", "two words", ""]):
        assert len(vector) == 384
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-5)


def test_batching_and_order_do_not_change_vectors() -> None:
    from daimon.models import OnnxEmbeddingModel

    texts = [f"sentence number {i} " + "word " * (i % 7) for i in range(11)]
    whole = OnnxEmbeddingModel(batch_size=32).embed_sync(texts)
    batched = OnnxEmbeddingModel(batch_size=3).embed_sync(texts)
    reversed_ = OnnxEmbeddingModel(batch_size=4).embed_sync(texts[::-1])[::-1]
    for a, b, c in zip(whole, batched, reversed_, strict=True):
        assert _cosine(a, b) > 0.99999
        assert _cosine(a, c) > 0.99999


async def test_empty_input_and_a_bare_string(model: OnnxEmbeddingModel) -> None:
    assert await model.embed([]) == []
    with pytest.raises(TypeError, match="sequence of texts"):
        model.embed_sync("not a list")


def test_it_is_an_embedding_model(model: OnnxEmbeddingModel) -> None:
    assert isinstance(model, EmbeddingModel)
    assert model.model_name == "all-MiniLM-L6-v2"


def test_bad_settings_and_missing_files_fail_at_construction(tmp_path: Path) -> None:
    from daimon.models import OnnxEmbeddingModel

    with pytest.raises(BuilderError, match="batch_size"):
        OnnxEmbeddingModel(batch_size=0)
    with pytest.raises(BuilderError, match="ONNX model file not found"):
        OnnxEmbeddingModel(tmp_path / "missing.onnx")
    with pytest.raises(BuilderError, match="tokenizer file not found"):
        OnnxEmbeddingModel(tokenizer_path=tmp_path / "missing.json")


async def test_a_corrupt_model_file_is_a_model_error(tmp_path: Path) -> None:
    from daimon.models import OnnxEmbeddingModel

    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx model")
    model = OnnxEmbeddingModel(bad)
    with pytest.raises(ModelError, match="cannot load ONNX model"):
        await model.embed(["hello"])


async def test_close_is_idempotent_and_the_model_reloads() -> None:
    from daimon.models import OnnxEmbeddingModel

    async with OnnxEmbeddingModel() as model:
        first = await model.embed(["hello"])
    await model.aclose()
    assert _cosine(first[0], (await model.embed(["hello"]))[0]) > 0.99999


def test_a_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.delitem(sys.modules, "daimon.models.onnx", raising=False)
    with pytest.raises(MissingDependencyError, match=r'pip install "daimon-agents\[embed\]"'):
        importlib.import_module("daimon.models.onnx")


def test_importing_the_package_loads_no_backend() -> None:
    code = (
        "import sys, daimon.models; "
        "print(sorted({'onnxruntime', 'numpy', 'tokenizers'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"
