"""Talk to a remote A2A agent: as a sub-agent (streaming) and as a tool of a local agent.

Starts examples/a2a_server.py on a free port, then connects to it. No API key needed: both
agents run on FunctionModels standing in for LLMs.
"""

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

from daimon import Agent, ChatRequest, ChatResponse, Role, TextDelta, ToolCall
from daimon.a2a import RemoteA2AAgent
from daimon.models import FunctionModel

SERVER = Path(__file__).with_name("a2a_server.py")


def model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: asks the remote shouter, then reports what it said."""
    results = [m.text for m in request.messages if m.role is Role.TOOL]
    if not results:
        return ChatResponse.tool_use(ToolCall(id="1", name="shouter", arguments={"prompt": "hi"}))
    return ChatResponse.reply(f"The shouter said: {results[-1]}")


async def main(port: int) -> None:
    shouter = RemoteA2AAgent(f"http://127.0.0.1:{port}")
    await _wait_until_up(shouter)  # the server is still starting
    async with shouter:
        words = [
            event.text.strip()
            async for event in shouter.prompt_stream("a2a works")
            if isinstance(event, TextDelta)
        ]
        print("streamed:", " ".join(words))
        agent = Agent(FunctionModel(model), tools=[shouter])  # the remote agent as a tool
        print((await agent.prompt("Greet the shouter")).text)


async def _wait_until_up(remote: RemoteA2AAgent) -> None:
    for _ in range(300):
        try:
            await remote.connect()  # reads the agent card
            return
        except Exception:
            await asyncio.sleep(0.1)
    await remote.connect()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(SERVER), str(port)])
    try:
        asyncio.run(main(port))
    finally:
        server.terminate()
        server.wait(timeout=10)
