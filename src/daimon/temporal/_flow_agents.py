"""A flow's agents as workflows of their own, started by the activity that runs the flow.

A flow (a graph, DAG or workflow) runs in one activity: its nodes are functions of the user's,
which Temporal cannot replay. The agents its nodes prompt (``ctx.prompt``) need not share that
fate: an agent the worker serves runs as a workflow of its own, its model and tool calls
activities, under an id made of the flow's workflow id, the agent and the prompt. When the
flow's activity is retried (its worker died), the flow runs again and each prompt finds its
workflow by that id: finished, its recorded answer; still running, it is awaited; nothing is
called twice.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from daimon.core.cancel import CancelToken
from daimon.core.errors import DaimonError
from daimon.core.protocols import Promptable
from daimon.core.results import AgentResponse
from daimon.temporal._registry import served_name
from daimon.temporal._types import WORKFLOW_NAME, ActivityOptions, RunRequest

__all__ = ("AgentWorkflows", "FlowAgentError")


class FlowAgentError(DaimonError):
    """A flow's agent, run as a workflow, failed (the flow's node fails with it)."""


class AgentWorkflows:
    """An ``agent_caller`` for one run of a flow: each served agent prompted, a workflow.

    Ids are ``<flow workflow id>-<agent>-<prompt digest>-<n>``, ``n`` counting the same prompt
    to the same agent in this run of the flow: stable when the flow runs again, whatever
    order its concurrent nodes prompt in.
    """

    def __init__(self, client: Client, parent: str, task_queue: str, options: ActivityOptions):
        self._client = client
        self._parent = parent
        self._task_queue = task_queue
        self._options = options
        self._seen: dict[tuple[str, str], int] = {}

    @classmethod
    def for_activity(cls, options: ActivityOptions) -> AgentWorkflows:
        """The caller for the flow the current activity runs."""
        info = activity.info()
        return cls(activity.client(), info.workflow_id or "", info.task_queue, options)

    async def __call__(
        self, agent: Promptable, text: str, cancel: CancelToken | None
    ) -> AgentResponse[Any] | None:
        """Run ``agent`` on ``text`` as a workflow; ``None`` when this worker does not serve it."""
        name = served_name(self._task_queue, agent)
        if name is None:
            return None
        handle = await self._started(name, text)
        try:
            response: AgentResponse[Any] = await handle.result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            what = f"{cause.type}: {cause.message}" if isinstance(cause, ApplicationError) else exc
            raise FlowAgentError(
                f"agent {name!r} (workflow {handle.id!r}) failed: {what}"
            ) from None
        except asyncio.CancelledError:  # the flow's activity was cancelled: so is the agent's run
            await asyncio.shield(handle.cancel())
            raise
        return response

    async def _started(self, name: str, text: str) -> WorkflowHandle[Any, Any]:
        """The agent's workflow for this prompt: started now, or found from an earlier attempt."""
        key = (name, text)
        count = self._seen[key] = self._seen.get(key, 0) + 1
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        workflow_id = f"{self._parent}-{name}-{digest}-{count}"
        request = RunRequest(agent=name, prompt=text, options=self._options, pausable=False)
        try:
            return await self._client.start_workflow(
                WORKFLOW_NAME,
                request,
                id=workflow_id,
                task_queue=self._task_queue,
                result_type=AgentResponse,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
        except WorkflowAlreadyStartedError:  # it ran to its end in an earlier attempt
            return self._client.get_workflow_handle(workflow_id, result_type=AgentResponse)
