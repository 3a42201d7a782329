"""Client tools: tools the model may call that the caller runs, not the agent.

A run given client tools offers their specs beside the agent's own. When the model calls one,
the run pauses (as for approvals) with the call in ``AgentResponse.client_calls``; the caller
runs it and resumes the run with the result. Runs without client tools never reach this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from daimon.agent._output import OUTPUT_TOOL
from daimon.core.errors import ClientToolError
from daimon.core.messages import ToolCall
from daimon.core.tools import ToolOutput, ToolSpec

if TYPE_CHECKING:
    from daimon.agent._agent import Agent

__all__ = ("CUSTOM_KEY", "ClientTools", "as_results", "client_tools_of", "to_custom")

CUSTOM_KEY = "client_tools"
"""Where a paused run's state keeps its client tools' specs (JSON), so ``resume`` offers them."""


class ClientTools:
    """One run's client tools, and the results its caller supplied on resume."""

    __slots__ = ("names", "results", "specs")

    def __init__(self, specs: tuple[ToolSpec, ...], results: Mapping[str, ToolOutput]) -> None:
        self.specs = specs
        self.names = frozenset(spec.name for spec in specs)
        self.results = results

    def take(self, calls: Sequence[ToolCall], completed: dict[str, ToolOutput]) -> list[ToolCall]:
        """Record supplied results as completed; the client calls still waiting for one."""
        waiting: list[ToolCall] = []
        for call in calls:
            if call.name not in self.names or call.id in completed:
                continue
            result = self.results.get(call.id)
            if result is None:
                waiting.append(call)
            else:
                completed[call.id] = result
        return waiting

    def check_results(
        self, pending: Sequence[ToolCall], completed: Mapping[str, ToolOutput]
    ) -> None:
        """Refuse results for calls the paused run does not wait for."""
        waiting = {c.id for c in pending if c.name in self.names and c.id not in completed}
        unknown = sorted(set(self.results) - waiting)
        if unknown:
            expected = sorted(waiting) or "none"
            raise ClientToolError(
                f"result(s) for unknown client tool call id(s) {unknown}: the run waits for "
                f"{expected}"
            )


def client_tools_of(
    agent: Agent[Any, Any],
    specs: Iterable[ToolSpec],
    results: Mapping[str, ToolOutput | str] | None,
) -> ClientTools:
    """The run's client tools, checked: well-formed specs, no clash with the agent's tools."""
    checked: list[ToolSpec] = []
    seen: set[str] = set()
    for spec in specs:
        _check_spec(spec)
        if spec.name in agent.tools or (agent.output is not None and spec.name == OUTPUT_TOOL):
            raise ClientToolError(
                f"client tool {spec.name!r} clashes with agent {agent.name!r}'s own tool of "
                "that name: rename it"
            )
        if spec.name in seen:
            raise ClientToolError(f"client tool {spec.name!r} is given twice")
        seen.add(spec.name)
        checked.append(spec)
    return ClientTools(tuple(checked), as_results(results))


def as_results(results: Mapping[str, ToolOutput | str] | None) -> Mapping[str, ToolOutput]:
    """Results by call id, each a :class:`ToolOutput` (a string is a plain text result)."""
    if not results:
        return MappingProxyType({})
    outputs: dict[str, ToolOutput] = {}
    for call_id, result in results.items():
        if isinstance(result, str):
            outputs[call_id] = ToolOutput.text(result)
        elif isinstance(result, ToolOutput):
            outputs[call_id] = result
        else:
            raise ClientToolError(
                f"the result for call {call_id!r} must be a str or a ToolOutput, "
                f"not {type(result).__name__}"
            )
    return outputs


def _check_spec(spec: object) -> None:
    """Refuse a spec a model cannot be offered: no name, or parameters that are no schema."""
    if not isinstance(spec, ToolSpec):
        raise ClientToolError(f"a client tool must be a ToolSpec, not {type(spec).__name__}")
    name = spec.name
    if not isinstance(name, str) or not name or len(name) > 64:
        raise ClientToolError(f"client tool name {name!r} must be a string of 1 to 64 characters")
    if not all(ch.isalnum() or ch in "_-" for ch in name) or not name.isascii():
        raise ClientToolError(
            f"client tool name {name!r} may hold only ASCII letters, digits, '_' and '-'"
        )
    schema = spec.parameters
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ClientToolError(
            f"client tool {name!r}: parameters must be a JSON Schema of type 'object', "
            f"got {schema!r}"
        )
    import fastjsonschema  # only runs that are given client tools pay for it

    try:
        fastjsonschema.compile(_plain(schema), use_default=False, use_formats=False)
    except Exception as exc:  # fastjsonschema raises several kinds for a bad schema
        message = f"client tool {name!r}: its parameters are no valid schema: {exc}"
        raise ClientToolError(message) from None


def _plain(value: Any) -> Any:
    """A schema as plain dicts and lists (specs may hold read-only mappings)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def to_custom(specs: Sequence[ToolSpec]) -> dict[str, Any]:
    """The specs as a paused state's ``custom`` entry (JSON values)."""
    return {
        CUSTOM_KEY: [
            {"name": s.name, "description": s.description, "parameters": _plain(s.parameters)}
            for s in specs
        ]
    }


def from_custom(custom: Mapping[str, Any]) -> list[ToolSpec]:
    """The specs a paused state keeps (none when it keeps none)."""
    saved = custom.get(CUSTOM_KEY)
    if not isinstance(saved, list):
        return []
    return [
        ToolSpec(name=s["name"], description=s.get("description", ""), parameters=s["parameters"])
        for s in saved
        if isinstance(s, dict) and "name" in s and "parameters" in s
    ]
