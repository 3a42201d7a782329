"""Spans and metrics for agent runs, model calls and tool calls, after the GenAI conventions.

A run is an ``invoke_agent`` span, opened and closed by the run's hooks. Each model call is a
``chat`` span and each tool call an ``execute_tool`` span, written by an
:class:`~daimon.extensions.Extension` around the call (the innermost one, so a span is the call
itself: a retry is a span of its own, a call an extension answered has none). Both are children
of the run's span, found by the run's id, so concurrent runs never mix. While a run executes, its
span is the current span; while a model call or a tool runs, its span is: a sub-agent started by
the tool (or an HTTP call it makes, or a message it sends with
:func:`~daimon.telemetry.inject_trace_context`) continues the trace under that tool call. Each
model call is also measured (:mod:`daimon.telemetry._metrics`).

The run's effect ledger shows too: each ``execute_tool`` span says the tool's declared effect
(``daimon.tool.effect``), and for a call the ledger records (a run with a checkpoint store, a
tool whose effect is not ``repeatable``) where it stands and which attempt it is
(``daimon.tool.effect.status``, ``daimon.tool.effect.attempt``). A call in doubt that is not run
again (``once``; ``ask`` waiting for a person or rejected by one) has no ``execute_tool`` span: it
is a ``daimon.tool.in_doubt`` event on the run's span, when the run decides it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import daimon
from daimon.agent import Agent
from daimon.core.chat import ChatRequest, ChatResponse, StopReason, Usage
from daimon.core.checkpoints import EffectRecord
from daimon.core.messages import CachePoint, Message, Role, TextPart, ToolCall
from daimon.core.optional import require
from daimon.core.results import AgentResponse
from daimon.core.tools import ToolOutput
from daimon.extensions import CallModel, CallTool, Extension
from daimon.hooks import AgentHook
from daimon.limits._model import watching_waits
from daimon.state import RunState
from daimon.telemetry._metrics import ClientMetrics
from daimon.tools import EndRun

trace = require("opentelemetry.trace", extra="otel")
otel_context = require("opentelemetry.context", extra="otel")

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = ("CAPTURE_CONTENT_ENV", "instrument")

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The standard switch for recording message content on GenAI spans (``true`` turns it on)."""

_FINISH_REASONS = {
    StopReason.END_TURN: "stop",
    StopReason.TOOL_USE: "tool_call",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTENT_FILTER: "content_filter",
}

_PROVIDERS = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
}
"""daimon provider names -> ``gen_ai.provider.name`` values; others are passed through."""

_MAX_OPEN_RUNS = 10_000
"""Runs a hook tracks at once. Every run's end reaches the hook (cancelled and abandoned ones
through ``on_error``), but a stream held open and never finished keeps its run open; past this
many, the oldest open run is ended as abandoned."""

_Attributes: TypeAlias = dict[str, str | bool | int | float | Sequence[str]]


_MODALITY = {"image": "image", "audio": "audio", "document": "document"}
"""The GenAI semantic conventions' ``modality`` of each media part kind."""


def instrument(
    agent: Agent,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
) -> Agent:
    """A copy of ``agent`` whose runs are traced and measured; the agent itself is left as it was.

    Instrument each agent whose spans you want, sub-agents included (``AgentTool(instrument(a),
    ...)``); a sub-agent's run nests under the tool call that started it. Instrumenting an
    instrumented agent replaces its tracing rather than adding a second one.

    Args:
        agent: The agent to trace.
        tracer_provider: Where spans go; by default the global provider (set one with
            :func:`~daimon.telemetry.configure_otlp`, or your own SDK setup), looked up when
            spans start.
        meter_provider: Where the ``gen_ai.client.token.usage`` and
            ``gen_ai.client.operation.duration`` measurements of each model call go; by default
            the global provider (nothing is recorded until one is set).
        capture_content: Record prompts, answers, tool arguments and tool results on the spans
            (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``,
            ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``). They may hold personal
            data, so this is off unless switched on here or by
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
    """
    if capture_content is None:
        capture_content = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    tracer = trace.get_tracer("daimon", daimon.__version__, tracer_provider)
    tracing = _Tracing(agent, tracer, meter_provider, capture_content=capture_content)
    hooks = [h for h in agent.hooks if not isinstance(h, _Tracing)]
    extensions = [e for e in agent.extensions if not isinstance(e, _Tracing)]
    # The first hook, so that the run's span is current before other hooks run and ends as they
    # fail; the last extension, so that its spans are the model and tool calls themselves.
    return agent.replace(hooks=[tracing, *hooks], extensions=[*extensions, tracing])


class _Scope:
    """A span, its context, and the attachment that made it current (if any)."""

    __slots__ = ("context", "span", "task", "token")

    def __init__(self, span: Span, parent: Context | None, *, current: bool) -> None:
        self.span = span
        self.context: Context = trace.set_span_in_context(span, parent)
        self.token: Token[Context] | None = None
        self.task: asyncio.Task[Any] | None = None
        if current:
            self.token = otel_context.attach(self.context)
            self.task = asyncio.current_task()

    def release(self) -> None:
        """Undo the attachment, where it was made (a context elsewhere is not ours to reset)."""
        token, self.token = self.token, None
        if token is not None and asyncio.current_task() is self.task:
            otel_context.detach(token)

    def fail(self, error: BaseException) -> None:
        """Record ``error`` on the span (status, ``error.type``, exception event) and end it."""
        span = self.span
        span.record_exception(error)
        span.set_attribute("error.type", _error_type(error))
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(error) or type(error).__name__))
        span.end()


class _Run:
    """A traced run's span, and its calls' spans still open (to end them if it is abandoned)."""

    __slots__ = ("calls", "effects", "scope")

    def __init__(self, scope: _Scope, effects: Mapping[str, EffectRecord]) -> None:
        self.scope = scope
        self.calls: set[_Scope] = set()
        self.effects = effects
        """The run's effect ledger as last seen (replaced, never mutated, when it changes)."""


class _Tracing(AgentHook, Extension):
    """Turns one agent's runs into spans (made by :func:`instrument`).

    The run's span is opened and closed by hooks; its model and tool calls' spans by the
    extension methods around each call.
    """

    def __init__(
        self,
        agent: Agent,
        tracer: Tracer,
        meter_provider: MeterProvider | None,
        *,
        capture_content: bool,
    ) -> None:
        model = agent.model
        self._tracer = tracer
        self._capture = capture_content
        self._tools = agent.tools
        self._model_name: str = model.model_name
        request: _Attributes = {"gen_ai.request.model": model.model_name}
        measured = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model.model_name}
        provider = getattr(model, "provider", None)
        if isinstance(provider, str) and provider:
            request["gen_ai.provider.name"] = _PROVIDERS.get(provider, provider)
            measured["gen_ai.provider.name"] = _PROVIDERS.get(provider, provider)
        self._metrics = ClientMetrics(meter_provider, daimon.__version__, measured)
        if agent.temperature is not None:
            request["gen_ai.request.temperature"] = float(agent.temperature)
        if agent.max_tokens is not None:
            request["gen_ai.request.max_tokens"] = agent.max_tokens
        self._request = request
        self._runs: dict[str, _Run] = {}

    # ------------------------------------------------------------------------------------ run
    async def on_run_start(self, state: RunState) -> None:
        attributes: _Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": state.agent_name,
            "daimon.run.id": state.run_id,
            **self._request,
        }
        if state.session_id is not None:
            attributes["gen_ai.conversation.id"] = state.session_id
        parent = otel_context.get_current()
        span = self._tracer.start_span(
            f"invoke_agent {state.agent_name}",
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        runs = self._runs
        runs[state.run_id] = _Run(_Scope(span, parent, current=True), state.effects)
        if len(runs) > _MAX_OPEN_RUNS:
            oldest = runs.pop(next(iter(runs)))
            for scope in (*_open(oldest), oldest.scope):
                scope.span.set_status(trace.Status(trace.StatusCode.ERROR, "abandoned"))
                scope.span.end()

    async def on_run_end(self, response: AgentResponse, state: RunState) -> None:
        run = self._runs.pop(state.run_id, None)
        if run is None:
            return
        for scope in _open(run):  # calls cut short (parallel calls when one ended the run)
            scope.span.end()
        _note_doubts(run, state)
        span = run.scope.span
        _set_usage(span, response.usage)
        span.set_attribute("daimon.cost", response.cost)
        span.set_attribute("daimon.iterations", response.iterations)
        if response.paused:
            span.set_attribute("daimon.run.paused", True)
        if self._capture and not response.paused:
            output = [{"role": "assistant", "parts": [{"type": "text", "content": response.text}]}]
            span.set_attribute("gen_ai.output.messages", _json(output))
        run.scope.release()
        span.end()

    async def on_error(self, error: BaseException, state: RunState) -> None:
        run = self._runs.pop(state.run_id, None)
        if run is None:
            return
        for scope in _open(run):
            scope.fail(error)
        _note_doubts(run, state)
        _set_usage(run.scope.span, state.usage)
        run.scope.span.set_attribute("daimon.cost", state.cost)
        run.scope.release()
        run.scope.fail(error)

    # ------------------------------------------------------------------------- model calls
    async def wrap_model_call(
        self, request: ChatRequest, ctx: RunState, call_next: CallModel
    ) -> ChatResponse:
        run = self._runs.get(ctx.run_id)
        if run is None:
            return await call_next(request)
        _note_doubts(run, ctx)  # decided in the tool turn before this call: the model reads them
        attributes: _Attributes = {"gen_ai.operation.name": "chat", **self._request}
        if ctx.session_id is not None:
            attributes["gen_ai.conversation.id"] = ctx.session_id
        if self._capture:
            _add_input(attributes, request.messages)
        span = self._tracer.start_span(
            f"chat {self._model_name}",
            context=run.scope.context,
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        )
        # Current during the call, so the provider's HTTP spans (if instrumented) nest under it.
        scope = _Scope(span, run.scope.context, current=True)
        run.calls.add(scope)
        cost_before = ctx.cost
        started = time.perf_counter()
        try:
            with watching_waits(_waits_on(span)):
                response = await call_next(request)
        except BaseException as error:
            if scope in run.calls:  # not ended as abandoned already
                self._metrics.failed(time.perf_counter() - started, _error_type(error))
            _end(run, scope, error)
            raise
        self._metrics.call(time.perf_counter() - started, response.usage, response.model)
        if response.model:
            span.set_attribute("gen_ai.response.model", response.model)
        finish = _FINISH_REASONS.get(response.stop_reason, str(response.stop_reason))
        span.set_attribute("gen_ai.response.finish_reasons", (finish,))
        _set_usage(span, response.usage)
        span.set_attribute("daimon.cost", ctx.cost - cost_before)
        if self._capture:
            output = {**_message(response.message), "finish_reason": finish}
            span.set_attribute("gen_ai.output.messages", _json([output]))
        _end(run, scope, None)
        return response

    # -------------------------------------------------------------------------- tool calls
    async def wrap_tool_call(
        self, call: ToolCall, ctx: RunState, call_next: CallTool
    ) -> ToolOutput:
        run = self._runs.get(ctx.run_id)
        if run is None:
            return await call_next(call)
        attributes: _Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        found = self._tools.get(call.name)
        effect = getattr(found, "effect", None)
        attributes["daimon.tool.effect"] = effect if isinstance(effect, str) else "repeatable"
        description = getattr(found, "description", None)
        if isinstance(description, str) and description:
            attributes["gen_ai.tool.description"] = description
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = call.arguments_json
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=run.scope.context,
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        # Current while the tool runs (in this task only): sub-agents nest under the call.
        scope = _Scope(span, run.scope.context, current=True)
        run.calls.add(scope)
        try:
            output = await call_next(call)
        except EndRun:  # a signal: the run ends with this call's answer
            _set_effect(span, ctx.effects.get(call.id), returned=True)
            _end(run, scope, None)
            raise
        except BaseException as error:
            _set_effect(span, ctx.effects.get(call.id), returned=False)
            _end(run, scope, error)
            raise
        _set_effect(span, ctx.effects.get(call.id), returned=True)
        if output.is_error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(trace.Status(trace.StatusCode.ERROR, "the tool returned an error"))
        if self._capture:
            span.set_attribute("gen_ai.tool.call.result", output.content)
        _end(run, scope, None)
        return output


def _waits_on(span: Span) -> Callable[[str, float], None]:
    """Records a rate-limit wait of the call on its span: ``daimon.rate_limit.waited`` seconds."""

    def waited(key: str, seconds: float) -> None:
        span.set_attribute("daimon.rate_limit.waited", seconds)
        span.set_attribute("daimon.rate_limit.key", key)

    return waited


def _set_effect(span: Span, record: EffectRecord | None, *, returned: bool) -> None:
    """The call's place in the run's effect ledger, when the ledger records it.

    The loop marks a recorded call ``completed`` as soon as its result comes back out of the
    extensions (this one among them), so a call that returned is ``completed``; one that raised
    stays ``started``: a run resumed after it finds it in doubt.
    """
    if record is None:
        return
    status = "completed" if returned and record.status == "started" else record.status
    span.set_attribute("daimon.tool.effect.status", status)
    span.set_attribute("daimon.tool.effect.attempt", record.attempts)


def _note_doubts(run: _Run, state: RunState) -> None:
    """An event on the run's span for each call in doubt the run decided not to run (yet).

    ``once`` calls (the model is told the outcome is unknown), ``ask`` calls waiting for a person
    (``in_doubt``) or rejected by one (``skipped``): they run no tool, so they have no
    ``execute_tool`` span. Each change is told once: the ledger is compared with the one last
    seen, which the loop replaces (never mutates) when it changes.
    """
    effects, before = state.effects, run.effects
    if effects is before:
        return
    run.effects = effects
    for record in effects.values():
        if record.status not in ("in_doubt", "skipped"):
            continue
        prior = before.get(record.call_id)
        if prior is not None and prior.status == record.status:
            continue
        run.scope.span.add_event(
            "daimon.tool.in_doubt",
            {
                "gen_ai.tool.name": record.tool,
                "gen_ai.tool.call.id": record.call_id,
                "daimon.tool.effect": record.effect,
                "daimon.tool.effect.status": record.status,
                "daimon.tool.effect.attempt": record.attempts,
            },
        )


def _add_input(attributes: _Attributes, messages: Sequence[Message]) -> None:
    """The request's system instructions and input messages, in the conventions' JSON shape."""
    system = [m for m in messages if m.role is Role.SYSTEM]
    if system:
        attributes["gen_ai.system_instructions"] = _json(
            [{"type": "text", "content": m.text} for m in system]
        )
    attributes["gen_ai.input.messages"] = _json(
        [_message(m) for m in messages if m.role is not Role.SYSTEM]
    )


def _end(run: _Run, scope: _Scope, error: BaseException | None) -> None:
    """Let go of a call's context and end its span, unless the run ended it already."""
    scope.release()
    if scope not in run.calls:  # ended as abandoned
        return
    run.calls.discard(scope)
    if error is None:
        scope.span.end()
    else:
        scope.fail(error)


def _open(run: _Run) -> list[_Scope]:
    """The run's call spans still open, forgotten by the run."""
    scopes = list(run.calls)
    run.calls.clear()
    return scopes


def _set_usage(span: Span, usage: Usage) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if usage.cached_tokens:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens)
    if usage.cache_write_tokens:
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)


def _error_type(error: BaseException) -> str:
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _message(message: Message) -> dict[str, Any]:
    """A message in the conventions' JSON shape: a role and typed parts."""
    parts: list[dict[str, Any]] = []
    if message.role is Role.TOOL:
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.text}
        )
    elif isinstance(message.content, str):
        if message.content:
            parts.append({"type": "text", "content": message.content})
    else:
        for part in message.content:
            if isinstance(part, TextPart):
                parts.append({"type": "text", "content": part.text})
            elif isinstance(part, CachePoint):
                continue
            elif part.url is not None and not part.url.startswith("data:"):
                parts.append({"type": "uri", "modality": _MODALITY[part.kind], "uri": part.url})
            else:  # the bytes themselves stay out of the trace
                modality = _MODALITY[part.kind]
                parts.append({"type": "blob", "modality": modality, "mime_type": part.media_type})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": str(message.role), "parts": parts}


def _json(value: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
