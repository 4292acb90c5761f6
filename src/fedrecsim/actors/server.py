"""The server (recommender) role: it learns who is online only from join and leave messages."""

from __future__ import annotations

from typing import ClassVar

from ..network.party import Party, Role
from .actor import Actor
from .membership import update_members


class Server(Actor):
    """Generic server behaviour: the membership view built from the join/leave messages it received."""

    role: ClassVar[Role] = Role.SERVER

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.members: set[Party] = set()
        self._announced: dict[Party, tuple[float, int]] = {}

    def update_membership(self) -> set[Party]:
        """Apply every join and leave delivered so far, in the order they were sent, ignoring any sent
        before one already applied (`update_members`); returns who left."""
        return update_members(self, self.members, self._announced)
