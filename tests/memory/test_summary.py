from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from itertools import count

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daimon import Agent, tool
from daimon.core import (
    BuilderError,
    ChatRequest,
    ChatResponse,
    ImagePart,
    Memory,
    Message,
    ModelError,
    Role,
    TextPart,
    ToolCall,
    Usage,
)
from daimon.kit.tokens import message_tokens
from daimon.memory import (
    CharacterTokenCounter,
    SlidingWindowMemory,
    SummarizingMemory,
    TokenWindowMemory,
)
from daimon.memory.summary import DEFAULT_SUMMARY_INSTRUCTIONS, SUMMARY_HEADER
from daimon.models import FunctionModel
from daimon.testing.memory import MemoryConformance, MemoryFactory

ONE = CharacterTokenCounter(chars_per_token=1)  # a token per character: budgets are easy to count
_ids = count()


def users(*texts: str) -> list[Message]:
    return [Message.user(text) for text in texts]


def group(*names: str) -> list[Message]:
    """An assistant message calling one tool per name, then every result."""
    calls = [ToolCall(id=f"call-{next(_ids)}", name=name, arguments={"q": name}) for name in names]
    results = [Message.tool(call.id, f"{call.name} result", name=call.name) for call in calls]
    return [Message.assistant("", calls), *results]


def tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(message, ONE) for message in messages)


def summary_of(text: str) -> Message:
    return Message.user(f"{SUMMARY_HEADER}\n{text}")


def is_summary(message: Message) -> bool:
    return message.role is Role.USER and message.text.startswith(SUMMARY_HEADER)


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


class Summarizer:
    """A FunctionModel summarizer that records its requests and answers S1, S2, ..."""

    def __init__(self, *, delay: float = 0.0, fail: Exception | None = None) -> None:
        self.requests: list[ChatRequest] = []
        self.delay = delay
        self.fail = fail
        self.model = FunctionModel(self._answer, model_name="summarizer")

    async def _answer(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        number = len(self.requests)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        usage = Usage(input_tokens=100, output_tokens=10, requests=1)
        return ChatResponse.reply(f"S{number}", usage=usage, model="summarizer")

    @property
    def prompts(self) -> list[str]:
        """The text each call was asked to summarize (previous summary included)."""
        return [request.messages[-1].text for request in self.requests]


def summarizing(
    inner: Memory, summarizer: Summarizer, max_tokens: int = 100, keep_last_tokens: int = 35
) -> SummarizingMemory:
    return SummarizingMemory(
        inner,
        model=summarizer.model,
        max_tokens=max_tokens,
        keep_last_tokens=keep_last_tokens,
        counter=ONE,
    )


# Twenty user messages of 3 characters: 7 tokens each, 140 in all. With max_tokens=100 and
# keep_last_tokens=35 a compaction keeps the newest five; the summary message "S1" costs 44.
TWENTY = users(*(f"m{n:02}" for n in range(20)))


# ----------------------------------------------------------------- reading


async def test_a_short_conversation_passes_through_untouched() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    assert await memory.get_messages("s") == []
    conversation = [*users("hi"), *group("search"), Message.assistant("found it here.")]
    await memory.add_messages("s", conversation)
    assert await memory.get_messages("s") == conversation
    more = users(*(f"m{n:02}" for n in range(5)))
    await memory.add_messages("s", more)
    assert tokens([*conversation, *more]) == 100  # exactly the budget: still fits
    assert await memory.get_messages("s") == [*conversation, *more]
    assert summarizer.requests == []
    assert memory.usage == Usage()


async def test_a_long_conversation_becomes_a_summary_and_the_newest_messages() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    window = await memory.get_messages("s")

    assert window == [summary_of("S1"), *TWENTY[15:]]
    assert tokens(window) <= 100
    assert tokens(window[1:]) <= 35
    [request] = summarizer.requests
    assert [m.role for m in request.messages] == [Role.SYSTEM, Role.USER]
    assert request.messages[0].text == DEFAULT_SUMMARY_INSTRUCTIONS
    assert request.max_tokens == 500
    expected = "\n".join(f"user: m{n:02}" for n in range(15))
    assert request.messages[1].text == f"Conversation to summarize:\n{expected}"
    assert "Summary so far" not in request.messages[1].text


async def test_the_summary_is_cached_between_reads() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    first = await memory.get_messages("s")
    assert await memory.get_messages("s") == first
    assert len(summarizer.requests) == 1


async def test_the_summary_is_incremental() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    await memory.get_messages("s")  # S1 covers m00..m14; 44 + 35 = 79 tokens
    more = users(*(f"n{n:02}" for n in range(4)))
    for message in more[:3]:  # 79 + 3 * 7 = 100: still fits, nothing to summarize
        await memory.add_messages("s", [message])
        window = await memory.get_messages("s")
        assert window[0] == summary_of("S1")
        assert window[-1] == message
    assert len(summarizer.requests) == 1

    await memory.add_messages("s", more[3:])  # 107: the messages that fell out join the summary
    window = await memory.get_messages("s")
    assert window == [summary_of("S2"), *TWENTY[19:], *more]
    assert len(summarizer.requests) == 2
    newly_dropped = "\n".join(f"user: m{n:02}" for n in range(15, 19))
    assert summarizer.prompts[1] == (
        f"Summary so far:\nS1\n\nConversation to summarize:\n{newly_dropped}"
    )


async def test_tool_calls_and_results_are_rendered_as_text() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer, max_tokens=50, keep_last_tokens=10)
    call = ToolCall(id="c1", name="lookup", arguments={"city": "Oslo"})
    await memory.add_messages(
        "s",
        [
            Message.user([TextPart(text="look at"), ImagePart(url="https://x/y.png")]),
            Message.assistant("checking", [call]),
            Message.tool("c1", "x" * 600, name="lookup"),
            Message.tool("c2", "boom", is_error=True),
            *users("ok"),
        ],
    )
    assert await memory.get_messages("s") == [summary_of("S1"), *users("ok")]
    lines = summarizer.prompts[0].split("\n")
    assert lines == [
        "Conversation to summarize:",
        "user: look at [1 image]",
        "assistant: checking",
        'assistant called lookup({"city":"Oslo"})',
        f"tool lookup result: {'x' * 500}... [100 more chars]",
        "tool result (error): boom",
    ]


async def test_instructions_and_summary_tokens_are_configurable() -> None:
    summarizer = Summarizer()
    memory = SummarizingMemory(
        SlidingWindowMemory(),
        model=summarizer.model,
        max_tokens=100,
        keep_last_tokens=35,
        summary_tokens=42,
        instructions="Summarize like a pirate.",
        counter=ONE,
    )
    await memory.add_messages("s", TWENTY)
    await memory.get_messages("s")
    [request] = summarizer.requests
    assert request.messages[0] == Message.system("Summarize like a pirate.")
    assert request.max_tokens == 42


async def test_a_tool_group_is_never_split_between_summary_and_tail() -> None:
    summarizer = Summarizer()
    tools = group("search", "fetch")  # the call costs 4 + 6 + 12 + 5 + 11: with its results, 80
    conversation = [*TWENTY[:10], *tools, *users("done")]
    memory = summarizing(SlidingWindowMemory(), summarizer, max_tokens=100, keep_last_tokens=60)
    await memory.add_messages("s", conversation)
    window = await memory.get_messages("s")
    # Both results and "done" fit keep_last_tokens, the call does not: the group is summarized.
    assert tokens(tools[1:]) + tokens(users("done")) <= 60 < tokens([*tools, *users("done")])
    assert window == [summary_of("S1"), *users("done")]
    assert summarizer.prompts[0].endswith("tool fetch result: fetch result")


async def test_concurrent_reads_summarize_once() -> None:
    summarizer = Summarizer(delay=0.05)
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    first, second = await asyncio.gather(memory.get_messages("s"), memory.get_messages("s"))
    assert first == second == [summary_of("S1"), *TWENTY[15:]]
    assert len(summarizer.requests) == 1


async def test_sessions_are_summarized_separately_and_concurrently() -> None:
    summarizer = Summarizer(delay=0.05)
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("a", TWENTY)
    await memory.add_messages("b", TWENTY)
    a, b = await asyncio.gather(memory.get_messages("a"), memory.get_messages("b"))
    assert len(summarizer.requests) == 2
    assert {a[0].text, b[0].text} == {summary_of("S1").text, summary_of("S2").text}


async def test_usage_accumulates_over_summarizer_calls() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("a", TWENTY)
    await memory.add_messages("b", TWENTY)
    await memory.get_messages("a")
    await memory.get_messages("b")
    assert memory.usage == Usage(input_tokens=200, output_tokens=20, requests=2)


# ----------------------------------------------------------------- failures


async def test_a_failing_summarizer_falls_back_to_the_token_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    summarizer = Summarizer(fail=ModelError("overloaded", status_code=529))
    inner = SlidingWindowMemory()
    memory = summarizing(inner, summarizer)
    await memory.add_messages("s", TWENTY)
    with caplog.at_level(logging.WARNING, logger="daimon.memory.summary"):
        window = await memory.get_messages("s")
    assert window == await TokenWindowMemory(inner, 100, ONE).get_messages("s")
    assert window == TWENTY[6:]
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "ModelError: overloaded" in record.getMessage()
    # Nothing was cached: the next read tries again, and succeeds once the model is back.
    summarizer.fail = None
    assert await memory.get_messages("s") == [summary_of("S2"), *TWENTY[15:]]


async def test_a_failure_after_a_summary_keeps_the_old_summary() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    await memory.get_messages("s")
    summarizer.fail = RuntimeError("bug in a custom model")
    more = users(*(f"n{n:02}" for n in range(4)))
    await memory.add_messages("s", more)
    window = await memory.get_messages("s")
    # The old summary, then the newest messages that fit beside it (56 tokens of 100 - 44).
    assert window == [summary_of("S1"), *TWENTY[16:], *more]
    assert tokens(window) <= 100


async def test_an_empty_summary_counts_as_a_failure() -> None:
    model = FunctionModel(lambda request: "   ")
    memory = SummarizingMemory(
        SlidingWindowMemory(), model=model, max_tokens=100, keep_last_tokens=35, counter=ONE
    )
    await memory.add_messages("s", TWENTY)
    assert await memory.get_messages("s") == TWENTY[6:]


async def test_an_agent_run_survives_a_failing_summarizer() -> None:
    summarizer = Summarizer(fail=ModelError("down"))
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    agent = Agent(FunctionModel(lambda request: f"seen {len(request.messages)}"), memory=memory)
    response = await agent.prompt("still there?", session_id="s")
    assert response.text == "seen 15"  # the 14 newest messages that fit, and the prompt
    assert len(summarizer.requests) == 1


# ----------------------------------------------------------------- the inner memory


async def test_writes_clear_and_listing_reach_the_inner_memory() -> None:
    summarizer = Summarizer()
    inner = SlidingWindowMemory()
    memory = summarizing(inner, summarizer)
    await memory.add_messages("s", users("a"))
    await memory.add_messages("t", users("b"))
    assert await inner.get_messages("s") == users("a")
    assert await memory.list_sessions() == ["s", "t"]
    await memory.clear("t")
    assert await inner.list_sessions() == ["s"]


async def test_listing_through_a_memory_that_cannot_list_says_so() -> None:
    class Unlisted(SlidingWindowMemory):
        list_sessions = None  # type: ignore[assignment]

    memory = summarizing(Unlisted(), Summarizer())
    await memory.add_messages("s", users("a"))
    with pytest.raises(NotImplementedError, match=r"^Unlisted cannot list its sessions$"):
        await memory.list_sessions()


async def test_clear_forgets_the_summary() -> None:
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(), summarizer)
    await memory.add_messages("s", TWENTY)
    await memory.get_messages("s")
    await memory.clear("s")
    assert await memory.get_messages("s") == []
    # The same messages again: not mistaken for the old conversation, summarized afresh.
    await memory.add_messages("s", TWENTY)
    assert await memory.get_messages("s") == [summary_of("S2"), *TWENTY[15:]]


async def test_a_new_instance_summarizes_once_more() -> None:
    summarizer = Summarizer()
    inner = SlidingWindowMemory()
    await summarizing(inner, summarizer).add_messages("s", TWENTY)
    await summarizing(inner, summarizer).get_messages("s")
    restarted = summarizing(inner, summarizer)
    assert await restarted.get_messages("s") == [summary_of("S2"), *TWENTY[15:]]
    assert await restarted.get_messages("s") == [summary_of("S2"), *TWENTY[15:]]
    assert len(summarizer.requests) == 2


async def test_a_store_that_drops_old_messages_keeps_the_summary_in_place() -> None:
    summarizer = Summarizer()
    inner = SlidingWindowMemory(max_messages=18)  # already forgot m00 and m01
    memory = summarizing(inner, summarizer)
    await memory.add_messages("s", TWENTY)
    assert await memory.get_messages("s") == [summary_of("S1"), *TWENTY[15:]]
    more = users("n0", "n1")  # the store drops m02 and m03: the covered part moves up
    await memory.add_messages("s", more)
    assert await memory.get_messages("s") == [summary_of("S1"), *TWENTY[15:], *more]
    assert len(summarizer.requests) == 1


async def test_a_repeated_message_does_not_misplace_the_summary_in_a_dropping_store() -> None:
    # The last summarized message is "go on", as is the message now at its old place once the
    # store dropped two: matching that one message alone skipped every fact after the summary.
    summarizer = Summarizer()
    memory = summarizing(SlidingWindowMemory(max_messages=10), summarizer, 90, 35)
    for turn in range(14):
        await memory.add_messages("s", [Message.user("go on"), Message.assistant(f"fact{turn:02}")])
        window = await memory.get_messages("s")
        assert tokens(window) <= 90
        seen = "\n".join([*summarizer.prompts, *(m.text for m in window)])
        assert [n for n in range(turn + 1) if f"fact{n:02}" not in seen] == [], turn


async def test_a_store_that_forgot_every_summarized_message_drops_the_summary() -> None:
    summarizer = Summarizer()
    inner = SlidingWindowMemory(max_messages=20)
    memory = summarizing(inner, summarizer)
    await memory.add_messages("s", TWENTY)
    await memory.get_messages("s")
    fresh = users(*(f"x{n:02}" for n in range(16)))  # m00..m15 gone, summary anchor with them
    await memory.add_messages("s", fresh)
    window = await memory.get_messages("s")
    assert window[0] == summary_of("S2")
    assert "Summary so far" not in summarizer.prompts[1]
    assert "user: m16" in summarizer.prompts[1]


async def test_the_cache_is_bounded() -> None:
    summarizer = Summarizer()
    memory = SummarizingMemory(
        SlidingWindowMemory(),
        model=summarizer.model,
        max_tokens=100,
        keep_last_tokens=35,
        counter=ONE,
        cache_size=1,
    )
    await memory.add_messages("a", TWENTY)
    await memory.add_messages("b", TWENTY)
    await memory.get_messages("a")
    await memory.get_messages("b")  # evicts a
    await memory.get_messages("b")
    assert len(summarizer.requests) == 2
    await memory.get_messages("a")
    assert len(summarizer.requests) == 3


# ----------------------------------------------------------------- with an agent


async def test_an_agent_over_many_turns_sees_the_summary() -> None:
    @tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return f"notes on {topic}"

    seen: list[ChatRequest] = []

    def agent_model(request: ChatRequest) -> ChatResponse:
        seen.append(request)
        last = request.messages[-1]
        if last.role is Role.USER:
            call = ToolCall(id=f"call-{len(seen)}", name="lookup", arguments={"topic": last.text})
            return ChatResponse.tool_use(call)
        return ChatResponse.reply(f"answer after {len(request.messages)} messages")

    summarizer = Summarizer()
    memory = SummarizingMemory(
        SlidingWindowMemory(max_messages=1_000),
        model=summarizer.model,
        max_tokens=120,
        keep_last_tokens=60,
        counter=ONE,
    )
    agent = Agent(
        FunctionModel(agent_model), tools=[lookup], memory=memory, system_prompt="Be brief."
    )
    for turn in range(15):
        response = await agent.prompt(f"topic {turn}", session_id="chat")
        assert response.text.startswith("answer after")

    assert len(summarizer.requests) >= 2
    stored = await memory.inner.get_messages("chat")
    assert len(stored) == 15 * 4  # prompt, tool call, result, answer: nothing lost in storage
    first_turn_requests = [r for r in seen if r.messages[-1].text == "topic 0"]
    last_turn = next(r for r in reversed(seen) if r.messages[-1].text == "topic 14")
    assert first_turn_requests and not any(is_summary(m) for m in first_turn_requests[0].messages)
    # The latest run's request: the system prompt, the summary, a valid tail, the new prompt.
    system, summary, *tail, prompt = last_turn.messages
    assert system == Message.system("Be brief.")
    assert summary == summary_of(f"S{len(summarizer.requests)}")
    assert_well_formed(tail)
    assert tokens([summary, *tail]) <= 120
    assert prompt == Message.user("topic 14")
    assert tail == stored[len(stored) - len(tail) :]
    # The last summarizer call folded the previous summary into newly dropped turns.
    assert summarizer.prompts[-1].startswith(f"Summary so far:\nS{len(summarizer.requests) - 1}")


# ----------------------------------------------------------------- properties

_unique = count()
_unit = st.one_of(
    st.just("user").map(lambda _: [Message.user(f"u{next(_unique)}")]),
    st.just("assistant").map(lambda _: [Message.assistant(f"a{next(_unique)}")]),
    st.lists(st.sampled_from(["search", "fetch", "calc"]), min_size=1, max_size=4).map(
        lambda names: group(*names)
    ),
)


@settings(max_examples=200, deadline=None)
@given(
    units=st.lists(_unit, max_size=30),
    max_tokens=st.integers(60, 400),
    data=st.data(),
)
async def test_summarizing_property(
    units: list[list[Message]], max_tokens: int, data: st.DataObject
) -> None:
    keep_last_tokens = data.draw(st.integers(1, max_tokens - 55), label="keep_last_tokens")
    messages: list[Message] = []
    starts: list[int] = []
    for unit in units:
        starts.append(len(messages))
        messages.extend(unit)
    summarizer = Summarizer()
    inner = SlidingWindowMemory(max_messages=10_000)
    memory = summarizing(inner, summarizer, max_tokens, keep_last_tokens)
    # Write in random batches of whole units (turns), reading after each as an agent would.
    points = st.sampled_from(starts) if starts else st.just(0)
    cuts = sorted(data.draw(st.sets(points, max_size=8), label="cuts"))
    for low, high in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        await memory.add_messages("s", messages[low:high])
        stored = messages[:high]
        window = await memory.get_messages("s")

        assert tokens(window) <= max_tokens
        summarized = bool(window) and is_summary(window[0])
        tail = window[1:] if summarized else window
        assert not any(is_summary(m) for m in tail)
        assert_well_formed(tail)
        # The tail is the stored conversation's end, cut where a unit starts.
        start = len(stored) - len(tail)
        assert tail == stored[start:]
        assert start in [*starts, len(stored)]
        if not summarized:
            assert start == 0
            continue
        # Every message before the tail went to the summarizer, exactly once.
        lines = [line for prompt in summarizer.prompts for line in prompt.split("\n")]
        dropped = [f"{m.role.value}: {m.text}" for m in stored[:start] if m.role is not Role.TOOL]
        dropped = [line for line in dropped if not line.endswith(": ")]
        spoken = [line for line in lines if line.startswith(("user: ", "assistant: "))]
        assert sorted(spoken) == sorted(dropped)


# ----------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"keep_last_tokens": -1}, "keep_last_tokens"),
        ({"keep_last_tokens": True}, "keep_last_tokens"),
        ({"summary_tokens": 0}, "summary_tokens"),
        ({"cache_size": 0}, "cache_size"),
        ({"keep_last_tokens": 100}, "keep_last_tokens .*less than max_tokens"),
        ({"keep_last_tokens": 200}, "keep_last_tokens .*less than max_tokens"),
        ({"model": object()}, "generate"),
        ({"instructions": ""}, "instructions"),
        ({"counter": len}, "count_tokens"),
    ],
)
def test_bad_configuration_is_refused(options: dict[str, object], named: str) -> None:
    settings: dict[str, object] = {
        "model": Summarizer().model,
        "max_tokens": 100,
        "keep_last_tokens": 50,
        **options,
    }
    with pytest.raises(BuilderError, match=named):
        SummarizingMemory(SlidingWindowMemory(), **settings)  # type: ignore[arg-type]


def test_properties_and_repr() -> None:
    inner = SlidingWindowMemory(7)
    summarizer = Summarizer()
    memory = SummarizingMemory(inner, model=summarizer.model, max_tokens=40, keep_last_tokens=20)
    assert memory.inner is inner
    assert memory.model is summarizer.model
    assert (memory.max_tokens, memory.keep_last_tokens) == (40, 20)
    assert repr(memory).startswith("SummarizingMemory(SlidingWindowMemory(max_messages=7), ")
    assert repr(memory).endswith("max_tokens=40, keep_last_tokens=20)")


# ----------------------------------------------------------------- conformance


class TestSummarizingMemory(MemoryConformance):
    """The conformance kit through a summarizing memory over a sliding window."""

    persistent = False

    @pytest.fixture
    def make_memory(self) -> Iterator[MemoryFactory]:
        summarizer = Summarizer()
        memory = SummarizingMemory(
            SlidingWindowMemory(1_000),  # the kit's longest session: 60
            model=summarizer.model,
            max_tokens=100_000,
            keep_last_tokens=50_000,
        )

        async def make() -> Memory:
            return memory

        yield make
        assert summarizer.requests == []  # the kit's conversations fit: nothing is summarized

    async def test_a_batch_that_cannot_be_stored_stores_nothing(self, memory: Memory) -> None:
        pytest.skip("messages are kept as objects in process: nothing is encoded")
