"""What ldp_implicit's proxy and server refuse and count once (issue 18): reports of another number than k
or outside V, from a party that is not a user, twice for one epoch; a model from anyone but the server,
or twice; a report batch the network delivered twice. Every refusal is a ledger rejection, never an error."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import trio

from fedrecsim.actors.actor import Actor
from fedrecsim.models.implicit_mf import ImplicitHyper
from fedrecsim.network.ledger import Ledger, RejectReason
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.ldp_implicit.messages import Model, Relayed, ReportBatch, Reports
from fedrecsim.protocols.ldp_implicit.pool import Underfull
from fedrecsim.protocols.ldp_implicit.roles import LDPServer, ShuffleProxy
from fedrecsim.seeding import Stream, generator

PROXY = Party(Role.PROXY, 0)
OTHER_PROXY = Party(Role.PROXY, 1)


class Anyone(Actor):
    role: ClassVar[Role] = Role.USER


class AnyProxy(Actor):
    role: ClassVar[Role] = Role.PROXY


def _world(latency: LinkSpec | None = None) -> tuple[Network, ShuffleProxy]:
    network = Network(Links(1, latency or LinkSpec(Constant(0.01))), Ledger())
    for party in (SERVER, PROXY, OTHER_PROXY, *(Party(Role.USER, index) for index in range(4))):
        network.attach(party)
    proxy = ShuffleProxy(
        PROXY, network, generator(1, Stream.ACTOR, Role.PROXY.code, 0), server=SERVER, min_users=2,
        underfull=Underfull.DROP, batch_size=4, wait_s=5.0, horizon_s=1e6, reports_per_user=3, entries=12,
    )
    return network, proxy


def _reports(epoch: int, indices: list[int]) -> Reports:
    return Reports.pack(epoch, np.array(indices), np.ones(len(indices), dtype=np.int8))


async def test_the_proxy_refuses_reports_it_cannot_admit_and_relays_one_model_per_epoch(autojump_clock) -> None:
    network, proxy = _world()
    users = [Anyone(Party(Role.USER, index), network, np.random.default_rng(index)) for index in range(3)]
    intruder = AnyProxy(OTHER_PROXY, network, np.random.default_rng(9))
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        network.send(SERVER, PROXY, Model(1, np.zeros((4, 3))))
        network.send(SERVER, PROXY, Model(1, np.zeros((4, 3))))  # a copy: relayed once
        users[0].send(PROXY, Model(1, np.ones((4, 3))))  # not from the server
        await trio.sleep(1.0)
        users[0].send(PROXY, _reports(1, [0, 1, 2]))
        users[0].send(PROXY, _reports(1, [3, 4, 5]))  # a second message for epoch 1
        users[1].send(PROXY, _reports(1, [0, 1]))  # two reports, not three
        users[2].send(PROXY, _reports(1, [0, 1, 12]))  # an index outside the 4 x 3 of V
        intruder.send(PROXY, _reports(1, [0, 1, 2]))  # not a user
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    rows = sorted((row.src.index, row.src.role.value, row.reason.value, row.problem) for row in network.ledger.rejections)
    assert rows == [
        (0, "server", "duplicate", "proxy:0 received epoch 1's ldp.model twice; the first counts"),
        (0, "user", "duplicate", "proxy:0 received epoch 1's ldp.reports twice from user:0; the first counts"),
        (0, "user", "unexpected", "proxy:0 expected ldp.model from server:0, received it from user:0"),
        (1, "proxy", "invalid", "proxy:0 expected valid ldp.reports from proxy:1: reports come from users only"),
        (1, "user", "invalid", "proxy:0 expected valid ldp.reports from user:1: 3 reports, received 2"),
        (2, "user", "invalid", "proxy:0 expected valid ldp.reports from user:2: report indices below 12 (V's entries), received 12"),
    ]
    [pool] = proxy.pools.values()
    assert (pool.users, pool.reports) == (1, 3)  # only user:0's first message
    assert network.ledger.party(SERVER)["recv_msgs"] == 1  # one ldp.relayed: the model went out once


async def test_the_proxy_numbers_its_batches_per_epoch_across_releases(autojump_clock) -> None:
    network, proxy = _world()
    users = [Anyone(Party(Role.USER, index), network, np.random.default_rng(index)) for index in range(4)]
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        network.send(SERVER, PROXY, Model(1, np.zeros((4, 3))))
        await trio.sleep(1.0)
        for user in users[:2]:
            user.send(PROXY, _reports(1, [0, 1, 2]))
        await trio.sleep(1.0)
        for user in users[2:]:  # late ones: a second pool of epoch 1
            user.send(PROXY, _reports(1, [3, 4, 5]))
        await trio.sleep(1.0)
        network.send(SERVER, PROXY, Model(2, np.zeros((4, 3))))
        await trio.sleep(1.0)
        users[0].send(PROXY, _reports(2, [0, 1, 2]))
        users[1].send(PROXY, _reports(2, [0, 1, 2]))
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    batches = network.mailbox(SERVER).take_all(ReportBatch.KIND)
    assert [(envelope.body.epoch, envelope.body.batch) for envelope in batches] == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1)]
    assert proxy._admitted == {1: {user.party for user in users}, 2: {users[0].party, users[1].party}}


async def test_the_proxy_forgets_who_reported_in_epochs_the_server_no_longer_counts(autojump_clock) -> None:
    network, proxy = _world()
    user = Anyone(Party(Role.USER, 0), network, np.random.default_rng(0))
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        for epoch in (1, 2, 3):
            network.send(SERVER, PROXY, Model(epoch, np.zeros((4, 3))))
            await trio.sleep(1.0)
            user.send(PROXY, _reports(epoch, [0, 1, 2]))
            await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert set(proxy._admitted) == {2, 3}


async def test_the_server_counts_a_duplicated_batch_once(autojump_clock) -> None:
    network = Network(Links(1, LinkSpec(Constant(0.01), duplicate=1.0)), Ledger())
    for party in (SERVER, PROXY):
        network.attach(party)
    server = LDPServer(
        SERVER, network, generator(1, Stream.ACTOR, Role.SERVER.code, 0), n_items=4, hyper=ImplicitHyper(d=3),
        steps=1, epsilon=1.0, k=3, init_scale=0.1, proxies=(PROXY,),
    )
    proxy = AnyProxy(PROXY, network, np.random.default_rng(1))

    async def proxy_side() -> None:
        await proxy.recv(Model, deadline=trio.current_time() + 5.0)
        proxy.send(SERVER, Relayed(1, 1))
        proxy.send(SERVER, ReportBatch.pack(1, np.array([0, 1, 2]), np.ones(3, dtype=np.int8), batch=0))

    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy_side)
        report = await server.epoch(1, trio.current_time() + 5.0)
    assert (report.expected, report.received, report.late) == (3, 3, 0)
    duplicates = [row for row in network.ledger.rejections if row.kind == ReportBatch.KIND]
    assert [row.reason for row in duplicates] == [RejectReason.DUPLICATE]
    assert duplicates[0].problem == "server:0 received batch 0 of epoch 1 twice from proxy:0; the first counts"


@pytest.mark.parametrize("batch", [-1])
def test_a_batch_number_is_never_negative(batch: int) -> None:
    with pytest.raises(ValueError, match="batch must be >= 0, got -1"):
        ReportBatch.pack(1, np.array([0]), np.ones(1, dtype=np.int8), batch=batch).validate()
