"""What the DP-MF parties refuse, and what they count once (issue 18): requests and uploads of items the
model does not have or of ratings outside the public range, contributions of the wrong width, a roster the
network delivered twice, requests for rounds and attempts already answered, pre-sharing shares outside a
pre-sharing attempt. Every refusal is a ledger rejection; the run goes on."""

from __future__ import annotations

import numpy as np
import trio

from fedrecsim.actors.membership import Join
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.models.mf import MFHyper
from fedrecsim.network.ledger import Ledger, RejectReason
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.protocols.dpmf.messages import (
    Aggregate,
    Contribution,
    ItemRequest,
    PresharingShare,
    RatingsUpload,
    Roster,
)
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.recommender import Recommender, TrustedRecommender
from fedrecsim.protocols.dpmf.third_party import Aggregator
from fedrecsim.seeding import Stream, generator

N_ITEMS, D = 6, 2
ALICE, BOB = Party(Role.USER, 0), Party(Role.USER, 1)
RING = Ring(32, 16)


def _public(scenario: str) -> PublicParameters:
    return PublicParameters(scenario, "protected", "explicit", MFHyper(d=D), RING, 1.0, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, D))


def _network() -> Network:
    network = Network(Links(0, LinkSpec(Constant(0.01))), Ledger())
    for party in (SERVER, THIRD_PARTY, ALICE, BOB):
        network.attach(party)
    return network


def _third_party(network: Network, scenario: str) -> Aggregator:
    aggregator = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 4, 0), _public(scenario))
    aggregator.horizon_s = 1e6
    return aggregator


def _problems(network: Network) -> list[tuple[Party, str, str]]:
    return [(row.src, row.reason.value, row.problem) for row in network.ledger.rejections]


async def test_the_trusted_recommender_keeps_only_valid_uploads(autojump_clock) -> None:
    network = _network()
    recommender = TrustedRecommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), _public("S1"), 2)
    async with network.open():
        network.send(ALICE, SERVER, RatingsUpload(np.array([1, 6], dtype=np.int32), np.array([2.0, 3.0])))
        network.send(BOB, SERVER, RatingsUpload(np.array([1, 2], dtype=np.int32), np.array([0.5, 3.0])))
        await trio.sleep(1.0)
        assert recommender.collect() == 0
        network.send(BOB, SERVER, RatingsUpload(np.array([1, 2], dtype=np.int32), np.array([5.0, 1.0])))
        await trio.sleep(1.0)
        assert recommender.collect() == 1
    assert _problems(network) == [
        (ALICE, "invalid", "server:0 expected valid dpmf.ratings from user:0: items below 6, received item 6"),
        (BOB, "invalid", "server:0 expected valid dpmf.ratings from user:1: ratings in [1, 5], received 0.5 .. 3"),
    ]


async def test_the_recommender_refuses_requests_for_items_it_does_not_have(autojump_clock) -> None:
    network = _network()
    recommender = Recommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), _public("S2"), max_users=10, k_presharing=2)
    async with network.open():
        for user in (ALICE, BOB):
            network.send(user, SERVER, Join())
        network.send(ALICE, SERVER, ItemRequest(np.array([0, 7], dtype=np.int32)))
        await trio.sleep(1.0)
        recommender.refresh()
        assert recommender.requests == {}
        network.send(BOB, SERVER, ItemRequest(np.array([9], dtype=np.int32)))
        assert await recommender.set_up_noise(trio.current_time() + 1.0) == 0  # BOB's, in the gather, refused too
    assert _problems(network) == [
        (ALICE, "invalid", "server:0 expected a valid dpmf.item_request from user:0: items below 6, received item 7"),
        (BOB, "invalid", "server:0 expected a valid dpmf.item_request from user:1: items below 6, received item 9"),
    ]


async def test_the_recommender_receives_the_third_partys_pre_sharing_sums_only_in_s3(autojump_clock) -> None:
    for scenario in ("S2", "S3"):
        network = _network()
        Recommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), _public(scenario), max_users=10, k_presharing=2)
        Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 4, 0), _public(scenario))
        expected = {Aggregate.KIND, ItemRequest.KIND, "core.join", "core.leave"} | ({"dpmf.presharing_aggregate"} if scenario == "S3" else set())
        assert network.mailbox(SERVER).receives == expected
        third = {Roster.KIND, Contribution.KIND} | ({PresharingShare.KIND} if scenario == "S3" else set())
        assert network.mailbox(THIRD_PARTY).receives == third


def _contribution(round_index: int, items: list[int], width: int = D) -> Contribution:
    return Contribution(round_index, np.array(items, dtype=np.int32), np.zeros((len(items), width), dtype=np.uint32))


async def test_the_third_party_works_a_roster_once_and_refuses_what_it_cannot_sum(autojump_clock) -> None:
    network = _network()
    aggregator = _third_party(network, "S2")
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(aggregator.run)
        roster = Roster(1, (ALICE, BOB), trio.current_time() + 2.0)
        network.send(SERVER, THIRD_PARTY, roster)
        network.send(SERVER, THIRD_PARTY, roster)  # a copy of it
        network.send(ALICE, THIRD_PARTY, _contribution(1, [0, 8]))
        network.send(BOB, THIRD_PARTY, _contribution(1, [1], width=3))
        await trio.sleep(5.0)
        nursery.cancel_scope.cancel()
    [aggregate] = network.mailbox(SERVER).take_all(Aggregate.KIND)
    assert aggregate.body.contributors == () and aggregate.body.items.size == 0
    assert _problems(network) == [
        (ALICE, "invalid", "third_party:0 expected a valid dpmf.contribution from user:0: items below 6, received item 8"),
        (BOB, "invalid", "third_party:0 expected a valid dpmf.contribution from user:1: rows of 2 words, received 3"),
    ]


async def test_the_third_party_refuses_pre_sharing_shares_when_no_attempt_is_under_way(autojump_clock) -> None:
    network = _network()
    aggregator = _third_party(network, "S3")
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(aggregator.run)
        network.send(ALICE, THIRD_PARTY, PresharingShare(3, np.array([0], dtype=np.int32), np.zeros((1, D), dtype=np.uint32)))
        await trio.sleep(1.0)
        network.send(SERVER, THIRD_PARTY, Roster(2, (ALICE,), trio.current_time() + 1.0))
        network.send(ALICE, THIRD_PARTY, _contribution(2, [0]))
        await trio.sleep(2.0)
        nursery.cancel_scope.cancel()
    [aggregate] = network.mailbox(SERVER).take_all(Aggregate.KIND)
    assert aggregate.body.contributors == (ALICE,)
    assert _problems(network) == [(
        ALICE, "unexpected",
        "third_party:0 expected dpmf.contribution of iteration 2 from user:0; received dpmf.presharing_share of "
        "attempt 3, which is not under way",
    )]
    assert network.ledger.rejections[0].reason is RejectReason.UNEXPECTED


async def test_a_roster_from_anyone_but_the_recommender_is_never_worked(autojump_clock) -> None:
    network = _network()
    aggregator = _third_party(network, "S2")
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(aggregator.run)
        network.send(ALICE, THIRD_PARTY, Roster(1, (ALICE,), trio.current_time() + 1.0))
        await trio.sleep(2.0)
        nursery.cancel_scope.cancel()
    assert network.mailbox(SERVER).take_all(Aggregate.KIND) == []
