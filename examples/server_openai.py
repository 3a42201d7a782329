"""Serve an agent over HTTP and talk to it: daimon's own API, its event stream, and the OpenAI SDK.

A FunctionModel stands in for an LLM (no API key needed); the agent's tool runs on the server.
To serve for real, call ``serve(agent)`` (127.0.0.1:8000) or run ``python server_openai.py
--serve``; this script instead starts the server in a thread, makes a few requests and stops.
"""

import json
import sys
import threading
import time

import httpx
import openai
import uvicorn

from daimon import Agent, ChatRequest, ChatResponse, Role, ToolCall, tool
from daimon.models import FunctionModel
from daimon.server import ServerSettings, create_app, serve


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny and 21 C in {city}"


def weather_model(request: ChatRequest) -> ChatResponse:
    """Plays the LLM: asks the weather tool, then answers with what it said."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return ChatResponse.reply(f"It is {last.text}.")
    return ChatResponse.tool_use(ToolCall(id="1", name="weather", arguments={"city": "Lisbon"}))


agent = Agent(FunctionModel(weather_model), name="weather", tools=[weather])


def main() -> None:
    # Port 0: the system picks a free one.
    app = create_app(agent, settings=ServerSettings(port=0))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url) as http:
            # daimon's API: one answer, with usage and ids.
            reply = http.post("/prompt", json={"input": "Weather?", "session_id": "demo"}).json()
            print(f"/prompt: {reply['text']} ({reply['iterations']} model calls)")

            # The same run as server-sent events: one per agent event, `done` last.
            with http.stream("POST", "/prompt/stream", json={"input": "Weather?"}) as stream:
                kinds = [line[7:] for line in stream.iter_lines() if line.startswith("event: ")]
            print("/prompt/stream:", " ".join(kinds))

            # The session remembers the conversation.
            session = http.get("/sessions/demo").json()
            print(f"/sessions/demo: {len(session['messages'])} messages")

        # The official OpenAI SDK: the agent is a model, its tool runs on the server.
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        with client:
            completion = client.chat.completions.create(
                model="weather", messages=[{"role": "user", "content": "Weather in Lisbon?"}]
            )
            print("openai:", completion.choices[0].message.content)
            chunks = client.chat.completions.create(
                model="weather",
                messages=[{"role": "user", "content": "Weather in Lisbon?"}],
                stream=True,
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            print("openai stream:", json.dumps(text))
    finally:
        server.should_exit = True
        thread.join()


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve(agent)  # http://127.0.0.1:8000 until Ctrl+C
    else:
        main()
