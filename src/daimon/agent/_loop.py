"""The one ReAct loop: an async generator of stream events that every entry point drains."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from daimon.agent._chain import stream_chain
from daimon.agent._run import Run
from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse
from daimon.core.checkpoints import CheckpointState
from daimon.core.errors import RunCancelled
from daimon.core.events import (
    RateLimitWait,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageEvent,
)
from daimon.core.messages import Message
from daimon.core.results import ApprovalDecision
from daimon.kit.streaming import StreamAccumulator

if TYPE_CHECKING:
    from daimon.agent._agent import Agent
    from daimon.agent._client_tools import ClientTools
    from daimon.extensions import CallModel

__all__ = ("run_events",)

_FORWARDED = (TextDelta, ToolCallStart, ToolCallDelta, ToolCallEnd, RateLimitWait)


async def run_events(
    agent: Agent[Any, Any],
    prompt: str | Message | None,
    *,
    stream: bool,
    session_id: str | None = None,
    run_id: str | None = None,
    deps: Any = None,
    cancel: CancelToken | None = None,
    resume: CheckpointState | None = None,
    decisions: Mapping[str, ApprovalDecision] | None = None,
    history: Sequence[Message] | None = None,
    instructions: str | None = None,
    client: ClientTools | None = None,
) -> AsyncIterator[StreamEvent]:
    """Run ``agent`` on ``prompt``, yielding events; the last is ``Done`` with the response.

    With ``stream`` the model streams and every event is yielded; without it the model is called
    with ``generate`` and only ``Done`` is yielded (all that ``prompt()`` and ``resume()`` read).
    A run continues when ``resume`` holds a paused run's state or the agent's checkpoint store
    holds ``run_id``; ``decisions`` answer approvals, ``client`` holds client tools and results.
    The steps are the seed's: open; the model's turn (checks, the call through the extensions,
    usage), and the tools' turn while the model asks for tools; the end (answer, pause, EndRun).
    """
    run = Run(
        agent,
        stream=stream,
        session_id=session_id,
        run_id=run_id,
        deps=deps,
        cancel=cancel,
        decisions=decisions,
        client=client,
    )
    try:
        done = await run.open(prompt, resume, history, instructions)
        while done is None:
            if not run.pending:  # the model's turn
                request = await run.hooked_request() if agent.hooks else run.request()
                chain = run.model_chain
                if chain is not None:  # through the agent's extensions
                    result: list[ChatResponse] = []
                    chained = _through_chain(run, chain, request, result)
                    async with aclosing(chained):
                        async for event in chained:
                            yield event
                    response = result[0]
                else:
                    with run.interrupt as interrupt:  # the cancel token interrupts the call
                        if not stream:
                            response = await agent.model.generate(request)
                        else:
                            # Forwarded here rather than through a generator of Run's: a second
                            # generator level cost a fifth of a stream's events per second.
                            accumulator = StreamAccumulator()
                            add = accumulator.add
                            async for event in agent.model.generate_stream(request):
                                add(event)
                                if isinstance(event, _FORWARDED):
                                    interrupt.armed = False  # the consumer's awaits aren't ours
                                    yield event
                                    interrupt.armed = True
                                    if run.cancel.cancelled:  # by the consumer, between events
                                        raise RunCancelled(run.cancel.reason)
                            response = accumulator.response()
                    cost = run.count(response)
                    if stream:
                        yield UsageEvent(usage=response.usage, cost=cost)
                done = await run.take(response)
                if done is not None or not run.pending:
                    continue
            events, done = await run.tool_turn()  # the tools' turn
            for event in events:
                yield event
        yield done
    except BaseException as exc:  # cancelled, interrupted or abandoned runs end their hooks too
        await run.failed(exc)
        raise
    finally:
        run.close()


async def _through_chain(
    run: Run, chain: CallModel, request: ChatRequest, result: list[ChatResponse]
) -> AsyncGenerator[StreamEvent, None]:
    """Call the model through the agent's extensions; the response lands in ``result``.

    A streamed call yields the model's events as the chain relays them; a plain call yields none.
    (Only runs with extensions take this path, so its generator level costs the bare run nothing.)
    """
    with run.interrupt as interrupt:
        if not run.stream:
            result.append(await chain(request))
            return
        run.relay = True
        chained = stream_chain(chain, request, interrupt, result)
        async with aclosing(chained):
            async for event in chained:
                yield event
