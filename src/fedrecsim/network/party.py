"""Parties: who sends and who receives.

A party is a ``(role, index)`` pair printed ``user:17``. Parties sort by role name then index; every
aggregation in fedrecsim iterates contributions in that order, which is what makes a run independent of
trio's (deliberately non-deterministic) scheduling order.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Role(enum.StrEnum):
    """The kinds of party a protocol can have."""

    USER = "user"
    SILO = "silo"
    SERVER = "server"
    PROXY = "proxy"
    THIRD_PARTY = "third_party"

    @property
    def code(self) -> int:
        """A small stable integer for this role, used on the wire and in seed derivation."""
        return _ROLE_CODES[self]

    @classmethod
    def from_code(cls, code: int) -> Role:
        try:
            return _ROLES_BY_CODE[code]
        except (KeyError, TypeError):
            raise ValueError(f"unknown role code {code!r}") from None


_ROLE_CODES = {role: code for code, role in enumerate(Role)}
_ROLES_BY_CODE = {code: role for role, code in _ROLE_CODES.items()}


class Party(NamedTuple):
    """One participant of a run: a role and a non-negative index within that role."""

    role: Role
    index: int

    def __str__(self) -> str:
        return f"{self.role.value}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> Party:
        """Parse ``"user:17"`` back into a party; raises ValueError on anything else."""
        role_name, sep, index_text = text.partition(":")
        if not sep or not index_text.isdigit():
            raise ValueError(f"not a party: {text!r} (expected ROLE:INDEX, e.g. user:17)")
        return cls(Role(role_name), int(index_text))


def user(index: int) -> Party:
    return Party(Role.USER, index)


SERVER = Party(Role.SERVER, 0)
THIRD_PARTY = Party(Role.THIRD_PARTY, 0)
