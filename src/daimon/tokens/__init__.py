"""Token counters: implementations of the :class:`daimon.core.TokenCounter` protocol.

:class:`CharacterTokenCounter` (defined in :mod:`daimon.core`) estimates from text length and
needs nothing; :class:`TiktokenCounter` (extra ``tokens``) counts exactly as OpenAI's tokenizers
do, offline; :func:`token_counter_for` picks the better of the two for a model.

``import daimon.tokens`` imports no tokenizer library: the tiktoken names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports
from daimon.kit.tokens import CharacterTokenCounter

if TYPE_CHECKING:
    from daimon.tokens.tiktoken import TiktokenCounter, encoding_for_model, token_counter_for

__all__ = ("CharacterTokenCounter", "TiktokenCounter", "encoding_for_model", "token_counter_for")

_LAZY = {
    "TiktokenCounter": "daimon.tokens.tiktoken",
    "encoding_for_model": "daimon.tokens.tiktoken",
    "token_counter_for": "daimon.tokens.tiktoken",
}


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
