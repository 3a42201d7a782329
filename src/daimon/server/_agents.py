"""The promptables one server serves, by name: agents, supervisors, networks, flows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeAlias, TypeGuard

from daimon.core.errors import BuilderError
from daimon.core.protocols import Memory, Promptable
from daimon.orchestration import Dag, Graph, PromptableFlow, Workflow

__all__ = ("Servable", "ServedAgents")

Servable: TypeAlias = Promptable | Graph | Dag | Workflow
"""What a server answers prompts with: any :class:`~daimon.core.protocols.Promptable` (an agent,
a supervisor, a handoff network, a :class:`~daimon.server.ServedFlow`), or a bare flow (served
with the defaults of ``ServedFlow``)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_FLOWS = (Graph, Dag, Workflow)


class ServedAgents:
    """Promptables by name; the first one answers requests that name none.

    Attributes:
        by_name: Every promptable, flows included, in the order given.
        flows: The flows among them (their streams report nodes; they keep no sessions).
        names: Every name, in the order given.
        default: The first name.
    """

    __slots__ = ("by_name", "default", "flows", "names")

    def __init__(self, agents: Servable | Mapping[str, Servable]) -> None:
        if isinstance(agents, (*_FLOWS, PromptableFlow)) or _promptable(agents):
            one = _served(agents)
            named: dict[str, object] = {one.name: one}
        elif isinstance(agents, Mapping):
            named = dict(agents)
        else:
            raise BuilderError(
                "serve an Agent or any promptable (Supervisor, HandoffNetwork, ServedFlow, "
                f"Graph, Dag, Workflow), or a mapping of names to them, not {type(agents).__name__}"
            )
        if not named:
            raise BuilderError("serve at least one agent")
        self.by_name: dict[str, Promptable] = {}
        self.flows: dict[str, PromptableFlow] = {}
        for name, value in named.items():
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise BuilderError(
                    f"agent name {name!r} is not usable in a URL: use 1-128 letters, digits and "
                    "'._:-', starting with a letter or digit"
                )
            if isinstance(value, _FLOWS):
                value = PromptableFlow(value, name=name)
            if not _promptable(value):
                raise BuilderError(
                    f"{name!r} is a {type(value).__name__}, not an Agent or a flow, nor anything "
                    "promptable (prompt, prompt_stream and a name)"
                )
            self.by_name[name] = value
            if isinstance(value, PromptableFlow):
                self.flows[name] = value
        self.names = tuple(named)
        self.default = self.names[0]

    def get(self, name: str | None) -> Promptable | None:
        """The promptable called ``name`` (the default one for ``None``), or ``None``."""
        return self.by_name.get(self.default if name is None else name)

    def flow(self, name: str | None) -> PromptableFlow | None:
        """The flow called ``name`` (the default one for ``None``), or ``None``."""
        return self.flows.get(self.default if name is None else name)

    def memory(self, name: str | None) -> Memory | None:
        """Where the promptable called ``name`` keeps sessions; ``None`` if it keeps none."""
        found = self.get(name)
        if found is None or isinstance(found, PromptableFlow):
            return None
        memory = getattr(found, "memory", None)
        return memory if memory is not None and hasattr(memory, "get_messages") else None

    def unknown(self, name: str) -> str:
        """Why ``name`` names nothing this route can use."""
        if name in self.flows:
            return (
                f"{name!r} is a flow: flows answer prompts (POST /prompt, /prompt/stream, "
                "/v1/chat/completions with one user message) and keep no sessions"
            )
        if name in self.by_name:
            return f"{name!r} keeps no sessions"
        return f"no agent named {name[:100]!r}; served: {', '.join(self.names)}"

    def describe(self, name: str) -> dict[str, Any]:
        """How ``/agents`` lists ``name``: its model and tools, or a flow's kind and drawing."""
        found = self.by_name[name]
        if isinstance(found, PromptableFlow):
            return {"name": name, "model": found.kind, "tools": [], "flow": found.drawing()}
        inner = getattr(found, "agent", found)  # a Supervisor lists its own agent's
        model = getattr(inner, "model", None)
        if model is None:
            return {"name": name, "model": type(found).__name__, "tools": []}
        tools = getattr(inner, "tools", None)
        names = list(getattr(tools, "names", ()))
        return {
            "name": name,
            "model": str(getattr(model, "model_name", type(model).__name__)),
            "tools": names,
        }


def _promptable(value: object) -> TypeGuard[Promptable]:
    return isinstance(value, Promptable) and isinstance(getattr(value, "name", None), str)


def _served(value: object) -> Promptable:
    if isinstance(value, _FLOWS):
        return PromptableFlow(value)
    assert isinstance(value, Promptable)
    return value
