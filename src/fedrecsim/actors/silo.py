"""The silo role: an organisation holding many users' data (cross-silo protocols)."""

from __future__ import annotations

from typing import ClassVar

from ..network.party import Role
from .actor import Actor


class Silo(Actor):
    role: ClassVar[Role] = Role.SILO
