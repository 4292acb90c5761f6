"""One secure-aggregation session on a small simulated network, for the tests: users that crash at a
chosen stage, the server's result (or its abort), every party's ledger counters and the server's view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import trio
import trio.testing

from fedrecsim.actors.server import Server
from fedrecsim.actors.user import User
from fedrecsim.errors import SecAggAborted
from fedrecsim.network.links import LinkSpec
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.secagg import Aggregate, IdealSum, SecAggParams, Stage, aggregate, participate
from fedrecsim.testing import open_network

SESSION = 7


class SummingUser(User):
    """Holds ``x``; takes part in one session; goes silent before sending its ``crash_at`` message."""

    def __init__(self, party, network, rng, x, params, ideal, crash_at=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(party, network, rng)
        self.x = x
        self.params = params
        self.ideal = ideal
        self.crash_at = crash_at
        self.contribution = None

    def _crash(self, session: int, stage: Stage) -> bool:
        if stage is self.crash_at:
            self.network.detach(self.party)
            return True
        return False

    async def run(self) -> None:
        self.contribution = await participate(
            self, self.x, self.params, deadline=trio.current_time() + 500.0, ideal=self.ideal, crash=self._crash
        )


@dataclass
class Outcome:
    result: Aggregate | SecAggAborted
    ledger: dict[Party, dict[str, int]]
    users: dict[Party, SummingUser]
    seen: list = field(default_factory=list)  # the server's view: (src, message)

    @property
    def truth(self) -> np.ndarray:
        """The sum the simulator knows: the inputs of the users in U3, mod 2^b."""
        assert isinstance(self.result, Aggregate)
        dtype = next(iter(self.users.values())).x.dtype
        total = np.zeros_like(next(iter(self.users.values())).x)
        for party in self.result.survivors:
            total = (total + self.users[party].x).astype(dtype)
        return total


async def session(
    inputs: np.ndarray,
    params: SecAggParams,
    crash_at: Mapping[int, Stage] | None = None,
    *,
    seed: int = 0,
    links: LinkSpec = LinkSpec(),
) -> Outcome:
    """One session over users 0..n-1 holding ``inputs[i]``; ``crash_at[i]`` makes user i crash there."""
    crash_at = dict(crash_at or {})
    ideal = IdealSum() if params.ideal else None
    async with open_network(seed=seed, links=links) as sim:
        server = Server(SERVER, sim.network, sim.actor_rng(SERVER))
        sim.attach(SERVER)
        record = sim.record(SERVER)
        users = {}
        for index, x in enumerate(inputs):
            party = Party(Role.USER, index)
            users[party] = SummingUser(party, sim.network, sim.actor_rng(party), x, params, ideal, crash_at.get(index))
        async with trio.open_nursery() as nursery:
            for party, user in users.items():
                sim.attach(party)
                nursery.start_soon(user.run)
            await trio.sleep(0)
            try:
                result: Aggregate | SecAggAborted = await aggregate(
                    server, list(users), inputs.shape[1], params, session=SESSION,
                    deadline=trio.current_time() + 400.0, ideal=ideal,
                )
            except SecAggAborted as aborted:
                result = aborted
        ledger = {party: sim.network.ledger.party(party) for party in [SERVER, *users]}
        seen = [(envelope.src, envelope.body) for envelope in record]
    return Outcome(result, ledger, users, seen)


def run_session(*args, **kwargs) -> Outcome:  # type: ignore[no-untyped-def]
    """`session` in a fresh trio loop on a virtual clock (for hypothesis tests, which cannot share one)."""

    async def main() -> Outcome:
        return await session(*args, **kwargs)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def inputs(n: int, length: int, ring, seed: int = 1) -> np.ndarray:  # type: ignore[no-untyped-def]
    """n uniform inputs of ``length`` ring elements."""
    return ring.uniform(np.random.default_rng(seed), (n, length))
