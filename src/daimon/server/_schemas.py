"""The HTTP bodies, as pydantic models: they validate requests and write the OpenAPI document.

Responses are encoded by hand (see ``_routes`` and ``_openai_compat``) for speed; the response
models here document them, and the tests check the two agree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

__all__ = (
    "AgentInfo",
    "AgentsResponse",
    "ApprovalBody",
    "ChatCompletion",
    "ChatCompletionRequest",
    "ChatMessage",
    "ErrorResponse",
    "HealthResponse",
    "ModelList",
    "ModelObject",
    "OpenAIErrorResponse",
    "PromptRequest",
    "PromptResponse",
    "ReadyResponse",
    "SessionResponse",
    "SessionSummary",
    "SessionsResponse",
    "UsageBody",
)

SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+=~-]{0,255}$"
"""Session ids: 1-256 characters, letters, digits and ``._:@+=~-``, starting alphanumeric."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------ errors


class ErrorDetail(BaseModel):
    """What went wrong."""

    type: str = Field(description="A stable identifier, e.g. `invalid_request` or `ModelError`.")
    message: str = Field(description="A human-readable explanation.")
    details: list[dict[str, Any]] | None = Field(
        default=None, description="For invalid requests: each problem, with where it is (`loc`)."
    )


class ErrorResponse(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail


class OpenAIErrorDetail(BaseModel):
    """What was wrong with a request to ``/v1``, as OpenAI says it."""

    message: str = Field(description="A human-readable explanation.")
    type: str = Field(
        description="`invalid_request_error` for a malformed request; a daimon error type "
        "(e.g. `GuardrailBlockedError`) for a prompt the agent refused."
    )
    param: str | None = Field(
        description="The request field at fault, e.g. `messages[0].content` or `stream`."
    )
    code: str | None = Field(
        description="`missing_required_parameter`, `invalid_type`, `invalid_value`, "
        "`empty_array`, `integer_below_min_value`, `integer_above_max_value`, or null."
    )


class OpenAIErrorResponse(BaseModel):
    """The body of a 400 answer from ``/v1/chat/completions``: OpenAI's error shape."""

    error: OpenAIErrorDetail


# ------------------------------------------------------------------------------------ native


class PromptRequest(_Strict):
    """A prompt for one of the served agents."""

    input: str = Field(min_length=1, description="The user's message.")
    session_id: str | None = Field(
        default=None,
        pattern=SESSION_PATTERN,
        description="Continue this conversation (kept in the agent's memory); omit for a "
        "one-off, stateless prompt.",
    )
    agent: str | None = Field(
        default=None, description="The agent to ask, by name; omit for the default agent."
    )


class UsageBody(BaseModel):
    """Tokens used by the run."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    requests: int = Field(description="Model calls made.")
    total_tokens: int


class ApprovalBody(BaseModel):
    """A tool call waiting for a person's approval."""

    id: str
    tool: str
    arguments: dict[str, Any] | str
    in_doubt: bool = Field(
        default=False,
        description="The call started before and its outcome is unknown (the process running "
        "it stopped before its result was recorded): approving runs it again.",
    )


class PromptResponse(BaseModel):
    """A finished (or paused) run."""

    text: str = Field(description="The final answer.")
    agent: str
    run_id: str
    session_id: str | None
    iterations: int = Field(description="Model calls the run made.")
    usage: UsageBody
    cost: float = Field(description="Dollars spent, when the agent has a cost model.")
    output: Any = Field(default=None, description="The typed answer, for structured output.")
    pending_approvals: list[ApprovalBody] = Field(
        default_factory=list[ApprovalBody],
        description="Tool calls waiting for approval: the run is paused until they are decided.",
    )


class SessionResponse(BaseModel):
    """A conversation's messages (the window the agent's memory keeps), oldest first."""

    session_id: str
    agent: str
    messages: list[dict[str, Any]] = Field(description="Messages in daimon's JSON encoding.")


class SessionSummary(BaseModel):
    """A conversation the agent's memory holds."""

    session_id: str


class SessionsResponse(BaseModel):
    """The conversations an agent's memory holds, sorted by id."""

    agent: str
    sessions: list[SessionSummary]
    truncated: bool = Field(description="More sessions exist than `limit` let through.")


class HealthResponse(BaseModel):
    """The process is up."""

    status: Literal["ok"]


class ReadyResponse(BaseModel):
    """The server accepts prompts."""

    status: Literal["ready"]
    agents: list[str]


class FlowNode(BaseModel):
    """A node of a served flow's drawing."""

    id: str = Field(description="The node's name (`__start__`, `__end__` for the terminals).")
    label: str
    terminal: bool = Field(description="Whether it is START or END rather than a node.")


class FlowEdge(BaseModel):
    """An arrow of a served flow's drawing."""

    source: str
    target: str
    label: str = Field(description="A route's label, a workflow's fields, or empty.")
    dashed: bool = Field(description="A route the node may pick at run time.")


class FlowDrawing(BaseModel):
    """A served graph, DAG or workflow, as nodes and edges."""

    kind: Literal["graph", "dag", "workflow"]
    nodes: list[FlowNode]
    edges: list[FlowEdge]


class AgentInfo(BaseModel):
    """A served agent, or flow (its `model` is then `graph`, `dag` or `workflow`)."""

    name: str
    model: str
    tools: list[str]
    flow: FlowDrawing | None = Field(default=None, description="A flow's drawing.")


class AgentsResponse(BaseModel):
    """The served agents."""

    default: str = Field(description="The agent that answers when a request names none.")
    agents: list[AgentInfo]


# ---------------------------------------------------------------------- OpenAI-compatible


class TextContentPart(BaseModel):
    """Text inside a message."""

    type: Literal["text"]
    text: str


class ImageURL(BaseModel):
    """Where an image is (``https:`` or ``data:`` URL)."""

    url: str
    detail: str | None = None


class ImageContentPart(BaseModel):
    """An image inside a user message."""

    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextContentPart | ImageContentPart, Field(discriminator="type")]


class FunctionCall(BaseModel):
    """The function an earlier assistant turn called."""

    name: str
    arguments: str


class ToolCallBody(BaseModel):
    """A tool call of an earlier assistant turn."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


TextContent = str | Annotated[list[TextContentPart], Field(min_length=1)]
"""Text, as a string or as text parts."""
UserContent = str | Annotated[list[ContentPart], Field(min_length=1)]
"""Text, or text and image parts."""


class _Turn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str | None = None


class InstructionMessage(_Turn):
    """A system or developer message: instructions added to the agent's own."""

    role: Literal["system", "developer"]
    content: TextContent


class UserMessage(_Turn):
    """A user message: the prompt when it is the last message, else history."""

    role: Literal["user"]
    content: UserContent


class AssistantMessage(_Turn):
    """An earlier assistant turn; ``content`` is required unless it has ``tool_calls``."""

    role: Literal["assistant"]
    content: TextContent | None = None
    tool_calls: list[ToolCallBody] | None = None


class ToolMessage(_Turn):
    """A tool's result, answering a tool call of the assistant turn before it."""

    role: Literal["tool"]
    content: TextContent
    tool_call_id: str


ChatMessage = Annotated[
    InstructionMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]
"""One message of the conversation: what it must hold depends on its role, as at OpenAI."""


class StreamOptions(BaseModel):
    """Options of a streamed answer."""

    model_config = ConfigDict(extra="ignore")

    include_usage: StrictBool = False


class FunctionDefinition(BaseModel):
    """A function the client runs: its name, what it does and its arguments' JSON Schema."""

    model_config = ConfigDict(extra="ignore")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class FunctionTool(BaseModel):
    """A client tool: the model may call it; the client runs it and sends the result back."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    """The function a named tool choice names."""

    model_config = ConfigDict(extra="ignore")

    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming one function: the model must call it."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(BaseModel):
    """An OpenAI Chat Completions request; sampling parameters are the agent's and are ignored.

    ``model`` names the agent. System and developer messages are added to the agent's
    instructions, earlier turns become the conversation's history, and the last message, which
    must be the user's, is the prompt. The agent's own tools run on the server; ``tools`` sent
    by the client are client tools: when the model calls one the answer is ``finish_reason:
    "tool_calls"``, and the next request, ending with the ``tool`` messages, continues the
    run. ``tool_choice`` (any of the agent's tools or the client's) holds for the run's model
    calls until the model calls a tool. Booleans and integers must be JSON booleans and integers
    (``"stream": "yes"`` is refused, as OpenAI refuses it).
    """

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool | None = False
    stream_options: StreamOptions | None = None
    n: StrictInt | None = Field(
        default=None, ge=1, le=1, description="Only one choice is produced."
    )
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """Whether the model must call a tool, on the run's model calls until it calls one."""

    @property
    def chosen_tool(self) -> str | None:
        """``tool_choice`` as the agent takes it: a mode, or the named function's name."""
        choice = self.tool_choice
        return choice.function.name if isinstance(choice, NamedToolChoice) else choice


class CompletionMessage(BaseModel):
    """The agent's answer, or the client tools it calls."""

    role: Literal["assistant"]
    content: str | None
    refusal: None = None
    tool_calls: list[ToolCallBody] | None = None


class Choice(BaseModel):
    """The one choice."""

    index: int
    message: CompletionMessage
    logprobs: None = None
    finish_reason: Literal["stop", "tool_calls"]


class PromptTokensDetails(BaseModel):
    """Input tokens detail."""

    cached_tokens: int
    cache_write_tokens: int


class CompletionUsage(BaseModel):
    """Tokens used by the whole run (every model call)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails


class ChatCompletion(BaseModel):
    """An OpenAI ``chat.completion`` object.

    With ``stream: true`` the answer is ``chat.completion.chunk`` events instead, ending with
    ``data: [DONE]``.
    """

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage
    system_fingerprint: None = None


class ModelObject(BaseModel):
    """A served agent, as an OpenAI model."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    """The served agents, as OpenAI models."""

    object: Literal["list"]
    data: list[ModelObject]
