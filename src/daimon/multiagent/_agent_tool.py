"""AgentTool: an agent offered to another agent as a tool."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from daimon.core import (
    AgentResponse,
    ApprovalRequiredError,
    BuilderError,
    Done,
    Promptable,
    RunCancelled,
    ToolOutput,
)
from daimon.cost import SpendRecord
from daimon.tools import RunContext

__all__ = ("AgentTool", "SessionId", "run_sub_agent", "sub_agent_failed")

SessionId = str | Callable[[RunContext[Any]], str | None] | None
"""A sub-agent's session: none (each call is a fresh conversation), a fixed id, or a function of
the calling run's context (``lambda ctx: f"{ctx.session_id}:research"``)."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_ERROR_CHARS = 2000

TASK_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "description": (
                "The task, with everything needed to do it: the agent does not see this "
                "conversation."
            ),
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


class AgentTool:
    """An agent as a tool: calling the tool prompts the agent and returns its answer.

    Any :class:`~daimon.core.protocols.Promptable` can be the sub-agent: a Supervisor, a
    HandoffNetwork or a flow (a graph, DAG or workflow, given the task as its prompt) as well as
    an Agent.

    The sub-agent runs as its own conversation: it sees only the task (no history of the calling
    run, and no session unless ``session_id`` asks for one). It gets the caller's ``deps`` and
    cancel token, so cancelling the caller stops it at once. It spends from the caller's budget:
    a model call that could take the caller past its ``max_budget`` is refused (the calling
    model reads that as the sub-agent's failure). Its usage and cost are added to the caller's
    (through :meth:`RunContext.report_usage`) however it ends, its own sub-agents' included.

    A sub-agent that fails gives the calling model an error result naming it and the error; the
    calling run goes on. A sub-agent cannot pause for approvals: if one of its tools needs
    approval (or an agent of a team or flow it is), the call returns an error result saying so
    and those calls do not run (give the approval-gated tools to the calling agent instead).

    Args:
        agent: The agent (or any promptable) to run.
        name: The tool's name, as the calling model sees it.
        description: What the agent does, for the calling model.
        input_schema: JSON Schema of the tool's arguments; by default ``{"task": string}``, and the
            task is the sub-agent's prompt. With a schema of your own, the prompt is the arguments
            as a JSON object.
        session_id: Keep the sub-agent's conversation across calls in its memory: a fixed session
            id, or a function of the calling run's context returning one (or ``None``).

    Raises:
        BuilderError: The name is not a valid tool name, or an argument has the wrong type.

    Example::

        researcher = Agent(model, name="researcher", tools=[search])
        writer = Agent(
            model,
            tools=[AgentTool(researcher, name="research", description="Finds sources on a topic")],
        )
    """

    __slots__ = (
        "_custom_schema",
        "_session_id",
        "agent",
        "description",
        "name",
        "parameters_schema",
    )

    agent: Promptable
    """The sub-agent."""
    name: str
    """The tool's name."""
    description: str
    """What the tool does, for the model."""
    parameters_schema: Mapping[str, Any]
    """JSON Schema of the tool's arguments."""

    def __init__(
        self,
        agent: Promptable,
        *,
        name: str,
        description: str,
        input_schema: Mapping[str, Any] | None = None,
        session_id: SessionId = None,
    ) -> None:
        if isinstance(agent, type) or not isinstance(agent, Promptable):
            raise BuilderError(
                f"AgentTool needs an Agent (or anything promptable), not {type(agent).__name__}"
            )
        if not isinstance(name, str) or _TOOL_NAME.fullmatch(name) is None:
            raise BuilderError(
                f"AgentTool name {name!r} is not a valid tool name: use 1 to 64 letters, "
                "digits, '_' or '-'"
            )
        if not isinstance(description, str) or not description.strip():
            raise BuilderError(f"AgentTool {name!r} needs a description, for the calling model")
        if input_schema is not None and not (
            isinstance(input_schema, Mapping) and input_schema.get("type") == "object"
        ):
            raise BuilderError(f"AgentTool {name!r}: input_schema must be a JSON Schema object")
        if session_id is not None and not (isinstance(session_id, str) or callable(session_id)):
            raise BuilderError(
                f"AgentTool {name!r}: session_id must be a string or a function of the context"
            )
        self.agent = agent
        self.name = name
        self.description = description
        self.parameters_schema = input_schema if input_schema is not None else TASK_SCHEMA
        self._custom_schema = input_schema is not None
        self._session_id = session_id

    def __repr__(self) -> str:
        return f"AgentTool(name={self.name!r}, agent={self.agent!r})"

    def delegation(self, arguments: object) -> tuple[Promptable, str, str] | None:
        """The sub-agent, its label and the prompt a call with ``arguments`` runs.

        ``None`` unless the call is a plain delegation another runner can take over (a durable
        engine running the sub-agent as a run of its own): the default ``{"task": string}``
        schema with valid arguments, and no session.
        """
        if self._custom_schema or self._session_id is not None:
            return None
        if not isinstance(arguments, dict) or set(arguments) != {"task"}:
            return None
        task = arguments["task"]
        return (self.agent, self.name, task) if isinstance(task, str) else None

    async def execute(self, arguments: dict[str, Any], ctx: RunContext[Any]) -> ToolOutput:
        """Prompt the sub-agent with the task; its answer (or what went wrong) is the result."""
        if self._custom_schema:
            prompt = json.dumps(arguments, ensure_ascii=False)
        else:
            prompt = str(arguments.get("task", ""))
        session = self._session_id
        if callable(session):
            session = session(ctx)
        return await run_sub_agent(self.agent, self.name, prompt, ctx, session_id=session)


async def run_sub_agent(
    agent: Promptable,
    label: str,
    prompt: str,
    ctx: RunContext[Any],
    *,
    session_id: str | None = None,
) -> ToolOutput:
    """Run ``agent`` on ``prompt`` for a tool call: its answer, or an error result naming ``label``.

    The sub-agent spends from the caller's budget (see :class:`~daimon.cost.Budget`): it is
    refused a model call that could take the caller past its ``max_budget``. Its usage and cost
    go to ``ctx.report_usage`` however it ends (finished, failed or cancelled), its own
    sub-agents' included. Cancellation of the caller's token propagates: as
    :class:`asyncio.CancelledError` when this task is itself being cancelled (the caller's loop
    turns that into one :class:`RunCancelled`, even for parallel calls), else as
    :class:`RunCancelled`.
    """
    response: AgentResponse | None = None
    record, collecting = SpendRecord.collect()
    try:
        async for event in agent.prompt_stream(
            prompt, session_id=session_id, deps=ctx.deps, cancel=ctx.cancel
        ):
            if type(event) is Done:
                response = event.response
        if response is not None:
            response.require_finished(f"agent {label!r}, delegated to,")
    except ApprovalRequiredError as exc:  # it paused (or a team or flow whose agent did)
        return ToolOutput.error(f"Error: {exc}")
    except RunCancelled as exc:
        if not ctx.cancel.cancelled:  # raised by a tool of its own accord: just a failure
            return _failed(label, exc)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # Someone (the caller's run, or the task group running parallel calls) is cancelling
            # this task: end as cancelled, and let them turn it into RunCancelled once.
            raise asyncio.CancelledError(exc.reason) from exc
        raise
    except Exception as exc:  # the calling model reads what went wrong and carries on
        return _failed(label, exc)
    finally:
        SpendRecord.done(collecting)
        # The run's totals, its sub-agents' included, however it ended; no await comes between
        # its end and this report, so the caller's budget never loses sight of the spending.
        ctx.report_usage(record.usage, record.cost)
    if response is None:  # pragma: no cover - an agent stream always ends with Done or raises
        return ToolOutput.error(f"Error: agent {label!r} ended without an answer")
    return ToolOutput(content=response.text)


def _failed(label: str, exc: Exception) -> ToolOutput:
    return sub_agent_failed(label, type(exc).__name__, str(exc))


def sub_agent_failed(label: str, kind: str, message: str) -> ToolOutput:
    """What the calling model reads when sub-agent ``label`` failed with a ``kind`` error."""
    if len(message) > _MAX_ERROR_CHARS:
        message = message[:_MAX_ERROR_CHARS] + "... (truncated)"
    what = f"{kind}: {message}" if message else kind
    return ToolOutput.error(f"Error: agent {label!r} failed: {what}")
