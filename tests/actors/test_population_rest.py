"""Which users a checkpoint may be taken around (issue 18): those waiting for a delivery until their
horizon, or computing -- the resume points of `User.resume` -- and no others."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio

from fedrecsim.actors.population import Population
from fedrecsim.actors.user import User
from fedrecsim.network.availability import AlwaysOnline
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.network.wire import message
from fedrecsim.seeding import Stream, generator


@message("test.checkpoint_ping")
@dataclass(frozen=True)
class Ping:
    round: int


class Dozing(User):
    """Waits for a ping until its horizon (a resume point), then sleeps elsewhere or computes."""

    async def run(self) -> None:
        request = (await self.recv(Ping, deadline=self.horizon_s)).body
        if request.round == 1:
            await self.network.sleep(50.0)  # not a resume point
        else:
            self.compute_delay_s = 50.0
            await self.compute()  # a resume point


async def test_only_users_waiting_for_a_delivery_or_computing_are_at_rest(autojump_clock) -> None:
    network = Network(Links(5, LinkSpec(Constant(0.01))), Ledger())
    network.attach(SERVER)
    users = {Party(Role.USER, i): Dozing(Party(Role.USER, i), network, generator(5, Stream.ACTOR, 0, i)) for i in range(3)}
    population = Population(network, users, churn=AlwaysOnline(), seed=5, horizon_s=1e7)
    async with network.open(), population.open():
        await trio.sleep(1.0)
        assert population.not_at_rest() == []
        network.send(SERVER, Party(Role.USER, 1), Ping(1))
        network.send(SERVER, Party(Role.USER, 2), Ping(2))
        await trio.sleep(1.0)
        assert population.not_at_rest() == [Party(Role.USER, 1)]
        assert users[Party(Role.USER, 2)].computing_until == pytest.approx(1.01 + 50.0, abs=0.01)
        await trio.sleep(60.0)
        assert users[Party(Role.USER, 2)].computing_until is None
        # Both tasks are over: neither is waited for, at rest or not.
        assert population.not_at_rest() == []
