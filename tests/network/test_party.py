"""Parties: role codes, printing and parsing (issue 13)."""

from __future__ import annotations

import pytest

from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role, user


def test_role_codes_are_the_declaration_order_and_round_trip() -> None:
    # The codes travel on the wire and feed the seeds: user 0, silo 1, server 2, proxy 3, third party 4.
    roles = [Role.USER, Role.SILO, Role.SERVER, Role.PROXY, Role.THIRD_PARTY]
    assert [role.code for role in roles] == [0, 1, 2, 3, 4]
    assert [Role.from_code(code) for code in range(5)] == roles


@pytest.mark.parametrize("code", [5, -1, "0", None, 1.5])
def test_an_unknown_role_code_is_a_value_error_naming_it(code: object) -> None:
    with pytest.raises(ValueError, match=f"^unknown role code {code!r}$".replace("(", r"\(").replace(")", r"\)")):
        Role.from_code(code)  # type: ignore[arg-type]


def test_a_party_prints_and_parses_as_role_colon_index() -> None:
    assert str(Party(Role.THIRD_PARTY, 12)) == "third_party:12"
    assert Party.parse("user:17") == Party(Role.USER, 17) == user(17)
    assert Party.parse("server:0") is not None and Party.parse("server:0") == SERVER
    assert THIRD_PARTY == Party(Role.THIRD_PARTY, 0)
    assert SERVER == Party(Role.SERVER, 0)
    for party in (SERVER, THIRD_PARTY, user(3), Party(Role.PROXY, 40)):
        assert Party.parse(str(party)) == party


@pytest.mark.parametrize("text", ["user17", "user:", "user:-1", "user:1.5", "user:x", ":3"])
def test_malformed_party_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Party.parse(text)


@pytest.mark.parametrize("text", ["user17", "user:", "user:-1"])
def test_malformed_party_text_names_the_expected_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a party: .* \(expected ROLE:INDEX, e\.g\. user:17\)"):
        Party.parse(text)


def test_parties_sort_by_role_name_then_index() -> None:
    parties = [user(10), SERVER, user(2), Party(Role.SILO, 1), THIRD_PARTY]
    assert sorted(parties) == [SERVER, Party(Role.SILO, 1), THIRD_PARTY, user(2), user(10)]


@pytest.mark.parametrize("text", ["user:1:2", "user:", "user: 3"])
def test_only_the_first_colon_separates_role_and_index(text: str) -> None:
    with pytest.raises(ValueError, match=f"^not a party: {text!r} "):
        Party.parse(text)
