"""Prompts and grammars for local models, the same on every runtime.

daimon renders the prompt itself with the model's own chat template (from the GGUF file), with
Jinja2's autoescaping off, so the text reaches the model byte for byte as written. Tools are
listed in the system message; a call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(arguments first when the tool has an argument called ``name``: a tiny model copied the tool's
name into it), and the runtime's sampler is held to that shape by a grammar daimon builds from
the tools' JSON Schemas.
When a request lets the model choose, it is first asked which tool fits, or none
(:func:`decision_messages`); "none" gets a plain-text answer under a grammar that cannot open a
call. Tool results are written into the question they answer (:func:`chat_messages`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daimon.core.chat import ChatRequest
from daimon.core.errors import ModelError
from daimon.core.messages import ImagePart, Message, Role, ToolCall
from daimon.core.optional import require

__all__ = (
    "CALL_CLOSE",
    "CALL_OPEN",
    "ChatTemplate",
    "NO_TOOL",
    "Output",
    "RESULTS_STYLE",
    "build_output",
    "chat_messages",
    "decision_messages",
    "gbnf_grammar",
    "lark_grammar",
    "parse_output",
)

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_PROVIDER = "local"
_DEFAULT_SYSTEM = "You are a helpful assistant."
_USE_RESULTS = "Answer my question with these results, repeating the numbers or facts they give."
_FAILED_NOTE = "The tool failed: answer without it."
_FOLD_NOTE = "Answer with this result."
"""The line after folded results: without it the model explains how to compute (15 of 20
answers held the value on llama.cpp; with it 19)."""
_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, for a GGUF file that carries no chat template."""


class ChatTemplate:
    """A model's Jinja chat template, rendered without HTML escaping.

    Args:
        source: The template text (from the GGUF file); ``None`` uses ChatML.
        bos_token: The text of the model's beginning-of-sequence token.
        eos_token: The text of its end-of-sequence token.
    """

    __slots__ = ("_template", "bos_token", "eos_token", "source")

    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        jinja2 = require("jinja2", extra="local")
        sandbox = require("jinja2.sandbox", extra="local")
        # Like Hugging Face's own renderer: sandboxed, no autoescape (the text is a prompt, not
        # HTML), whitespace control as chat templates expect.
        env = sandbox.ImmutableSandboxedEnvironment(
            autoescape=False, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True
        )
        env.globals["raise_exception"] = _raise_template_error
        self.source = source or _CHATML
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise ModelError(
                f"the model's chat template is broken: {exc}", provider=_PROVIDER
            ) from exc
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt for ``messages`` (``role``/``content`` mappings), ready for the answer."""
        jinja2 = require("jinja2", extra="local")

        try:
            prompt: str = self._template.render(
                messages=list(messages),
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except jinja2.TemplateError as exc:
            raise ModelError(f"the chat template failed: {exc}", provider=_PROVIDER) from exc
        return prompt


def _raise_template_error(message: str) -> None:
    raise ModelError(f"the chat template refused the messages: {message}", provider=_PROVIDER)


# ---------------------------------------------------------------------------- messages
RESULTS_STYLE = "fold"
"""How tool results reach the model: ``"fold"`` (into the question they answer) or ``"turn"``
(the call as the model wrote it, then a user message with the results); measured in
docs/benchmarks.md."""


def chat_messages(request: ChatRequest, tools: Sequence[Any]) -> list[dict[str, str]]:
    """``role``/``content`` messages for the template; ``tools`` are the offered ToolSpecs.

    Small models' templates know only system/user/assistant, so tool results are written into
    user text. Folded (the default), each result is added to the question it answers as
    ``tool(arguments) = result`` and the call itself is left out: a tiny model copies a value
    from the question far more often than from a turn of its own.
    """
    wire: list[dict[str, str]] = []
    calls: dict[str, ToolCall] = {}
    results: list[str] = []
    answered: list[bool] = []  # a True for each result that is not an error
    question = -1  # index in ``wire`` of the last user message

    def flush() -> None:
        if not results:
            return
        if RESULTS_STYLE != "fold":
            wire.append({"role": "user", "content": "\n".join([*results, _USE_RESULTS])})
        else:
            note = _FOLD_NOTE if answered else _FAILED_NOTE
            lines = "\n".join([*results, note])
            if question >= 0:
                asked = wire[question]["content"]
                wire[question] = {"role": "user", "content": f"{asked}\n\n{lines}"}
            else:
                wire.append({"role": "user", "content": lines})
        results.clear()
        answered.clear()

    for message in request.messages:
        if message.role is Role.TOOL:
            results.append(_result_line(message, calls.get(message.tool_call_id or "")))
            if not message.is_error:
                answered.append(True)
            continue
        flush()
        _text_only(message)
        if message.role is Role.ASSISTANT and message.tool_calls:
            calls.update((call.id, call) for call in message.tool_calls)
            if RESULTS_STYLE == "fold":
                continue
            text = message.text + "".join(_call_text(call) for call in message.tool_calls)
            wire.append({"role": "assistant", "content": text})
            continue
        if message.role is Role.USER:
            question = len(wire)
        wire.append({"role": message.role.value, "content": message.text})
    flush()
    if tools:
        listing = _tool_listing(tools)
        if wire and wire[0]["role"] == "system":
            wire[0] = {"role": "system", "content": wire[0]["content"] + "\n\n" + listing}
        else:
            wire.insert(0, {"role": "system", "content": _DEFAULT_SYSTEM + "\n\n" + listing})
    return wire


def _result_line(message: Message, call: ToolCall | None) -> str:
    name = message.name or (call.name if call else "tool")
    if RESULTS_STYLE != "fold":
        return f"Tool {name} {'error' if message.is_error else 'result'}: {message.text}"
    arguments = _arguments_text(call.arguments) if call else ""
    if message.is_error:
        return f"{name}({arguments}) failed: {message.text}"
    return f"{name}({arguments}) = {message.text}"


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    """The values of a call's arguments, plain (``17 * 23``, not ``{"expression": ...}``)."""
    if isinstance(arguments, str):  # arguments that were not valid JSON, as the model wrote them
        return arguments
    return ", ".join(
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        for value in arguments.values()
    )


def _text_only(message: Message) -> None:
    if not isinstance(message.content, str) and any(
        isinstance(part, ImagePart) for part in message.content
    ):
        raise ModelError("local models read text only, not images", provider=_PROVIDER)


def _call_text(call: ToolCall) -> str:
    arguments = call.arguments
    keys = arguments if isinstance(arguments, Mapping) else {}
    body = json.dumps(_call_properties(call.name, arguments, keys), ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


_EXAMPLE = re.compile(
    r"""[,;]?\s*\(?\b(?:e\.g\.|eg\.|for example|for instance)[,:]?\s*"""
    r"""(?:"[^"]*"|'[^']*'|`[^`]*`|[^.;()\n]*)\)?""",
    re.IGNORECASE,
)
"""An example in a description (``e.g. "12.5 * 4 + 3"``, ``(for example ...)``)."""


def without_examples(description: str) -> str:
    """``description`` with its examples taken out.

    A tiny model copies example values into its calls (asked "17 times 23", SmolLM2-135M wrote
    ``"17 * 23 + 3"`` after reading ``e.g. "12.5 * 4 + 3"``), so the local prompt leaves them out.
    """
    text = _EXAMPLE.sub("", description).strip()
    return re.sub(r"\s+([.,;:])", r"\1", text)


def _tool_listing(tools: Sequence[Any]) -> str:
    lines = ["You can call these tools:"]
    for spec in tools:
        params = spec.parameters.get("properties", {}) if spec.parameters else {}
        args = "; ".join(
            f"{name} ({p.get('type', 'value')}): "
            f"{without_examples(p.get('description', ''))}".rstrip(": ")
            for name, p in params.items()
        )
        lines.append(f"- {spec.name}: {without_examples(spec.description)} Arguments: {args}")
    lines.append(
        f'To call a tool, reply with only {CALL_OPEN}{{"name": "<tool>", "arguments": {{...}}}}'
        f"{CALL_CLOSE}. If no tool fits, answer in plain text."
    )
    return "\n".join(lines)


NO_TOOL = "none"
"""The decision label for "answer in plain text"."""


def decision_messages(question: str, tools: Sequence[Any]) -> list[dict[str, str]]:
    """The messages that ask the model which tool (or ``none``) fits ``question``.

    The model's answer is read from the probabilities of each label's first token; see
    :meth:`daimon.models.local.LocalModel.decide`.
    """
    listing = "\n".join(
        f"- {spec.name}: {(spec.description.strip().splitlines() or [''])[0]}" for spec in tools
    )
    system = (
        f"Pick the tool for the message.\n{listing}\n"
        f"- {NO_TOOL}: a greeting, general knowledge or writing: no tool.\nReply with one name."
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Message: {question}"},
    ]


# ---------------------------------------------------------------------------- output shape
@dataclass(frozen=True, slots=True)
class Output:
    """What the model may write: a call of one of ``tools``, plain text, or JSON."""

    tools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """(name, parameters schema) of the tools it may call."""
    text: bool = True
    """Whether a plain-text answer is allowed."""
    json_schema: Mapping[str, Any] | None = None
    """Structured output: the answer is JSON matching this schema (instead of free text)."""
    no_calls: bool = False
    """Text that must not open a tool call: tools were offered but a call is not allowed (the
    model would otherwise copy the calls it sees in the conversation)."""
    constrained: bool = field(init=False)

    def __post_init__(self) -> None:
        constrained = bool(self.tools) or self.json_schema is not None or self.no_calls
        object.__setattr__(self, "constrained", constrained)

    def call_schema(self) -> dict[str, Any]:
        """The JSON Schema of one call: ``{"name": <tool>, "arguments": {...}}``.

        The arguments come first for a tool with an argument called ``name``
        (see :func:`_call_properties`).
        """
        options = []
        for name, parameters in self.tools:
            schema = _object_schema(parameters)
            properties = _call_properties({"const": name}, schema, schema["properties"])
            options.append(
                {
                    "type": "object",
                    "properties": properties,
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
            )
        return options[0] if len(options) == 1 else {"anyOf": options}


def _call_properties(name: Any, arguments: Any, keys: Mapping[str, Any]) -> dict[str, Any]:
    """A call's two keys in the order the model writes them.

    ``name`` comes first, unless the tool has an argument called ``name`` too (``keys``: the
    arguments, or their schemas, by name).

    After ``"name": "lookup"`` SmolLM2 copied "lookup" into the lookup tool's own ``name``
    argument 12 times of 12; written first, the argument was right 11 times. Arguments first
    for every tool broke the calculator's expression when it was the only tool
    (``"17 * 23,"``), so the order changes only where the names collide.
    """
    if "name" in keys:
        return {"arguments": arguments, "name": name}
    return {"name": name, "arguments": arguments}


_PLAIN_STRING = r'^[0-9A-Za-z(+\-\u00c0-\u024f][^\x00-\x1f\x7f{}<>"\\]{0,79}$'
"""Free-form string arguments in a call: one line of at most 80 characters, not empty, with no
braces, angle brackets, quotes, backslashes or control characters, starting with a letter, a
digit, ``(``, ``+`` or ``-`` (a leading ``.`` turned ``17 * 23`` into ``.17 * 23``; barred from
``.`` only, the model wrote ``\\u001b`` escapes).

A tiny model asked for an argument it cannot find tends to close the call inside the string
(``"expression": "}}"``), or to spell on forever, until ``max_tokens`` cuts the call short; this
keeps its strings to short values. Only the grammar holds it, not validation."""
_STRING_RULES = frozenset({"pattern", "enum", "const", "format", "maxLength", "minLength"})


def _object_schema(parameters: Mapping[str, Any]) -> dict[str, Any]:
    schema = dict(parameters) if parameters else {}
    schema.setdefault("type", "object")
    properties = {
        name: _plain(prop) if isinstance(prop, Mapping) else prop
        for name, prop in (schema.get("properties") or {}).items()
    }
    schema["properties"] = properties
    return schema


def _plain(prop: Mapping[str, Any]) -> Mapping[str, Any]:
    if prop.get("type") == "string" and not _STRING_RULES & prop.keys():
        return {**prop, "pattern": _PLAIN_STRING}
    return prop


def build_output(request: ChatRequest, choice: str | None) -> Output:
    """The output shape for ``request`` under the resolved tool choice.

    ``choice`` is ``None`` or ``"none"`` (no tools), ``"auto"`` (a call or an answer),
    ``"required"`` (a call of any tool) or a tool's name (that call only).
    """
    schema = request.response_format.schema if request.response_format is not None else None
    if schema is not None and "properties" in schema:
        # Its free strings are held like a call's (see _PLAIN_STRING): asked for a city's name,
        # SmolLM2 wrote a paragraph into it until max_tokens cut the JSON short.
        schema = _object_schema(schema)
    if not request.tools or choice in (None, "none"):
        return Output(json_schema=schema, text=schema is None, no_calls=bool(request.tools))
    tools = tuple((spec.name, spec.parameters) for spec in request.tools)
    if choice == "auto":
        return Output(tools=tools, text=schema is None, json_schema=schema)
    if choice != "required":
        tools = tuple(tool for tool in tools if tool[0] == choice)
    return Output(tools=tools, text=False)


_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def lark_grammar(output: Output) -> str:
    """The output shape as an llguidance Lark grammar (mistral.rs)."""
    branches: list[str] = []
    rules: list[str] = []
    if output.tools:
        schema = {**output.call_schema(), "x-guidance": _COMPACT}
        branches.append("call")
        rules.append(f'call: "{CALL_OPEN}" call_json "{CALL_CLOSE}"')
        rules.append(f"call_json: %json {json.dumps(schema)}")
    if output.json_schema is not None:
        branches.append("answer_json")
        rules.append(
            f"answer_json: %json {json.dumps({**output.json_schema, 'x-guidance': _COMPACT})}"
        )
    elif output.text:
        branches.append("text")
        # Any text that does not open a tool call.
        rules.append(r"text: /[^<\s][\s\S]*/")
    return "\n".join([f"start: {' | '.join(branches)}", *rules]) + "\n"


def gbnf_grammar(output: Output, converter: Any) -> str:
    """The output shape as a llama.cpp GBNF grammar.

    ``converter`` is llama-cpp-python's ``SchemaConverter`` class (it turns JSON Schemas into
    GBNF rules); passed in so this module needs no runtime.
    """
    schema_rules = converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    branches: list[str] = []
    extra: list[str] = []
    if output.tools:
        name = schema_rules.visit(output.call_schema(), "call-json")
        branches.append("call")
        extra.append(f'call ::= "{CALL_OPEN}" {name} "{CALL_CLOSE}"')
    if output.json_schema is not None:
        branches.append(schema_rules.visit(dict(output.json_schema), "answer-json"))
    elif output.text:
        branches.append("text")
        extra.append(r"text ::= [^<\x20\t\n] [^\x00]*")
    rules = [
        _json_char(line)
        for line in schema_rules.format_grammar().splitlines()
        if line and not line.startswith("root ::=")
    ]
    return "\n".join([f"root ::= {' | '.join(branches)}", *extra, *rules]) + "\n"


_LAX_CHAR = 'char ::= [^"\\\\]'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F]'


def _json_char(rule: str) -> str:
    """``rule`` with the converter's string character barred from control characters.

    llama-cpp-python's ``SchemaConverter`` lets a JSON string hold raw newlines, which JSON does
    not allow: SmolLM2 wrote a paragraph inside ``"name"`` and the answer did not parse.
    """
    return _JSON_CHAR + rule[len(_LAX_CHAR) :] if rule.startswith(_LAX_CHAR) else rule


# ---------------------------------------------------------------------------- parsing
def parse_output(text: str, output: Output) -> tuple[str, list[tuple[str, str]]]:
    """The answer text and the tool calls (name, arguments JSON) in what the model wrote.

    Raises:
        ModelError: The model opened a tool call but its JSON is not a call of an offered tool
            (possible only if the output was cut short by ``max_tokens``).
    """
    stripped = text.strip()
    if not output.tools or not stripped.startswith(CALL_OPEN):
        return text, []
    calls: list[tuple[str, str]] = []
    rest = stripped
    names = {name for name, _ in output.tools}
    while rest.startswith(CALL_OPEN):
        body, closed, rest = rest[len(CALL_OPEN) :].partition(CALL_CLOSE)
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            data = None
        if not (closed and isinstance(data, dict) and data.get("name") in names):
            raise ModelError(
                f"the local model wrote an unfinished tool call: {stripped[:200]!r} "
                "(raise max_tokens)",
                provider=_PROVIDER,
            )
        arguments = data.get("arguments")
        calls.append((data["name"], json.dumps(arguments if arguments is not None else {})))
        rest = rest.lstrip()
    return "", calls
