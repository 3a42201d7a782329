"""Free-form data may hold keys that look like code-reviving markers: they are stored escaped.

Issue 17, items 3 and 11. A marker key (``$type``, ``__module__``, ``py/...``, ``!!python...``)
in data gains one ``~`` when written and loses it when read, so any JSON object round-trips; a bare
marker in a payload (never written by daimon) is refused, whatever follows its family's prefix.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daimon.core import (
    CheckpointState,
    Message,
    SerializationError,
    ToolCall,
    ToolOutput,
)
from daimon.core.codec import _REVIVING_MARKERS, dumps, from_data, loads, to_data
from daimon.kit import checkpoint_records as records

from . import strategies as s

# One of each family, and the forms a prefix family takes in the wild.
MARKERS = [
    "__class__",
    "__module__",
    "__init__",
    "__proto__",
    "__a__",
    "py/object",
    "py/id",
    "py/",
    "!!python",
    "!!python/object/apply:os.system",
    "!!python/name:os.system",
    "tag:yaml.org,2002:python/object/apply:os.system",
    "$type",
]
# Keys that only look close: stored exactly as they are, before escaping existed and after.
NOT_MARKERS = [
    "",
    "~",
    "~~",
    "~x",
    "x~$type",
    "__",
    "____",
    "__typename",
    "_id",
    "__init",
    "init__",
    "py",
    "Py/object",
    "python/object",
    "!python/object",
    "!!pyth",
    "$types",
    "$type\n",
    "type",
    "$ref",
    "@type",
]


def _envelope(data: Any) -> str:
    return json.dumps({"daimon": 1, "data": data})


def test_the_known_markers_are_all_in_the_family() -> None:
    for marker in _REVIVING_MARKERS:
        assert to_data({marker: 1}) == {"~" + marker: 1}


@pytest.mark.parametrize("marker", MARKERS)
def test_a_bare_marker_key_is_refused_when_read(marker: str) -> None:
    for cls, data in (
        (Any, {"a": [{marker: "os.system"}]}),
        (dict[str, Any], {marker: 1}),
        (ToolCall, {"id": "c", "name": "n", "arguments": {marker: "id"}}),
        (Message, {"role": "user", "content": "x", marker: 1}),  # where fields are decoded
    ):
        with pytest.raises(SerializationError, match="code-reviving marker"):
            loads(_envelope(data), cls)


def test_a_yaml_apply_tag_is_refused_unescaped() -> None:
    # Item 11: the key used to pass as data, as only "!!python" itself was matched.
    payload = '{"daimon": 1, "data": {"!!python/object/apply:os.system": ["id"]}}'
    with pytest.raises(SerializationError, match=r"at \$: refusing a code-reviving marker"):
        loads(payload, Any)


@pytest.mark.parametrize("marker", MARKERS)
def test_a_marker_key_is_written_with_one_more_escape(marker: str) -> None:
    assert to_data({marker: 1}) == {"~" + marker: 1}
    assert to_data({"~" + marker: 1}) == {"~~" + marker: 1}
    assert to_data({"~~" + marker: 1}) == {"~~~" + marker: 1}
    for key in (marker, "~" + marker, "~~" + marker):
        assert loads(dumps({key: [1]}), Any) == {key: [1]}


@pytest.mark.parametrize("key", NOT_MARKERS)
def test_other_keys_are_stored_as_they_are(key: str) -> None:
    assert to_data({key: {key: 1}}) == {key: {key: 1}}
    # Data stored before escaping existed reads back the same.
    assert loads(_envelope({key: {key: 1}}), Any) == {key: {key: 1}}


def test_an_escaped_key_is_no_dataclass_field() -> None:
    # Field names are decoded as they are: an escaped key there is just an unknown field.
    with pytest.raises(SerializationError, match=r"unknown field\(s\) for Message: ~__class__"):
        from_data(Message, {"role": "user", "~__class__": 1})


def test_dataclass_fields_are_never_escaped() -> None:
    assert to_data(ToolCall(id="c", name="n", arguments={"$type": 1})) == {
        "id": "c",
        "name": "n",
        "arguments": {"~$type": 1},
        "kind": "tool_call",
    }


# Keys near the markers, built without the codec's own pattern: escapes, family members, noise.
marker_like_keys = st.builds(
    lambda escapes, marker, tail: "~" * escapes + marker + tail,
    st.integers(min_value=0, max_value=3),
    st.sampled_from(MARKERS + NOT_MARKERS),
    st.sampled_from(["", "", "x", "/os.system", "__", "~"]),
)
keys = st.text(max_size=8) | st.text(alphabet="~_$typo/!:", max_size=10) | marker_like_keys
json_values: st.SearchStrategy[Any] = st.recursive(
    s.json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=15,
)
json_objects = st.dictionaries(keys, json_values, max_size=5)


@s.PROPERTY_SETTINGS
@given(obj=json_objects)
def test_any_json_object_round_trips(obj: dict[str, Any]) -> None:
    assert loads(dumps(obj), Any) == obj
    assert loads(dumps(obj), dict[str, Any]) == obj
    assert from_data(dict[str, Any], to_data(obj)) == obj


@s.PROPERTY_SETTINGS
@given(obj=json_objects)
def test_any_json_object_round_trips_in_what_daimon_persists(obj: dict[str, Any]) -> None:
    message = Message.assistant("", [ToolCall(id="c", name="t", arguments=obj)])
    assert loads(dumps(message), Message) == message
    state = CheckpointState(
        run_id="r",
        messages=(message,),
        completed_tool_results={"c": ToolOutput.json(obj)},
        custom=obj,
    )
    record = records.decode(records.encode(state, 1, 1), run_id="r", seq=1)
    assert record.state == state


def _looks_like_a_marker(key: str) -> bool:
    """The escaping rule, written out independently of the codec's pattern."""
    core = key.lstrip("~")
    dunder = len(core) > 4 and core.startswith("__") and core.endswith("__")
    prefixed = core.startswith(("py/", "!!python", "tag:yaml.org,2002:python/"))
    return dunder or prefixed or core == "$type"


@s.PROPERTY_SETTINGS
@given(key=keys)
def test_only_marker_keys_are_escaped(key: str) -> None:
    expected = "~" + key if _looks_like_a_marker(key) else key
    assert to_data({key: 1}) == {expected: 1}
    stored = _envelope({key: 1})  # the key as a payload holds it
    if not _looks_like_a_marker(key):
        assert loads(stored, Any) == {key: 1}
    elif key.startswith("~"):
        assert loads(stored, Any) == {key[1:]: 1}  # an escaped marker
    else:
        with pytest.raises(SerializationError, match="code-reviving marker"):
            loads(stored, Any)
