"""The one ReAct loop: an async generator of stream events that every entry point drains."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from daimon.agent._run import Run
from daimon.core.cancel import CancelToken
from daimon.core.checkpoints import CheckpointState
from daimon.core.events import (
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

__all__ = ("run_events",)

_FORWARDED = (TextDelta, ToolCallStart, ToolCallDelta, ToolCallEnd)


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
) -> AsyncIterator[StreamEvent]:
    """Run ``agent`` on ``prompt``, yielding events; the last is ``Done`` with the response.

    With ``stream`` the model streams and every event is yielded. Without it the model is called
    with ``generate`` and only the final ``Done`` is yielded: ``prompt()`` and ``resume()`` read
    nothing else, so building usage and tool-result events for them would be wasted work.

    A run continues instead of starting when ``resume`` holds a paused run's state, or when the
    agent has a checkpoint store holding ``run_id``; ``decisions`` answer pending approvals.

    The steps are the seed's: open the run (guardrails, system prompt, history, the prompt); then
    in turn the model's turn (checks, budget, hooks, middleware, the call, usage) and, while the
    model asks for tools, the tools' turn (approvals, the loop guard, the calls, their results);
    the run ends with the final answer, a pause for approvals or a tool's ``EndRun``.
    """
    run = Run(
        agent,
        stream=stream,
        session_id=session_id,
        run_id=run_id,
        deps=deps,
        cancel=cancel,
        decisions=decisions,
    )
    try:
        done = await run.open(prompt, resume, history, instructions)
        while done is None:
            if not run.pending:  # the model's turn
                request, response = await run.request()
                if response is None:
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
