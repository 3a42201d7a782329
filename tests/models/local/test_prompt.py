"""Prompts and grammars of local models: no HTML escaping, grammars built from the schemas."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daimon import ChatRequest, Message, ResponseFormat, ToolCall
from daimon.cli.demo import calculator
from daimon.core import ModelError
from daimon.models.local._prompt import (
    _PLAIN_STRING,
    CALL_CLOSE,
    CALL_OPEN,
    ChatTemplate,
    Output,
    build_output,
    chat_messages,
    decision_messages,
    gbnf_grammar,
    lark_grammar,
    parse_output,
    without_examples,
)
from daimon.tools import tool

pytest.importorskip("jinja2")

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TRICKY = """Say "hi" & <b>don't</b> escape 'this'"""


@tool
def lookup(name: str) -> str:
    """Look up a colleague.

    Args:
        name: The person's full name.
    """
    return name


def test_the_template_renders_quotes_and_markup_byte_exact() -> None:
    template = ChatTemplate(SMOLLM2_TEMPLATE)
    prompt = template.render([{"role": "user", "content": TRICKY}])
    assert TRICKY in prompt
    assert "&#34;" not in prompt and "&quot;" not in prompt and "&lt;" not in prompt
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith(f"<|im_start|>user\n{TRICKY}<|im_end|>\n<|im_start|>assistant\n")


def test_a_file_without_a_template_gets_chatml_and_bos_eos_reach_the_template() -> None:
    assert ChatTemplate(None).render([{"role": "user", "content": "x"}]) == (
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    )
    template = ChatTemplate(
        "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}",
        bos_token="<s>",
        eos_token="</s>",
    )
    assert template.render([{"role": "user", "content": "a"}]) == "<s>a</s>"


def test_template_errors_are_model_errors() -> None:
    with pytest.raises(ModelError, match="chat template is broken"):
        ChatTemplate("{% for %}")
    refusing = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ModelError, match="roles must alternate"):
        refusing.render([])


def _asked_and_answered(*results: tuple[str, bool]) -> ChatRequest:
    """A question, the calculator called once per result, and the results."""
    calls = [
        ToolCall(id=f"c{i}", name="calculator", arguments={"expression": f'"1" + {i}'})
        for i in range(len(results))
    ]
    return ChatRequest(
        messages=[
            Message.system("Be brief."),
            Message.user("q"),
            Message.assistant(tool_calls=calls),
            *(
                Message.tool(f"c{i}", text, name="calculator", is_error=error)
                for i, (text, error) in enumerate(results)
            ),
        ],
        tools=[calculator.spec],
    )


def test_tools_are_listed_in_the_system_message_and_results_fold_into_the_question() -> None:
    request = _asked_and_answered(("3", False))
    wire = chat_messages(request, request.tools)
    assert [m["role"] for m in wire] == ["system", "user"]
    assert wire[0]["content"].startswith("Be brief.\n\nYou can call these tools:\n- calculator:")
    assert "expression (string): The arithmetic to compute" in wire[0]["content"]
    # The call is not shown as a turn of the model's: its arguments and result join the question.
    assert wire[1]["content"] == 'q\n\ncalculator("1" + 0) = 3\nAnswer with this result.'
    # Without tools offered, nothing is listed and no system message is added.
    assert chat_messages(ChatRequest(messages=[Message.user("q")]), ()) == [
        {"role": "user", "content": "q"}
    ]


def test_several_results_and_errors_fold_in_order() -> None:
    request = _asked_and_answered(("3", False), ("no such number", True))
    content = chat_messages(request, ())[-1]["content"]
    assert content == (
        'q\n\ncalculator("1" + 0) = 3\ncalculator("1" + 1) failed: no such number\n'
        "Answer with this result."
    )
    # A later question starts a new turn; the earlier one keeps its results.
    later = ChatRequest(messages=[*request.messages, Message.assistant("4"), Message.user("r")])
    wire = chat_messages(later, ())
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
    assert wire[1]["content"] == content and wire[3]["content"] == "r"


def test_a_result_without_its_question_or_call_still_reaches_the_model() -> None:
    orphan = ChatRequest(messages=[Message.tool("zz", "42", name="calculator")])
    assert chat_messages(orphan, ()) == [
        {"role": "user", "content": "calculator() = 42\nAnswer with this result."}
    ]


def test_results_as_a_turn_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from daimon.models.local import _prompt

    monkeypatch.setattr(_prompt, "RESULTS_STYLE", "turn")
    request = _asked_and_answered(("3", False))
    wire = chat_messages(request, request.tools)
    assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
    assert wire[2]["content"] == (
        f'{CALL_OPEN}{{"name": "calculator", "arguments": {{"expression": "\\"1\\" + 0"}}}}'
        f"{CALL_CLOSE}"
    )
    assert wire[3]["content"].startswith("Tool calculator result: 3\nAnswer my question with")


def test_the_decision_question_names_every_tool_and_none() -> None:
    system, user = decision_messages("What is 2+2?", [calculator.spec, lookup.spec])
    assert "- calculator: Evaluate an arithmetic" in system["content"]
    assert "- lookup: Look up a colleague." in system["content"]
    assert "- none: a greeting" in system["content"]
    assert user == {"role": "user", "content": "Message: What is 2+2?"}


@pytest.mark.parametrize(
    ("choice", "tools", "text", "schema"),
    [
        (None, (), True, False),
        ("none", (), True, False),
        ("auto", ("calculator", "lookup"), True, False),
        ("required", ("calculator", "lookup"), False, False),
        ("lookup", ("lookup",), False, False),
    ],
)
def test_build_output(choice: str | None, tools: tuple[str, ...], text: bool, schema: bool) -> None:
    request = ChatRequest(messages=[Message.user("q")], tools=[calculator.spec, lookup.spec])
    output = build_output(request, choice)
    assert tuple(name for name, _ in output.tools) == tools
    assert output.text is text
    assert (output.json_schema is not None) is schema
    # With tools offered, text is held too: it may not open a call when none is allowed.
    assert output.constrained
    assert output.no_calls is (not tools)
    assert not build_output(ChatRequest(messages=[Message.user("q")]), choice).constrained


def test_structured_output_replaces_free_text() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    request = ChatRequest(
        messages=[Message.user("q")], response_format=ResponseFormat(name="r", schema=schema)
    )
    output = build_output(request, None)
    assert output.json_schema == {**schema, "type": "object"}
    assert not output.text and output.constrained
    # Free strings in the answer are held like a call's: one short plain line.
    named = {"type": "object", "properties": {"city": {"type": "string"}, "code": {"enum": ["x"]}}}
    request = ChatRequest(
        messages=[Message.user("q")], response_format=ResponseFormat(name="r", schema=named)
    )
    properties = build_output(request, None).json_schema["properties"]  # type: ignore[index]
    assert properties["city"] == {"type": "string", "pattern": _PLAIN_STRING}
    assert properties["code"] == {"enum": ["x"]}


def test_the_call_schema_pins_the_tool_name() -> None:
    one = Output(tools=(("calculator", calculator.spec.parameters),), text=False)
    schema = one.call_schema()
    assert schema["properties"]["name"] == {"const": "calculator"}
    assert list(schema["properties"]) == ["name", "arguments"]
    # A tool with an argument called `name` gets its arguments first (both grammars keep the
    # order): after `"name": "lookup"` the model copied "lookup" into it, 12 times of 12.
    named = Output(tools=(("lookup", lookup.spec.parameters),), text=False).call_schema()
    assert list(named["properties"]) == ["arguments", "name"]
    assert named["properties"]["name"] == {"const": "lookup"}
    assert schema["properties"]["arguments"]["required"] == ["expression"]
    two = Output(tools=(("a", {}), ("b", {})), text=False).call_schema()
    assert [o["properties"]["name"]["const"] for o in two["anyOf"]] == ["a", "b"]
    assert two["anyOf"][0]["properties"]["arguments"] == {"type": "object", "properties": {}}


def test_a_call_is_written_back_in_its_grammar_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from daimon.models.local import _prompt

    monkeypatch.setattr(_prompt, "RESULTS_STYLE", "turn")
    call = ToolCall(id="c0", name="lookup", arguments={"name": "Ann"})
    request = ChatRequest(
        messages=[Message.user("q"), Message.assistant(tool_calls=[call])], tools=[lookup.spec]
    )
    assistant = chat_messages(request, ())[-1]["content"]
    assert (
        assistant == f'{CALL_OPEN}{{"arguments": {{"name": "Ann"}}, "name": "lookup"}}{CALL_CLOSE}'
    )
    text, calls = parse_output(assistant, Output(tools=(("lookup", lookup.spec.parameters),)))
    assert text == ""
    assert calls == [("lookup", '{"name": "Ann"}')]


def test_the_lark_grammar_allows_a_call_or_text() -> None:
    grammar = lark_grammar(Output(tools=(("calculator", calculator.spec.parameters),)))
    lines = grammar.splitlines()
    assert lines[0] == "start: call | text"
    assert lines[1] == f'call: "{CALL_OPEN}" call_json "{CALL_CLOSE}"'
    schema = json.loads(lines[2].removeprefix("call_json: %json "))
    assert schema["properties"]["name"] == {"const": "calculator"}
    assert schema["x-guidance"]["whitespace_flexible"] is False
    assert lines[3].startswith("text: /[^<")
    forced = lark_grammar(Output(tools=(("calculator", {}),), text=False))
    assert forced.splitlines()[0] == "start: call"
    structured = lark_grammar(Output(json_schema={"type": "object"}, text=False))
    assert structured.splitlines()[0] == "start: answer_json"
    # After the tools' round, text only, and it may not copy a call.
    assert lark_grammar(Output(no_calls=True)).splitlines() == ["start: text", lines[3]]


def test_the_gbnf_grammar_is_valid_for_llama_cpp() -> None:
    grammar_module = pytest.importorskip("llama_cpp.llama_grammar")
    output = Output(tools=(("calculator", calculator.spec.parameters), ("lookup", {})))
    gbnf = gbnf_grammar(output, grammar_module.SchemaConverter)
    assert gbnf.splitlines()[0] == "root ::= call | text"
    assert f'call ::= "{CALL_OPEN}" call-json "{CALL_CLOSE}"' in gbnf
    assert gbnf.count("root ::=") == 1
    grammar_module.LlamaGrammar.from_string(gbnf, verbose=False)  # parses
    structured = gbnf_grammar(
        Output(
            json_schema={"type": "object", "properties": {"a": {"type": "integer"}}}, text=False
        ),
        grammar_module.SchemaConverter,
    )
    assert structured.splitlines()[0] == "root ::= answer-json"
    grammar_module.LlamaGrammar.from_string(structured, verbose=False)
    # A JSON string's characters exclude control characters (the converter allowed raw newlines).
    strings = gbnf_grammar(
        Output(json_schema={"type": "object", "properties": {"a": {"type": "string"}}}, text=False),
        grammar_module.SchemaConverter,
    )
    char = next(line for line in strings.splitlines() if line.startswith("char ::="))
    assert char.startswith('char ::= [^"\\\\\\x7F\\x00-\\x1F] |'), char
    grammar_module.LlamaGrammar.from_string(strings, verbose=False)


def _output(*names: str) -> Output:
    return Output(tools=tuple((name, {}) for name in names))


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>',
            [("calculator", {"expression": "17 * 23"})],
        ),
        (
            ' <tool_call>{"name": "a", "arguments": {}}</tool_call>\n'
            '<tool_call>{"name": "b"}</tool_call>',
            [("a", {}), ("b", {})],
        ),
    ],
)
def test_tool_calls_are_parsed(text: str, calls: list[tuple[str, Any]]) -> None:
    answer, parsed = parse_output(text, _output("calculator", "a", "b"))
    assert answer == ""
    assert [(name, json.loads(arguments)) for name, arguments in parsed] == calls


def test_plain_text_is_the_answer() -> None:
    assert parse_output("Paris is the capital.", _output("calculator")) == (
        "Paris is the capital.",
        [],
    )
    # Without tools offered, even text that looks like a call is text.
    looks_like = '<tool_call>{"name": "x"}</tool_call>'
    assert parse_output(looks_like, Output()) == (looks_like, [])


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "calculator", "argu',  # cut short by max_tokens
        '<tool_call>{"name": "other", "arguments": {}}</tool_call>',  # not an offered tool
    ],
)
def test_a_broken_call_is_a_model_error(text: str) -> None:
    with pytest.raises(ModelError, match="unfinished tool call"):
        parse_output(text, _output("calculator"))


@pytest.mark.parametrize(
    ("description", "plain"),
    [
        ('The arithmetic to compute, e.g. "12.5 * 4 + 3".', "The arithmetic to compute."),
        ("A city (for example Paris).", "A city."),
        ("A date; for instance 2026-01-31.", "A date."),
        ("Units such as km or mi, like the map's.", "Units such as km or mi, like the map's."),
        ("No example here.", "No example here."),
    ],
)
def test_examples_are_taken_out_of_descriptions(description: str, plain: str) -> None:
    assert without_examples(description) == plain


def test_the_prompt_the_model_sees_carries_no_example_values() -> None:
    @tool
    def lookup(name: str) -> str:
        """Look up a colleague, e.g. "Alice Martin".

        Args:
            name: The person's full name, e.g. "Alice Martin".
        """
        return name

    request = ChatRequest(messages=[Message.user("q")], tools=[calculator.spec, lookup.spec])
    system = chat_messages(request, request.tools)[0]["content"]
    assert "12.5" not in system and "Alice" not in system
    assert "expression (string): The arithmetic to compute, written with numbers and" in system
    assert "name (string): The person's full name." in system


def test_free_strings_cannot_open_with_punctuation() -> None:
    import re

    pattern = re.compile(_PLAIN_STRING)
    for good in ("17 * 23", "(1 + 2) * 3", "-4", "Alice Martin", "\u00c9lise"):
        assert pattern.match(good), good
    for bad in (".17 * 23", " 17", "}", ",x", "?", "", "\x1b", "1\x1b", "a\nb", "\\u007f", "\x7f"):
        assert not pattern.match(bad), bad


def test_a_label_scores_its_own_first_token_only() -> None:
    from daimon.models.local._runtimes import label_scores

    # Tokens 7 ("n") and 9 ("l") begin labels too, but only each label's own first token counts:
    # llama.cpp reads it that way, so both runtimes choose alike.
    candidates = [(7, -0.7), (5, -1.6), (9, -2.3), (3, -0.1)]
    assert label_scores(candidates, [4, 5, 3]) == [-50.0, -1.6, -0.1]
