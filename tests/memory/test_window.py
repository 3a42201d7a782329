from __future__ import annotations

from collections.abc import Sequence
from itertools import count

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daimon.core import BuilderError, ImagePart, Memory, Message, Role, TextPart, ToolCall
from daimon.kit.tokens import IMAGE_TOKENS, MESSAGE_OVERHEAD
from daimon.memory import CharacterTokenCounter, SlidingWindowMemory, TokenWindowMemory
from daimon.testing.memory import MemoryConformance, MemoryFactory

_ids = count()


def group(*names: str) -> list[Message]:
    """An assistant message calling one tool per name, then every result."""
    calls = [ToolCall(id=f"call-{next(_ids)}", name=name, arguments={"q": name}) for name in names]
    results = [Message.tool(call.id, f"{call.name} result", name=call.name) for call in calls]
    return [Message.assistant("", calls), *results]


def users(*texts: str) -> list[Message]:
    return [Message.user(text) for text in texts]


class CharCounter:
    """One token per character: makes budgets easy to reason about."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def count_tokens(self, text: str) -> int:
        self.seen.append(text)
        return len(text)


class ListMemory:
    """A minimal Memory that keeps everything, to wrap."""

    def __init__(self) -> None:
        self.sessions: dict[str, list[Message]] = {}

    async def get_messages(self, session_id: str) -> list[Message]:
        return list(self.sessions.get(session_id, []))

    async def add_messages(self, session_id: str, messages: Sequence[Message]) -> None:
        self.sessions.setdefault(session_id, []).extend(messages)

    async def clear(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    async def list_sessions(self) -> list[str]:
        return sorted(self.sessions)


def assert_well_formed(window: Sequence[Message]) -> None:
    """No orphan results at the start, and every tool call answered inside the window."""
    if window:
        assert window[0].role is not Role.TOOL
    for index, message in enumerate(window):
        if message.tool_calls:
            answered = set()
            for result in window[index + 1 :]:
                if result.role is not Role.TOOL:
                    break
                answered.add(result.tool_call_id)
            assert {call.id for call in message.tool_calls} <= answered


# ----------------------------------------------------------------- SlidingWindowMemory


async def test_sliding_window_is_a_memory() -> None:
    memory: Memory = SlidingWindowMemory()
    assert await memory.get_messages("s") == []
    await memory.add_messages("s", users("a", "b"))
    assert [m.text for m in await memory.get_messages("s")] == ["a", "b"]


async def test_default_window_is_50_messages() -> None:
    memory = SlidingWindowMemory()
    assert memory.max_messages == 50
    await memory.add_messages("s", users(*map(str, range(120))))
    window = await memory.get_messages("s")
    assert [m.text for m in window] == [str(i) for i in range(70, 120)]


async def test_keeps_the_newest_messages_in_order() -> None:
    memory = SlidingWindowMemory(max_messages=3)
    for text in "abcde":
        await memory.add_messages("s", users(text))
    assert [m.text for m in await memory.get_messages("s")] == ["c", "d", "e"]


async def test_cut_inside_a_group_drops_the_whole_group() -> None:
    tools = group("search", "fetch")  # assistant + 2 results
    memory = SlidingWindowMemory(max_messages=3)
    await memory.add_messages("s", [*users("q"), *tools, *users("next")])
    # The newest 3 would be [result, result, "next"]: the group is left out, not split.
    assert await memory.get_messages("s") == users("next")


async def test_cut_on_the_tool_call_message_keeps_the_group() -> None:
    tools = group("search", "fetch")
    memory = SlidingWindowMemory(max_messages=4)
    await memory.add_messages("s", [*users("q"), *tools, *users("next")])
    assert await memory.get_messages("s") == [*tools, *users("next")]


async def test_cut_between_parallel_results_drops_the_group() -> None:
    tools = group("a", "b", "c", "d")
    memory = SlidingWindowMemory(max_messages=4)
    await memory.add_messages("s", [*users("q"), *tools, *users("x", "y")])
    window = await memory.get_messages("s")
    assert window == users("x", "y")
    assert_well_formed(window)


async def test_group_larger_than_the_window_leaves_nothing_of_it() -> None:
    memory = SlidingWindowMemory(max_messages=3)
    await memory.add_messages("s", [*users("q"), *group("a", "b", "c")])
    assert await memory.get_messages("s") == []


async def test_orphan_tool_results_are_never_at_the_start() -> None:
    memory = SlidingWindowMemory(max_messages=10)
    orphan = Message.tool("lost-call", "stale result")
    await memory.add_messages("s", [orphan, orphan, *users("hello")])
    assert await memory.get_messages("s") == users("hello")


async def test_results_added_after_their_call_stay_with_it() -> None:
    # An agent may store the tool-call message and each result in separate writes.
    memory = SlidingWindowMemory(max_messages=3)
    await memory.add_messages("s", users("q1", "q2"))
    tools = group("a", "b")
    for message in tools:
        await memory.add_messages("s", [message])
        window = await memory.get_messages("s")
        assert len(window) <= 3
        assert window[0].role is not Role.TOOL
    assert await memory.get_messages("s") == tools


async def test_sessions_are_isolated() -> None:
    memory = SlidingWindowMemory(max_messages=5)
    await memory.add_messages("a", users("for a"))
    await memory.add_messages("b", users("for b"))
    assert await memory.get_messages("a") == users("for a")
    assert await memory.get_messages("b") == users("for b")
    await memory.clear("a")
    assert await memory.get_messages("a") == []
    assert await memory.get_messages("b") == users("for b")


async def test_clear_of_an_unknown_session_is_a_no_op() -> None:
    memory = SlidingWindowMemory()
    await memory.clear("never-seen")
    assert await memory.get_messages("never-seen") == []


async def test_returned_list_is_a_copy() -> None:
    memory = SlidingWindowMemory()
    await memory.add_messages("s", users("a"))
    (await memory.get_messages("s")).append(Message.user("intruder"))
    assert await memory.get_messages("s") == users("a")


async def test_storage_stays_bounded() -> None:
    memory = SlidingWindowMemory(max_messages=5)
    for turn in range(500):
        await memory.add_messages("s", [*users(f"q{turn}"), *group("t"), Message.assistant("ok")])
        assert len(memory._sessions["s"]) <= 5
    window = await memory.get_messages("s")
    assert window[-1] == Message.assistant("ok")
    assert_well_formed(window)


async def test_adding_nothing_creates_no_session() -> None:
    memory = SlidingWindowMemory()
    await memory.add_messages("s", [])
    assert memory._sessions == {}


class TestSlidingWindowMemory(MemoryConformance):
    """The conformance kit, in process: one handle is the whole store."""

    persistent = False

    @pytest.fixture
    def make_memory(self) -> MemoryFactory:
        memory = SlidingWindowMemory(max_messages=1_000)  # the kit's longest session: 60

        async def make() -> Memory:
            return memory

        return make

    async def test_a_batch_that_cannot_be_stored_stores_nothing(self, memory: Memory) -> None:
        pytest.skip("messages are kept as objects in process: nothing is encoded")


class TestTokenWindowMemory(TestSlidingWindowMemory):
    """The conformance kit through a token window: listing and writes reach the inner memory."""

    @pytest.fixture
    def make_memory(self) -> MemoryFactory:
        memory = TokenWindowMemory(SlidingWindowMemory(1_000), max_tokens=100_000)

        async def make() -> Memory:
            return memory

        return make


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_sliding_window_rejects_a_bad_size(bad: object) -> None:
    with pytest.raises(BuilderError, match="max_messages"):
        SlidingWindowMemory(max_messages=bad)  # type: ignore[arg-type]


def test_sliding_window_repr() -> None:
    assert repr(SlidingWindowMemory(7)) == "SlidingWindowMemory(max_messages=7)"


# ----------------------------------------------------------------- token counting


def test_character_counter_rounds_up() -> None:
    counter = CharacterTokenCounter()
    assert counter.chars_per_token == 4
    assert counter.count_tokens("") == 0
    assert counter.count_tokens("abcd") == 1
    assert counter.count_tokens("abcde") == 2
    assert CharacterTokenCounter(chars_per_token=2.5).count_tokens("abcdef") == 3


@pytest.mark.parametrize("bad", [0, -4, float("nan")])
def test_character_counter_rejects_a_bad_ratio(bad: float) -> None:
    with pytest.raises(BuilderError, match="chars_per_token"):
        CharacterTokenCounter(chars_per_token=bad)


async def test_token_window_counts_text_parts_tool_names_and_arguments() -> None:
    counter = CharCounter()
    inner = ListMemory()
    memory = TokenWindowMemory(inner, max_tokens=10_000, counter=counter)
    call = ToolCall(id="c1", name="lookup", arguments={"city": "Oslo"})
    await memory.add_messages(
        "s",
        [
            Message.user([TextPart(text="part one"), ImagePart(url="https://x/y.png")]),
            Message.assistant("thinking", [call]),
            Message.tool("c1", "sunny"),
        ],
    )
    await memory.get_messages("s")
    assert sorted(counter.seen) == sorted(
        ["part one", "thinking", "lookup", '{"city":"Oslo"}', "sunny"]
    )


async def test_token_window_keeps_the_newest_messages_that_fit() -> None:
    inner = ListMemory()
    memory = TokenWindowMemory(inner, max_tokens=3 * (MESSAGE_OVERHEAD + 2), counter=CharCounter())
    await memory.add_messages("s", users("aa", "bb", "cc", "dd"))
    assert await memory.get_messages("s") == users("bb", "cc", "dd")


async def test_token_window_counts_images() -> None:
    inner = ListMemory()
    picture = Message.user([ImagePart(url="https://x/y.png")])
    budget = MESSAGE_OVERHEAD + IMAGE_TOKENS
    memory = TokenWindowMemory(inner, max_tokens=budget, counter=CharCounter())
    await memory.add_messages("s", [picture])
    assert await memory.get_messages("s") == [picture]
    memory = TokenWindowMemory(inner, max_tokens=budget - 1, counter=CharCounter())
    assert await memory.get_messages("s") == []


async def test_token_window_never_splits_a_group() -> None:
    inner = ListMemory()
    tools = group("a", "b")
    conversation = [*users("question"), *tools, *users("hi")]
    await inner.add_messages("s", conversation)
    counter = CharCounter()
    sizes = [MESSAGE_OVERHEAD + len(m.text) for m in conversation]
    sizes[1] += len("a") + len('{"q":"a"}') + len("b") + len('{"q":"b"}')
    # Room for the final user message and both results, but not for the call that made them.
    budget = sum(sizes[2:])
    memory = TokenWindowMemory(inner, max_tokens=budget, counter=counter)
    assert await memory.get_messages("s") == users("hi")
    memory = TokenWindowMemory(inner, max_tokens=sum(sizes[1:]), counter=counter)
    assert await memory.get_messages("s") == [*tools, *users("hi")]


async def test_token_window_is_empty_when_the_newest_message_is_too_big() -> None:
    inner = ListMemory()
    await inner.add_messages("s", users("x" * 100))
    memory = TokenWindowMemory(inner, max_tokens=10)
    assert await memory.get_messages("s") == []


async def test_token_window_default_counter_is_four_chars_per_token() -> None:
    inner = ListMemory()
    await inner.add_messages("s", users("x" * 40, "y" * 40))  # 10 tokens + overhead each
    memory = TokenWindowMemory(inner, max_tokens=10 + MESSAGE_OVERHEAD)
    assert await memory.get_messages("s") == users("y" * 40)


async def test_token_window_skips_orphan_results_from_its_inner_memory() -> None:
    inner = ListMemory()
    await inner.add_messages("s", [Message.tool("gone", "old"), *users("hi")])
    memory = TokenWindowMemory(inner, max_tokens=1_000)
    assert await memory.get_messages("s") == users("hi")


async def test_token_window_delegates_writes_and_clear() -> None:
    inner = ListMemory()
    memory: Memory = TokenWindowMemory(inner, max_tokens=1_000)
    await memory.add_messages("s", users("a"))
    assert inner.sessions["s"] == users("a")
    await memory.clear("s")
    assert "s" not in inner.sessions
    inner.sessions["t"] = users("b")
    assert await memory.list_sessions() == ["t"]


class UnlistedMemory(ListMemory):
    """A memory written before the protocol gained ``list_sessions``."""

    list_sessions = None  # type: ignore[assignment]


async def test_listing_through_a_memory_that_cannot_list_says_so() -> None:
    inner = UnlistedMemory()
    assert getattr(inner, "list_sessions", None) is None
    memory = TokenWindowMemory(inner, max_tokens=100)
    await memory.add_messages("s", users("a"))
    with pytest.raises(NotImplementedError, match=r"^UnlistedMemory cannot list its sessions$"):
        await memory.list_sessions()


async def test_token_window_over_a_sliding_window() -> None:
    memory = TokenWindowMemory(SlidingWindowMemory(max_messages=3), max_tokens=1_000)
    await memory.add_messages("s", users("a", "b", "c", "d"))
    assert await memory.get_messages("s") == users("b", "c", "d")
    assert isinstance(memory.inner, SlidingWindowMemory)
    assert memory.max_tokens == 1_000


@pytest.mark.parametrize("bad", [0, -5, 1.5])
def test_token_window_rejects_a_bad_budget(bad: object) -> None:
    with pytest.raises(BuilderError, match="max_tokens"):
        TokenWindowMemory(ListMemory(), max_tokens=bad)  # type: ignore[arg-type]


def test_token_window_rejects_a_counter_without_count_tokens() -> None:
    with pytest.raises(BuilderError, match="count_tokens"):
        TokenWindowMemory(ListMemory(), max_tokens=10, counter=len)  # type: ignore[arg-type]


# ----------------------------------------------------------------- properties

# A conversation is a list of units: a user message, a plain assistant message, or a tool-call
# group (an assistant message with 1-4 parallel calls followed by all their results).
_unit = st.one_of(
    st.text(max_size=12).map(lambda t: [Message.user(t)]),
    st.text(max_size=12).map(lambda t: [Message.assistant(t)]),
    st.lists(st.sampled_from(["search", "fetch", "calc"]), min_size=1, max_size=4).map(
        lambda names: group(*names)
    ),
)
_conversations = st.lists(_unit, max_size=25)


def _flatten(units: list[list[Message]]) -> tuple[list[Message], list[int]]:
    messages: list[Message] = []
    starts: list[int] = []
    for unit in units:
        starts.append(len(messages))
        messages.extend(unit)
    return messages, starts


@settings(max_examples=300)
@given(units=_conversations, max_messages=st.integers(1, 20), data=st.data())
async def test_sliding_window_property(
    units: list[list[Message]], max_messages: int, data: st.DataObject
) -> None:
    messages, starts = _flatten(units)
    memory = SlidingWindowMemory(max_messages=max_messages)
    # Write in random batches: trimming on write must never lose what a window needs.
    cuts = sorted(data.draw(st.sets(st.integers(0, len(messages)), max_size=6)))
    for low, high in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        await memory.add_messages("s", messages[low:high])
    window = await memory.get_messages("s")

    assert len(window) <= max_messages
    assert_well_formed(window)
    # The longest suffix that starts on a unit and fits: nothing droppable is kept or lost.
    fitting = [s for s in starts if len(messages) - s <= max_messages]
    expected = messages[fitting[0] :] if fitting else []
    assert window == expected


@settings(max_examples=300)
@given(units=_conversations, max_tokens=st.integers(1, 400))
async def test_token_window_property(units: list[list[Message]], max_tokens: int) -> None:
    messages, starts = _flatten(units)
    inner = ListMemory()
    await inner.add_messages("s", messages)
    counter = CharacterTokenCounter(chars_per_token=2)
    window = await TokenWindowMemory(inner, max_tokens, counter).get_messages("s")

    def tokens(seq: Sequence[Message]) -> int:
        total = 0
        for m in seq:
            total += MESSAGE_OVERHEAD + counter.count_tokens(m.text)
            for call in m.tool_calls:
                total += counter.count_tokens(call.name)
                total += counter.count_tokens(call.arguments_json)
        return total

    assert tokens(window) <= max_tokens
    assert_well_formed(window)
    fitting = [s for s in starts if tokens(messages[s:]) <= max_tokens]
    expected = messages[fitting[0] :] if fitting else []
    assert window == expected
