r"""The agent of the local-model eval: the model under test with a calculator and a lookup tool.

Run from the repository root (the model string picks the runtime)::

    daimon eval evals/local/tools.yaml evals.local.agent:agent --concurrency 1
    DAIMON_MODEL="local:smollm2?runtime=llama" daimon eval evals/local/tools.yaml \\
        evals.local.agent:agent --concurrency 1

Everything is offline: the lookup tool reads the small staff directory below.
"""

from __future__ import annotations

import os

from daimon import Agent, tool
from daimon.cli.demo import calculator
from daimon.eval import EvalOutput

__all__ = ("DIRECTORY", "agent", "build_agent", "lookup", "no_tool_call")

DIRECTORY = {
    "alice martin": "Alice Martin: team Payments, office Berlin, extension 4410",
    "bruno silva": "Bruno Silva: team Search, office Lisbon, extension 3120",
    "chen wei": "Chen Wei: team Security, office Singapore, extension 5502",
    "dana cohen": "Dana Cohen: team Design, office Tel Aviv, extension 2217",
    "emil novak": "Emil Novak: team Billing, office Prague, extension 6034",
    "fatima zahra": "Fatima Zahra: team Mobile, office Rabat, extension 7781",
    "goran petrov": "Goran Petrov: team Data, office Sofia, extension 1195",
    "hana sato": "Hana Sato: team Support, office Osaka, extension 8846",
}
"""The staff directory the lookup tool reads (fictional: no model knows it)."""


@tool
def lookup(name: str) -> str:
    """Look up a colleague in the staff directory: their team, office and phone extension.

    Args:
        name: The person's full name, e.g. "Alice Martin".
    """
    key = " ".join(name.lower().split())
    for known, entry in DIRECTORY.items():
        if key == known or key in known or known in key:
            return entry
    raise ValueError(f"nobody called {name!r} in the directory")


def build_agent(model: str | None = None) -> Agent:
    """The eval's agent on ``model`` (default: ``DAIMON_MODEL``, else ``local:smollm2``)."""
    return Agent(
        model or os.environ.get("DAIMON_MODEL", "local:smollm2"),
        tools=[calculator, lookup],
        max_tokens=64,
        max_iterations=3,
    )


def no_tool_call(output: EvalOutput) -> bool:
    """A scorer: the agent answered without calling any tool, and did answer."""
    return not output.tool_calls and bool(output.text.strip())


agent = build_agent()
