"""Guardrails: check (and possibly rewrite) a run's input and its final output."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from daimon.core.chat import ChatResponse
from daimon.core.errors import GuardrailBlockedError
from daimon.core.messages import Message

__all__ = (
    "GuardrailAction",
    "GuardrailResult",
    "InputGuardrail",
    "OutputGuardrail",
    "check_input",
    "check_output",
)


class GuardrailAction(StrEnum):
    """What a guardrail decided."""

    ALLOW = "allow"
    TRANSFORM = "transform"
    BLOCK = "block"


@dataclass(frozen=True, slots=True)
class GuardrailResult:
    """A guardrail's verdict: allow, transform (with the new text) or block (with why)."""

    action: GuardrailAction
    text: str | None = None
    reason: str | None = None

    @classmethod
    def allow(cls) -> GuardrailResult:
        """Let it through unchanged."""
        return _ALLOW

    @classmethod
    def transform(cls, text: str) -> GuardrailResult:
        """Let it through as ``text``."""
        return cls(GuardrailAction.TRANSFORM, text=text)

    @classmethod
    def block(cls, reason: str) -> GuardrailResult:
        """Stop the run."""
        return cls(GuardrailAction.BLOCK, reason=reason)


_ALLOW = GuardrailResult(GuardrailAction.ALLOW)


class InputGuardrail(Protocol):
    """Checks the user's input before the model sees it."""

    async def check(self, input: str, messages: Sequence[Message]) -> GuardrailResult:
        """Judge ``input``; ``messages`` is the conversation history it joins."""
        ...


class OutputGuardrail(Protocol):
    """Checks the final answer before the caller gets it."""

    async def check(self, response: ChatResponse) -> GuardrailResult:
        """Judge the model's final response."""
        ...


def _name(guardrail: object) -> str:
    name = getattr(guardrail, "name", None)
    return name if isinstance(name, str) else type(guardrail).__name__


def _apply(result: object, current: str, guardrail: object) -> str:
    if not isinstance(result, GuardrailResult):
        raise GuardrailBlockedError(
            f"guardrail returned {type(result).__name__}, not a GuardrailResult", _name(guardrail)
        )
    if result.action is GuardrailAction.BLOCK:
        raise GuardrailBlockedError(result.reason or "blocked", _name(guardrail))
    if result.action is GuardrailAction.TRANSFORM:
        if result.text is None:
            raise GuardrailBlockedError("transform without text", _name(guardrail))
        return result.text
    return current


async def check_input(
    guardrails: Sequence[InputGuardrail], text: str, messages: Sequence[Message]
) -> str:
    """Run input guardrails in order; the (possibly rewritten) input, or GuardrailBlockedError.

    A guardrail that raises blocks the run (fail closed).
    """
    for guardrail in guardrails:
        try:
            result = await guardrail.check(text, messages)
        except GuardrailBlockedError:
            raise
        except Exception as exc:
            raise GuardrailBlockedError(
                f"guardrail failed: {type(exc).__name__}: {exc}", _name(guardrail)
            ) from exc
        text = _apply(result, text, guardrail)
    return text


async def check_output(guardrails: Sequence[OutputGuardrail], response: ChatResponse) -> str:
    """Run output guardrails in order; the (possibly rewritten) answer, or GuardrailBlockedError."""
    text = response.text
    for guardrail in guardrails:
        try:
            result = await guardrail.check(response)
        except GuardrailBlockedError:
            raise
        except Exception as exc:
            raise GuardrailBlockedError(
                f"guardrail failed: {type(exc).__name__}: {exc}", _name(guardrail)
            ) from exc
        text = _apply(result, text, guardrail)
    return text
