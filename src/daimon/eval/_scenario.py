"""EvalScenario: one input for the agent, and what its answer must satisfy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from daimon.core.errors import BuilderError
from daimon.eval._scorers import Scorer

__all__ = ("EvalScenario",)

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalScenario:
    """An input and the expectations its answer is scored against.

    The scenario passes when the run finishes and every scorer passes; its score is the mean of
    the scorers' values.

    Example::

        EvalScenario(
            name="adds",
            input="What is 2 + 2?",
            expect=(Contains("4"), ToolCalled("add", {"a": 2, "b": 2})),
        )
    """

    name: str
    """Unique within a dataset; reports and comparisons go by it."""
    input: str
    """The prompt."""
    expect: tuple[Scorer, ...] = ()
    """The scorers; none means the scenario passes when the run finishes."""
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=lambda: _NO_METADATA)
    """Anything else, carried into the report."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise BuilderError(f"a scenario needs a name, got {self.name!r}")
        if not isinstance(self.input, str):
            raise BuilderError(f"scenario {self.name!r}: input must be a string")
        expect = tuple(self.expect)
        for item in expect:
            if not isinstance(item, Scorer):
                raise BuilderError(
                    f"scenario {self.name!r}: {item!r} is not a Scorer (wrap a function with "
                    "daimon.eval.scorer)"
                )
        object.__setattr__(self, "expect", expect)
        object.__setattr__(self, "tags", tuple(self.tags))
