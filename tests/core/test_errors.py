"""The exception tree: fields, messages and hierarchy."""

from __future__ import annotations

import builtins

import pytest

from daimon.core import errors
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
    NoClientError,
    OrchestrationError,
    OutputValidationError,
    PromptTemplateError,
    RepeatedToolCallError,
    RunCancelled,
    SchemaValidationError,
    SerializationError,
    SkillError,
    StreamClosedError,
    TimeoutError,  # noqa: A004 - daimon's own, tested against the builtin
    ToolError,
    ToolExecutionError,
    ToolNotFoundError,
)

PARENTS: dict[type[BaseException], tuple[type[BaseException], ...]] = {
    BuilderError: (DaimonError,),
    DuplicateToolError: (BuilderError,),
    PromptTemplateError: (BuilderError,),
    SkillError: (BuilderError,),
    MissingDependencyError: (DaimonError, ImportError),
    SerializationError: (DaimonError, ValueError),
    errors.InvalidIdError: (DaimonError, ValueError),
    CheckpointCorruptError: (SerializationError,),
    CheckpointConflictError: (DaimonError,),
    ToolError: (DaimonError,),
    ToolExecutionError: (ToolError,),
    ToolNotFoundError: (ToolError,),
    SchemaValidationError: (ToolError,),
    NoClientError: (ToolError,),
    AgentRunError: (DaimonError,),
    ModelError: (AgentRunError,),
    StreamClosedError: (ModelError,),
    errors.UnsupportedContentError: (ModelError,),
    MaxIterationsError: (AgentRunError,),
    RepeatedToolCallError: (AgentRunError,),
    BudgetExceededError: (AgentRunError,),
    errors.ApprovalRequiredError: (AgentRunError,),
    GuardrailBlockedError: (AgentRunError,),
    RunCancelled: (AgentRunError,),
    TimeoutError: (AgentRunError, builtins.TimeoutError),
    OrchestrationError: (AgentRunError,),
    OutputValidationError: (AgentRunError,),
    errors.ExtensionError: (AgentRunError,),
    MCPError: (DaimonError,),
    errors.BrokerError: (DaimonError,),
    errors.VectorStoreError: (DaimonError,),
    errors.DimensionMismatchError: (errors.VectorStoreError,),
    errors.FilterError: (errors.VectorStoreError, ValueError),
    errors.KnowledgeBaseError: (DaimonError, ValueError),
    errors.ClientToolError: (errors.BuilderError,),
    errors.EmptyDocumentError: (errors.KnowledgeBaseError,),
    errors.UnknownPausedRunError: (DaimonError, LookupError),
    errors.RunLeasedError: (CheckpointConflictError,),
    errors.SchemaVersionError: (DaimonError,),
    errors.StateStoreError: (DaimonError, ValueError),
}


@pytest.mark.parametrize("cls", list(PARENTS), ids=lambda c: c.__name__)
def test_hierarchy(cls: type[BaseException]) -> None:
    for parent in PARENTS[cls]:
        assert issubclass(cls, parent)
    assert issubclass(cls, DaimonError)


def test_every_error_is_in_the_table() -> None:
    defined = {getattr(errors, name) for name in errors.__all__ if name != "DaimonError"}
    assert defined == set(PARENTS)


def test_daimon_timeout_is_caught_as_the_builtin() -> None:
    with pytest.raises(builtins.TimeoutError):
        raise TimeoutError(2.5, "model call")
    error = TimeoutError(2.5, "model call")
    assert str(error) == "model call timed out after 2.5s"
    assert error.seconds == 2.5
    assert str(TimeoutError(30)) == "operation timed out after 30s"


def test_serialization_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="bad"):
        raise SerializationError("bad")
    assert issubclass(CheckpointCorruptError, ValueError)


def test_missing_dependency_error() -> None:
    error = MissingDependencyError("openai", "openai")
    assert isinstance(error, ImportError)
    assert (error.module, error.extra) == ("openai", "openai")
    assert (
        str(error)
        == "'openai' is not installed; install it with: pip install \"daimon-agents[openai]\""
    )


def test_model_error_fields() -> None:
    error = ModelError(
        "rate limited", status_code=429, retryable=True, retry_after=1.5, provider="openai"
    )
    assert str(error) == "rate limited"
    assert (
        error.message,
        error.status_code,
        error.retryable,
        error.retry_after,
        error.provider,
    ) == (
        "rate limited",
        429,
        True,
        1.5,
        "openai",
    )
    plain = ModelError("bad request")
    assert (plain.status_code, plain.retryable, plain.retry_after, plain.provider) == (
        None,
        False,
        None,
        None,
    )


def test_stream_closed_error_is_retryable_by_default_and_keeps_model_fields() -> None:
    error = StreamClosedError()
    assert str(error) == "stream closed unexpectedly"
    assert error.retryable
    full = StreamClosedError(
        "cut", status_code=502, retryable=False, retry_after=3.0, provider="anthropic"
    )
    assert (full.status_code, full.retryable, full.retry_after, full.provider) == (
        502,
        False,
        3.0,
        "anthropic",
    )


@pytest.mark.parametrize(
    ("error", "message", "fields"),
    [
        (
            DuplicateToolError("add"),
            "duplicate tool 'add': tool names must be unique",
            {"tool": "add"},
        ),
        (
            PromptTemplateError(["b", "a"]),
            "prompt template is missing variable(s): a, b",
            {"missing": ("a", "b")},
        ),
        (
            ToolExecutionError("add", "division by zero"),
            "tool 'add' failed: division by zero",
            {"tool": "add", "message": "division by zero"},
        ),
        (
            ToolNotFoundError("mul", ["add", "sub"]),
            "tool 'mul' not found; available tools: add, sub",
            {"tool": "mul", "available": ("add", "sub")},
        ),
        (
            ToolNotFoundError("mul"),
            "tool 'mul' not found; available tools: none",
            {"available": ()},
        ),
        (
            SchemaValidationError("add", ["a is required", "b must be int"]),
            "invalid arguments for tool 'add': a is required; b must be int",
            {"tool": "add", "errors": ("a is required", "b must be int")},
        ),
        (
            NoClientError("sampling", "no MCP client"),
            "cannot ask the caller for sampling: no MCP client",
            {"what": "sampling", "reason": "no MCP client"},
        ),
        (MaxIterationsError(10), "max iterations (10) exceeded", {"max_iterations": 10}),
        (
            RepeatedToolCallError("search", {"q": "x", "n": 1}, 4),
            'tool call search({"n": 1, "q": "x"}) repeated 4 times with the same result; '
            "raise max_repeated_tool_calls, or set it to None to turn the guard off",
            {"tool_name": "search", "arguments": {"q": "x", "n": 1}, "count": 4},
        ),
        (
            BudgetExceededError(1.5, 1.0),
            "budget exceeded: $1.500000 spent of a $1.000000 limit",
            {"spent": 1.5, "limit": 1.0},
        ),
        (
            GuardrailBlockedError("pii found", "pii"),
            "guardrail 'pii' blocked: pii found",
            {"reason": "pii found", "guardrail": "pii"},
        ),
        (GuardrailBlockedError("nope"), "guardrail blocked: nope", {"guardrail": None}),
        (RunCancelled(), "operation cancelled", {"reason": None}),
        (RunCancelled("user left"), "operation cancelled: user left", {"reason": "user left"}),
        (OrchestrationError("cycle"), "cycle", {}),
        (MCPError("server gone"), "server gone", {}),
    ],
)
def test_messages_and_fields(error: DaimonError, message: str, fields: dict[str, object]) -> None:
    assert str(error) == message
    for name, value in fields.items():
        assert getattr(error, name) == value


def test_tree_is_drawn_in_the_module_docstring() -> None:
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        assert name in doc, f"{name} is missing from the tree in daimon.core.errors' docstring"


def test_checkpoint_conflict_error_names_the_run_and_both_positions() -> None:
    error = errors.InvalidIdError("session", "a\0b", "it contains a NUL character")
    assert (error.id_kind, error.value) == ("session", "a\0b")
    assert str(error) == "invalid session id 'a\\x00b': it contains a NUL character"
    error = CheckpointConflictError("run-1", 3, 5)
    assert (error.run_id, error.expected, error.found) == ("run-1", 3, 5)
    assert "run-1" in str(error) and "checkpoint 3" in str(error) and "checkpoint 5" in str(error)


def test_output_validation_error_lists_errors_and_attempts() -> None:
    error = OutputValidationError(["city: required"], attempts=3)
    assert error.errors == ("city: required",) and error.attempts == 3
    assert "after 3 attempt(s)" in str(error) and "city: required" in str(error)


def test_a_paused_response_refuses_to_pass_as_finished() -> None:
    from daimon.core.messages import ToolCall
    from daimon.core.results import AgentResponse, ApprovalRequest

    calls = [ToolCall(id=f"c{n}", name=name) for n, name in enumerate(["wire", "refund", "wire"])]
    paused = AgentResponse(
        text="",
        pending_approvals=tuple(ApprovalRequest(id=c.id, call=c, run_id="r") for c in calls),
    )
    with pytest.raises(errors.ApprovalRequiredError) as raised:
        paused.require_finished("the test")
    assert raised.value.tool_names == ("refund", "wire")
    assert len(raised.value.approvals) == 3
    assert str(raised.value) == (
        "the run paused: refund, wire need(s) a person's approval, which the test cannot ask "
        "for; those calls did not run"
    )
    finished = AgentResponse(text="done")
    assert finished.require_finished("the test") is finished
