"""daimon.core: the plugin boundary.

Shared types, protocols and errors. Standard library only: a provider, store, broker or memory
backend needs nothing else of daimon.
"""

from daimon.core.cancel import CancelToken
from daimon.core.chat import ChatRequest, ChatResponse, ResponseFormat, StopReason, Usage
from daimon.core.checkpoints import CheckpointState
from daimon.core.documents import Document, ScoredDocument
from daimon.core.errors import (
    AgentRunError,
    BudgetExceededError,
    BuilderError,
    CheckpointConflictError,
    CheckpointCorruptError,
    DaimonError,
    DuplicateToolError,
    GuardrailBlockedError,
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
    TimeoutError,  # noqa: A004 - daimon's, also a subclass of the builtin
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
from daimon.core.messages import Content, ContentPart, ImagePart, Message, Role, TextPart, ToolCall
from daimon.core.protocols import (
    Checkpoint,
    EmbeddingModel,
    Memory,
    Model,
    TaskBroker,
    TokenCounter,
    VectorStore,
)
from daimon.core.results import AgentResponse, ApprovalDecision, ApprovalRequest
from daimon.core.tasks import AgentTask, TaskResult, TaskState, TaskStatus
from daimon.core.tokens import CharacterTokenCounter, message_tokens
from daimon.core.tools import ToolOutput, ToolSpec

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
    "Content",
    "ContentPart",
    "DaimonError",
    "Document",
    "Done",
    "DuplicateToolError",
    "EmbeddingModel",
    "ErrorEvent",
    "GuardrailBlockedError",
    "ImagePart",
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
    "Role",
    "RunCancelled",
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
    "message_tokens",
)
