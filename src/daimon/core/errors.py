"""The daimon exception tree.

Every error daimon raises derives from :class:`DaimonError`. The tree splits by who is at fault::

    DaimonError
    ├── BuilderError                  a configuration mistake, raised at construction
    │   ├── ClientToolError           client tools or their results are wrong (a 400 on the server)
    │   ├── DuplicateToolError
    │   ├── PromptTemplateError
    │   └── SkillError                a skill folder or SKILL.md that cannot be loaded (typed path)
    ├── MissingDependencyError        an extra is not installed (also an ImportError)
    ├── InvalidIdError                a session, run or task id no backend can store (a ValueError)
    ├── SerializationError            bad persisted or wire data (also a ValueError)
    │   └── CheckpointCorruptError
    ├── CheckpointConflictError       another writer saved the run first
    │   └── RunLeasedError            another process holds the run's lease (typed owner, expiry)
    ├── SchemaVersionError            a database's tables are newer than this daimon knows
    ├── StateStoreError               a server-state store refused an argument (also a ValueError)
    ├── UnknownPausedRunError         a resume names a paused run not kept (also a LookupError)
    ├── ToolError                     a tool call went wrong
    │   ├── ToolExecutionError
    │   ├── ToolNotFoundError
    │   ├── SchemaValidationError
    │   └── NoClientError             a tool asked its caller for something no caller can answer
    ├── AgentRunError                 a run failed
    │   ├── ModelError                the model provider failed
    │   │   ├── StreamClosedError
    │   │   └── UnsupportedContentError  a part the provider cannot take, refused before sending
    │   ├── MaxIterationsError
    │   ├── RepeatedToolCallError     the model repeated an identical call with an identical result
    │   ├── BudgetExceededError
    │   ├── RateLimitedError          a call waited its longest for its turn under shared limits
    │   ├── ApprovalRequiredError     a run paused for approvals where none can be given
    │   ├── GuardrailBlockedError
    │   ├── OutputValidationError     structured output never matched its type
    │   ├── ExtensionError            an extension returned something that is not a result
    │   ├── RunCancelled
    │   ├── TimeoutError              (also the builtin TimeoutError)
    │   └── OrchestrationError
    ├── MCPError
    ├── BrokerError                   a broker's service failed or is unreachable (typed task_id)
    ├── VectorStoreError              a vector store refused its input or failed
    │   ├── DimensionMismatchError    a vector's length is not the store's (typed expected/actual)
    │   └── FilterError               a metadata filter outside daimon's filter language
    └── KnowledgeBaseError            a document cannot be ingested (also a ValueError)
        └── EmptyDocumentError

Errors carry typed fields (``status_code``, ``retryable``, ``retry_after``, ...); nothing needs to
be parsed out of a message.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daimon.core.limits import Remaining

__all__ = (
    "AgentRunError",
    "ApprovalRequiredError",
    "BrokerError",
    "BudgetExceededError",
    "BuilderError",
    "CheckpointConflictError",
    "CheckpointCorruptError",
    "ClientToolError",
    "DaimonError",
    "DimensionMismatchError",
    "DuplicateToolError",
    "EmptyDocumentError",
    "ExtensionError",
    "FilterError",
    "GuardrailBlockedError",
    "InvalidIdError",
    "KnowledgeBaseError",
    "MCPError",
    "MaxIterationsError",
    "MissingDependencyError",
    "ModelError",
    "NoClientError",
    "OrchestrationError",
    "OutputValidationError",
    "PromptTemplateError",
    "RateLimitedError",
    "RepeatedToolCallError",
    "RunCancelled",
    "RunLeasedError",
    "SchemaValidationError",
    "SchemaVersionError",
    "SerializationError",
    "SkillError",
    "StateStoreError",
    "StreamClosedError",
    "TimeoutError",
    "ToolError",
    "ToolExecutionError",
    "ToolNotFoundError",
    "UnknownPausedRunError",
    "UnsupportedContentError",
    "VectorStoreError",
)


class DaimonError(Exception):
    """Base class of every error daimon raises."""


class BuilderError(DaimonError):
    """A component was configured wrongly; raised at construction, never mid-run."""


class ClientToolError(BuilderError):
    """Client tools or their results are wrong: a bad spec, a name clash, an unknown call id."""


class DuplicateToolError(BuilderError):
    """Two tools share one name."""

    def __init__(self, tool: str) -> None:
        super().__init__(f"duplicate tool {tool!r}: tool names must be unique")
        self.tool = tool


class PromptTemplateError(BuilderError):
    """A prompt template was rendered without a variable it needs."""

    def __init__(self, missing: Sequence[str]) -> None:
        names = ", ".join(sorted(missing))
        super().__init__(f"prompt template is missing variable(s): {names}")
        self.missing = tuple(sorted(missing))


class SkillError(BuilderError):
    """A skill cannot be loaded: a malformed ``SKILL.md``, a bad folder, or a duplicate name.

    ``path`` is the file or folder at fault; the message starts with it.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


DISTRIBUTION = "daimon-agents"
"""The name daimon is installed under (``pip install daimon-agents``); ``daimon`` on PyPI is another
project. The import name is ``daimon``."""


class MissingDependencyError(DaimonError, ImportError):
    """An optional library is not installed; the message names the extra to install."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f'{module!r} is not installed; install it with: pip install "{DISTRIBUTION}[{extra}]"'
        )
        self.module = module
        self.extra = extra


class SerializationError(DaimonError, ValueError):
    """Data could not be encoded or decoded: the message says what and where."""


class InvalidIdError(DaimonError, ValueError):
    """A session, run or task id that no backend can store (see :mod:`daimon.core.ids`).

    Attributes:
        id_kind: What the id names: ``"session"``, ``"run"`` or ``"task"``.
        value: The id as given.
        reason: What is wrong with it.
    """

    def __init__(self, id_kind: str, value: object, reason: str) -> None:
        super().__init__(f"invalid {id_kind} id {value!r}: {reason}")
        self.id_kind = id_kind
        self.value = value
        self.reason = reason


class CheckpointCorruptError(SerializationError):
    """A stored checkpoint failed its integrity check."""


class CheckpointConflictError(DaimonError):
    """A save would overwrite checkpoints of the run that this writer has not seen."""

    def __init__(
        self, run_id: str, expected: int | None, found: int | None, *, message: str | None = None
    ) -> None:
        seen = f"checkpoint {expected}" if expected is not None else "no checkpoint"
        held = f"checkpoint {found}" if found is not None else "a newer checkpoint"
        super().__init__(
            message
            or f"checkpoint conflict on run {run_id!r}: this handle last saw {seen}, but the "
            f"store holds {held} written by another handle; load() the run again before saving"
        )
        self.run_id = run_id
        self.expected = expected
        self.found = found


class UnknownPausedRunError(DaimonError, LookupError):
    """A resume names a paused run that is not kept: answered already, unknown, or forgotten.

    Front ends keep paused runs in memory until they are resumed: a bounded number (the oldest
    is forgotten first), and none across a restart.

    Attributes:
        owner: The served promptable the resume was for.
        key: What the resume named: a client call id, a thread, a task id (``""``: nothing).
    """

    def __init__(self, owner: str, key: str, message: str) -> None:
        super().__init__(message)
        self.owner = owner
        self.key = key


class ToolError(DaimonError):
    """A tool call could not be completed."""


class ToolExecutionError(ToolError):
    """A tool raised while running."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(f"tool {tool!r} failed: {message}")
        self.tool = tool
        self.message = message


class ToolNotFoundError(ToolError):
    """The model asked for a tool that is not registered."""

    def __init__(self, tool: str, available: Sequence[str] = ()) -> None:
        names = ", ".join(available) if available else "none"
        super().__init__(f"tool {tool!r} not found; available tools: {names}")
        self.tool = tool
        self.available = tuple(available)


class SchemaValidationError(ToolError):
    """Tool arguments did not match the tool's JSON Schema."""

    def __init__(self, tool: str, errors: Sequence[str]) -> None:
        super().__init__(f"invalid arguments for tool {tool!r}: " + "; ".join(errors))
        self.tool = tool
        self.errors = tuple(errors)


class NoClientError(ToolError):
    """A tool asked its caller (an MCP client) for sampling or input, and no caller can answer.

    Raised by :meth:`RunContext.sample <daimon.tools.RunContext.sample>` and
    :meth:`RunContext.elicit <daimon.tools.RunContext.elicit>` outside an MCP tool call, or
    when the connected client did not declare the capability.
    """

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"cannot ask the caller for {what}: {reason}")
        self.what = what
        self.reason = reason


class AgentRunError(DaimonError):
    """A run failed."""


class ModelError(AgentRunError):
    """The model provider failed.

    Attributes:
        status_code: The HTTP status the provider answered with, when there was one.
        retryable: Whether trying again may succeed (rate limits, timeouts, 5xx, lost connections).
        retry_after: Seconds the provider asked us to wait before retrying, when it said.
        provider: The provider's name, when known.
        rate_limits: What the provider's rate-limit headers said remains, when it sent them.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        provider: str | None = None,
        rate_limits: Remaining | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.provider = provider
        self.rate_limits = rate_limits


class StreamClosedError(ModelError):
    """A model stream ended before it was complete."""

    def __init__(
        self,
        message: str = "stream closed unexpectedly",
        *,
        status_code: int | None = None,
        retryable: bool = True,
        retry_after: float | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(
            message,
            status_code=status_code,
            retryable=retryable,
            retry_after=retry_after,
            provider=provider,
        )


class UnsupportedContentError(ModelError):
    """A message part the provider cannot take (audio for Anthropic, a web URL for Bedrock, ...).

    Raised while the request is built, before anything is sent; never retryable.

    Attributes:
        part: The part's kind (``"image"``, ``"audio"``, ``"document"``).
    """

    def __init__(self, provider: str, part: str, reason: str) -> None:
        super().__init__(f"{provider} cannot take this {part} part: {reason}", provider=provider)
        self.part = part


class MaxIterationsError(AgentRunError):
    """The run reached its iteration limit without a final answer."""

    def __init__(self, max_iterations: int) -> None:
        super().__init__(f"max iterations ({max_iterations}) exceeded")
        self.max_iterations = max_iterations


class RepeatedToolCallError(AgentRunError):
    """The model made the same tool call, with the same result, more often than allowed.

    ``count`` is the number of identical calls the model asked for, the refused one included.
    """

    def __init__(self, tool_name: str, arguments: dict[str, Any] | str, count: int) -> None:
        shown = (
            arguments
            if isinstance(arguments, str)
            else json.dumps(arguments, sort_keys=True, default=str)
        )
        if len(shown) > 200:
            shown = shown[:200] + "..."
        super().__init__(
            f"tool call {tool_name}({shown}) repeated {count} times with the same result; "
            f"raise max_repeated_tool_calls, or set it to None to turn the guard off"
        )
        self.tool_name = tool_name
        self.arguments = arguments
        self.count = count


class BudgetExceededError(AgentRunError):
    """The next model call could take the run past its cost budget.

    Attributes:
        spent: Dollars spent (and held by calls in flight) when the call was refused.
        limit: The limit that would be passed.
        reserved: The refused call's worst case in dollars (0 when the limit was already reached).
    """

    def __init__(
        self, spent: float, limit: float, *, reserved: float = 0.0, detail: str = ""
    ) -> None:
        if spent >= limit or not reserved:
            message = f"budget exceeded: ${spent:.6f} spent of a ${limit:.6f} limit"
        else:
            message = (
                f"budget exceeded: the next model call was refused before it was made; it could "
                f"cost up to ${reserved:.6f}, which with ${spent:.6f} already spent could pass "
                f"the ${limit:.6f} limit"
            )
        super().__init__(f"{message}; {detail}" if detail else message)
        self.spent = spent
        self.limit = limit
        self.reserved = reserved
        self.detail = detail
        """What the reservation counted and what to change, when known."""


class RateLimitedError(AgentRunError):
    """A model call waited its longest (``RateLimits.max_wait``) for its turn and was not sent.

    Attributes:
        key: Whose limits (an API key, a model, a tenant).
        waited: Seconds it waited.
    """

    def __init__(self, key: str, waited: float) -> None:
        super().__init__(
            f"rate limited: the call waited {waited:.1f}s for its turn under {key!r}'s limits and "
            "was not sent; raise RateLimits.max_wait or the limits, or send fewer calls"
        )
        self.key = key
        self.waited = waited


class ApprovalRequiredError(AgentRunError):
    """A run paused for approvals where nobody can give them (a server, a delegated agent).

    Attributes:
        approvals: The pending :class:`~daimon.core.results.ApprovalRequest` s.
        tool_names: The names of the tools waiting, sorted, once each.
    """

    def __init__(self, approvals: Sequence[Any], where: str) -> None:
        names = sorted({approval.call.name for approval in approvals})
        super().__init__(
            f"the run paused: {', '.join(names)} need(s) a person's approval, which {where} "
            "cannot ask for; those calls did not run"
        )
        self.approvals = tuple(approvals)
        self.tool_names = tuple(names)


class GuardrailBlockedError(AgentRunError):
    """A guardrail blocked the input or the output (or failed, which blocks too)."""

    def __init__(self, reason: str, guardrail: str | None = None) -> None:
        prefix = f"guardrail {guardrail!r} blocked" if guardrail else "guardrail blocked"
        super().__init__(f"{prefix}: {reason}")
        self.reason = reason
        self.guardrail = guardrail


class OutputValidationError(AgentRunError):
    """The model's answer never matched the requested output type, after every retry."""

    def __init__(self, errors: Sequence[str], attempts: int) -> None:
        super().__init__(
            f"structured output failed validation after {attempts} attempt(s): " + "; ".join(errors)
        )
        self.errors = tuple(errors)
        self.attempts = attempts


class ExtensionError(AgentRunError):
    """An extension broke its contract: it returned something that is not the call's result."""


class RunCancelled(AgentRunError):
    """The run's :class:`~daimon.core.cancel.CancelToken` was cancelled."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__("operation cancelled" + (f": {reason}" if reason else ""))
        self.reason = reason


class TimeoutError(AgentRunError, builtins.TimeoutError):  # noqa: A001 - mirrors the builtin
    """An operation took longer than allowed."""

    def __init__(self, seconds: float, what: str = "operation") -> None:
        super().__init__(f"{what} timed out after {seconds:g}s")
        self.seconds = seconds


class OrchestrationError(AgentRunError):
    """A chain, graph, DAG or workflow is invalid or failed."""


class MCPError(DaimonError):
    """A Model Context Protocol peer failed or misbehaved."""


class BrokerError(DaimonError):
    """A broker's service failed or could not be reached; a submit that raised it queued nothing.

    Attributes:
        task_id: The task the operation was about (``None`` for one about no task: a claim).
    """

    def __init__(self, message: str, *, task_id: str | None = None) -> None:
        super().__init__(message)
        self.task_id = task_id


# ---------------------------------------------------------------- retrieval (RAG)


class VectorStoreError(DaimonError):
    """A vector store refused its input or failed; nothing of the refused call was written."""


class DimensionMismatchError(VectorStoreError):
    """A vector's length differs from the store's (or an embedder's from its store's).

    Attributes:
        expected: The length the store (or collection, table, index) holds.
        actual: The length that was given.
    """

    def __init__(self, expected: int, actual: int, what: str = "vector") -> None:
        super().__init__(f"{what} has {actual} dimensions, but the store holds {expected}")
        self.expected = expected
        self.actual = actual


class FilterError(VectorStoreError, ValueError):
    """A metadata filter is outside daimon's filter language (see :mod:`daimon.kit.filters`)."""


class KnowledgeBaseError(DaimonError, ValueError):
    """A document cannot be ingested as given."""


class EmptyDocumentError(KnowledgeBaseError):
    """A document has no text to embed."""

    def __init__(self, document_id: str) -> None:
        super().__init__(f"document {document_id!r} is empty: there is no text to embed")
        self.document_id = document_id


class RunLeasedError(CheckpointConflictError):
    """Another process holds the run's lease: it runs the run now, so this one runs nothing.

    Attributes:
        owner: Who holds the lease (``host:pid`` of its process).
        expires_at: When the lease ends unless its owner renews it, in milliseconds since the
            epoch by the store's clock.
    """

    def __init__(self, run_id: str, owner: str, expires_at: int) -> None:
        import datetime  # here: `import daimon` stays light (tests/tools/test_lazy_imports.py)

        when = datetime.datetime.fromtimestamp(expires_at / 1000, datetime.UTC)
        until = when.isoformat(timespec="milliseconds")
        super().__init__(
            run_id,
            None,
            None,
            message=f"run {run_id!r} is leased by {owner} until {until}"
            " (renewed while it runs): it is running elsewhere; resume it after that owner ends",
        )
        self.owner = owner
        self.expires_at = expires_at


class SchemaVersionError(DaimonError):
    """A database's tables were written by a newer daimon: this one does not know their version.

    Attributes:
        component: Whose tables (``checkpoint``, ``memory``, ...).
        found: The version the database holds.
        known: The newest version this daimon knows.
    """

    def __init__(self, component: str, found: int, known: int) -> None:
        super().__init__(
            f"the database's {component} tables are at version {found}, newer than this daimon "
            f"knows ({known}): upgrade daimon-agents to use them"
        )
        self.component = component
        self.found = found
        self.known = known


class StateStoreError(DaimonError, ValueError):
    """A state store refused an argument: a bad ttl, version, sequence number, limit or wait."""
