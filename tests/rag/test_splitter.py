from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daimon.core import BuilderError
from daimon.rag import TextChunk, TextSplitter
from daimon.tokens import CharacterTokenCounter


def _check(text: str, chunks: list[TextChunk], size: int, measure=len) -> None:  # type: ignore[no-untyped-def]
    for n, chunk in enumerate(chunks):
        assert chunk.index == n
        assert text[chunk.start : chunk.start + len(chunk.text)] == chunk.text
        assert measure(chunk.text) <= size
        assert chunk.text == chunk.text.strip() and chunk.text
    starts = [c.start for c in chunks]
    assert starts == sorted(set(starts))


def test_short_text_is_one_chunk() -> None:
    assert TextSplitter(100, 10).split("  Hello world.  ") == [
        TextChunk(text="Hello world.", index=0, start=2)
    ]
    assert TextSplitter(100, 10).split(" \n\t ") == []
    assert TextSplitter(100, 10).split("") == []


def test_cuts_at_paragraphs_before_sentences_before_words() -> None:
    text = "First paragraph is here.\n\nSecond one, longer than the first.\n\nThird."
    chunks = TextSplitter(40, 0).split(text)
    assert [c.text for c in chunks] == [
        "First paragraph is here.",
        "Second one, longer than the first.",
        "Third.",
    ]
    _check(text, chunks, 40)
    sentences = "One two three. Four five six. Seven eight nine."
    assert [c.text for c in TextSplitter(20, 0).split(sentences)] == [
        "One two three.",
        "Four five six.",
        "Seven eight nine.",
    ]


def test_overlap_repeats_the_end_of_the_previous_chunk() -> None:
    words = " ".join(f"w{n:02d}" for n in range(40))  # 4 characters a word with its space
    chunks = TextSplitter(40, 12).split(words)
    _check(words, chunks, 40)
    for before, after in itertools.pairwise(chunks):
        shared = before.text.split()[-3:]
        assert after.text.split()[:3] == shared
    covered = set()
    for chunk in chunks:
        covered |= set(chunk.text.split())
    assert covered == set(words.split())


def test_a_word_longer_than_a_chunk_is_cut() -> None:
    text = "short " + "x" * 95 + " end"
    chunks = TextSplitter(30, 5).split(text)
    _check(text, chunks, 30)
    assert "".join(c.text for c in chunks if "x" in c.text).count("x") >= 95


def test_token_sizes_use_the_counter() -> None:
    counter = CharacterTokenCounter(chars_per_token=4)
    text = " ".join(f"token{n}" for n in range(200))
    chunks = TextSplitter(16, 4, counter=counter).split(text)
    assert len(chunks) > 5
    _check(text, chunks, 16 + 2, counter.count_tokens)  # summed piece counts round up per piece


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0), "chunk_size"),
        ((10, 10), "overlap"),
        ((10, -1), "overlap"),
        ((1.5, 0), "chunk_size"),
    ],
)
def test_bad_settings(args: tuple[int, int], message: str) -> None:
    with pytest.raises(BuilderError, match=message):
        TextSplitter(*args)
    with pytest.raises(BuilderError, match="separators"):
        TextSplitter(10, 2, separators=["\n", ""])


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab .\n\té🧪"), max_size=400),
    size=st.integers(1, 60),
    data=st.data(),
)
def test_chunks_are_exact_in_order_and_cover_the_text(
    text: str, size: int, data: st.DataObject
) -> None:
    overlap = data.draw(st.integers(0, size - 1))
    chunks = TextSplitter(size, overlap).split(text)
    _check(text, chunks, size)
    covered = [False] * len(text)
    for chunk in chunks:
        for i in range(chunk.start, chunk.start + len(chunk.text)):
            covered[i] = True
    assert all(covered[i] for i, ch in enumerate(text) if not ch.isspace())


def test_token_sizes_with_a_real_tokenizer() -> None:
    from daimon.tokens import TiktokenCounter  # the tokens extra, in dev

    counter = TiktokenCounter("cl100k_base")
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * 40)
    chunks = TextSplitter(64, 8, counter=counter).split(text)
    assert len(chunks) >= 6
    for chunk in chunks:
        assert counter.count_tokens(chunk.text) <= 64 + 2  # pieces counted apart, summed
