"""A support desk where agents hand the conversation to one another (no API key needed).

Triage hands a billing question to billing, which sees the user's words (not triage's tool
calls) and a note saying why; streaming shows the handoff; a second turn of the same session
carries on with the agent that answered last.
"""

import asyncio

from daimon import Agent, ChatRequest, ChatResponse, Done, Role, ToolCall, ToolResult, Usage
from daimon.models import FunctionModel
from daimon.multiagent import HANDOFF_PREFIX, HandoffNetwork

USAGE = Usage(input_tokens=100, output_tokens=20, requests=1)


def triage_model(request: ChatRequest) -> ChatResponse:
    """Plays triage's LLM: sends anything about money to billing."""
    question = request.messages[-1].text
    if "charged" in question:
        return ChatResponse.tool_use(
            ToolCall(id="t1", name="transfer_to_billing", arguments={"reason": "a double charge"}),
            text="Let me get billing for you.",
            usage=USAGE,
        )
    return ChatResponse.reply("How can I help?", usage=USAGE)


def billing_model(request: ChatRequest) -> ChatResponse:
    """Plays billing's LLM: shows what it was given, then answers."""
    seen = [m for m in request.messages if m.role is not Role.SYSTEM]
    if seen[-1].text.startswith("[handoff]"):
        print("billing saw:", " | ".join(f"{m.role}: {m.text[:40]}" for m in seen))
        return ChatResponse.reply("I refunded the duplicate charge.", usage=USAGE)
    return ChatResponse.reply("Refunds take 3 days.", usage=USAGE)


async def main() -> None:
    network = HandoffNetwork(
        {
            "triage": Agent(FunctionModel(triage_model), system_prompt="You route requests."),
            "billing": Agent(FunctionModel(billing_model), system_prompt="You handle billing."),
        },
        start="triage",
        descriptions={"billing": "charges, refunds and invoices"},
    )
    response = None
    async for event in network.prompt_stream("I was charged twice", session_id="user-1"):
        if isinstance(event, ToolResult) and event.name.startswith(HANDOFF_PREFIX):
            print("handoff:", event.output.content)
        elif isinstance(event, Done):
            response = event.response
    assert response is not None
    print(f"{response.output.agent} answered: {response.text}")
    print("handoffs:", [(h.source, h.target, h.reason) for h in response.output.handoffs])
    print(f"usage: {response.usage.requests} requests, {response.usage.total_tokens} tokens")

    follow_up = await network.prompt(
        "How long will it take?", session_id="user-1", agent=response.output.agent
    )
    print(f"{follow_up.output.agent} answered: {follow_up.text}")


if __name__ == "__main__":
    asyncio.run(main())
