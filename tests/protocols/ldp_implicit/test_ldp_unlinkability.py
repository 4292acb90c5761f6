"""Unlinkability: the server hears only proxies, and the order of what it hears says nothing about users."""

from __future__ import annotations

import dataclasses
import typing
from typing import ClassVar

import numpy as np
import pytest
import trio
from scipy import stats

import fedrecsim
from fedrecsim.actors.actor import Actor
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links, LogNormal
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.ldp_implicit.messages import Relayed, ReportBatch, Reports
from fedrecsim.protocols.ldp_implicit.pool import Underfull
from fedrecsim.protocols.ldp_implicit.roles import ShuffleProxy
from fedrecsim.seeding import Stream, generator

PROXY = Party(Role.PROXY, 0)


def test_the_servers_view_holds_no_user_identity() -> None:
    tables = {
        "run": {"protocol": "ldp_implicit", "seed": 9, "rounds": 2},
        "data": {"source": "synthetic", "feedback": "implicit", "users": 30, "items": 150, "ratings": 300,
                 "split": "leave_one_out"},
        "network": {"latency": {"model": "lognormal", "median_s": 0.05, "sigma": 0.5}},
        "availability": {"model": "bernoulli", "p_join": 0.2, "p_leave": 0.2},
        "protocol": {"k": 10, "proxies": 2, "min_users": 5},
    }
    view = fedrecsim.run(tables, record_views=[SERVER]).views[SERVER]
    assert view
    assert all(envelope.src.role is Role.PROXY for envelope in view)
    assert {envelope.kind for envelope in view} == {"ldp.relayed", "ldp.report_batch"}
    # Structurally, too: no field of what the server receives can carry a party.
    for kind in (Relayed, ReportBatch):
        hints = typing.get_type_hints(kind, include_extras=True)
        assert all(hints[field.name] is not Party for field in dataclasses.fields(kind))


class Sender(Actor):
    """A user whose reports name it to the test: user u sends indices u*k .. u*k + k - 1."""

    role: ClassVar[Role] = Role.USER

    async def report(self, epoch: int, delay_s: float, k: int) -> None:
        await trio.sleep(delay_s)
        indices = np.arange(self.party.index * k, (self.party.index + 1) * k)
        self.send(PROXY, Reports.pack(epoch, indices, np.ones(k, dtype=np.int8)))


def _one_proxy(n_users: int, link: LinkSpec, seed: int, views: list[Party]) -> tuple[Network, list, ShuffleProxy]:
    """A network of the server, one proxy that releases only whole epochs, and ``n_users`` senders."""
    network = Network(Links(seed, link), Ledger(), record_views=views)
    for party in (SERVER, PROXY, *(Party(Role.USER, index) for index in range(n_users))):
        network.attach(party)
    senders = [
        Sender(Party(Role.USER, index), network, generator(seed, Stream.ACTOR, 0, index)) for index in range(n_users)
    ]
    proxy = ShuffleProxy(
        PROXY, network, generator(seed, Stream.ACTOR, Role.PROXY.code, 0),
        server=SERVER, min_users=n_users, underfull=Underfull.HOLD, batch_size=50, wait_s=30.0, horizon_s=1e6,
    )
    return network, senders, proxy


async def test_arrival_order_at_the_server_is_independent_of_send_order_and_latency(autojump_clock) -> None:
    """30 users send 8 reports each at random times over log-normal links (sigma 1), 25 epochs.

    Before the proxy, the order is the users' timing: a user's arrival rank at the proxy follows its
    send time (Spearman rho > 0.5). After it, the position of each report at the server is tested
    against its sender's arrival rank: Spearman test on 6,000 reports, fixed seeds, level 0.01.
    """
    n_users, k, epochs = 30, 8, 25
    network, senders, proxy = _one_proxy(n_users, LinkSpec(LogNormal(0.05, 1.0)), seed=1, views=[SERVER, PROXY])
    timing = np.random.default_rng(3)
    send_rank_vs_arrival, arrival_vs_position = [], []
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        for epoch in range(1, epochs + 1):
            delays = timing.uniform(0.0, 1.0, n_users)
            async with trio.open_nursery() as sending:
                for sender, delay in zip(senders, delays):
                    sending.start_soon(sender.report, epoch, float(delay), k)
            received = 0
            while received < n_users * k:
                await trio.sleep(0.5)
                received = sum(e.body.indices.size for e in network.view(SERVER) if e.body.epoch == epoch)
            arrivals = [e.src.index for e in network.view(PROXY) if e.kind == "ldp.reports" and e.body.epoch == epoch]
            arrival_rank = np.empty(n_users)
            arrival_rank[arrivals] = np.arange(n_users)
            send_rank_vs_arrival.append(stats.spearmanr(np.argsort(np.argsort(delays)), arrival_rank).statistic)
            at_server = np.concatenate([e.body.indices for e in network.view(SERVER) if e.body.epoch == epoch])
            arrival_vs_position.append(np.stack([arrival_rank[at_server // k], np.arange(at_server.size)]))
        nursery.cancel_scope.cancel()
    assert all(envelope.src == PROXY for envelope in network.view(SERVER))
    assert np.mean(send_rank_vs_arrival) > 0.5
    pairs = np.concatenate(arrival_vs_position, axis=1)
    assert stats.spearmanr(pairs[0], pairs[1]).pvalue > 0.01
    # The first user to arrive is not first at the server more often than anyone else: where its
    # reports land, as a fraction of the pool, is uniform (KS, 200 positions).
    first = np.concatenate([np.flatnonzero(pair[0] == 0) / pair.shape[1] for pair in arrival_vs_position])
    assert stats.kstest(first, "uniform").pvalue > 0.01


def adjacent_same_user_null(n_users: int, k: int) -> tuple[float, float]:
    """Mean and variance of the number of adjacent same-user pairs when n_users x k reports are in a
    uniformly random order.

    With N = n_users * k and I_i = [reports i and i+1 have one sender], P(I_i) = (k-1)/(N-1). Two
    overlapping pairs (i, i+1, i+2 one sender) have probability (k-1)(k-2)/((N-1)(N-2)); two disjoint
    pairs are one sender's or two senders', [n k(k-1)(k-2)(k-3) + n(n-1) k^2 (k-1)^2] / (N(N-1)(N-2)(N-3)).
    """
    n, N = n_users, n_users * k
    p = (k - 1) / (N - 1)
    overlapping = (k - 1) * (k - 2) / ((N - 1) * (N - 2))
    disjoint = (n * k * (k - 1) * (k - 2) * (k - 3) + n * (n - 1) * k**2 * (k - 1) ** 2) / (
        N * (N - 1) * (N - 2) * (N - 3)
    )
    mean = (N - 1) * p
    variance = mean + 2 * (N - 2) * overlapping + (N - 2) * (N - 3) * disjoint - mean**2
    return mean, variance


async def test_the_released_order_does_not_keep_a_users_reports_together(autojump_clock) -> None:
    """30 users x 8 reports, 25 epochs, one pool per epoch cut in batches of 50: in the order the server
    receives an epoch's reports, count the neighbours that came from one user.

    Under a uniform permutation of the pool the count has mean k - 1 = 7 per epoch (whatever the
    number of users) and the variance of `adjacent_same_user_null` (6.79); over 25 epochs, 175 with
    sd 13.0. The test allows 4 sd either way (fixed seeds). A proxy that shuffles users instead of
    reports -- each user's 8 reports released as one run -- gives 7 pairs per user, 210 per epoch.
    """
    n_users, k, epochs = 30, 8, 25
    network, senders, proxy = _one_proxy(n_users, LinkSpec(Constant(0.05)), seed=2, views=[SERVER])
    timing = np.random.default_rng(5)
    pairs = []
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(proxy.run)
        for epoch in range(1, epochs + 1):
            async with trio.open_nursery() as sending:
                for sender, delay in zip(senders, timing.uniform(0.0, 1.0, n_users)):
                    sending.start_soon(sender.report, epoch, float(delay), k)
            await trio.sleep(5.0)
            released = np.concatenate([e.body.indices for e in network.view(SERVER) if e.body.epoch == epoch])
            assert released.size == n_users * k
            owners = released // k
            pairs.append(int(np.sum(owners[1:] == owners[:-1])))
        nursery.cancel_scope.cancel()
    mean, variance = adjacent_same_user_null(n_users, k)
    assert mean == pytest.approx(k - 1)
    assert abs(sum(pairs) - epochs * mean) <= 4 * np.sqrt(epochs * variance), pairs
