from __future__ import annotations

import pytest

from daimon import ChatRequest, ChatResponse, Done, Message, ModelError, TextDelta
from daimon.models import ScriptedModel

REQUEST = ChatRequest(messages=(Message.user("hi"),))


async def test_answers_in_order_and_records_requests() -> None:
    model = ScriptedModel(["one", ChatResponse.reply("two")])
    assert (await model.generate(REQUEST)).text == "one"
    events = [e async for e in model.generate_stream(REQUEST)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["two"]
    assert isinstance(events[-1], Done)
    assert model.requests == [REQUEST, REQUEST]
    assert model.remaining == 0


async def test_running_out_is_a_model_error() -> None:
    model = ScriptedModel(["only"])
    await model.generate(REQUEST)
    with pytest.raises(ModelError, match="ran out of responses after 1"):
        await model.generate(REQUEST)
