"""daimon: a Python framework for production AI agents.

Application code imports from here; plugin authors implement :mod:`daimon.core`
(the contract) and may use :mod:`daimon.kit` (the backend kit). The namespace is lazy:
``import daimon`` loads nothing but this file, and each name loads its module on first use, so
importing daimon stays cheap and never pulls in an optional library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daimon.core.lazy import lazy_exports

if TYPE_CHECKING:
    from daimon.agent import (
        Agent,
    )
    from daimon.core.cancel import (
        CancelToken,
    )
    from daimon.core.chat import (
        ChatRequest,
        ChatResponse,
        ResponseFormat,
        StopReason,
        Usage,
    )
    from daimon.core.errors import (
        AgentRunError,
        ApprovalRequiredError,
        BudgetExceededError,
        BuilderError,
        CheckpointConflictError,
        CheckpointCorruptError,
        DaimonError,
        DuplicateToolError,
        ExtensionError,
        GuardrailBlockedError,
        InvalidIdError,
        MaxIterationsError,
        MCPError,
        MissingDependencyError,
        ModelError,
        OrchestrationError,
        OutputValidationError,
        PromptTemplateError,
        RepeatedToolCallError,
        RunCancelled,
        SchemaValidationError,
        SerializationError,
        SkillError,
        StreamClosedError,
        TimeoutError,  # noqa: A004 - daimon.TimeoutError is also a builtins.TimeoutError
        ToolError,
        ToolExecutionError,
        ToolNotFoundError,
    )
    from daimon.core.events import (
        Done,
        ErrorEvent,
        StreamEvent,
        TextDelta,
        ToolCallDelta,
        ToolCallEnd,
        ToolCallStart,
        ToolResult,
        UsageEvent,
    )
    from daimon.core.messages import (
        ImagePart,
        Message,
        Role,
        TextPart,
        ToolCall,
    )
    from daimon.core.results import (
        AgentResponse,
        ApprovalDecision,
        ApprovalRequest,
    )
    from daimon.core.tools import (
        ToolOutput,
        ToolSpec,
    )
    from daimon.cost import (
        CostModel,
        CostTracker,
        ModelPrice,
        PriceTable,
    )
    from daimon.extensions import CallModel, CallTool, Extension
    from daimon.guardrails import (
        GuardrailResult,
        InputGuardrail,
        OutputGuardrail,
    )
    from daimon.hooks import (
        AgentHook,
    )
    from daimon.middleware import (
        Middleware,
        ShortCircuit,
    )
    from daimon.multiagent import AgentTool, HandoffNetwork, Supervisor
    from daimon.orchestration import Chain, DagBuilder, GraphBuilder, WorkflowBuilder
    from daimon.prompt import (
        PromptTemplate,
    )
    from daimon.skills import Skill, Skills
    from daimon.state import (
        RunState,
    )
    from daimon.tools import (
        EndRun,
        ModelRetry,
        RunContext,
        Tool,
        ToolRetryPolicy,
        tool,
    )

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Agent": "daimon.agent",
    "AgentHook": "daimon.hooks",
    "AgentResponse": "daimon.core.results",
    "AgentRunError": "daimon.core.errors",
    "ApprovalRequiredError": "daimon.core.errors",
    "AgentTool": "daimon.multiagent",
    "ApprovalDecision": "daimon.core.results",
    "ApprovalRequest": "daimon.core.results",
    "BudgetExceededError": "daimon.core.errors",
    "BuilderError": "daimon.core.errors",
    "CallModel": "daimon.extensions",
    "CallTool": "daimon.extensions",
    "CancelToken": "daimon.core.cancel",
    "Chain": "daimon.orchestration",
    "ChatRequest": "daimon.core.chat",
    "ChatResponse": "daimon.core.chat",
    "CheckpointConflictError": "daimon.core.errors",
    "CheckpointCorruptError": "daimon.core.errors",
    "CostModel": "daimon.cost",
    "CostTracker": "daimon.cost",
    "DagBuilder": "daimon.orchestration",
    "DaimonError": "daimon.core.errors",
    "Done": "daimon.core.events",
    "DuplicateToolError": "daimon.core.errors",
    "Extension": "daimon.extensions",
    "ExtensionError": "daimon.core.errors",
    "EndRun": "daimon.tools",
    "ErrorEvent": "daimon.core.events",
    "GraphBuilder": "daimon.orchestration",
    "GuardrailBlockedError": "daimon.core.errors",
    "InvalidIdError": "daimon.core.errors",
    "GuardrailResult": "daimon.guardrails",
    "HandoffNetwork": "daimon.multiagent",
    "ImagePart": "daimon.core.messages",
    "InputGuardrail": "daimon.guardrails",
    "MCPError": "daimon.core.errors",
    "MaxIterationsError": "daimon.core.errors",
    "Message": "daimon.core.messages",
    "Middleware": "daimon.middleware",
    "MissingDependencyError": "daimon.core.errors",
    "ModelError": "daimon.core.errors",
    "ModelPrice": "daimon.cost",
    "ModelRetry": "daimon.tools",
    "OrchestrationError": "daimon.core.errors",
    "OutputGuardrail": "daimon.guardrails",
    "OutputValidationError": "daimon.core.errors",
    "PriceTable": "daimon.cost",
    "PromptTemplate": "daimon.prompt",
    "PromptTemplateError": "daimon.core.errors",
    "RepeatedToolCallError": "daimon.core.errors",
    "ResponseFormat": "daimon.core.chat",
    "Role": "daimon.core.messages",
    "RunCancelled": "daimon.core.errors",
    "RunContext": "daimon.tools",
    "RunState": "daimon.state",
    "SchemaValidationError": "daimon.core.errors",
    "SerializationError": "daimon.core.errors",
    "ShortCircuit": "daimon.middleware",
    "Skill": "daimon.skills",
    "SkillError": "daimon.core.errors",
    "Skills": "daimon.skills",
    "StopReason": "daimon.core.chat",
    "StreamClosedError": "daimon.core.errors",
    "StreamEvent": "daimon.core.events",
    "Supervisor": "daimon.multiagent",
    "TextDelta": "daimon.core.events",
    "TextPart": "daimon.core.messages",
    "TimeoutError": "daimon.core.errors",
    "Tool": "daimon.tools",
    "ToolCall": "daimon.core.messages",
    "ToolCallDelta": "daimon.core.events",
    "ToolCallEnd": "daimon.core.events",
    "ToolCallStart": "daimon.core.events",
    "ToolError": "daimon.core.errors",
    "ToolExecutionError": "daimon.core.errors",
    "ToolNotFoundError": "daimon.core.errors",
    "ToolOutput": "daimon.core.tools",
    "ToolResult": "daimon.core.events",
    "ToolRetryPolicy": "daimon.tools",
    "ToolSpec": "daimon.core.tools",
    "Usage": "daimon.core.chat",
    "UsageEvent": "daimon.core.events",
    "WorkflowBuilder": "daimon.orchestration",
    "tool": "daimon.tools",
}

__all__ = (
    "Agent",
    "AgentHook",
    "AgentResponse",
    "AgentRunError",
    "AgentTool",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalRequiredError",
    "BudgetExceededError",
    "BuilderError",
    "CallModel",
    "CallTool",
    "CancelToken",
    "Chain",
    "ChatRequest",
    "ChatResponse",
    "CheckpointConflictError",
    "CheckpointCorruptError",
    "CostModel",
    "CostTracker",
    "DagBuilder",
    "DaimonError",
    "Done",
    "DuplicateToolError",
    "EndRun",
    "ErrorEvent",
    "Extension",
    "ExtensionError",
    "GraphBuilder",
    "GuardrailBlockedError",
    "GuardrailResult",
    "HandoffNetwork",
    "ImagePart",
    "InputGuardrail",
    "InvalidIdError",
    "MCPError",
    "MaxIterationsError",
    "Message",
    "Middleware",
    "MissingDependencyError",
    "ModelError",
    "ModelPrice",
    "ModelRetry",
    "OrchestrationError",
    "OutputGuardrail",
    "OutputValidationError",
    "PriceTable",
    "PromptTemplate",
    "PromptTemplateError",
    "RepeatedToolCallError",
    "ResponseFormat",
    "Role",
    "RunCancelled",
    "RunContext",
    "RunState",
    "SchemaValidationError",
    "SerializationError",
    "ShortCircuit",
    "Skill",
    "SkillError",
    "Skills",
    "StopReason",
    "StreamClosedError",
    "StreamEvent",
    "Supervisor",
    "TextDelta",
    "TextPart",
    "TimeoutError",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolError",
    "ToolExecutionError",
    "ToolNotFoundError",
    "ToolOutput",
    "ToolResult",
    "ToolRetryPolicy",
    "ToolSpec",
    "Usage",
    "UsageEvent",
    "WorkflowBuilder",
    "__version__",
    "tool",
)


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
