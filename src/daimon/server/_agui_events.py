"""daimon's run events as AG-UI 1.0 events (the official ``ag-ui-protocol`` types).

An :class:`AguiRun` turns one run into AG-UI events, in the order the spec wants them:
``RUN_STARTED`` and a ``STATE_SNAPSHOT`` first; text as ``TEXT_MESSAGE_START``/``CONTENT``/``END``
(a message closes when a tool call starts); tool calls as ``TOOL_CALL_START``/``ARGS``/``END``
(arguments streamed as the model writes them) and ``TOOL_CALL_RESULT``; a flow's nodes as
``STEP_STARTED``/``STEP_FINISHED``; the run's state as ``STATE_DELTA`` JSON Patches; and last
``RUN_FINISHED`` (its outcome success, or interrupt with one interrupt per pending approval,
and its token usage) or ``RUN_ERROR``.

daimon's own details ride in each event's ``metadata`` under ``"daimon"`` (a tool's seconds and
whether it failed, the flow node an agent event came from) and in ``CUSTOM`` events named
``daimon.*`` (each model call's usage, a skipped node): an AG-UI client ignores what it does not
know, and the playground draws its inspector from them.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import jsonpatch
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import ToolCall as AguiToolCall
from ag_ui.encoder import EventEncoder

from daimon.core.chat import Usage
from daimon.core.events import (
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    UsageEvent,
)
from daimon.core.messages import Message, Role
from daimon.core.results import AgentResponse, ApprovalRequest
from daimon.server._encode import jsonable, usage_body
from daimon.server._failures import describe_failure

__all__ = (
    "APPROVAL_REASON",
    "AguiRun",
    "PROTOCOL_VERSION",
    "agent_state",
    "encode",
    "flow_state",
    "interrupt_for",
    "messages_snapshot",
    "node_events",
)

PROTOCOL_VERSION = "1.0"
"""The AG-UI version this server speaks (``RUN_STARTED.protocolVersion``)."""

APPROVAL_REASON = "tool_approval"
"""The ``reason`` of an interrupt that asks a person to approve a tool call."""

_ENCODER = EventEncoder()

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Let the call run (default: true)."},
        "reason": {"type": "string", "description": "Why not, shown to the model."},
    },
    "additionalProperties": False,
}
"""The answer an approval interrupt expects as its resume entry's ``payload``."""


def encode(event: BaseEvent) -> bytes:
    """One event as an SSE frame, written by the official encoder."""
    return _ENCODER.encode(event).encode("utf-8")


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def interrupt_for(approval: ApprovalRequest) -> Interrupt:
    """The interrupt that asks for ``approval``: answered by a resume entry with its id.

    ``metadata.daimon.inDoubt`` says the call started before and its outcome is unknown (its
    tool's effect is ``ask``): approving runs it again, rejecting tells the model it was not.
    """
    name = approval.call.name
    return Interrupt(
        id=approval.id,
        reason=APPROVAL_REASON,
        message=(
            f"The call to {name} started before and its outcome is unknown: run it again?"
            if approval.in_doubt
            else f"Approve the call to {name}?"
        ),
        tool_call_id=approval.call.id,
        response_schema=APPROVAL_SCHEMA,
        metadata={
            "daimon": {
                "tool": name,
                "arguments": approval.call.arguments,
                "inDoubt": approval.in_doubt,
            }
        },
    )


def _token_usage(usage: Usage, model: str | None) -> list[TokenUsage] | None:
    if not usage.requests and not usage.input_tokens and not usage.output_tokens:
        return None
    return [
        TokenUsage(
            model=model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.input_tokens + usage.output_tokens,
            cached_input_tokens=usage.cached_tokens,
            cache_write_input_tokens=usage.cache_write_tokens,
        )
    ]


def _summary(text: str, usage: Usage, cost: float) -> dict[str, Any]:
    """The summary daimon adds to a finished run: its answer, token counts and cost."""
    return {"daimon": {"text": text, "usage": usage_body(usage), "cost": cost}}


class _Scope:
    """Where an agent's events come from: the run itself, or one prompt of a flow node's agent."""

    __slots__ = ("calls", "meta", "prefix")

    def __init__(self, prefix: str = "", meta: dict[str, Any] | None = None) -> None:
        self.prefix = prefix
        self.meta = meta
        self.calls: dict[str, bool] = {}  # tool call id -> whether its arguments were sent

    def call_id(self, call_id: str) -> str:
        return f"{self.prefix}{call_id}"


class AguiRun:
    """The AG-UI events of one run, made as daimon's events come (see the module docstring)."""

    __slots__ = (
        "_model",
        "_parent",
        "_scopes",
        "_state",
        "_text",
        "_usage",
        "run_id",
        "thread_id",
    )

    def __init__(
        self, thread_id: str, run_id: str, state: dict[str, Any], parent: str | None = None
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._parent = parent
        self._state = state
        self._text: str | None = None  # the open text message's id
        self._scopes: dict[str, _Scope] = {"": _Scope()}
        self._usage = Usage()
        self._model: str | None = None

    # -------------------------------------------------------------------------- lifecycle

    def start(self) -> list[BaseEvent]:
        """``RUN_STARTED``, then the state the run starts with."""
        return [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                parent_run_id=self._parent,
                protocol_version=PROTOCOL_VERSION,
            ),
            StateSnapshotEvent(snapshot=copy.deepcopy(self._state)),
        ]

    def finished(self, response: AgentResponse[Any]) -> list[BaseEvent]:
        """The end of an agent's run: success, or an interrupt per pending approval."""
        events = self.close_text()
        if response.pending_approvals:
            events += self.update(status="paused")
            outcome: Any = RunFinishedInterruptOutcome(
                interrupts=[interrupt_for(a) for a in response.pending_approvals]
            )
            result = None
        else:  # finished, or waiting for front-end tools' results (the client's next run)
            events += self.update(status="paused" if response.client_calls else "finished")
            outcome = RunFinishedSuccessOutcome()
            result = None if response.output is None else jsonable(response.output)
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=outcome,
                result=result,
                usage=_token_usage(response.usage, self._model),
                metadata=_summary(response.text, response.usage, response.cost),
            )
        )
        return events

    def flow_finished(self, text: str, output: Any, usage: Usage, cost: float) -> list[BaseEvent]:
        """The end of a flow's run: its answer as a text message, then success."""
        events = self.close_text()
        events += self.text(text)
        events += self.close_text()
        events += self.update(status="finished")
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=RunFinishedSuccessOutcome(),
                result=None if output is None else jsonable(output),
                usage=_token_usage(usage, self._model),
                metadata=_summary(text, usage, cost),
            )
        )
        return events

    def failed(self, exc: BaseException) -> list[BaseEvent]:
        """``RUN_ERROR`` for ``exc``: its daimon error type as the code."""
        _, kind, message = describe_failure(exc)
        usage = _token_usage(self._usage, self._model)
        return [RunErrorEvent(message=message, code=kind, usage=usage)]

    # ------------------------------------------------------------------------------ state

    def update(self, **changes: Any) -> list[BaseEvent]:
        """Set keys of the run's ``daimon`` state; a ``STATE_DELTA`` if anything changed."""
        return self.change(lambda run: run.update(changes))

    def change(self, edit: Any) -> list[BaseEvent]:
        """Apply ``edit(run_state)`` and send the difference as a JSON Patch."""
        # Only the run's own part changes: diff that (the client's state may be large).
        run = self._state["daimon"]
        before = copy.deepcopy(run)
        edit(run)
        patch = jsonpatch.make_patch(before, run).patch
        for op in patch:
            op["path"] = "/daimon" + op["path"]
            if "from" in op:
                op["from"] = "/daimon" + op["from"]
        # The operations as the protocol's models (jsonpatch writes plain dicts).
        return [StateDeltaEvent.model_validate({"delta": patch})] if patch else []

    # ------------------------------------------------------------------------------ agents

    def text(self, delta: str, meta: dict[str, Any] | None = None) -> list[BaseEvent]:
        """Streamed text: opens an assistant message when none is open."""
        if not delta:
            return []
        events: list[BaseEvent] = []
        if self._text is None:
            self._text = _id("msg")
            events.append(
                TextMessageStartEvent(message_id=self._text, role="assistant", metadata=meta)
            )
        events.append(TextMessageContentEvent(message_id=self._text, delta=delta))
        return events

    def close_text(self) -> list[BaseEvent]:
        """End the open text message, if any."""
        if self._text is None:
            return []
        ended, self._text = self._text, None
        return [TextMessageEndEvent(message_id=ended)]

    def scope(self, key: str, meta: dict[str, Any]) -> _Scope:
        """The scope of a flow node's agent (``key`` tells its prompts apart)."""
        found = self._scopes.get(key)
        if found is None:
            found = self._scopes[key] = _Scope(f"{key}/", meta)
        return found

    def agent_event(self, event: StreamEvent, scope: _Scope | None = None) -> list[BaseEvent]:
        """The AG-UI events for one of an agent's stream events (none for ``Done``)."""
        scope = scope if scope is not None else self._scopes[""]
        if isinstance(event, TextDelta):
            return self.text(event.text, scope.meta)
        if isinstance(event, ToolCallStart):
            return self._tool_start(scope, event.call_id, event.name)
        if isinstance(event, ToolCallDelta):
            return self._tool_args(scope, event.call_id, event.arguments_delta)
        if isinstance(event, ToolCallEnd):
            call = event.call
            events = self._tool_start(scope, call.id, call.name)
            if not scope.calls[call.id]:
                events += self._tool_args(scope, call.id, json.dumps(call.arguments))
            return [*events, ToolCallEndEvent(tool_call_id=scope.call_id(call.id))]
        if isinstance(event, ToolResult):
            return self._tool_result(scope, event)
        if isinstance(event, UsageEvent):
            return self._model_call(event, scope.meta)
        return []

    def _tool_start(self, scope: _Scope, call_id: str, name: str) -> list[BaseEvent]:
        if call_id in scope.calls:
            return []
        scope.calls[call_id] = False
        events = self.close_text()
        events.append(
            ToolCallStartEvent(
                tool_call_id=scope.call_id(call_id), tool_call_name=name, metadata=scope.meta
            )
        )
        return events

    def _tool_args(self, scope: _Scope, call_id: str, delta: str) -> list[BaseEvent]:
        if not delta:
            return []
        events = self._tool_start(scope, call_id, "tool") if call_id not in scope.calls else []
        scope.calls[call_id] = True
        return [*events, ToolCallArgsEvent(tool_call_id=scope.call_id(call_id), delta=delta)]

    def _tool_result(self, scope: _Scope, event: ToolResult) -> list[BaseEvent]:
        meta = {"seconds": event.duration, "isError": event.output.is_error, "tool": event.name}
        if scope.meta:
            meta.update(scope.meta["daimon"])
        result = ToolCallResultEvent(
            message_id=_id("tool"),
            tool_call_id=scope.call_id(event.call_id),
            content=event.output.content,
            role="tool",
            metadata={"daimon": meta},
        )
        return [result, *self.change(lambda run: run.update(toolCalls=run["toolCalls"] + 1))]

    def _model_call(self, event: UsageEvent, meta: dict[str, Any] | None) -> list[BaseEvent]:
        usage = event.usage
        self._usage = self._usage + usage
        value = {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "cachedTokens": usage.cached_tokens,
            "cacheWriteTokens": usage.cache_write_tokens,
            "cost": event.cost,
        }
        if meta:
            value.update(meta["daimon"])
        total = self._usage

        def count(run: dict[str, Any]) -> None:
            run["modelCalls"] += 1
            run["usage"] = {"inputTokens": total.input_tokens, "outputTokens": total.output_tokens}
            run["cost"] = round(run["cost"] + event.cost, 10)

        return [CustomEvent(name="daimon.usage", value=value), *self.change(count)]

    def restore(self, state: dict[str, Any]) -> None:
        """Carry on from ``state``, the state a client was sent (a lost attempt's, say)."""
        self._state = state
        run = state["daimon"]
        used = run.get("usage", {})
        self._usage = Usage(
            input_tokens=int(used.get("inputTokens", 0)),
            output_tokens=int(used.get("outputTokens", 0)),
            requests=int(run.get("modelCalls", 0)),
        )

    def model(self, name: str | None) -> None:
        """The model that answered (labels the run's usage)."""
        if name:
            self._model = name

    # --------------------------------------------------------------------- a resumed run

    def replay(self, messages: Sequence[Message]) -> list[BaseEvent]:
        """What a resumed run added to the conversation, as if streamed: results, calls, text."""
        events: list[BaseEvent] = []
        scope = self._scopes[""]
        for message in messages:
            if message.role is Role.TOOL and message.tool_call_id is not None:
                events += self.close_text()
                events.append(
                    ToolCallResultEvent(
                        message_id=_id("tool"),
                        tool_call_id=message.tool_call_id,
                        content=message.text,
                        role="tool",
                        metadata={"daimon": {"isError": message.is_error, "tool": message.name}},
                    )
                )
            elif message.role is Role.ASSISTANT:
                events += self.text(message.text)
                for call in message.tool_calls:
                    events += self.agent_event(ToolCallEnd(call=call), scope)
        return events


def messages_snapshot(thread_id: str, messages: Sequence[Message]) -> MessagesSnapshotEvent:
    """The thread's conversation as AG-UI messages (ids by position: daimon's have none)."""
    converted: list[Any] = []
    for index, message in enumerate(messages):
        ident = f"{thread_id}-{index}"
        if message.role is Role.USER:
            converted.append(UserMessage(id=ident, content=message.text))
        elif message.role is Role.ASSISTANT:
            calls = [
                AguiToolCall(
                    id=c.id, function=FunctionCall(name=c.name, arguments=json.dumps(c.arguments))
                )
                for c in message.tool_calls
            ]
            converted.append(
                AssistantMessage(id=ident, content=message.text or None, tool_calls=calls or None)
            )
        elif message.role is Role.TOOL and message.tool_call_id is not None:
            converted.append(
                ToolMessage(id=ident, content=message.text, tool_call_id=message.tool_call_id)
            )
        elif message.role is Role.SYSTEM:
            converted.append(SystemMessage(id=ident, content=message.text))
    return MessagesSnapshotEvent(messages=converted)


def flow_state(name: str, kind: str) -> dict[str, Any]:
    """The ``daimon`` state of a flow's run: its status, each node's, and its agents' calls."""
    return {"flow": name, "kind": kind, "nodes": {}, **_counts()}


def agent_state(name: str) -> dict[str, Any]:
    """The ``daimon`` state of an agent's run: its status, model calls, tool calls and usage."""
    return {"agent": name, **_counts()}


def _counts() -> dict[str, Any]:
    return {
        "status": "running",
        "modelCalls": 0,
        "toolCalls": 0,
        "usage": {"inputTokens": 0, "outputTokens": 0},
        "cost": 0.0,
    }


def node_events(run: AguiRun, event: Any) -> Iterable[BaseEvent]:
    """A flow's node event as steps and a state delta (a skipped node: a custom event)."""
    node = event.node
    if event.kind == "node_skipped":
        yield CustomEvent(name="daimon.node_skipped", value={"node": node})
        yield from run.change(lambda state: state["nodes"].__setitem__(node, {"status": "skipped"}))
        return
    step = event.step
    if event.kind == "node_started":
        yield from run.close_text()
        yield StepStartedEvent(step_name=node, metadata={"daimon": {"step": step}})

        def started(state: dict[str, Any]) -> None:
            before = state["nodes"].get(node, {})
            runs = before.get("runs", 0) + 1
            state["nodes"][node] = {"status": "running", "runs": runs, "step": step}

        yield from run.change(started)
        return
    failed = event.kind == "node_failed"
    meta: dict[str, Any] = {"step": step, "seconds": event.seconds}
    if failed:
        from daimon.orchestration import NodeError

        meta["errorType"] = type(event.error).__name__
        meta["message"] = str(NodeError(node, event.error))
    yield from run.close_text()
    yield StepFinishedEvent(step_name=node, metadata={"daimon": meta})

    def ended(state: dict[str, Any]) -> None:
        entry = state["nodes"].setdefault(node, {"runs": 1})
        entry.update(status="failed" if failed else "finished", seconds=event.seconds)

    yield from run.change(ended)
