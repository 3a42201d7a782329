"""The agents and flows one server serves, by name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeAlias

from daimon.agent import Agent
from daimon.core.errors import BuilderError
from daimon.orchestration import Dag, Graph, Workflow
from daimon.server._flows import ServedFlow

__all__ = ("Servable", "ServedAgents")

Servable: TypeAlias = Agent | ServedFlow | Graph | Dag | Workflow
"""What a server answers prompts with: an agent, or a flow (bare flows get the defaults of
:class:`ServedFlow`)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_SERVABLE = (Agent, ServedFlow, Graph, Dag, Workflow)


class ServedAgents:
    """Agents and flows by name; the first one answers requests that name none.

    Attributes:
        by_name: The agents (the OpenAI-compatible routes and sessions serve these only).
        flows: The flows.
        names: Every name, agents and flows, in the order given.
        default: The first name.
    """

    __slots__ = ("by_name", "default", "flows", "names")

    def __init__(self, agents: Servable | Mapping[str, Servable]) -> None:
        if isinstance(agents, _SERVABLE):
            one = agents if isinstance(agents, (Agent, ServedFlow)) else ServedFlow(agents)
            named: dict[str, object] = {one.name: one}
        elif isinstance(agents, Mapping):
            named = dict(agents)
        else:
            raise BuilderError(
                "serve an Agent, a ServedFlow (or Graph, Dag, Workflow), or a mapping of names "
                f"to them, not {type(agents).__name__}"
            )
        if not named:
            raise BuilderError("serve at least one agent")
        self.by_name: dict[str, Agent] = {}
        self.flows: dict[str, ServedFlow] = {}
        for name, value in named.items():
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise BuilderError(
                    f"agent name {name!r} is not usable in a URL: use 1-128 letters, digits and "
                    "'._:-', starting with a letter or digit"
                )
            if isinstance(value, Agent):
                self.by_name[name] = value
            elif isinstance(value, ServedFlow):
                self.flows[name] = value
            elif isinstance(value, (Graph, Dag, Workflow)):
                self.flows[name] = ServedFlow(value, name=name)
            else:
                raise BuilderError(
                    f"{name!r} is a {type(value).__name__}, not an Agent or a flow (ServedFlow, "
                    "Graph, Dag, Workflow)"
                )
        self.names = tuple(named)
        self.default = self.names[0]

    def get(self, name: str | None) -> Agent | None:
        """The agent called ``name`` (the default one for ``None``), or ``None``."""
        return self.by_name.get(self.default if name is None else name)

    def flow(self, name: str | None) -> ServedFlow | None:
        """The flow called ``name`` (the default one for ``None``), or ``None``."""
        return self.flows.get(self.default if name is None else name)

    def unknown(self, name: str) -> str:
        """Why ``name`` names no agent."""
        if name in self.flows:
            return (
                f"{name!r} is a flow, not an agent: flows answer POST /prompt and /prompt/stream "
                "only, and keep no sessions"
            )
        return f"no agent named {name[:100]!r}; served: {', '.join(self.names)}"
