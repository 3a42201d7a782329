"""Resources and prompts a daimon MCP server offers, declared as decorated functions.

``@resource("test://static-text", mime_type="text/plain")`` makes a function returning ``str``
(a text resource) or ``bytes`` (a binary one) a resource; a URI with ``{placeholders}`` makes
it a template whose placeholders are the function's parameters. ``@prompt`` makes a function a
prompt whose arguments are its parameters (described in its docstring, as tools are); it
returns text (one user message) or a list of messages: text, daimon messages, images and
embedded resources (:mod:`daimon.mcp._content`).
"""

from __future__ import annotations

from daimon.mcp import _sdk  # noqa: F401  # isort: skip - first: names the extra

import base64
import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

import anyio.to_thread
import mcp_types
from mcp.shared.exceptions import MCPError

from daimon.core.errors import BuilderError
from daimon.core.messages import (
    AudioPart,
    CachePoint,
    DocumentPart,
    ImagePart,
    Message,
    Role,
    TextPart,
)
from daimon.mcp._content import (
    MCPAudio,
    MCPEmbeddedResource,
    MCPImage,
    MCPResourceLink,
    content_block,
)
from daimon.tools._docstrings import parse_doc

__all__ = ("Prompt", "Resource", "prompt", "resource")

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_F = TypeVar("_F", bound=Callable[..., Any])


async def _call(function: Callable[..., Any], arguments: Mapping[str, Any]) -> Any:
    """Await an async function; run a sync one on a worker thread (it may block)."""
    if inspect.iscoroutinefunction(function):
        return await function(**arguments)
    return await anyio.to_thread.run_sync(functools.partial(function, **arguments))


def _choices(function: Callable[..., Any]) -> dict[str, tuple[str, ...]]:
    """Each parameter annotated ``Literal["a", "b", ...]`` (strings), with its values."""
    try:
        params = inspect.signature(function, eval_str=True).parameters.values()
    except (NameError, TypeError):  # an annotation that does not resolve: no choices
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for param in params:
        if typing.get_origin(param.annotation) is Literal:
            values = typing.get_args(param.annotation)
            if all(isinstance(v, str) for v in values):
                found[param.name] = values
    return found


def _complete(
    choices: Mapping[str, tuple[str, ...]],
    names: Iterable[str],
    what: str,
    argument: str,
    prefix: str,
) -> list[str]:
    """The choices of ``argument`` starting with ``prefix`` (at most 100, as MCP allows)."""
    if argument not in names:
        raise MCPError(mcp_types.INVALID_PARAMS, f"{what} has no argument {argument!r}")
    return [value for value in choices.get(argument, ()) if value.startswith(prefix)][:100]


def _failed(what: str, exc: Exception) -> MCPError:
    return MCPError(mcp_types.INTERNAL_ERROR, f"{what} failed: {type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------ resources


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource (or, with ``{placeholders}`` in its URI, a resource template)."""

    uri: str
    function: Callable[..., str | bytes | Awaitable[str | bytes]]
    name: str
    description: str | None = None
    mime_type: str | None = None
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The values of each placeholder annotated ``Literal[...]``, offered as completions."""

    def complete(self, argument: str, prefix: str) -> list[str]:
        """Completions for a placeholder (``completion/complete``)."""
        names = _PLACEHOLDER.findall(self.uri)
        return _complete(self.choices, names, f"resource template {self.uri!r}", argument, prefix)

    @property
    def is_template(self) -> bool:
        """Whether the URI has placeholders (listed by ``resources/templates/list``)."""
        return _PLACEHOLDER.search(self.uri) is not None

    def match(self, uri: str) -> dict[str, str] | None:
        """The placeholders' values if ``uri`` is this resource's (or an instance of it)."""
        if not self.is_template:
            return {} if uri == self.uri else None
        pattern, position = [], 0
        for found in _PLACEHOLDER.finditer(self.uri):
            pattern.append(re.escape(self.uri[position : found.start()]))
            pattern.append(f"(?P<{found.group(1)}>[^/]+)")
            position = found.end()
        pattern.append(re.escape(self.uri[position:]))
        matched = re.fullmatch("".join(pattern), uri)
        if matched is None:
            return None
        values = matched.groupdict()
        allowed = all(values[key] in choices for key, choices in self.choices.items())
        return values if allowed else None  # a Literal placeholder matches its values only

    async def read(self, uri: str, values: Mapping[str, str]) -> mcp_types.ReadResourceResult:
        """Call the function; its text or bytes as the resource's contents."""
        try:
            value = await _call(self.function, values)
        except Exception as exc:  # the client reads what went wrong; the server keeps serving
            raise _failed(f"reading {uri}", exc) from None
        contents: mcp_types.TextResourceContents | mcp_types.BlobResourceContents
        if isinstance(value, str):
            contents = mcp_types.TextResourceContents(uri=uri, mime_type=self.mime_type, text=value)
        elif isinstance(value, bytes | bytearray):
            blob = base64.b64encode(value).decode("ascii")
            contents = mcp_types.BlobResourceContents(uri=uri, mime_type=self.mime_type, blob=blob)
        else:
            raise MCPError(
                mcp_types.INTERNAL_ERROR,
                f"reading {uri} failed: the resource returned a {type(value).__name__}, "
                "not str or bytes",
            )
        return mcp_types.ReadResourceResult(contents=[contents])

    def listed(self) -> mcp_types.Resource:
        """As ``resources/list`` shows it."""
        return mcp_types.Resource(
            uri=self.uri, name=self.name, description=self.description, mime_type=self.mime_type
        )

    def listed_template(self) -> mcp_types.ResourceTemplate:
        """As ``resources/templates/list`` shows it."""
        return mcp_types.ResourceTemplate(
            uri_template=self.uri,
            name=self.name,
            description=self.description,
            mime_type=self.mime_type,
        )


def resource(
    uri: str,
    *,
    name: str | None = None,
    description: str | None = None,
    mime_type: str | None = None,
) -> Callable[[Callable[..., Any]], Resource]:
    """Make a function returning ``str`` or ``bytes`` a resource at ``uri``.

    ``{name}`` placeholders make it a template: each is a parameter of the function, given
    the matching part of the URI a client reads. Name and description default to the
    function's name and docstring.

    Raises:
        BuilderError: The placeholders and the function's parameters differ.
    """

    def declare(function: Callable[..., Any]) -> Resource:
        wanted = set(_PLACEHOLDER.findall(uri))
        params = set(inspect.signature(function).parameters)
        if wanted != params:
            raise BuilderError(
                f"resource {uri!r}: the URI's placeholders {sorted(wanted)} must be the "
                f"parameters of {function.__name__}(), which are {sorted(params)}"
            )
        doc = parse_doc(function.__doc__).description or None
        return Resource(
            uri=uri,
            function=function,
            name=name or function.__name__,
            description=description if description is not None else doc,
            mime_type=mime_type,
            choices=_choices(function),
        )

    return declare


# ------------------------------------------------------------------------------ prompts

PromptItem = str | Message | MCPImage | MCPAudio | MCPEmbeddedResource | MCPResourceLink | ImagePart


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt: a function of string arguments returning the messages to send."""

    function: Callable[..., Any]
    name: str
    description: str | None
    arguments: tuple[mcp_types.PromptArgument, ...]
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The values of each argument annotated ``Literal[...]``: completions, and all it accepts."""

    def complete(self, argument: str, prefix: str) -> list[str]:
        """Completions for an argument (``completion/complete``)."""
        names = [a.name for a in self.arguments]
        return _complete(self.choices, names, f"prompt {self.name!r}", argument, prefix)

    def listed(self) -> mcp_types.Prompt:
        """As ``prompts/list`` shows it."""
        return mcp_types.Prompt(
            name=self.name, description=self.description, arguments=list(self.arguments)
        )

    async def get(self, arguments: Mapping[str, str]) -> mcp_types.GetPromptResult:
        """Call the function with ``arguments``; its messages, or a JSON-RPC error."""
        known = {a.name for a in self.arguments}
        missing = [a.name for a in self.arguments if a.required and a.name not in arguments]
        if missing:
            raise MCPError(
                mcp_types.INVALID_PARAMS,
                f"prompt {self.name!r} needs the argument(s) {', '.join(missing)}",
            )
        for key, allowed in self.choices.items():
            if key in arguments and arguments[key] not in allowed:
                raise MCPError(
                    mcp_types.INVALID_PARAMS,
                    f"prompt {self.name!r}: {key} must be one of {', '.join(allowed)}, "
                    f"not {arguments[key]!r}",
                )
        unknown = sorted(set(arguments) - known)
        if unknown:
            raise MCPError(
                mcp_types.INVALID_PARAMS,
                f"prompt {self.name!r} has no argument(s) {', '.join(unknown)}; "
                f"it takes {', '.join(sorted(known)) or 'none'}",
            )
        try:
            value = await _call(self.function, arguments)
            messages = _prompt_messages(value)
        except Exception as exc:
            raise _failed(f"prompt {self.name!r}", exc) from None
        return mcp_types.GetPromptResult(description=self.description, messages=messages)


def _prompt_messages(value: Any) -> list[mcp_types.PromptMessage]:
    items: Sequence[Any] = [value] if isinstance(value, str | Message) else value
    if not isinstance(items, Sequence):
        raise TypeError(f"a prompt returns text or a list of messages, not {type(value).__name__}")
    messages: list[mcp_types.PromptMessage] = []
    for item in items:
        if not isinstance(item, Message):
            messages.append(mcp_types.PromptMessage(role="user", content=content_block(item)))
            continue
        if item.role not in (Role.USER, Role.ASSISTANT):
            raise TypeError(f"a prompt message is from the user or the assistant, not {item.role}")
        role: Literal["user", "assistant"] = "user" if item.role == Role.USER else "assistant"
        parts = [item.content] if isinstance(item.content, str) else item.content
        for part in parts:
            if isinstance(part, CachePoint):
                continue
            if isinstance(part, AudioPart | DocumentPart):
                raise TypeError(f"a prompt message holds text and images, not a {part.kind} part")
            block = content_block(part.text if isinstance(part, TextPart) else part)
            messages.append(mcp_types.PromptMessage(role=role, content=block))
    return messages


@overload
def prompt(function: _F, /) -> Prompt: ...
@overload
def prompt(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Prompt]: ...
def prompt(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> Prompt | Callable[[Callable[..., Any]], Prompt]:
    """Make a function a prompt; its parameters are the prompt's (string) arguments.

    A parameter without a default is required. The description and each argument's come from
    the docstring (``Args:``), as for tools. The function (sync or async) returns text, or a
    list of: text, ``Message.user(...)``/``Message.assistant(...)``, :class:`MCPImage`,
    :class:`MCPAudio`, :class:`MCPEmbeddedResource`, :class:`MCPResourceLink` or ``ImagePart``
    (a user message each, besides ``Message``).
    """

    def declare(fn: Callable[..., Any]) -> Prompt:
        doc = parse_doc(fn.__doc__)
        arguments = []
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise BuilderError(
                    f"prompt {fn.__name__}(): {param.name} must be a named parameter"
                )
            arguments.append(
                mcp_types.PromptArgument(
                    name=param.name,
                    description=doc.params.get(param.name),
                    required=param.default is param.empty,
                )
            )
        return Prompt(
            function=fn,
            name=name or fn.__name__,
            description=description if description is not None else (doc.description or None),
            arguments=tuple(arguments),
            choices=_choices(fn),
        )

    return declare if function is None else declare(function)
