"""Hypothesis strategies for every core type, kept small so property tests stay fast.

JSON payloads are limited in depth and size, floats are finite, and object keys never collide with
the markers the codec refuses (``__class__``, ``py/object``, ...).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from daimon.core import (
    AgentResponse,
    AgentTask,
    AudioPart,
    CachePoint,
    ChatRequest,
    ChatResponse,
    CheckpointState,
    Document,
    DocumentPart,
    Done,
    ErrorEvent,
    ImagePart,
    Message,
    ResponseFormat,
    Role,
    ScoredDocument,
    StopReason,
    TaskResult,
    TaskState,
    TaskStatus,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolOutput,
    ToolResult,
    ToolSpec,
    Usage,
    UsageEvent,
)
from daimon.core.codec import _REVIVING_MARKERS

# Decoders are built on first use, so the first example of a test may be slow: no deadline.
PROPERTY_SETTINGS = settings(
    deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)

texts = st.text(max_size=20)
ids = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
names = st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
counts = st.integers(min_value=0, max_value=10**9)
json_keys = texts.filter(lambda key: key not in _REVIVING_MARKERS)

json_scalars: st.SearchStrategy[Any] = st.none() | st.booleans() | finite_floats | texts
json_scalars |= st.integers(min_value=-(2**63), max_value=2**63)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=12,
)
json_objects: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    json_keys, json_values, max_size=4
)

usages = st.builds(
    Usage,
    input_tokens=counts,
    output_tokens=counts,
    cached_tokens=counts,
    cache_write_tokens=counts,
    requests=counts,
)

tool_calls = st.builds(
    ToolCall,
    id=ids,
    name=names,
    arguments=json_objects | st.text(max_size=30),  # parsed arguments, or the model's raw text
)

text_parts = st.builds(TextPart, text=texts)
image_parts = st.builds(
    ImagePart,
    url=st.just("https://example.com/cat.png")
    | st.from_regex(r"data:image/png;base64,[A-Za-z0-9+/]{0,16}", fullmatch=True),
) | st.builds(
    ImagePart,
    data=st.binary(max_size=64),
    media_type=st.sampled_from(["image/png", "image/jpeg", "image/webp"]),
)
audio_parts = st.builds(
    AudioPart, data=st.binary(max_size=64), media_type=st.sampled_from(["audio/wav", "audio/mpeg"])
) | st.builds(AudioPart, url=st.just("gs://bucket/a.wav"))
document_parts = st.builds(
    DocumentPart,
    data=st.binary(max_size=64),
    media_type=st.sampled_from(["application/pdf", "text/plain"]),
    name=st.none() | names,
) | st.builds(DocumentPart, url=st.just("https://example.com/a.pdf"))
media_parts = image_parts | audio_parts | document_parts
content_parts = text_parts | media_parts | st.just(CachePoint())

messages = st.builds(
    Message,
    role=st.sampled_from(Role),
    content=texts | st.lists(content_parts, max_size=3).map(tuple),
    tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    tool_call_id=st.none() | ids,
    name=st.none() | names,
    is_error=st.booleans(),
)

tool_specs = st.builds(ToolSpec, name=names, description=texts, parameters=json_objects)
response_formats = st.builds(ResponseFormat, name=names, schema=json_objects, strict=st.booleans())
chat_requests = st.builds(
    ChatRequest,
    messages=st.lists(messages, max_size=3).map(tuple),
    tools=st.lists(tool_specs, max_size=2).map(tuple),
    temperature=st.none() | st.floats(min_value=0, max_value=2),
    max_tokens=st.none() | st.integers(min_value=1, max_value=100_000),
    response_format=st.none() | response_formats,
    tool_choice=st.none() | st.sampled_from(["auto", "none", "required"]) | names,
    settings=json_objects,
)
chat_responses = st.builds(
    ChatResponse,
    message=messages,
    stop_reason=st.sampled_from(StopReason),
    usage=usages,
    model=st.none() | names,
)

tool_outputs = st.builds(
    ToolOutput,
    content=texts,
    data=json_values,
    is_error=st.booleans(),
    media=st.lists(media_parts, max_size=2).map(tuple),
)
documents = st.builds(Document, content=texts, id=st.just("") | ids, metadata=json_objects)
scored_documents = st.builds(ScoredDocument, document=documents, score=finite_floats)

agent_responses = st.builds(
    AgentResponse,
    text=texts,
    messages=st.lists(messages, max_size=2).map(tuple),
    iterations=counts,
    usage=usages,
    cost=finite_floats,
    run_id=ids,
    session_id=st.none() | ids,
    output=json_values,
)

stream_events = st.one_of(
    st.builds(TextDelta, text=texts),
    st.builds(ToolCallStart, call_id=ids, name=names, index=counts),
    st.builds(ToolCallDelta, call_id=ids, arguments_delta=texts, index=counts),
    st.builds(ToolCallEnd, call=tool_calls, index=counts),
    st.builds(ToolResult, call_id=ids, name=names, output=tool_outputs, duration=finite_floats),
    st.builds(UsageEvent, usage=usages, cost=finite_floats),
    st.builds(ErrorEvent, message=texts, error_type=names),
    st.builds(
        Done,
        stop_reason=st.sampled_from(StopReason),
        model=st.none() | names,
        response=st.none() | agent_responses,
    ),
)

agent_tasks = st.builds(
    AgentTask,
    task_id=ids,
    input=texts,
    run_id=st.none() | ids,
    session_id=st.none() | ids,
    metadata=json_objects,
    attempt=st.integers(min_value=1, max_value=100),
)
task_results = st.builds(
    TaskResult,
    task_id=ids,
    output=texts,
    iterations=counts,
    cost=finite_floats,
    usage=usages,
    error=st.none() | texts,
)
task_statuses = st.builds(
    TaskStatus,
    state=st.sampled_from(TaskState),
    result=st.none() | task_results,
    error=st.none() | texts,
)

checkpoint_states = st.builds(
    CheckpointState,
    run_id=ids,
    messages=st.lists(messages, max_size=3).map(tuple),
    iteration=counts,
    usage=usages,
    cost=finite_floats,
    pending_tool_calls=st.lists(tool_calls, max_size=2).map(tuple),
    completed_tool_results=st.dictionaries(ids, tool_outputs, max_size=2),
    custom=json_objects,
    session_id=st.none() | ids,
)


@st.composite
def streamable_responses(draw: st.DrawFn) -> ChatResponse:
    """Responses a model stream can carry exactly: assistant text plus tool calls."""
    calls = tuple(draw(st.lists(tool_calls, max_size=3, unique_by=lambda call: call.id)))
    stop = draw(st.sampled_from(StopReason))
    if calls and stop is StopReason.END_TURN:
        stop = StopReason.TOOL_USE  # what the accumulator reports for a turn with calls
    return ChatResponse(
        message=Message.assistant(draw(texts), calls),
        stop_reason=stop,
        usage=draw(usages),
        model=draw(st.none() | names),
    )
