from __future__ import annotations

from collections.abc import Sequence

import pytest

from daimon import Agent, ChatResponse, GuardrailBlockedError, GuardrailResult, Message
from daimon.models import ScriptedModel


class NoSecrets:
    name = "no-secrets"

    async def check(self, input: str, messages: Sequence[Message]) -> GuardrailResult:
        if "password" in input:
            return GuardrailResult.block("asks for a password")
        return GuardrailResult.transform(input.strip())


class Redact:
    async def check(self, response: ChatResponse) -> GuardrailResult:
        return GuardrailResult.transform(response.text.replace("42", "[redacted]"))


class Broken:
    async def check(self, input: str, messages: Sequence[Message]) -> GuardrailResult:
        raise ConnectionError("moderation service down")


async def test_input_guardrail_transforms_and_blocks() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model, input_guardrails=[NoSecrets()])
    await agent.prompt("  hello  ")
    assert model.requests[0].messages[-1].text == "hello"
    with pytest.raises(GuardrailBlockedError, match="no-secrets") as info:
        await agent.prompt("what is the password")
    assert info.value.reason == "asks for a password"
    assert len(model.requests) == 1


async def test_a_raising_guardrail_fails_closed() -> None:
    model = ScriptedModel(["never"])
    with pytest.raises(GuardrailBlockedError, match="moderation service down"):
        await Agent(model, input_guardrails=[Broken()]).prompt("hi")
    assert model.requests == []


async def test_output_guardrail_rewrites_the_answer() -> None:
    response = await Agent(ScriptedModel(["it is 42"]), output_guardrails=[Redact()]).prompt("q")
    assert response.text == "it is [redacted]"
