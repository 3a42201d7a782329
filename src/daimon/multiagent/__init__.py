"""Multi-agent patterns: agents as tools, supervisors, and handoff networks.

* :class:`AgentTool`: an agent offered to another agent as a tool.
* :class:`Supervisor`: an agent that routes tasks to named sub-agents through a ``delegate`` tool.
* :class:`HandoffNetwork`: agents that hand the conversation to one another, each seeing the
  conversation so far through a history filter (:func:`text_only`, :func:`keep_all`,
  :func:`last_n`, or your own).

In every pattern the sub-agents get the caller's cancel token and deps, and their usage and cost
add up into the result the caller gets. With :class:`AgentTool` and :class:`Supervisor` they also
spend from the caller's ``max_budget`` while they run: a sub-agent is refused a call that could
take its caller past it.
"""

from daimon.multiagent._agent_tool import AgentTool, SessionId
from daimon.multiagent._handoff import (
    HANDOFF_PREFIX,
    Handoff,
    HandoffNetwork,
    HandoffResult,
    MaxHandoffsError,
)
from daimon.multiagent._history import HistoryFilter, keep_all, last_n, text_only
from daimon.multiagent._supervisor import DELEGATE_TOOL, Supervisor

__all__ = (
    "AgentTool",
    "DELEGATE_TOOL",
    "HANDOFF_PREFIX",
    "Handoff",
    "HandoffNetwork",
    "HandoffResult",
    "HistoryFilter",
    "MaxHandoffsError",
    "SessionId",
    "Supervisor",
    "keep_all",
    "last_n",
    "text_only",
)
