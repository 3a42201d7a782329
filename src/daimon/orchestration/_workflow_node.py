"""Workflow nodes: functions whose named, typed inputs and outputs are fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, overload

from daimon.core.errors import OrchestrationError
from daimon.orchestration._common import callable_name
from daimon.orchestration._errors import OrchestrationBuildError
from daimon.orchestration._fields import fields_of, matches, parameters_of, type_name
from daimon.orchestration._scheduler import NodeContext

__all__ = ("WorkflowNode", "workflow_node")


class WorkflowNode:
    """A function whose parameters are input fields and whose result holds output fields.

    Inputs are the function's parameters, typed by their annotations (a parameter with a default
    is optional: without a producer, the default is used). A parameter annotated
    :class:`NodeContext` receives the node's context instead. Outputs come from the return
    annotation, a ``TypedDict`` or a dataclass, whose fields are the output fields; or name a
    single output field with ``output=`` and return its value. ``inputs``/``outputs`` override
    what is read off the function (the function is then called with the input fields by name and
    returns a mapping).

    Calling a WorkflowNode calls the function.
    """

    __slots__ = ("context_param", "fn", "inputs", "name", "optional", "output", "outputs")

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        output: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(fn):
            raise OrchestrationBuildError(
                f"a workflow node must be callable, not {type(fn).__name__}"
            )
        self.fn = fn
        self.name = name or callable_name(fn)
        what = f"workflow node {self.name!r}"
        found, optional, self.context_param, returns = parameters_of(
            fn, what, NodeContext, declared=inputs is not None
        )
        self.inputs: Mapping[str, Any] = MappingProxyType(
            dict(inputs if inputs is not None else found)
        )
        """Input field names and types."""
        self.optional = optional if inputs is None else frozenset()
        """Inputs that have a default, so may have no producer."""
        self.output = output
        """The single output field's name, when the function returns one value."""
        if output is not None and outputs is not None:
            raise OrchestrationBuildError(f"{what}: give output= or outputs=, not both")
        if outputs is not None:
            declared: Mapping[str, Any] | None = outputs
        elif output is not None:
            declared = {output: returns}
        else:
            declared = fields_of(returns, what)
        if not declared:
            raise OrchestrationBuildError(
                f"{what} declares no outputs: return a TypedDict or a dataclass, or pass "
                "output='<field>' (one value) or outputs={...}",
                nodes=[self.name],
            )
        self.outputs: Mapping[str, Any] = MappingProxyType(dict(declared))
        """Output field names and types."""

    def __repr__(self) -> str:
        inputs = ", ".join(f"{k}: {type_name(v)}" for k, v in self.inputs.items())
        outputs = ", ".join(f"{k}: {type_name(v)}" for k, v in self.outputs.items())
        return f"WorkflowNode({self.name!r}, ({inputs}) -> ({outputs}))"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def collect(self, result: object) -> dict[str, Any]:
        """The output fields of a result, checked against their declared types.

        Raises:
            OrchestrationError: A field is missing, unexpected, or of the wrong type.
        """
        if self.output is not None:
            values = {self.output: result}
        elif isinstance(result, Mapping):
            values = dict(result)
        elif dataclasses.is_dataclass(result) and not isinstance(result, type):
            values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        else:
            raise OrchestrationError(
                f"workflow node {self.name!r} returned {type(result).__name__}, not a mapping or "
                f"a dataclass of its outputs ({', '.join(self.outputs)})"
            )
        missing = [f for f in self.outputs if f not in values]
        extra = [f for f in values if f not in self.outputs]
        if missing or extra:
            raise OrchestrationError(
                f"workflow node {self.name!r} returned the wrong fields: missing "
                f"{', '.join(missing) or 'none'}; unexpected {', '.join(extra) or 'none'}"
            )
        for field, tp in self.outputs.items():
            if not matches(values[field], tp):
                raise OrchestrationError(
                    f"workflow node {self.name!r} returned {type(values[field]).__name__} for "
                    f"field {field!r}, declared {type_name(tp)}"
                )
        return values


@overload
def workflow_node(fn: Callable[..., Any], /) -> WorkflowNode: ...
@overload
def workflow_node(
    *,
    name: str | None = None,
    output: str | None = None,
    inputs: Mapping[str, Any] | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], WorkflowNode]: ...
def workflow_node(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    output: str | None = None,
    inputs: Mapping[str, Any] | None = None,
    outputs: Mapping[str, Any] | None = None,
) -> WorkflowNode | Callable[[Callable[..., Any]], WorkflowNode]:
    """Make a function a :class:`WorkflowNode`: ``@workflow_node`` or ``@workflow_node(...)``."""
    if fn is not None:
        return WorkflowNode(fn)

    def decorate(function: Callable[..., Any]) -> WorkflowNode:
        return WorkflowNode(function, name=name, output=output, inputs=inputs, outputs=outputs)

    return decorate
