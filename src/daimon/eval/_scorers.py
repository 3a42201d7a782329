"""Scorers: what a scenario expects of an answer, each giving a :class:`Score`.

Built in: :class:`Contains`, :class:`Regex`, :class:`Exact`, :class:`JsonSchema`,
:class:`ToolCalled` and :class:`LLMJudge`. Any object with a ``name`` and an async
``score(output)`` is a :class:`Scorer`; :func:`scorer` makes one of a plain function.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from daimon.core.chat import ChatRequest
from daimon.core.errors import BuilderError
from daimon.core.messages import Message, Role, ToolCall
from daimon.core.protocols import Model
from daimon.core.results import AgentResponse

if TYPE_CHECKING:
    from daimon.eval._scenario import EvalScenario

__all__ = (
    "Contains",
    "EvalOutput",
    "Exact",
    "FunctionScorer",
    "JsonSchema",
    "LLMJudge",
    "Regex",
    "Score",
    "ScoreFunction",
    "Scorer",
    "ToolCalled",
    "scorer",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Score:
    """How well an answer met one expectation."""

    value: float
    """From 0.0 (not at all) to 1.0 (fully)."""
    passed: bool
    reason: str = ""
    """Why, in a few words, for the report."""

    def __post_init__(self) -> None:
        if not (isinstance(self.value, int | float) and 0.0 <= self.value <= 1.0):
            raise ValueError(f"a score's value must be between 0 and 1, got {self.value!r}")

    @classmethod
    def of(cls, passed: bool, reason: str = "") -> Score:
        """A pass (1.0) or a fail (0.0)."""
        return cls(value=1.0 if passed else 0.0, passed=passed, reason=reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalOutput:
    """What a scenario's run produced, as scorers see it."""

    scenario: EvalScenario
    response: AgentResponse

    @property
    def text(self) -> str:
        """The final answer."""
        return self.response.text

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """Every tool call the agent made, in order (its sub-agents' calls are not seen)."""
        return tuple(
            call
            for message in self.response.messages
            if message.role is Role.ASSISTANT
            for call in message.tool_calls
        )


@runtime_checkable
class Scorer(Protocol):
    """Judges an answer against one expectation."""

    @property
    def name(self) -> str:
        """A short label for reports (``contains:'4'``)."""
        ...

    async def score(self, output: EvalOutput) -> Score:
        """Score the answer; an exception is reported as a failed score."""
        ...


ScoreFunction: TypeAlias = Callable[
    [EvalOutput], bool | float | Score | Awaitable[bool | float | Score]
]
"""A function judging an answer: a pass/fail, a value from 0 to 1, or a :class:`Score`."""


class FunctionScorer:
    """A :class:`Scorer` from a function (sync or async) of the :class:`EvalOutput`.

    Args:
        function: Returns a bool (pass or fail), a float from 0 to 1 (passing at ``threshold``),
            or a :class:`Score`.
        name: The label in reports; by default the function's name.
        threshold: The lowest passing value, for functions that return a float.
    """

    __slots__ = ("_function", "_name", "threshold")

    def __init__(
        self, function: ScoreFunction, *, name: str | None = None, threshold: float = 0.5
    ) -> None:
        if not callable(function):
            raise BuilderError(f"a scorer function must be callable, got {function!r}")
        _check_threshold(threshold)
        self._function = function
        self._name = name or str(getattr(function, "__name__", "scorer"))
        self.threshold = threshold

    @property
    def name(self) -> str:
        """The label in reports."""
        return self._name

    async def score(self, output: EvalOutput) -> Score:
        """Call the function and read its answer as a score."""
        result = self._function(output)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Score):
            return result
        if isinstance(result, bool):
            return Score.of(result)
        if isinstance(result, int | float) and 0.0 <= result <= 1.0:
            value = float(result)
            return Score(value=value, passed=value >= self.threshold)
        raise TypeError(
            f"scorer {self._name!r} returned {result!r}: return a bool, a float from 0 to 1 or a "
            "Score"
        )

    def __repr__(self) -> str:
        return f"FunctionScorer({self._name!r})"


def scorer(function: ScoreFunction) -> FunctionScorer:
    """Make a scorer of a function: use it as a decorator.

    Example::

        @scorer
        def polite(output: EvalOutput) -> bool:
            return "please" in output.text.lower()
    """
    return FunctionScorer(function)


@dataclass(frozen=True, slots=True)
class Contains:
    """The answer contains ``text``."""

    text: str
    case_sensitive: bool = field(default=True, kw_only=True)

    @property
    def name(self) -> str:
        """``contains:'...'``."""
        return f"contains:{self.text!r}"

    async def score(self, output: EvalOutput) -> Score:
        """Pass when the text appears in the answer."""
        answer, wanted = output.text, self.text
        if not self.case_sensitive:
            answer, wanted = answer.casefold(), wanted.casefold()
        found = wanted in answer
        return Score.of(found, "" if found else f"{self.text!r} not in the answer")


@dataclass(frozen=True, slots=True)
class Regex:
    """Part of the answer matches the regular expression ``pattern`` (``re.search``)."""

    pattern: str
    flags: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern, self.flags)
        except re.error as exc:
            raise BuilderError(f"bad regular expression {self.pattern!r}: {exc}") from None

    @property
    def name(self) -> str:
        """``regex:'...'``."""
        return f"regex:{self.pattern!r}"

    async def score(self, output: EvalOutput) -> Score:
        """Pass when the pattern matches somewhere in the answer."""
        found = re.search(self.pattern, output.text, self.flags) is not None
        return Score.of(found, "" if found else f"no match for {self.pattern!r}")


@dataclass(frozen=True, slots=True)
class Exact:
    """The answer is exactly ``text`` (after stripping surrounding whitespace, by default)."""

    text: str
    strip: bool = field(default=True, kw_only=True)
    case_sensitive: bool = field(default=True, kw_only=True)

    @property
    def name(self) -> str:
        """``exact:'...'``."""
        return f"exact:{self.text!r}"

    async def score(self, output: EvalOutput) -> Score:
        """Pass when the answer equals the text."""
        answer, wanted = output.text, self.text
        if self.strip:
            answer, wanted = answer.strip(), wanted.strip()
        if not self.case_sensitive:
            answer, wanted = answer.casefold(), wanted.casefold()
        same = answer == wanted
        return Score.of(same, "" if same else f"expected {self.text!r}, got {_clip(output.text)}")


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """The answer is JSON matching ``schema`` (a fenced ```json block is unwrapped first)."""

    schema: Mapping[str, Any]
    _validate: Callable[[Any], Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        import fastjsonschema

        try:
            validate = fastjsonschema.compile(dict(self.schema))
        except Exception as exc:  # fastjsonschema raises several kinds
            raise BuilderError(f"bad JSON schema: {exc}") from None
        object.__setattr__(self, "_validate", validate)

    @property
    def name(self) -> str:
        """``json_schema``."""
        return "json_schema"

    async def score(self, output: EvalOutput) -> Score:
        """Pass when the answer parses as JSON and validates."""
        text = _unfence(output.text)
        try:
            value = json.loads(text)
        except ValueError as exc:
            return Score.of(False, f"not JSON: {exc}")
        try:
            self._validate(value)
        except Exception as exc:  # JsonSchemaValueException: the failure, in words
            return Score.of(False, f"does not match the schema: {exc}")
        return Score.of(True)


@dataclass(frozen=True, slots=True)
class ToolCalled:
    """The agent called tool ``tool``, with ``arguments`` when given.

    By default the call's arguments must include the given ones (others may be there too);
    with ``exact=True`` they must be the same.
    """

    tool: str
    arguments: Mapping[str, Any] | None = None
    exact: bool = field(default=False, kw_only=True)

    @property
    def name(self) -> str:
        """``tool_called:name``."""
        return f"tool_called:{self.tool}"

    async def score(self, output: EvalOutput) -> Score:
        """Pass when a matching call was made."""
        calls = [c for c in output.tool_calls if c.name == self.tool]
        if not calls:
            made = sorted({c.name for c in output.tool_calls})
            return Score.of(False, f"{self.tool!r} was not called (called: {made or 'none'})")
        if self.arguments is None:
            return Score.of(True)
        wanted = dict(self.arguments)
        for call in calls:
            if isinstance(call.arguments, str):
                continue
            if self.exact:
                if call.arguments == wanted:
                    return Score.of(True)
            elif all(k in call.arguments and call.arguments[k] == v for k, v in wanted.items()):
                return Score.of(True)
        seen = "; ".join(c.arguments_json for c in calls)
        return Score.of(False, f"{self.tool!r} was called with {_clip(seen)}, not {wanted!r}")


_JUDGE_PROMPT = """You grade an AI assistant's answer against a criterion.

Criterion: {criteria}

Question: {question}

Answer: {answer}

Reply with only a JSON object: {{"score": <a number from 0 to 1>, "reason": "<one sentence>"}}"""


class LLMJudge:
    """A model grades the answer against ``criteria``, with a score from 0 to 1.

    The judge is asked for ``{"score": ..., "reason": ...}``; the answer passes at
    ``threshold``. A reply that holds no score fails the scorer (reported as its error).

    Args:
        model: The judging model (a :class:`~daimon.core.Model` or a model string).
        criteria: What a good answer does, in plain words.
        threshold: The lowest passing score.
        name: The label in reports.
    """

    __slots__ = ("_model", "criteria", "name", "threshold")

    def __init__(
        self,
        model: Model | str,
        criteria: str,
        *,
        threshold: float = 0.5,
        name: str = "judge",
    ) -> None:
        if not isinstance(criteria, str) or not criteria.strip():
            raise BuilderError("LLMJudge needs criteria: what a good answer does")
        if not isinstance(model, str) and not isinstance(model, Model):
            raise BuilderError(f"LLMJudge needs a Model or a model string, not {model!r}")
        _check_threshold(threshold)
        self._model = model
        self.criteria = criteria
        self.threshold = threshold
        self.name = name

    @property
    def model(self) -> Model:
        """The judging model (a model string is resolved on first use)."""
        if isinstance(self._model, str):
            from daimon.models import infer_model

            self._model = infer_model(self._model)
        return self._model

    async def score(self, output: EvalOutput) -> Score:
        """Ask the judge; its score and reason."""
        prompt = _JUDGE_PROMPT.format(
            criteria=self.criteria, question=output.scenario.input, answer=output.text
        )
        request = ChatRequest(messages=(Message.user(prompt),), temperature=0.0)
        reply = await self.model.generate(request)
        value, reason = _read_verdict(reply.text)
        return Score(value=value, passed=value >= self.threshold, reason=reason)

    def __repr__(self) -> str:
        return f"LLMJudge({self.criteria!r}, threshold={self.threshold})"


def _read_verdict(text: str) -> tuple[float, str]:
    """The score and reason in a judge's reply."""
    body = _unfence(text)
    start, end = body.find("{"), body.rfind("}")
    if start != -1 and end > start:
        try:
            verdict = json.loads(body[start : end + 1])
        except ValueError:
            verdict = None
        if isinstance(verdict, dict) and isinstance(verdict.get("score"), int | float):
            value = float(verdict["score"])
            if math.isfinite(value):
                return min(max(value, 0.0), 1.0), str(verdict.get("reason", ""))
    raise ValueError(f"the judge gave no score: {_clip(text)}")


def _unfence(text: str) -> str:
    stripped = text.strip()
    match = re.fullmatch(r"```[A-Za-z0-9_-]*\s*\n(.*?)\n?```", stripped, re.DOTALL)
    return match.group(1) if match else stripped


def _clip(text: str, limit: int = 120) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit] + "...")


def _check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0):
        raise BuilderError(f"threshold must be between 0 and 1, got {threshold!r}")
