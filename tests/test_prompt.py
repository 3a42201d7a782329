from __future__ import annotations

import pytest

from daimon.core import BuilderError, Message, PromptTemplateError, Role
from daimon.prompt import PromptTemplate, few_shot


def test_render_fills_placeholders() -> None:
    template = PromptTemplate("Hello {{name}}, you are {{ role }}.")
    assert template.render(name="Ada", role="an engineer") == "Hello Ada, you are an engineer."


@pytest.mark.parametrize("placeholder", ["{{x}}", "{{ x }}", "{{  x\t}}", "{{\nx\n}}"])
def test_whitespace_inside_braces_is_allowed(placeholder: str) -> None:
    template = PromptTemplate(f"<{placeholder}>")
    assert template.variables == frozenset({"x"})
    assert template.render(x=1) == "<1>"


def test_variables_are_parsed_once_into_a_frozenset() -> None:
    template = PromptTemplate("{{a}} {{b}} {{a}}")
    assert template.variables == frozenset({"a", "b"})
    assert isinstance(template.variables, frozenset)
    assert template.render(a="1", b="2") == "1 2 1"


def test_missing_variables_are_all_listed() -> None:
    template = PromptTemplate("{{zeta}} {{alpha}} {{given}}")
    with pytest.raises(PromptTemplateError) as caught:
        template.render(given="x")
    assert caught.value.missing == ("alpha", "zeta")
    assert "alpha, zeta" in str(caught.value)
    assert isinstance(caught.value, BuilderError)


def test_extra_values_are_ignored() -> None:
    assert PromptTemplate("hi {{name}}").render(name="Bo", unused=3) == "hi Bo"


def test_values_are_converted_with_str() -> None:
    assert PromptTemplate("{{n}} items, {{ok}}").render(n=3, ok=None) == "3 items, None"


def test_values_are_not_expanded_again() -> None:
    template = PromptTemplate("{{a}}|{{b}}")
    assert template.render(a="{{b}}", b="B") == "{{b}}|B"


def test_a_template_without_placeholders_renders_as_is() -> None:
    text = 'Reply as JSON like {"a": {"b": 1}} and }} stays'
    template = PromptTemplate(text)
    assert template.variables == frozenset()
    assert template.render() == text


def test_escaped_braces_are_literal() -> None:
    template = PromptTemplate(r"Write \{{ name }} to get {{ name }}.")
    assert template.variables == frozenset({"name"})
    assert template.render(name="Ada") == "Write {{ name }} to get Ada."


def test_an_escaped_brace_that_is_never_closed_is_fine() -> None:
    assert PromptTemplate(r"open \{{ only").render() == "open {{ only"


@pytest.mark.parametrize(
    "text", ["Hello {{name", "{{ 1abc }}", "{{}}", "{{ a b }}", "{{ user.name }}"]
)
def test_malformed_placeholders_fail_at_construction(text: str) -> None:
    with pytest.raises(BuilderError, match="prompt template"):
        PromptTemplate(text)


def test_partial_fills_some_variables_now() -> None:
    template = PromptTemplate("{{greeting}}, {{name}}! {{greeting}} again.")
    hello = template.partial(greeting="Hello", unused="x")
    assert hello.variables == frozenset({"name"})
    assert hello.render(name="Ada") == "Hello, Ada! Hello again."
    assert template.variables == frozenset({"greeting", "name"})  # the original is unchanged


def test_partial_values_stay_literal() -> None:
    template = PromptTemplate("{{a}} then {{b}}")
    partial = template.partial(a="{{b}}")
    assert partial.variables == frozenset({"b"})
    assert partial.render(b="B") == "{{b}} then B"
    # Its text parses back to the same template.
    assert PromptTemplate(partial.template) == partial


def test_partial_of_everything_needs_no_values() -> None:
    assert PromptTemplate("{{a}}{{b}}").partial(a=1, b=2).render() == "12"


def test_templates_compare_by_content() -> None:
    assert PromptTemplate("{{ a }}!") == PromptTemplate("{{a}}!")
    assert PromptTemplate("{{a}}") != PromptTemplate("{{b}}")
    assert hash(PromptTemplate("{{ a }}!")) == hash(PromptTemplate("{{a}}!"))
    assert PromptTemplate("x") != "x"


def test_template_and_repr_show_the_source() -> None:
    template = PromptTemplate("Hi {{ name }}")
    assert template.template == "Hi {{ name }}"
    assert repr(template) == "PromptTemplate('Hi {{ name }}')"


def test_few_shot_builds_user_assistant_pairs() -> None:
    messages = few_shot([("2+2?", "4"), ("3+3?", "6")])
    assert messages == [
        Message.user("2+2?"),
        Message.assistant("4"),
        Message.user("3+3?"),
        Message.assistant("6"),
    ]
    assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT] * 2


def test_few_shot_accepts_any_iterable() -> None:
    assert few_shot(iter([])) == []
    assert few_shot(pair for pair in [("q", "a")]) == [Message.user("q"), Message.assistant("a")]
