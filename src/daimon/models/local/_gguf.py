"""The few GGUF metadata a local model's prompt needs: its chat template and special tokens.

A GGUF file starts with key/value metadata before the tensors; this reads the keys in pure Python
(no runtime needed), skipping the large arrays except the token list, which it reads only to
name the BOS and EOS tokens.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ("GGUFError", "GGUFMetadata", "read_metadata")

_MAGIC = b"GGUF"
# GGUF value types: id -> struct format of a scalar ("s" string, "a" array).
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING = 8
_ARRAY = 9
_TEMPLATE = "tokenizer.chat_template"
_TOKENS = "tokenizer.ggml.tokens"
_BOS = "tokenizer.ggml.bos_token_id"
_EOS = "tokenizer.ggml.eos_token_id"
_FILE_TYPE = "general.file_type"


class GGUFError(ValueError):
    """The file is not a GGUF file this reader understands."""


@dataclass(frozen=True, slots=True)
class GGUFMetadata:
    """What a prompt needs from a GGUF file."""

    chat_template: str | None
    """The Jinja chat template the model was trained with, if the file carries one."""
    bos_token: str
    """The beginning-of-sequence token's text ("" if unknown)."""
    eos_token: str
    """The end-of-sequence token's text ("" if unknown)."""
    file_type: int | None = None
    """How most weights are quantized (llama.cpp's ``LLAMA_FTYPE``: 3 is Q4_1), if stated."""


def read_metadata(path: str | Path) -> GGUFMetadata:
    """The chat template and special tokens of the GGUF file at ``path``.

    Raises:
        GGUFError: Not a GGUF file, or its metadata is cut short.
        OSError: The file cannot be read.
    """
    with Path(path).open("rb") as f:
        if f.read(4) != _MAGIC:
            raise GGUFError("not a GGUF file (bad header)")
        version, _tensors, count = struct.unpack("<IQQ", _read(f, 20))
        if version < 2:
            raise GGUFError(f"GGUF version {version} is not supported")
        values: dict[str, object] = {}
        tokens: list[str] = []
        for _ in range(count):
            key = _string(f)
            kind = _u32(f)
            if key == _TOKENS and kind == _ARRAY:
                tokens = _string_array(f)
            else:
                values[key] = _value(f, kind)
    template = values.get(_TEMPLATE)
    return GGUFMetadata(
        chat_template=template if isinstance(template, str) else None,
        bos_token=_token(tokens, values.get(_BOS)),
        eos_token=_token(tokens, values.get(_EOS)),
        file_type=_int(values.get(_FILE_TYPE)),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _token(tokens: list[str], index: object) -> str:
    if isinstance(index, int) and 0 <= index < len(tokens):
        return tokens[index]
    return ""


def _read(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise GGUFError("the GGUF metadata is cut short")
    return data


def _u32(f: BinaryIO) -> int:
    value: int = struct.unpack("<I", _read(f, 4))[0]
    return value


def _string(f: BinaryIO) -> str:
    (size,) = struct.unpack("<Q", _read(f, 8))
    return _read(f, size).decode("utf-8", errors="replace")


def _string_array(f: BinaryIO) -> list[str]:
    kind, size = struct.unpack("<IQ", _read(f, 12))
    if kind != _STRING:
        raise GGUFError("the token list is not a list of strings")
    return [_string(f) for _ in range(size)]


def _value(f: BinaryIO, kind: int) -> object:
    """A scalar or string value; arrays (other than the tokens) are skipped and give ``None``."""
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        item, size = struct.unpack("<IQ", _read(f, 12))
        if item == _STRING:
            for _ in range(size):
                (length,) = struct.unpack("<Q", _read(f, 8))
                f.seek(length, 1)
        elif item in _SCALARS:
            f.seek(struct.calcsize(_SCALARS[item]) * size, 1)
        else:
            raise GGUFError(f"unknown GGUF array type {item}")
        return None
    fmt = _SCALARS.get(kind)
    if fmt is None:
        raise GGUFError(f"unknown GGUF value type {kind}")
    return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
