"""The user role: a party holding its own ratings, which may churn, crash mid-round or straggle."""

from __future__ import annotations

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

    crash_round: int | None = None
    compute_delay_s: float = 0.0
    computing_until: float | None = None
    model_use: ModelUse | None = None
    server: Party = SERVER

    def at_rest(self) -> bool:
        """At a resume point of `resume`: waiting for a delivery until `horizon_s`, or computing."""
        return self.computing_until is not None or super().at_rest()

    async def resume(self) -> None:
        """Carry on from a checkpoint (`fedrecsim.checkpoint`): what ``run`` does once it first waits for a
        delivery until `horizon_s`, without what it sent before.

        A user class of a protocol that resumes implements it so that, from the user's state, it reaches
        the same wait ``run`` was in. The resume points are every wait of ``run`` for a delivery until
        `horizon_s`, and `compute` when the user saved what it does afterwards in its state: its
        ``resume`` first calls `compute_rest`, and if that returns True, does it. `Population.not_at_rest`
        holds checkpoints back while a user is anywhere else.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot resume from a checkpoint")

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
        """Spend this round's local compute time (the straggler model) in virtual time; meanwhile
        ``computing_until`` says until when."""
        if self.model_use is not None:
            self.model_use.compute = True
        if self.compute_delay_s > 0:
            self.computing_until = self.now + self.compute_delay_s
            await self.compute_rest()

    async def compute_rest(self) -> bool:
        """Spend the rest of the compute time under way (`resume`: a checkpoint found the user computing);
        False if none was."""
        until = self.computing_until
        if until is None:
            return False
        try:
            await self.network.sleep_until(until)
        finally:
            self.computing_until = None
        return True
