"""The agents one server serves, by name."""

from __future__ import annotations

import re
from collections.abc import Mapping

from daimon.agent import Agent
from daimon.core.errors import BuilderError

__all__ = ("ServedAgents",)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


class ServedAgents:
    """Agents by name; the first one answers requests that name none."""

    __slots__ = ("by_name", "default")

    def __init__(self, agents: Agent | Mapping[str, Agent]) -> None:
        if isinstance(agents, Agent):
            named: dict[str, Agent] = {agents.name: agents}
        elif isinstance(agents, Mapping):
            named = dict(agents)
        else:
            raise BuilderError(
                f"serve an Agent or a mapping of names to agents, not {type(agents).__name__}"
            )
        if not named:
            raise BuilderError("serve at least one agent")
        for name, agent in named.items():
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise BuilderError(
                    f"agent name {name!r} is not usable in a URL: use 1-128 letters, digits and "
                    "'._:-', starting with a letter or digit"
                )
            if not isinstance(agent, Agent):
                raise BuilderError(f"{name!r} is a {type(agent).__name__}, not an Agent")
        self.by_name = named
        self.default = next(iter(named))

    def get(self, name: str | None) -> Agent | None:
        """The agent called ``name`` (the default one for ``None``), or ``None``."""
        return self.by_name.get(self.default if name is None else name)

    def unknown(self, name: str) -> str:
        """Why ``name`` names no agent."""
        return f"no agent named {name[:100]!r}; served: {', '.join(self.by_name)}"
