"""Serve an agent over A2A (Agent-to-Agent), on a FunctionModel (no API key needed).

python examples/a2a_server.py 9999    # card at http://127.0.0.1:9999/.well-known/agent-card.json
"""

import asyncio
import sys
from collections.abc import Iterator

from daimon import Agent, ChatRequest
from daimon.a2a import serve_a2a
from daimon.models import FunctionModel


def shout(request: ChatRequest) -> Iterator[str]:
    """Plays the LLM: streams the question back in capitals, word by word."""
    for word in request.messages[-1].text.upper().split():
        yield word + " "
    yield "!"


agent = Agent(FunctionModel(stream_function=shout), name="shouter")

if __name__ == "__main__":
    asyncio.run(serve_a2a(agent, port=int(sys.argv[1]) if len(sys.argv) > 1 else 9999))
