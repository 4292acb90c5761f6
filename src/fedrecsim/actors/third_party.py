"""The semi-honest third party role: follows the protocol, curious about what it sees."""

from __future__ import annotations

from typing import ClassVar

from ..network.party import Role
from .actor import Actor


class ThirdParty(Actor):
    role: ClassVar[Role] = Role.THIRD_PARTY
