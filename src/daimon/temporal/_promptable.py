"""A served agent whose runs are Temporal workflows, as a promptable.

Any front end (``daimon serve``, MCP, A2A, ``AgentTool``) takes it as it takes an agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from temporalio.client import Client

from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError
from daimon.core.events import StreamEvent
from daimon.core.messages import Message
from daimon.core.results import AgentResponse, ApprovalDecision
from daimon.temporal._client import TemporalRun, start_run
from daimon.temporal._types import ActivityOptions
from daimon.temporal._worker import connect

__all__ = ("TemporalAgent",)


class TemporalAgent:
    """The agent ``name`` served by Temporal workers on ``task_queue``, as a promptable.

    ``prompt`` starts a workflow (its id is ``run_id`` when given) and returns the answer, or
    a paused response when the run waits for approval; ``resume`` decides the pending calls
    by the run's id and waits again. Serve it with ``daimon.server.create_app`` like an agent.
    ``client`` may be a Temporal address (``host:port``): it connects on first use, in the
    event loop that uses it (what ``daimon temporal serve`` does). With ``tokens``,
    ``prompt_stream`` shows the model calls' text as it comes (workers need ``stream_tokens``).
    """

    def __init__(
        self,
        client: Client | str,
        name: str,
        *,
        task_queue: str,
        options: ActivityOptions | None = None,
        poll: float = 0.1,
        tokens: bool = False,
    ) -> None:
        self._client: Client | None = client if isinstance(client, Client) else None
        self._address: str | None = client if isinstance(client, str) else None
        self._connecting: asyncio.Lock | None = None
        self._name = name
        self.task_queue = task_queue
        self.options = options
        self.poll = poll
        self.tokens = tokens

    async def client(self) -> Client:
        """The Temporal client (connected on first use when given an address)."""
        if self._client is None:
            if self._connecting is None:
                self._connecting = asyncio.Lock()
            async with self._connecting:
                if self._client is None:
                    assert self._address is not None
                    self._client = await connect(self._address)
        assert self._client is not None
        return self._client

    @property
    def name(self) -> str:
        """The agent's name on the workers."""
        return self._name

    async def prompt(
        self,
        input: str | Message,
        /,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse[Any]:
        """Start a run and wait for its answer or its first pause."""
        run = await self._start(input, session_id, history, instructions, run_id, deps)
        return await self._settled(run, cancel)

    async def prompt_stream(
        self,
        input: str | Message,
        /,
        *,
        session_id: str | None = None,
        history: Sequence[Message] | None = None,
        instructions: str | None = None,
        run_id: str | None = None,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Start a run and stream its events (see :meth:`TemporalRun.stream`)."""
        run = await self._start(input, session_id, history, instructions, run_id, deps)
        async for event in run.stream(poll=self.poll, tokens=self.tokens):
            yield event

    async def resume(
        self,
        paused: AgentResponse[Any] | str,
        approvals: Mapping[str, ApprovalDecision | bool] | None = None,
        *,
        deps: Any = None,
        cancel: CancelToken | None = None,
    ) -> AgentResponse[Any]:
        """Decide the paused run's calls (by its run id, the workflow id) and wait again."""
        run_id = paused if isinstance(paused, str) else paused.run_id
        run = TemporalRun.get(await self.client(), run_id)
        for approval_id, decision in (approvals or {}).items():
            if isinstance(decision, bool):
                decision = ApprovalDecision(approved=decision)
            await run.decide(approval_id, approved=decision.approved, reason=decision.reason)
        return await self._settled(run, cancel)

    async def _start(
        self,
        input: str | Message,
        session_id: str | None,
        history: Sequence[Message] | None,
        instructions: str | None,
        run_id: str | None,
        deps: Any,
    ) -> TemporalRun:
        if session_id is not None:
            raise BuilderError("a Temporal run keeps no session: give history= instead")
        prompt = input if isinstance(input, str) else input.text
        return await start_run(
            await self.client(),
            self._name,
            prompt,
            task_queue=self.task_queue,
            workflow_id=run_id,
            deps=deps,
            history=history or (),
            instructions=instructions,
            options=self.options,
        )

    async def _settled(self, run: TemporalRun, cancel: CancelToken | None) -> AgentResponse[Any]:
        """The run's answer, or a paused response once it waits for approvals."""
        result = asyncio.ensure_future(run.result())
        waiting = asyncio.ensure_future(run.wait_for_approvals(self.poll))
        detach = cancel.on_cancel(lambda: asyncio.ensure_future(run.cancel())) if cancel else None
        try:
            await asyncio.wait({result, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not result.done() and waiting.done() and waiting.result():
                status = await run.status()
                return AgentResponse(
                    text="",
                    messages=status.messages,
                    iterations=status.iteration,
                    usage=status.usage,
                    cost=status.cost,
                    run_id=run.workflow_id,
                    pending_approvals=status.pending_approvals,
                )
            return await result
        finally:
            for task in (result, waiting):
                task.cancel()
            await asyncio.gather(result, waiting, return_exceptions=True)
            if detach is not None:
                detach()
