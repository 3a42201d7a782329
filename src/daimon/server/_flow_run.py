"""One flow's native run, without any web library: what a replica, or a worker, runs.

A served flow's ``/prompt/stream`` is its node events as they happen (``node_started`` and the
rest, ``node_event`` for each event of an agent a node prompts), then ``done``, whose data holds
the ``POST /prompt`` answer (:func:`flow_body`). A :class:`FlowJob` makes those frames. A replica
without a broker runs it in its own process; with a broker (``daimon serve --broker``)
:meth:`FlowJob.spec` travels in a task's metadata, :func:`job_from_spec` makes the job again on
the worker, and the worker writes the frames to the run's log, which the replica reads (to its
end, for ``POST /prompt``).

A flow's nodes prompt their agents with fresh run ids and no effect ledger, so running a flow
again could run their tools twice. So a flow's run that fails is not tried again, and a later
attempt of a flow's task (its worker was lost) never runs the flow: unless the log holds the
run's end already, the run fails with :class:`~daimon.server._failures.RunLost`, whose ``error``
frame ends the stream saying so (the client sends the prompt again).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal

from daimon._run_logs import error_frame, log_ended, lost_run, sse_frame
from daimon.core.cancel import CancelToken
from daimon.core.errors import BuilderError, SerializationError
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse
from daimon.core.state_store import StateStore
from daimon.orchestration import Dag, FlowAnswer, Graph, PromptableFlow, Workflow
from daimon.server._encode import dump_json, jsonable, node_event_body, usage_body
from daimon.server._failures import describe_failure

__all__ = (
    "FLOW_KIND",
    "FlowJob",
    "as_flow",
    "flow_body",
    "job_from_spec",
    "run_error_frame",
)

FLOW_KIND = "flow"
"""The kind of run (:data:`daimon._run_logs.JOB_KEY`) of a flow's native stream."""
_FORMAT = 1
"""The format of runs sent to workers."""


def flow_body(name: str, answer: FlowAnswer) -> dict[str, Any]:
    """The ``POST /prompt`` answer of a flow's run (flows keep no sessions)."""
    return {
        "text": answer.text,
        "agent": name,
        "run_id": answer.run_id,
        "session_id": None,
        "iterations": answer.usage.requests,
        "usage": usage_body(answer.usage),
        "cost": answer.cost,
        "output": None if answer.output is None else jsonable(answer.output),
        "pending_approvals": [],
    }


def run_error_frame(exc: BaseException) -> bytes:
    """The ``error`` frame that ends a native stream whose run raised ``exc``."""
    _, kind, message = describe_failure(exc)
    return error_frame(kind, message)


class FlowJob:
    """A flow's run on one prompt, as native stream frames (see the module's doc).

    Args:
        flow: The flow.
        name: The name it is served by.
        text: The prompt.
    """

    __slots__ = ("_flow", "_left", "name", "response", "text")

    keeps_pauses = False
    retries = False
    """A failed attempt is not tried again: the flow's nodes would run again."""

    def __init__(self, flow: PromptableFlow, name: str, text: str) -> None:
        self._flow = flow
        self.name = name
        self.text = text
        self._left: Literal["all", "nothing", "lost"] = "all"
        self.response: AgentResponse | None = None

    async def frames(self, token: CancelToken) -> AsyncGenerator[bytes, None]:
        """The node events as they happen, then ``done``.

        Raises:
            RunLost: A later attempt of a run whose stream had not ended.
        """
        if self._left == "lost":  # the run fails for good: its stream ends with this error
            raise lost_run(self.name)
        if self._left == "nothing":
            self.response = AgentResponse(text="")
            return
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()

        def observe(event: Any) -> None:
            queue.put_nowait(sse_frame(dump_json(node_event_body(event)), event.kind))

        run = asyncio.create_task(
            self._flow.run(self.text, cancel=token, on_node=observe, on_agent_event=observe)
        )
        run.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (frame := await queue.get()) is not None:
                yield frame
            answer = run.result()
        finally:
            if not run.done():  # the reader left: stop the run and wait for it
                token.cancel("the stream ended")
                run.cancel()
                await asyncio.wait({run})
            if not run.cancelled():
                run.exception()  # retrieved: a run nobody reads is no error to log
        self.response = AgentResponse(
            text=answer.text,
            run_id=answer.run_id,
            iterations=answer.usage.requests,
            usage=answer.usage,
            cost=answer.cost,
        )
        body = {"kind": "done", "response": flow_body(self.name, answer)}
        yield sse_frame(dump_json(body), "done")

    def resume(self, logged: Sequence[str]) -> None:
        """A later attempt runs nothing: its stream ends, if the lost one had not ended it."""
        self._left = "nothing" if log_ended(logged) else "lost"

    def on_error(self, exc: BaseException) -> bytes:
        """The frame that ends a run that raised ``exc``."""
        return run_error_frame(exc)

    async def end(self, exc: BaseException, reason: str | None) -> None:
        """Nothing to record: a flow's run keeps nothing."""

    def spec(self) -> dict[str, Any]:
        """What a worker needs to run this again (JSON): see :func:`job_from_spec`."""
        return {"kind": FLOW_KIND, "format": _FORMAT, "name": self.name, "input": self.text}


def as_flow(value: Promptable, name: str | None = None) -> PromptableFlow | None:
    """``value`` as a promptable flow, when it is one.

    A bare graph, DAG or workflow gets the defaults (and ``name``, when given).
    """
    if isinstance(value, PromptableFlow):
        return value
    if isinstance(value, (Graph, Dag, Workflow)):
        return PromptableFlow(value, name=name)
    return None


def job_from_spec(agent: Promptable, spec: Mapping[str, Any], store: StateStore) -> FlowJob:
    """The run a :meth:`FlowJob.spec` describes, of the flow ``agent`` (``store`` is not used).

    Raises:
        SerializationError: The spec is of another format.
        BuilderError: ``agent`` is not a flow.
    """
    if spec.get("format") != _FORMAT:
        raise SerializationError(
            f"a flow run of format {spec.get('format')!r}; this daimon reads {_FORMAT}"
        )
    name = str(spec["name"])
    flow = as_flow(agent)
    if flow is None:
        raise BuilderError(
            f"the server runs {name!r} as a flow, but this worker's {name!r} is a "
            f"{type(agent).__name__}: serve and work the same promptables"
        )
    return FlowJob(flow, name, str(spec["input"]))
