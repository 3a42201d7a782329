"""Token streaming on the real dev server: a client sees a model call's text before it ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from temporalio.client import Client

from daimon import Agent, ChatRequest
from daimon.core.events import Done, TextDelta
from daimon.models import FunctionModel
from daimon.temporal import TemporalAgent, serving, start_run

PIECES = ("The answer", " comes", " slowly.")
ended: list[float] = []


async def _slow(request: ChatRequest) -> AsyncIterator[str]:
    """Three pieces a second apart; the time the stream ended is kept in ``ended``."""
    for index, piece in enumerate(PIECES):
        if index:
            await asyncio.sleep(1.0)
        yield piece
    ended.append(time.monotonic())


talker = Agent(FunctionModel(stream_function=_slow), name="talker")


async def test_text_deltas_reach_the_client_before_the_model_call_ends(
    client: Client, task_queue: str
) -> None:
    ended.clear()
    seen: list[tuple[float, str]] = []
    async with serving(client, [talker], task_queue=task_queue, stream_tokens=True):
        run = await start_run(client, talker, "talk", task_queue=task_queue)
        async for event in run.stream(poll=0.02, tokens=True):
            if isinstance(event, TextDelta):
                seen.append((time.monotonic(), event.text))
            elif isinstance(event, Done):
                assert event.response.text == "".join(PIECES)
    (model_ended,) = ended
    assert "".join(text for _, text in seen) == "".join(PIECES)  # shown once, in order
    assert len(seen) >= 2
    assert seen[0][0] < model_ended - 1.0  # the first piece came while the call went on


async def test_without_tokens_the_stream_is_the_recorded_turn(
    client: Client, task_queue: str
) -> None:
    async with serving(client, [talker], task_queue=task_queue, stream_tokens=True):
        run = await start_run(client, talker, "talk", task_queue=task_queue)
        deltas = [e.text async for e in run.stream(poll=0.02) if isinstance(e, TextDelta)]
    assert deltas == ["".join(PIECES)]


async def test_a_temporal_agent_with_tokens_streams_the_text_as_it_comes(
    client: Client, task_queue: str
) -> None:
    front = TemporalAgent(client, "talker", task_queue=task_queue, poll=0.02, tokens=True)
    async with serving(client, [talker], task_queue=task_queue, stream_tokens=True):
        events = [event async for event in front.prompt_stream("talk")]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 2 and "".join(deltas) == "".join(PIECES)
    assert isinstance(events[-1], Done)
