"""The user role: a party holding its own ratings, which may churn, crash mid-round or straggle."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..network.party import SERVER, Party, Role
from .actor import Actor
from .membership import Join, Leave


@dataclass
class ModelUse:
    """Whether any user of a run consulted the dropout model (`User.crashes_in`) and the straggler model
    (`User.compute`); a run whose scenario configures a model nobody consulted says so in its result."""

    dropout: bool = False
    compute: bool = False


class User(Actor):
    """Generic user behaviour shared by every protocol.

    The population (the simulator's model of the world, not a party) sets ``horizon_s`` (the deadline of
    a user's every wait) and ``model_use`` once, and ``crash_round`` and ``compute_delay_s`` at the start
    of each round; a protocol's user code calls ``crashes_in`` right after it received the round's request
    and ``compute`` before it replies.
    """

    role: ClassVar[Role] = Role.USER

    horizon_s: float = math.inf
    crash_round: int | None = None
    compute_delay_s: float = 0.0
    model_use: ModelUse | None = None
    server: Party = SERVER

    def announce_join(self) -> None:
        self.send(self.server, Join())

    def announce_leave(self) -> None:
        self.send(self.server, Leave())

    def crashes_in(self, round_index: int) -> bool:
        """True if this user is to crash in ``round_index``; it then goes silent (detached) for the round."""
        if self.model_use is not None:
            self.model_use.dropout = True
        if self.crash_round != round_index:
            return False
        self.network.detach(self.party)
        return True

    async def compute(self) -> None:
        """Spend this round's local compute time (the straggler model) in virtual time."""
        if self.model_use is not None:
            self.model_use.compute = True
        if self.compute_delay_s > 0:
            await self.network.sleep(self.compute_delay_s)
