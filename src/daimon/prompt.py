r"""Prompt templates with ``{{variable}}`` placeholders, and few-shot examples.

A template is parsed once, when it is built; rendering only joins strings::

    greeting = PromptTemplate("Hello {{ name }}, you are {{role}}.")
    greeting.render(name="Ada", role="an engineer")

Write ``\{{`` for a literal ``{{`` (so a backslash cannot directly precede a placeholder). A
lone ``}}`` is plain text.
"""

from __future__ import annotations

from collections.abc import Iterable

from daimon.core.errors import BuilderError, PromptTemplateError
from daimon.core.messages import Message

__all__ = ("PromptTemplate", "few_shot")

_OPEN = "{{"
_CLOSE = "}}"
_ESCAPE = "\\"


def _parse(template: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split ``template`` into literal texts and the variable names between them.

    There is always one more literal than there are names: ``literals[i]`` comes before
    ``names[i]``, and the last literal ends the text.
    """
    literals: list[str] = []
    names: list[str] = []
    pending: list[str] = []
    position = 0
    while (opening := template.find(_OPEN, position)) >= 0:
        if opening > 0 and template[opening - 1] == _ESCAPE:
            pending.append(template[position : opening - 1])
            pending.append(_OPEN)
            position = opening + len(_OPEN)
            continue
        closing = template.find(_CLOSE, opening + len(_OPEN))
        if closing < 0:
            raise BuilderError(
                f"prompt template has an unclosed '{{{{' at offset {opening}; "
                "write '\\{{' for a literal '{{'"
            )
        name = template[opening + len(_OPEN) : closing].strip()
        if not name.isidentifier():
            raise BuilderError(
                f"prompt template placeholder {template[opening : closing + 2]!r} at offset "
                f"{opening} is not a valid variable name; write '\\{{' for a literal '{{'"
            )
        pending.append(template[position:opening])
        literals.append("".join(pending))
        pending.clear()
        names.append(name)
        position = closing + len(_CLOSE)
    pending.append(template[position:])
    literals.append("".join(pending))
    return tuple(literals), tuple(names)


def _source(literals: tuple[str, ...], names: tuple[str, ...]) -> str:
    """Template text that parses back into ``literals`` and ``names``."""
    pieces = [literals[0].replace(_OPEN, _ESCAPE + _OPEN)]
    for name, literal in zip(names, literals[1:], strict=True):
        pieces.append(f"{{{{{name}}}}}")
        pieces.append(literal.replace(_OPEN, _ESCAPE + _OPEN))
    return "".join(pieces)


class PromptTemplate:
    """A text with ``{{variable}}`` placeholders (spaces inside the braces are allowed).

    Raises:
        BuilderError: The template has an unclosed ``{{`` or a placeholder that is not a name.
    """

    __slots__ = ("_literals", "_names", "_template", "_variables")

    def __init__(self, template: str) -> None:
        self._template = template
        self._literals, self._names = _parse(template)
        self._variables = frozenset(self._names)

    @classmethod
    def _from_parts(cls, literals: tuple[str, ...], names: tuple[str, ...]) -> PromptTemplate:
        self = cls.__new__(cls)
        self._template = _source(literals, names)
        self._literals = literals
        self._names = names
        self._variables = frozenset(names)
        return self

    @property
    def template(self) -> str:
        """The template text."""
        return self._template

    @property
    def variables(self) -> frozenset[str]:
        """The names of the placeholders."""
        return self._variables

    def render(self, **values: object) -> str:
        """The text with every placeholder replaced by ``str()`` of its value.

        Values for names the template does not use are ignored.

        Raises:
            PromptTemplateError: Some variables have no value; it lists them all.
        """
        missing = self._variables.difference(values)
        if missing:
            raise PromptTemplateError(tuple(missing))
        literals = self._literals
        pieces = [literals[0]]
        for index, name in enumerate(self._names, 1):
            pieces.append(str(values[name]))
            pieces.append(literals[index])
        return "".join(pieces)

    def partial(self, **values: object) -> PromptTemplate:
        """A template with some variables filled in now and the rest left to :meth:`render`.

        Values for names the template does not use are ignored.
        """
        literals = [self._literals[0]]
        names: list[str] = []
        for index, name in enumerate(self._names, 1):
            if name in values:
                literals[-1] += str(values[name]) + self._literals[index]
            else:
                names.append(name)
                literals.append(self._literals[index])
        return PromptTemplate._from_parts(tuple(literals), tuple(names))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PromptTemplate):
            return NotImplemented
        return self._literals == other._literals and self._names == other._names

    def __hash__(self) -> int:
        return hash((self._literals, self._names))

    def __repr__(self) -> str:
        return f"PromptTemplate({self._template!r})"


def few_shot(examples: Iterable[tuple[str, str]]) -> list[Message]:
    """In-context examples as conversation turns: a user message, then the assistant's answer."""
    messages: list[Message] = []
    for question, answer in examples:
        messages.append(Message.user(question))
        messages.append(Message.assistant(answer))
    return messages
