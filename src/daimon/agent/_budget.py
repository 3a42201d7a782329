"""A run's budget: the worst case of each model call, reserved before the call is made.

The reservation is an upper bound, not a guess:

* input: one token per UTF-8 byte of every message's text, tool call (id, name, arguments),
  tool schema and response schema (a byte-level tokenizer never makes more), plus fixed
  allowances for what providers add: per request, per message, per tool call, per tool, the
  tool-use instructions some providers insert when tools are offered, and per image;
* output: the request's ``max_tokens``; without it, the most the model can write (the price
  entry's ``max_output_tokens``, else :data:`~daimon.cost.DEFAULT_MAX_OUTPUT_TOKENS`);
* price: the requested model's, or the highest of it and the models earlier responses of the run
  named; a requested model the price table does not know is reserved at the table's highest
  prices.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from daimon.core.chat import ResponseFormat, Usage
from daimon.core.errors import BudgetExceededError
from daimon.core.messages import Message, TextPart
from daimon.core.tools import ToolSpec
from daimon.cost import Budget, CostTracker
from daimon.state import RunState

__all__ = ("Rollup", "RunBudget", "input_tokens_at_most")

PER_REQUEST = 16
"""Tokens a provider may add to any request (the start of the reply, separators)."""
PER_MESSAGE = 8
"""Tokens a provider may add around each message (role, delimiters)."""
PER_TOOL_CALL = 16
"""Tokens around each tool call or result beyond its id, name and arguments."""
PER_TOOL = 16
"""Tokens around each tool's schema."""
TOOLS_PREAMBLE = 512
"""Instructions a provider inserts when tools are offered (Anthropic's take about 350)."""
PER_IMAGE = 4_096
"""Tokens an image may count (the providers' largest images take under 3,000)."""

_CACHE_LIMIT = 4096
_spec_tokens: dict[int, tuple[ToolSpec, int]] = {}
"""Tokens of each tool schema, by the spec's id (the spec is kept so an id is never reused)."""


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _mapping(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else str(value)


def _schema_tokens(spec: ToolSpec) -> int:
    """Tokens of one tool's name, description and schema: worked out once per spec."""
    entry = _spec_tokens.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    text = json.dumps(
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
        ensure_ascii=False,
        default=_mapping,
    )
    tokens = _utf8(text) + PER_TOOL
    if len(_spec_tokens) >= _CACHE_LIMIT:
        _spec_tokens.clear()
    _spec_tokens[id(spec)] = (spec, tokens)
    return tokens


def input_tokens_at_most(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    response_format: ResponseFormat | None = None,
) -> int:
    """The most input tokens a request with these messages, tools and schema can be billed."""
    total = PER_REQUEST
    for message in messages:
        total += PER_MESSAGE
        content = message.content
        if isinstance(content, str):
            total += _utf8(content)
        else:
            for part in content:
                total += _utf8(part.text) if isinstance(part, TextPart) else PER_IMAGE
        for call in message.tool_calls:
            total += PER_TOOL_CALL + _utf8(call.id) + _utf8(call.name)
            total += _utf8(call.arguments_json)
        if message.tool_call_id is not None:
            total += PER_TOOL_CALL + _utf8(message.tool_call_id) + _utf8(message.name or "")
    if tools:
        total += TOOLS_PREAMBLE
        for spec in tools:
            total += _schema_tokens(spec)
    if response_format is not None:
        schema = {"name": response_format.name, "schema": response_format.schema}
        total += PER_TOOL + _utf8(json.dumps(schema, ensure_ascii=False, default=_mapping))
    return total


def _reservation(input_tokens: int, output_tokens: int, *, capped: bool) -> str:
    """What a refused reservation counted, and what would make it smaller."""
    counted = f"it counts at most {input_tokens} input tokens and {output_tokens} output tokens"
    if not capped:
        advice = (
            "max_tokens is not set, so the reservation counts the most the model can write: "
            "set the agent's max_tokens to the longest answer you expect to reserve less"
        )
    else:
        advice = "lower the agent's max_tokens to reserve less"
    return f"{counted}; {advice}, or raise max_budget"


class RunBudget:
    """One run's :class:`~daimon.cost.Budget`, and the reservation of its next model call."""

    __slots__ = ("_held", "_models", "_tracker", "ledger")

    def __init__(self, ledger: Budget, tracker: CostTracker | None, requested: str) -> None:
        self.ledger = ledger
        self._tracker = tracker
        self._models = [requested]
        """The model asked for, then each other model a response of the run named."""
        self._held = 0.0

    def reserve(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        max_tokens: int | None,
        response_format: ResponseFormat | None,
    ) -> None:
        """Hold the worst case of the next call (replacing any reservation not yet settled).

        Raises:
            BudgetExceededError: The call could take this run, or a run that started it, past
                its budget.
        """
        self.release()
        tracker = self._tracker
        estimate = 0.0  # a run without a cost model records its calls as free
        tokens = output = 0
        if tracker is not None:
            models: Iterable[str] = self._models
            if max_tokens is None:
                output = max(tracker.max_output_tokens(m) for m in self._models)
            else:
                output = max_tokens
            tokens = input_tokens_at_most(messages, tools, response_format)
            estimate = tracker.worst_case(models, tokens, output)
        try:
            self._held = self.ledger.reserve(estimate)
        except BudgetExceededError as exc:
            if not exc.reserved or exc.spent >= exc.limit:
                raise
            detail = _reservation(tokens, output, capped=max_tokens is not None)
            if exc.detail:
                detail = f"{exc.detail}; {detail}"
            raise BudgetExceededError(
                exc.spent, exc.limit, reserved=exc.reserved, detail=detail
            ) from None

    def settle(self, model_id: str | None, cost: float) -> None:
        """The call came back: count what it cost instead of its reservation."""
        held, self._held = self._held, 0.0
        self.ledger.settle(held, cost)
        if model_id and model_id not in self._models:
            self._models.append(model_id)

    def release(self) -> None:
        """Drop a reservation whose call was not made."""
        if self._held:
            held, self._held = self._held, 0.0
            self.ledger.settle(held, 0.0)

    def close(self) -> None:
        """The run ended: release what it holds in its callers' budgets."""
        self.release()
        self.ledger.close()


class Rollup:
    """Keeps the run's usage and cost: its own model calls plus what tools report."""

    __slots__ = ("_extra_cost", "_requested", "_state", "_tracker", "budget")

    def __init__(
        self,
        state: RunState,
        tracker: CostTracker | None,
        requested: str,
        budget: RunBudget | None,
    ) -> None:
        self._state = state
        self._tracker = tracker
        self._requested = requested
        self.budget = budget
        self._extra_cost = state.cost  # a resumed run starts from its saved cost

    def model_call(self, model_id: str | None, usage: Usage) -> float:
        """Count a model call; ``model_id`` is the model the response names, if it names one."""
        state = self._state
        state.usage = state.usage + usage
        cost = 0.0
        if self._tracker is not None:
            # Priced by the model that answered; by the one asked for when that has no price.
            requested = self._requested
            cost = self._tracker.record(model_id or requested, usage, requested=requested)
            state.cost = self._extra_cost + self._tracker.total
        if self.budget is not None:
            self.budget.settle(model_id, cost)
        return cost

    def report(self, usage: Usage, cost: float) -> None:
        """Usage and cost of nested work (a sub-agent) reported by a tool."""
        state = self._state
        state.usage = state.usage + usage
        self._extra_cost += cost
        state.cost = self._extra_cost + (self._tracker.total if self._tracker else 0.0)
        if self.budget is not None:
            self.budget.ledger.spend(cost)
