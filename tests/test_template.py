"""Single-pass substitution (DESIGN.md section 1), with property-based tests against a
reference scanner written independently of the implementation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flownb.flowfile.template import Template, render


def reference(text: str, values: dict[str, str]) -> str:
    """Scan left to right; at each '{', take the longest known label closed by '}'."""
    out = []
    i = 0
    labels = sorted(values, key=len, reverse=True)
    while i < len(text):
        if text[i] == "{":
            for label in labels:
                token = "{" + label + "}"
                if text.startswith(token, i):
                    out.append(values[label])
                    i += len(token)
                    break
            else:
                out.append("{")
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def test_every_occurrence_replaced() -> None:
    assert render("{a} and {a} and {b}", {"a": "x", "b": "y"}) == "x and x and y"


def test_values_are_copied_verbatim() -> None:
    tricky = r"C:\new\table $1 \g<0> \1 {b} {{a}}"
    assert render("[{a}]", {"a": tricky, "b": "NO"}) == f"[{tricky}]"


def test_value_holding_another_placeholder_is_not_substituted_again() -> None:
    assert render("{a}-{b}", {"a": "{b}", "b": "{a}"}) == "{b}-{a}"


def test_unknown_placeholders_json_and_spaced_labels_stay_literal() -> None:
    text = '{"key": 1} {unknown} { topic } {topic} {Topic}'
    assert render(text, {"topic": "owls"}) == '{"key": 1} {unknown} { topic } owls {Topic}'


def test_labels_with_spaces_and_punctuation() -> None:
    values = {"c++ (lang)": "C++", "first name": "Ada", "a.b": "dot", "x}": "brace"}
    text = "{c++ (lang)} by {first name}; {a.b}; {x}}"
    assert render(text, values) == "C++ by Ada; dot; brace"


def test_longest_label_wins_where_two_match() -> None:
    assert render("{a}}", {"a": "1", "a}": "2"}) == "2"


def test_nested_braces_around_a_label() -> None:
    assert render("{{a}}", {"a": "x"}) == "{x}"


def test_template_reports_names_in_first_use_order() -> None:
    t = Template("{b} {a} {b} {zzz}", ["a", "b", "c"])
    assert t.names == ("b", "a")


def test_text_without_labels_is_returned_as_is() -> None:
    assert Template("plain {text}", []).render({}) == "plain {text}"


label_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="{}")
labels = st.text(label_chars, min_size=1, max_size=6)
values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    mapping = draw(st.dictionaries(labels, values, min_size=1, max_size=4))
    pieces = st.one_of(
        st.sampled_from(["{" + k + "}" for k in mapping]),
        st.text(max_size=8),
        st.sampled_from(["{", "}", "{{", "}}", "{ x }", "$1", "\\", "\\1"]),
    )
    text = "".join(draw(st.lists(pieces, max_size=10)))
    return text, mapping


@settings(max_examples=400, deadline=None)
@given(cases())
def test_matches_reference_scanner(case: tuple[str, dict[str, str]]) -> None:
    text, mapping = case
    assert render(text, mapping) == reference(text, mapping)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(labels, values, min_size=1, max_size=4))
def test_rendering_placeholders_alone_yields_the_values(mapping: dict[str, str]) -> None:
    text = "\x00".join("{" + k + "}" for k in mapping)
    assert render(text, mapping) == "\x00".join(mapping.values())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.dictionaries(labels, values, max_size=3))
def test_text_without_known_placeholders_is_unchanged(text: str, mapping: dict[str, str]) -> None:
    if any("{" + k + "}" in text for k in mapping):
        return
    assert render(text, mapping) == text
