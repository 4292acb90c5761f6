"""The FedVAE server folds each gradient into its party-ordered sum as it arrives and keeps none of them:
the sum is the one added up here in party order, whatever the arrival order and with a user that never
answers, and the server's memory in a round stays that of a group of gradients, not of its R."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import trio
import trio.testing

from fedrecsim.actors.user import User
from fedrecsim.mechanisms.adam import AdamHyper
from fedrecsim.models.multvae import Layout, MultVAEHyper, init_params
from fedrecsim.network.ledger import RejectReason
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.fedvae import roles
from fedrecsim.protocols.fedvae.aggregation import FilterSettings
from fedrecsim.protocols.fedvae.messages import Gradient, Model
from fedrecsim.protocols.fedvae.roles import FedVAEServer
from fedrecsim.protocols.fedvae.validation import InvalidGradient, validated_gradient
from fedrecsim.testing import Constant, LinkSpec, open_network

LINKS = LinkSpec(Constant(0.01))
# Values whose float32 sum depends on the order: 1e8 + 1 - 1e8 = 0 but 1e8 - 1e8 + 1 = 1.
ORDER_SENSITIVE = np.array([1e8, -1e8, 1.0, 3.0, -0.0, 0.5], dtype=np.float32)


class Sender(User):
    """Answers round r's ω with ``gradient`` ``delay_s`` after the request arrives (never, if None)."""

    def __init__(self, network: Network, index: int, gradient: np.ndarray, delay_s: float | None) -> None:
        super().__init__(Party(Role.USER, index), network, np.random.default_rng(index))
        self.gradient = gradient
        self.delay_s = delay_s

    async def run(self) -> None:
        request = (await self.recv(Model, deadline=1000.0)).body
        if self.delay_s is None:
            return
        await trio.sleep(self.delay_s)
        self.send(SERVER, Gradient(request.round, self.gradient))


def _server(network: Network, layout: Layout, hyper: MultVAEHyper, users_per_round: int) -> FedVAEServer:
    omega = init_params(np.random.default_rng(0), layout)
    return FedVAEServer(
        SERVER, network, np.random.default_rng(1), layout, omega, users_per_round=users_per_round,
        adam=AdamHyper(eta=0.01), settings=FilterSettings("none"), sparse=False,
    )


async def _round(senders_of, layout: Layout, hyper: MultVAEHyper, users: int) -> FedVAEServer:  # type: ignore[no-untyped-def]
    async with open_network(links=LINKS) as sim:
        server = _server(sim.network, layout, hyper, users_per_round=users)
        senders = senders_of(sim.network)
        sim.attach(SERVER)
        async with sim.population(senders).open():
            await trio.sleep(1.0)  # every join has arrived
            report = await server.round(1, 0.0, trio.current_time() + 100)
    assert report.selected == tuple(sender.party for sender in senders)
    return server


def _means_stepped_along(monkeypatch) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """A list that receives a copy of each mean the server steps along (`roles.descend`)."""
    means: list[np.ndarray] = []
    descend = roles.descend

    def spy(omega, mean, *args):  # type: ignore[no-untyped-def]
        means.append(mean.copy())
        return descend(omega, mean, *args)

    monkeypatch.setattr(roles, "descend", spy)
    return means


@pytest.mark.parametrize("seed", range(6))
async def test_the_round_sums_in_party_order_whatever_the_arrival_order_and_without_a_dropped_user(
    autojump_clock, monkeypatch, seed: int
) -> None:
    """Eight users answer in a shuffled order, one at a time, and user:5 never answers. The mean the server
    steps along is, to the bit, the accepted gradients added here one float32 addition at a time in party
    order (the first copied, so a -0.0 stays -0.0), divided by seven."""
    hyper = MultVAEHyper(hidden=4, latent=2, dropout=0.5, beta=0.2)
    layout = Layout.of(6, hyper)
    rng = np.random.default_rng(seed)
    values = rng.choice(ORDER_SENSITIVE, size=(8, layout.size))
    arrival = rng.permutation(8)
    delays: list[float | None] = [0.1 * float(np.flatnonzero(arrival == index)[0]) for index in range(8)]
    delays[5] = None
    means = _means_stepped_along(monkeypatch)
    await _round(lambda network: [Sender(network, i, values[i], delays[i]) for i in range(8)], layout, hyper, 10)
    answering = [index for index in range(8) if delays[index] is not None]
    expected = values[answering[0]].copy()
    for index in answering[1:]:
        expected = np.add(expected, values[index], dtype=np.float32)
    expected /= np.float32(len(answering))
    [mean] = means
    assert [index for index in arrival if index != 5] != answering  # the replies really came out of order
    assert np.array_equal(mean, expected) and np.array_equal(np.signbit(mean), np.signbit(expected))


def _peak_bytes(users: int, layout: Layout, hyper: MultVAEHyper) -> int:
    """The traced peak of one round whose ``users`` answer one after the other, in party order."""
    gradient = np.linspace(-1.0, 1.0, layout.size, dtype=np.float32)

    async def measured() -> int:
        async with open_network(links=LINKS) as sim:
            server = _server(sim.network, layout, hyper, users_per_round=users)
            senders = [Sender(sim.network, index, gradient, 0.1 * index) for index in range(users)]
            sim.attach(SERVER)
            async with sim.population(senders).open():
                await trio.sleep(1.0)
                tracemalloc.start()
                try:
                    tracemalloc.reset_peak()
                    base = tracemalloc.get_traced_memory()[0]
                    report = await server.round(1, 0.0, trio.current_time() + 1000)
                    peak = tracemalloc.get_traced_memory()[1] - base
                finally:
                    tracemalloc.stop()
        assert len(report.accepted) == users
        return peak

    return trio.run(measured, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_servers_memory_in_a_round_is_a_group_of_gradients_not_the_rounds_r() -> None:
    """R = 96 and 48 users answer one at a time with a 256 KB gradient each. Kept until the deadline, 96
    replies would be 96 gradients; folded as they arrive, the server holds its sum, ω's encoding, Adam's
    scratch and at most the 16 gradients `OrderedSum` adds at a time -- and the same at either R."""
    hyper = MultVAEHyper(hidden=8, latent=2, dropout=0.5, beta=0.2)
    layout = Layout.of(4000, hyper)
    one = 4 * layout.size
    large, small = _peak_bytes(96, layout, hyper), _peak_bytes(48, layout, hyper)
    assert large < (16 + 8) * one, large / one
    assert abs(large - small) < 2 * one, (large / one, small / one)


@pytest.mark.parametrize("fault", ["nan", "norm"])
async def test_a_gradient_bad_only_in_its_last_block_is_refused_in_todays_words_and_leaves_no_trace(
    autojump_clock, monkeypatch, fault: str
) -> None:
    """Seven users answer at one instant with gradients of three blocks; user:3's is finite and small but
    for its last entry (a NaN, or 3e15: a norm beyond 1e15), so the server's one pass over it finds out
    only after adding the rest of it. user:5's has one entry too few (refused on arrival). The mean the
    server steps along is, to the bit, the five others' summed here in party order; the ledger holds both
    rejections at the instant they arrived, in the order they were taken, user:3's in the words the
    server's check of that gradient alone gives."""
    hyper = MultVAEHyper(hidden=16, latent=2, dropout=0.5, beta=0.2)
    layout = Layout.of(4000, hyper)
    assert layout.size > 2 * (1 << 16)  # three blocks of the sum and of the check
    rng = np.random.default_rng(7)
    values = rng.choice(ORDER_SENSITIVE, size=(7, layout.size))
    values[3, -1] = np.nan if fault == "nan" else 3e15
    short = values[5, :-1]
    means = _means_stepped_along(monkeypatch)
    async with open_network(links=LINKS) as sim:
        server = _server(sim.network, layout, hyper, users_per_round=10)
        senders = [Sender(sim.network, i, short if i == 5 else values[i], 0.0) for i in range(7)]
        sim.attach(SERVER)
        async with sim.population(senders).open():
            await trio.sleep(1.0)
            start = trio.current_time()
            report = await server.round(1, 0.0, start + 100)
        rejections = list(sim.network.ledger.rejections)
    expected = values[0].copy()
    for index in (1, 2, 4, 6):
        expected = np.add(expected, values[index], dtype=np.float32)
    expected /= np.float32(5)
    [mean] = means
    assert np.array_equal(mean, expected) and np.array_equal(np.signbit(mean), np.signbit(expected))
    user3, user5 = Party(Role.USER, 3), Party(Role.USER, 5)
    assert report.accepted == tuple(Party(Role.USER, i) for i in (0, 1, 2, 4, 6))
    assert [fault.party for fault in report.rejected] == [user3, user5]
    with pytest.raises(InvalidGradient) as alone:
        validated_gradient(user3, 1, Gradient(1, values[3]), layout)
    words = "1 NaN or Inf entry, the first at flat index" if fault == "nan" else "an L2 norm of 3e+15 > 1e+15"
    assert words in alone.value.problem and report.rejected[0].problem == alone.value.problem
    short_words = f"expected {layout.size} entries, received {layout.size - 1}"
    assert [(row.src, row.reason, row.problem) for row in rejections] == [
        (user3, RejectReason.INVALID, f"server:0 expected a valid fedvae.gradient from user:3: {alone.value.problem}"),
        (user5, RejectReason.INVALID, f"server:0 expected a valid fedvae.gradient from user:5: {short_words}"),
    ]
    assert [row.time for row in rejections] == [pytest.approx(start + 2 * LINKS.latency.seconds)] * 2
