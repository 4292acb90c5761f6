"""FedVAE's roles one at a time on a small hand-built network: what a user answers (and what it ignores or
refuses), what the server receives, validates and steps on -- each checked against Algorithm 2 computed
here."""

from __future__ import annotations

import re

import numpy as np
import pytest
import trio

from fedrecsim.actors.user import User
from fedrecsim.errors import ProtocolViolation
from fedrecsim.mechanisms.adam import AdamHyper, adam_init, adam_step
from fedrecsim.models.multvae import Batch, Layout, MultVAEHyper, dense_user_gradients, draw_noise, init_params
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.fedvae.aggregation import FilterSettings, OrderedSum
from fedrecsim.protocols.fedvae.messages import Gradient, Model, SparseGradient
from fedrecsim.protocols.fedvae.roles import FedVAEServer, FedVAEUser
from fedrecsim.testing import Constant, LinkSpec, open_network

HYPER = MultVAEHyper(hidden=4, latent=2, dropout=0.5, beta=0.2)
ITEMS = 6


LINKS = LinkSpec(Constant(0.01))


def _user(network: Network, index: int, items: list[int], seed: int, sparse: bool = False) -> FedVAEUser:
    layout = Layout.of(ITEMS, HYPER)
    values = np.ones(len(items))
    return FedVAEUser(Party(Role.USER, index), network, np.random.default_rng(seed), np.array(items), values, layout, HYPER, sparse)


def _server(network: Network, omega: np.ndarray, users_per_round: int, sparse: bool = False) -> FedVAEServer:
    return FedVAEServer(
        SERVER, network, np.random.default_rng(1), Layout.of(ITEMS, HYPER), omega, users_per_round=users_per_round,
        adam=AdamHyper(eta=0.01), settings=FilterSettings("none"), sparse=sparse,
    )


def _expected_gradient(omega: np.ndarray, items: list[int], seed: int, draws: int = 1) -> np.ndarray:
    """The user's gradient at ω from the ``draws``-th noise draw of its generator (seeded ``seed``)."""
    rng = np.random.default_rng(seed)
    batch = Batch.single(items, np.ones(len(items)), ITEMS)
    for _ in range(draws):
        noise = draw_noise(rng, batch, HYPER)
    return dense_user_gradients(omega, Layout.of(ITEMS, HYPER), batch, noise, HYPER)[0]


async def test_a_round_is_one_adam_step_along_the_mean_of_the_sampled_users_gradients(autojump_clock) -> None:
    omega = init_params(np.random.default_rng(0), Layout.of(ITEMS, HYPER))
    rows = {0: [0, 2, 5], 1: [1, 2], 2: [3, 4, 5]}
    async with open_network(links=LINKS) as sim:
        server = _server(sim.network, omega.copy(), users_per_round=5)
        users = [_user(sim.network, index, items, 20 + index) for index, items in rows.items()]
        sim.attach(SERVER)
        async with sim.population(users).open():
            await trio.sleep(1.0)
            report = await server.round(1, 0.0, trio.current_time() + 10)
    assert report.selected == report.accepted == report.kept == tuple(user.party for user in users)
    assert report.missing == () and report.rejected == () and report.applied
    mean = sum(_expected_gradient(omega, items, 20 + index) for index, items in rows.items()) / np.float32(3)
    expected, _ = adam_step(omega, mean.astype(np.float32), adam_init(omega), AdamHyper(eta=0.01))
    np.testing.assert_allclose(server.omega, expected, rtol=0, atol=1e-6)
    assert server.adam.t == 1


async def test_replies_arriving_out_of_party_order_are_averaged_in_party_order_bit_for_bit(autojump_clock, monkeypatch) -> None:
    """Replies delayed at random arrive out of party order; the server sums each as it comes (`OrderedSum`)
    and its ω is, to the bit, one Adam step along the mean summed here in party order in float32."""
    arrivals: list[int] = []
    add = OrderedSum.add

    def spy(self, party: Party, gradient: np.ndarray, **how: bool) -> None:  # type: ignore[no-untyped-def]
        arrivals.append(party.index)
        add(self, party, gradient, **how)

    monkeypatch.setattr(OrderedSum, "add", spy)
    omega = init_params(np.random.default_rng(0), Layout.of(ITEMS, HYPER))
    rows = {0: [0, 2, 5], 1: [1, 2], 2: [3, 4, 5], 3: [0, 1], 4: [2, 3, 4], 5: [5], 6: [0, 4]}
    links = LinkSpec(Constant(0.01), reorder=0.7, reorder_delay_s=2.0)
    async with open_network(links=links, seed=3) as sim:
        server = _server(sim.network, omega.copy(), users_per_round=10)
        users = [_user(sim.network, index, items, 20 + index) for index, items in rows.items()]
        sim.attach(SERVER)
        async with sim.population(users).open():
            await trio.sleep(5.0)  # every join has arrived
            report = await server.round(1, 0.0, trio.current_time() + 10)
    assert report.accepted == tuple(user.party for user in users) and arrivals != sorted(arrivals)
    total = _expected_gradient(omega, rows[0], 20).copy()
    for index in range(1, len(rows)):
        total += _expected_gradient(omega, rows[index], 20 + index)
    expected, _ = adam_step(omega, total / np.float32(len(rows)), adam_init(omega), AdamHyper(eta=0.01))
    assert np.array_equal(server.omega, expected)


class Replayer(User):
    """Sends user:0 the same ω twice for round 1, then once for round 2, and keeps what user:0 answers."""

    def __init__(self, network: Network, omega: np.ndarray) -> None:
        super().__init__(Party(Role.USER, 9), network, np.random.default_rng(0))
        self.omega = omega
        self.answers: list[Gradient] = []

    async def run(self) -> None:
        target = Party(Role.USER, 0)
        for round_index in (1, 1, 2):
            self.network.send(SERVER, target, Model(round_index, self.omega))
            await trio.sleep(1.0)
        self.answers = [envelope.body for envelope in self.network.mailbox(SERVER).take_all(Gradient.KIND)]


async def test_a_user_answers_a_round_once_and_a_copy_of_its_request_costs_it_no_draw(autojump_clock) -> None:
    omega = init_params(np.random.default_rng(0), Layout.of(ITEMS, HYPER))
    async with open_network(links=LINKS) as sim:
        user = _user(sim.network, 0, [0, 1, 4], seed=7)
        replayer = Replayer(sim.network, omega)
        sim.attach(SERVER)
        async with sim.start(user):
            await replayer.run()
    assert [answer.round for answer in replayer.answers] == [1, 2]
    # float32 sums may round differently in another buffer (BLAS): equal to 1e-6, where another draw differs by ~1.
    np.testing.assert_allclose(replayer.answers[0].values, _expected_gradient(omega, [0, 1, 4], 7, draws=1), rtol=0, atol=1e-6)
    np.testing.assert_allclose(replayer.answers[1].values, _expected_gradient(omega, [0, 1, 4], 7, draws=2), rtol=0, atol=1e-6)


async def test_a_user_refuses_parameters_of_another_length(autojump_clock) -> None:
    size = Layout.of(ITEMS, HYPER).size
    async with open_network(links=LINKS) as sim:
        user = _user(sim.network, 0, [1], seed=3)
        sim.attach(SERVER, user.party)
        sim.network.send(SERVER, user.party, Model(4, np.zeros(size - 1, np.float32)))
        with pytest.raises(ProtocolViolation, match=re.escape(f"user:0 expected parameters of length {size}, received {size - 1} in round 4")):
            await user.run()


class OtherKind(User):
    """Answers ω with a well-formed gradient of the other format than the server's."""

    def __init__(self, network: Network, sparse: bool) -> None:
        super().__init__(Party(Role.USER, 3), network, np.random.default_rng(0))
        self.sparse = sparse

    async def run(self) -> None:
        request = (await self.recv(Model, deadline=100.0)).body
        size = request.weights.size
        first = ITEMS * HYPER.hidden
        if self.sparse:
            self.send(SERVER, SparseGradient(request.round, np.zeros(0, np.int32), np.zeros((0, HYPER.hidden), np.float32),
                                             np.zeros(size - first, np.float32)))
        else:
            self.send(SERVER, Gradient(request.round, np.zeros(size, np.float32)))


@pytest.mark.parametrize("sparse", [False, True])
async def test_the_server_receives_only_its_runs_gradient_format(autojump_clock, sparse: bool) -> None:
    omega = init_params(np.random.default_rng(0), Layout.of(ITEMS, HYPER))
    async with open_network(links=LINKS) as sim:
        server = _server(sim.network, omega.copy(), users_per_round=5, sparse=sparse)
        other = OtherKind(sim.network, sparse=not sparse)
        sim.attach(SERVER)
        async with sim.population([other]).open():
            await trio.sleep(1.0)
            report = await server.round(1, 0.0, trio.current_time() + 5)
    assert report.missing == (other.party,) and not report.applied
    np.testing.assert_array_equal(server.omega, omega)
    (rejection,) = sim.ledger.faults()["rejections"]
    assert rejection["reason"] == "unexpected" and rejection["kind"] == ("fedvae.gradient" if sparse else "fedvae.sparse_gradient")


class LateAndBroken(User):
    """Answers round r's ω with ``gradient``; as user:3 it first sends a leftover gradient of round r - 1
    (huge, so it would show in ω if it counted)."""

    def __init__(self, network: Network, index: int, gradient: np.ndarray) -> None:
        super().__init__(Party(Role.USER, index), network, np.random.default_rng(0))
        self.gradient = gradient

    async def run(self) -> None:
        request = (await self.recv(Model, deadline=100.0)).body
        if self.party.index == 3:
            self.send(SERVER, Gradient(request.round - 1, np.full(request.weights.size, 1e6, np.float32)))
        self.send(SERVER, Gradient(request.round, self.gradient))


async def test_the_server_ignores_a_gradient_of_an_earlier_round_and_rejects_an_invalid_one_naming_its_round(
    autojump_clock,
) -> None:
    omega = init_params(np.random.default_rng(0), Layout.of(ITEMS, HYPER))
    gradient = np.linspace(-1.0, 1.0, omega.size).astype(np.float32)
    async with open_network(links=LINKS) as sim:
        server = _server(sim.network, omega.copy(), users_per_round=5)
        late = LateAndBroken(sim.network, 3, gradient)
        broken = LateAndBroken(sim.network, 4, np.full(omega.size, np.nan, np.float32))
        sim.attach(SERVER)
        async with sim.population([late, broken]).open():
            await trio.sleep(1.0)
            report = await server.round(2, 0.0, trio.current_time() + 10)
    assert report.accepted == report.kept == (late.party,) and report.missing == ()
    (fault,) = report.rejected
    assert (fault.party, fault.round) == (broken.party, 2) and "user:4 sent in round 2: the gradient holds" in str(fault)
    expected, _ = adam_step(omega, gradient, adam_init(omega), AdamHyper(eta=0.01))
    np.testing.assert_array_equal(server.omega, expected)
    # The leftover is dropped unseen: the only rejection is the NaN gradient (no duplicate from user:3).
    assert [row["src"] for row in sim.ledger.faults()["rejections"]] == ["user:4"]


async def test_the_server_draws_from_its_generator_only_when_it_must_choose_among_more_than_r(autojump_clock) -> None:
    """R = 2: two candidates are both taken without a draw, so the later choice of 2 among 4 is the
    generator's first draw (`_server` seeds it with 1)."""
    parties = [Party(Role.USER, index) for index in range(4)]
    async with open_network(links=LINKS) as sim:
        server = _server(sim.network, np.zeros(Layout.of(ITEMS, HYPER).size, np.float32), users_per_round=2)
        assert server.select(parties[:2]) == parties[:2]
        chosen = server.select(parties)
    first_draw = np.random.default_rng(1).choice(4, size=2, replace=False)
    assert chosen == sorted(parties[position] for position in first_draw)
