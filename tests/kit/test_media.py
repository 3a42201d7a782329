"""What provider mappings share about media parts: bytes, refusals, stand-ins, cache modes."""

from __future__ import annotations

import base64

import pytest

from daimon.core.errors import BuilderError, ModelError, UnsupportedContentError
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Message,
    TextPart,
)
from daimon.kit.media import (
    b64,
    cache_mode,
    data_url,
    has_cache_points,
    inline,
    stand_in,
    text_of,
    unsupported,
)


def test_inline_reads_bytes_and_base64_data_urls() -> None:
    assert inline(ImagePart(data=b"x", media_type="image/gif")) == ("image/gif", b"x")
    url = "data:audio/mpeg;base64," + base64.b64encode(b"ID3").decode()
    assert inline(AudioPart(url=url)) == ("audio/mpeg", b"ID3")
    assert inline(ImagePart(url="https://example.com/a.png")) is None


def test_a_broken_data_url_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedContentError, match="not valid base64"):
        inline(ImagePart(url="data:image/png;base64,@@@"))


def test_data_url_and_b64() -> None:
    assert data_url(DocumentPart(data=b"%PDF")) == "data:application/pdf;base64,JVBERg=="
    assert data_url(ImagePart(url="https://x/a.png")) == "https://x/a.png"
    assert b64(b"\xff") == "/w=="


def test_text_of_text_documents_only() -> None:
    assert text_of(DocumentPart.from_text("héllo")) == "héllo"
    assert text_of(DocumentPart(data=b"%PDF")) is None
    assert text_of(DocumentPart(url="https://x/a.txt", media_type="text/plain")) is None


def test_unsupported_names_the_provider_and_the_part() -> None:
    error = unsupported("anthropic", AudioPart(data=b"a"), "no audio")
    assert isinstance(error, ModelError)
    assert str(error) == "anthropic cannot take this audio part: no audio"
    assert (error.provider, error.part, error.retryable) == ("anthropic", "audio", False)
    text = unsupported("x", DocumentPart.from_text("t"), "why")
    assert text.part == "text document"


def test_stand_in_says_what_was_left_out() -> None:
    assert stand_in(ImagePart(data=b"1234", media_type="image/png")) == (
        "[the tool returned an image (image/png, 4 bytes) that this model cannot see in a tool "
        "result]"
    )
    assert "a document 'r.pdf' (application/pdf)" in stand_in(
        DocumentPart(url="s3://b/r.pdf", name="r.pdf")
    )


def test_cache_mode_and_cache_points() -> None:
    assert cache_mode("auto") == "auto"
    assert cache_mode("off") == "off"
    with pytest.raises(BuilderError, match="prompt_cache must be 'auto' or 'off'"):
        cache_mode("on")
    assert not has_cache_points([Message.user("x"), Message.user([TextPart(text="y")])])
    assert has_cache_points([Message.user([TextPart(text="y"), CachePoint()])])
