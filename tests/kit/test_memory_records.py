from __future__ import annotations

import pytest

from daimon.core.errors import SerializationError
from daimon.core.messages import Message, ToolCall
from daimon.kit.memory_records import decode_message, encode_message


def test_a_message_round_trips_as_text() -> None:
    message = Message.user("héllo 🧪")
    text = encode_message(message)
    assert isinstance(text, str)
    assert decode_message("s", 0, text) == message
    assert decode_message("s", 0, text.encode("utf-8")) == message


@pytest.mark.parametrize(
    "message",
    [
        Message.user("\ud800"),  # a lone surrogate: no UTF-8 store can hold it
    ],
    ids=["lone-surrogate"],
)
def test_what_could_not_be_read_back_is_refused(message: Message) -> None:
    with pytest.raises(SerializationError):
        encode_message(message)


def test_a_bad_stored_message_names_its_session_and_position() -> None:
    with pytest.raises(SerializationError, match=r"^session 'chat', message 3: "):
        decode_message("chat", 3, b'{"not": "a message"}')


def test_keys_other_serializers_read_as_code_round_trip() -> None:
    message = Message.assistant("", [ToolCall(id="c", name="t", arguments={"__class__": 1})])
    assert decode_message("s", 0, encode_message(message)) == message
