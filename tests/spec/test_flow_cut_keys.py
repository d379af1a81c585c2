"""An unquoted ',' in a flow mapping's value cuts the rest into a key: PF102 (an unknown
key) says to quote the value, as PF104 does for a tool's parameters."""

from __future__ import annotations

from phaseflow.spec.loader import check_text

FILE = """\
phaseflow: 1
name: desk
initial: a
state:
  account: ACCOUNT
phases:
  a:
    goal: g
    terminal: true
"""


def _messages(account: str) -> list[tuple[str, int, int, str]]:
    return [(d.code, d.line, d.column, d.message)
            for d in check_text(FILE.replace("ACCOUNT", account)).diagnostics]


def test_a_cut_key_with_spaces_says_to_quote_the_value() -> None:
    assert _messages("{type: object, description: The department, and whether the account "
                     "is active}") == [(
        "PF102", 5, 56,
        "unknown key 'and whether the account is active' in state key 'account': in a flow "
        "mapping ({...}) a ',' ends an unquoted value, so this is the text after a ',' in "
        "'description'; quote that text: description: \"The department, and whether the "
        "account is active\"")]


def test_two_cuts_of_one_value_give_the_whole_value_to_quote() -> None:
    found = _messages("{type: string, description: Phone, E.164, with the country code}")
    assert [code for code, *_ in found] == ["PF102", "PF102"]
    assert all(m.endswith('quote that text: description: "Phone, E.164, with the country '
                          'code"') for *_, m in found)


def test_a_key_written_with_a_colon_is_an_unknown_key_as_before() -> None:
    assert _messages("{type: string, description: Phone, defualt: x}") == [(
        "PF102", 5, 47, "unknown key 'defualt' in state key 'account'; did you mean "
                        "'default'?")]


def test_in_a_block_mapping_a_comma_cuts_nothing() -> None:
    block = "\n    type: string\n    description: Phone, E.164\n    bogus key: 1"
    found = _messages(block)
    assert [(code, m.split(";")[0].split(" (")[0]) for code, _, _, m in found] == [
        ("PF102", "unknown key 'bogus key' in state key 'account'")]
    assert "quote" not in found[0][3]
