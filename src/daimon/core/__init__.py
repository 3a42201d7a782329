"""daimon.core: the plugin boundary.

Shared types, protocols and errors. Standard library only: a provider, store, broker or memory
backend needs nothing else of daimon.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from daimon.core.checkpoints import (
        CheckpointState,
    )
    from daimon.core.documents import (
        Document,
        ScoredDocument,
    )
    from daimon.core.errors import (
        AgentRunError,
        BudgetExceededError,
        BuilderError,
        CheckpointConflictError,
        CheckpointCorruptError,
        DaimonError,
        DimensionMismatchError,
        DuplicateToolError,
        EmptyDocumentError,
        FilterError,
        GuardrailBlockedError,
        KnowledgeBaseError,
        MaxIterationsError,
        MCPError,
        MissingDependencyError,
        ModelError,
        OrchestrationError,
        OutputValidationError,
        PromptTemplateError,
        RunCancelled,
        SchemaValidationError,
        SerializationError,
        StreamClosedError,
        TimeoutError,  # noqa: A004
        ToolError,
        ToolExecutionError,
        ToolNotFoundError,
        VectorStoreError,
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
    from daimon.core.filters import (
        Condition,
        FilterOp,
        Scalar,
        matches,
        parse_filter,
    )
    from daimon.core.messages import (
        Content,
        ContentPart,
        ImagePart,
        Message,
        Role,
        TextPart,
        ToolCall,
    )
    from daimon.core.protocols import (
        Checkpoint,
        EmbeddingModel,
        KnowledgeBase,
        Memory,
        Model,
        Retriever,
        TaskBroker,
        TokenCounter,
        VectorStore,
    )
    from daimon.core.results import (
        AgentResponse,
        ApprovalDecision,
        ApprovalRequest,
    )
    from daimon.core.tasks import (
        AgentTask,
        TaskResult,
        TaskState,
        TaskStatus,
    )
    from daimon.core.tokens import (
        CharacterTokenCounter,
        message_tokens,
    )
    from daimon.core.tools import (
        ToolOutput,
        ToolSpec,
    )

_LAZY: dict[str, str] = {
    "AgentResponse": "daimon.core.results",
    "AgentRunError": "daimon.core.errors",
    "AgentTask": "daimon.core.tasks",
    "ApprovalDecision": "daimon.core.results",
    "ApprovalRequest": "daimon.core.results",
    "BudgetExceededError": "daimon.core.errors",
    "BuilderError": "daimon.core.errors",
    "CancelToken": "daimon.core.cancel",
    "CharacterTokenCounter": "daimon.core.tokens",
    "ChatRequest": "daimon.core.chat",
    "ChatResponse": "daimon.core.chat",
    "Checkpoint": "daimon.core.protocols",
    "CheckpointConflictError": "daimon.core.errors",
    "CheckpointCorruptError": "daimon.core.errors",
    "CheckpointState": "daimon.core.checkpoints",
    "Condition": "daimon.core.filters",
    "Content": "daimon.core.messages",
    "ContentPart": "daimon.core.messages",
    "DaimonError": "daimon.core.errors",
    "DimensionMismatchError": "daimon.core.errors",
    "Document": "daimon.core.documents",
    "Done": "daimon.core.events",
    "DuplicateToolError": "daimon.core.errors",
    "EmbeddingModel": "daimon.core.protocols",
    "EmptyDocumentError": "daimon.core.errors",
    "ErrorEvent": "daimon.core.events",
    "FilterError": "daimon.core.errors",
    "FilterOp": "daimon.core.filters",
    "GuardrailBlockedError": "daimon.core.errors",
    "ImagePart": "daimon.core.messages",
    "KnowledgeBase": "daimon.core.protocols",
    "KnowledgeBaseError": "daimon.core.errors",
    "MCPError": "daimon.core.errors",
    "MaxIterationsError": "daimon.core.errors",
    "Memory": "daimon.core.protocols",
    "Message": "daimon.core.messages",
    "MissingDependencyError": "daimon.core.errors",
    "Model": "daimon.core.protocols",
    "ModelError": "daimon.core.errors",
    "OrchestrationError": "daimon.core.errors",
    "OutputValidationError": "daimon.core.errors",
    "PromptTemplateError": "daimon.core.errors",
    "ResponseFormat": "daimon.core.chat",
    "Retriever": "daimon.core.protocols",
    "Role": "daimon.core.messages",
    "RunCancelled": "daimon.core.errors",
    "Scalar": "daimon.core.filters",
    "SchemaValidationError": "daimon.core.errors",
    "ScoredDocument": "daimon.core.documents",
    "SerializationError": "daimon.core.errors",
    "StopReason": "daimon.core.chat",
    "StreamClosedError": "daimon.core.errors",
    "StreamEvent": "daimon.core.events",
    "TaskBroker": "daimon.core.protocols",
    "TaskResult": "daimon.core.tasks",
    "TaskState": "daimon.core.tasks",
    "TaskStatus": "daimon.core.tasks",
    "TextDelta": "daimon.core.events",
    "TextPart": "daimon.core.messages",
    "TimeoutError": "daimon.core.errors",
    "TokenCounter": "daimon.core.protocols",
    "ToolCall": "daimon.core.messages",
    "ToolCallDelta": "daimon.core.events",
    "ToolCallEnd": "daimon.core.events",
    "ToolCallStart": "daimon.core.events",
    "ToolError": "daimon.core.errors",
    "ToolExecutionError": "daimon.core.errors",
    "ToolNotFoundError": "daimon.core.errors",
    "ToolOutput": "daimon.core.tools",
    "ToolResult": "daimon.core.events",
    "ToolSpec": "daimon.core.tools",
    "Usage": "daimon.core.chat",
    "UsageEvent": "daimon.core.events",
    "VectorStore": "daimon.core.protocols",
    "VectorStoreError": "daimon.core.errors",
    "matches": "daimon.core.filters",
    "message_tokens": "daimon.core.tokens",
    "parse_filter": "daimon.core.filters",
}
"""Where each public name lives; loaded on first use so plugins pay only for what they use."""

__all__ = (
    "AgentResponse",
    "AgentRunError",
    "AgentTask",
    "ApprovalDecision",
    "ApprovalRequest",
    "BudgetExceededError",
    "BuilderError",
    "CancelToken",
    "CharacterTokenCounter",
    "ChatRequest",
    "ChatResponse",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointCorruptError",
    "CheckpointState",
    "Condition",
    "Content",
    "ContentPart",
    "DaimonError",
    "DimensionMismatchError",
    "Document",
    "Done",
    "DuplicateToolError",
    "EmbeddingModel",
    "EmptyDocumentError",
    "ErrorEvent",
    "FilterError",
    "FilterOp",
    "GuardrailBlockedError",
    "ImagePart",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "MCPError",
    "MaxIterationsError",
    "Memory",
    "Message",
    "MissingDependencyError",
    "Model",
    "ModelError",
    "OrchestrationError",
    "OutputValidationError",
    "PromptTemplateError",
    "ResponseFormat",
    "Retriever",
    "Role",
    "RunCancelled",
    "Scalar",
    "SchemaValidationError",
    "ScoredDocument",
    "SerializationError",
    "StopReason",
    "StreamClosedError",
    "StreamEvent",
    "TaskBroker",
    "TaskResult",
    "TaskState",
    "TaskStatus",
    "TextDelta",
    "TextPart",
    "TimeoutError",
    "TokenCounter",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolError",
    "ToolExecutionError",
    "ToolNotFoundError",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "Usage",
    "UsageEvent",
    "VectorStore",
    "VectorStoreError",
    "matches",
    "message_tokens",
    "parse_filter",
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'daimon.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
