"""What a type checker infers for agents, responses and tool contexts (checked by mypy).

Not a test module: ``test_types.py`` runs mypy over this file, where every ``assert_type``
must hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_type

from daimon import Agent, AgentResponse, RunContext, tool
from daimon.models import FunctionModel, ScriptedModel


@dataclass
class City:
    name: str
    country: str


@dataclass
class Deps:
    greeting: str


@tool
def greet(ctx: RunContext[Deps], name: str) -> str:
    """Greet someone."""
    assert_type(ctx.deps, Deps)
    return f"{ctx.deps.greeting}, {name}"


async def check() -> None:
    model = ScriptedModel([])
    text_agent = Agent(model)
    assert_type(text_agent, Agent[Any, str])
    answer = await text_agent.prompt("hi")
    assert_type(answer, AgentResponse[str])
    assert_type(answer.output, str)

    typed = Agent(model, output_type=City)
    assert_type(typed, Agent[Any, City])
    city = await typed.prompt("Where is the Louvre?")
    assert_type(city, AgentResponse[City])
    assert_type(city.output, City)
    assert_type(typed.prompt_sync("again").output, City)
    assert_type((await typed.resume(city)).output, City)

    with_deps = Agent(model, tools=[greet], deps_type=Deps, output_type=City)
    assert_type(with_deps, Agent[Deps, City])
    assert_type((await with_deps.prompt("hi", deps=Deps("hello"))).output, City)
    assert_type(with_deps.replace(name="other"), Agent[Deps, City])

    functional = Agent(FunctionModel(lambda request: None))  # type: ignore[arg-type, return-value]
    assert_type(functional, Agent[Any, str])
