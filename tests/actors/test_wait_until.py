"""Actor.wait_until: a condition on what was delivered, re-checked after each delivery, with a deadline."""

from __future__ import annotations

import pytest
import trio

from fedrecsim.actors.membership import Join
from fedrecsim.actors.server import Server
from fedrecsim.errors import PartyTimeout
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.seeding import Stream, generator

USERS = [Party(Role.USER, index) for index in range(3)]


def _server() -> tuple[Network, Server]:
    network = Network(Links(0, LinkSpec(Constant(0.5))), Ledger())
    server = Server(SERVER, network, generator(0, Stream.ACTOR, 2, 0))
    for party in (SERVER, *USERS):
        network.attach(party)
    return network, server


def _all_joined(server: Server, users: list[Party]):  # type: ignore[no-untyped-def]
    def check() -> bool:
        server.update_membership()
        return server.members.issuperset(users)

    return check


async def test_it_returns_at_the_delivery_that_makes_the_condition_hold(autojump_clock) -> None:
    network, server = _server()
    async with network.open():
        start = trio.current_time()

        async def join_later(party: Party, after_s: float) -> None:
            await network.sleep(after_s)
            network.send(party, SERVER, Join())

        async with trio.open_nursery() as nursery:
            for position, party in enumerate(USERS):
                nursery.start_soon(join_later, party, 1.0 + position)
            await server.wait_until(_all_joined(server, USERS), deadline=start + 60.0, what="every user's join")
            waited = trio.current_time() - start
    # The last join is sent at 3 s and arrives 0.5 s later (1 ms resolution).
    assert waited == pytest.approx(3.5, abs=0.002)
    assert server.members == set(USERS)


async def test_a_condition_that_already_holds_does_not_wait(autojump_clock) -> None:
    network, server = _server()
    async with network.open():
        start = trio.current_time()
        await server.wait_until(lambda: True, deadline=start + 60.0, what="nothing")
        assert trio.current_time() == start


async def test_a_condition_still_false_at_the_deadline_is_a_party_timeout_naming_what(autojump_clock) -> None:
    network, server = _server()
    async with network.open():
        start = trio.current_time()
        network.send(USERS[0], SERVER, Join())
        with pytest.raises(PartyTimeout, match=r"server:0 waited for every user's join until t=\S+s; it did not come"):
            await server.wait_until(_all_joined(server, USERS), deadline=start + 10.0, what="every user's join")
        assert trio.current_time() - start == pytest.approx(10.0)
    assert server.members == {USERS[0]}
