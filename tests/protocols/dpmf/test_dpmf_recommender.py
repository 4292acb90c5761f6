"""The S3 recommender's bookkeeping of item requests and of the raters it knows of."""

from __future__ import annotations

import numpy as np
import trio

from fedrecsim.actors.membership import Join, Leave
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.models.mf import MFHyper
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.dpmf.messages import ItemRequest
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.recommender import Recommender
from fedrecsim.seeding import Stream, generator

N_ITEMS = 6
ALICE, BOB = Party(Role.USER, 0), Party(Role.USER, 1)


def _recommender(network: Network) -> Recommender:
    public = PublicParameters(
        "S3", "protected", "explicit", MFHyper(d=2), Ring(64, 32), 1.0, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, 2)
    )
    network.attach(SERVER)
    return Recommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), public, max_users=10, k_presharing=2)


def _send(network: Network, party: Party, body: object) -> None:
    network.attach(party)
    network.send(party, SERVER, body)


async def test_a_request_before_its_join_waits_and_a_leave_withdraws_it(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _recommender(network)
    async with network.open():
        _send(network, ALICE, ItemRequest(np.array([0, 2], dtype=np.int32)))
        await trio.sleep(0.01)
        recommender.refresh()
        assert recommender.requests == {}, "no request is pending before its sender joined"
        _send(network, ALICE, Join())
        _send(network, BOB, Join())
        _send(network, BOB, ItemRequest(np.array([2, 3], dtype=np.int32)))
        await trio.sleep(0.01)
        recommender.refresh()
        assert list(recommender.requests) == [ALICE, BOB]
        np.testing.assert_array_equal(recommender.known_raters, [1, 0, 2, 1, 0, 0])
        _send(network, ALICE, Leave())
        await trio.sleep(0.01)
        recommender.refresh()
        assert list(recommender.requests) == [BOB]
        # A user's rated items count once towards k_j, however often it asks again.
        _send(network, ALICE, Join())
        _send(network, ALICE, ItemRequest(np.array([0, 2], dtype=np.int32)))
        await trio.sleep(0.01)
        recommender.refresh()
        np.testing.assert_array_equal(recommender.known_raters, [1, 0, 2, 1, 0, 0])
