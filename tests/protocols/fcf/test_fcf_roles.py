"""FCF roles one at a time, on a small hand-built network: the server's update against a reference
computed here from the paper's update rules, what each side refuses, and whom the server selects."""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np
import pytest
import trio

from fedrecsim.actors.user import User
from fedrecsim.errors import PartyTimeout, ProtocolViolation
from fedrecsim.models.implicit_mf import ImplicitHyper, item_gradient, server_step, user_factors
from fedrecsim.models.mf import MFHyper, item_step, unit_rows, user_step
from fedrecsim.network.ledger import Ledger
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, Party, Role
from fedrecsim.protocols.fcf.messages import ItemGradients, ItemVectors, Model, ModelGradient, Register
from fedrecsim.protocols.fcf.roles import ExplicitServer, ExplicitUser, ImplicitServer, ImplicitUser, RoundReport

EXPLICIT = MFHyper(d=3, gamma=0.1, lam=0.05, mu=0.02)
IMPLICIT = ImplicitHyper(d=2, gamma=0.2, lam=0.1, alpha=0.5)


def _network() -> Network:
    network = Network(Links(0, LinkSpec(Constant(0.01))), Ledger())
    network.attach(SERVER)
    return network


def _online(nursery: trio.Nursery, network: Network, user: User) -> None:
    """What the population does for a joining user: attach, announce, run."""
    network.attach(user.party)
    user.announce_join()
    nursery.start_soon(user.run)  # type: ignore[attr-defined]


def _party(index: int) -> Party:
    return Party(Role.USER, index)


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


# ------------------------------------------------------------------ messages


@pytest.mark.parametrize("items", [[-1, 2], [3, 1], [1, 1], [0, 4, 4, 7]])
def test_register_refuses_negative_unsorted_or_repeated_items(items) -> None:
    with pytest.raises(ValueError, match=exactly("items must be non-negative, sorted and unique")):
        Register(np.array(items, dtype=np.int32)).validate()


@pytest.mark.parametrize("items", [[], [0], [0, 1, 5]])
def test_register_accepts_sorted_unique_items(items) -> None:
    Register(np.array(items, dtype=np.int32)).validate()


async def test_a_user_cannot_send_an_invalid_registration(autojump_clock) -> None:
    network = _network()
    user = ExplicitUser(_party(0), network, np.random.default_rng(0), [2, 1], [3.0, 4.0], EXPLICIT)
    network.attach(user.party)
    async with network.open():
        with pytest.raises(ValueError, match="sorted and unique"):
            await user.run()


# ------------------------------------------------------------------ explicit feedback


def test_users_keep_the_generator_they_are_given_and_start_from_a_unit_profile() -> None:
    network = _network()
    rng = np.random.default_rng(11)
    user = ExplicitUser(_party(0), network, rng, [0, 2], [4, 2], EXPLICIT)
    assert user.rng is rng
    np.testing.assert_array_equal(user.u, unit_rows(np.random.default_rng(11), 1, 3)[0])
    assert user.ratings.dtype == np.float64 and user.items.dtype == np.int32
    implicit_rng = np.random.default_rng(12)
    assert ImplicitUser(_party(1), network, implicit_rng, [1], [1.0], IMPLICIT).rng is implicit_rng


async def test_explicit_round_updates_exactly_the_rated_items_as_the_reference_says(autojump_clock) -> None:
    network = _network()
    server = ExplicitServer(SERVER, network, np.random.default_rng(1), 5, EXPLICIT, 0)
    data = {0: ([0, 2], [4.0, 2.0]), 1: ([2, 3], [5.0, 1.0])}  # items 1 and 4: nobody rated them
    users = [ExplicitUser(_party(u), network, np.random.default_rng(10 + u), items, ratings, EXPLICIT) for u, (items, ratings) in data.items()]
    V0 = server.item_factors.copy()
    profiles = [user.u.copy() for user in users]
    async with network.open(), trio.open_nursery() as nursery:
        for user in users:
            _online(nursery, network, user)
        await trio.sleep(1.0)
        report = await server.round(1, trio.current_time() + 10)
        nursery.cancel_scope.cancel()
    assert report == RoundReport(selected=2, replied=2, missing=0)
    sums, counts = np.zeros_like(V0), np.zeros(5, dtype=np.int64)
    for user, u, (items, ratings) in zip(users, profiles, data.values()):
        new_u, gradients = user_step(u, V0[items], np.array(ratings), EXPLICIT)
        np.testing.assert_allclose(user.u, new_u, rtol=0, atol=1e-12)
        sums[items] += gradients
        counts[items] += 1
    expected = V0.copy()
    for j in (0, 2, 3):
        gradient = sums[j] / counts[j]  # normalized: item 2 has two raters, items 0 and 3 one each
        expected[j] = V0[j] - EXPLICIT.gamma * (gradient + 2 * EXPLICIT.mu * V0[j])
    np.testing.assert_allclose(server.item_factors, expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(server.item_factors[[1, 4]], V0[[1, 4]])
    np.testing.assert_allclose(expected, item_step(V0, sums, counts, EXPLICIT), rtol=0, atol=1e-12)


class Silent(User):
    """Joins but never registers (or has not yet): it must not be selected."""

    async def run(self) -> None:
        await trio.sleep_forever()


async def test_a_member_that_has_not_registered_is_not_selected(autojump_clock) -> None:
    network = _network()
    server = ExplicitServer(SERVER, network, np.random.default_rng(1), 4, EXPLICIT, 0)
    rater = ExplicitUser(_party(0), network, np.random.default_rng(2), [1], [3.0], EXPLICIT)
    no_ratings = ExplicitUser(_party(1), network, np.random.default_rng(3), [], [], EXPLICIT)
    silent = Silent(_party(2), network, np.random.default_rng(4))
    async with network.open(), trio.open_nursery() as nursery:
        for user in (rater, no_ratings, silent):
            _online(nursery, network, user)
        await trio.sleep(1.0)
        report = await server.round(1, trio.current_time() + 10)
        nursery.cancel_scope.cancel()
    assert server.members == {rater.party, no_ratings.party, silent.party}
    assert report == RoundReport(selected=1, replied=1, missing=0)


async def test_the_explicit_server_knows_a_user_once_it_has_both_joined_and_registered(autojump_clock) -> None:
    network = _network()
    server = ExplicitServer(SERVER, network, np.random.default_rng(1), 4, EXPLICIT, 0)
    rater = ExplicitUser(_party(0), network, np.random.default_rng(2), [1], [3.0], EXPLICIT)
    silent = Silent(_party(1), network, np.random.default_rng(3))
    assert not server.knows([rater.party])
    async with network.open(), trio.open_nursery() as nursery:
        for user in (rater, silent):
            _online(nursery, network, user)
        await trio.sleep(1.0)
        assert server.knows([rater.party])
        assert not server.knows([silent.party]) and not server.knows([rater.party, silent.party])
        assert server.knows([])
        nursery.cancel_scope.cancel()


class WrongGradients(User):
    """Registers two items and answers with one gradient row."""

    async def run(self) -> None:
        self.send(self.server, Register(np.array([0, 1], dtype=np.int32)))
        request = (await self.recv(ItemVectors, deadline=self.horizon_s)).body
        self.send(self.server, ItemGradients(request.round, np.zeros((1, EXPLICIT.d))))


async def test_the_explicit_server_rejects_gradients_of_the_wrong_shape_and_goes_on(autojump_clock) -> None:
    network = _network()
    server = ExplicitServer(SERVER, network, np.random.default_rng(1), 4, EXPLICIT, 0)
    before = server.item_factors.copy()
    async with network.open(), trio.open_nursery() as nursery:
        _online(nursery, network, WrongGradients(_party(5), network, np.random.default_rng(0)))
        await trio.sleep(1.0)
        start = trio.current_time()
        report = await server.round(1, start + 10)
        assert trio.current_time() - start == pytest.approx(0.02)  # the rejected reply ends the wait
        nursery.cancel_scope.cancel()
    assert report == RoundReport(selected=1, replied=0, missing=0, rejected=1)
    np.testing.assert_array_equal(server.item_factors, before)
    [rejection] = network.ledger.rejections
    assert rejection.problem == "server:0 expected a valid fcf.item_gradients from user:5: gradients of shape (2, 3), received (1, 3)"


async def test_the_explicit_user_refuses_item_vectors_of_the_wrong_shape(autojump_clock) -> None:
    network = _network()
    user = ExplicitUser(_party(0), network, np.random.default_rng(0), [0, 2], [4.0, 2.0], EXPLICIT)
    network.attach(user.party)
    async with network.open():
        network.send(SERVER, user.party, ItemVectors(7, np.zeros((1, 3))))
        message = "user:0 expected item vectors of shape (2, 3), received (1, 3) in round 7"
        with pytest.raises(ProtocolViolation, match=exactly(message)):
            await user.run()


async def test_an_explicit_user_answers_a_duplicated_request_once_and_still_answers_the_next_round(autojump_clock) -> None:
    network = _network()
    user = ExplicitUser(_party(0), network, np.random.default_rng(0), [0, 2], [4.0, 2.0], EXPLICIT)
    first, second = (np.random.default_rng(seed).standard_normal((2, 3)) for seed in (1, 2))
    u = user.u.copy()
    network.attach(user.party)
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(user.run)
        for request in (ItemVectors(1, first), ItemVectors(1, first), ItemVectors(2, second)):
            network.send(SERVER, user.party, request)
        await trio.sleep(1.0)
        replies = [envelope.body for envelope in network.mailbox(SERVER).take_all(ItemGradients.KIND)]
        nursery.cancel_scope.cancel()
    assert [reply.round for reply in replies] == [1, 2]
    after_first, gradients = user_step(u, first, np.array([4.0, 2.0]), EXPLICIT)
    np.testing.assert_allclose(replies[0].gradients, gradients, rtol=0, atol=1e-12)
    np.testing.assert_allclose(user.u, user_step(after_first, second, np.array([4.0, 2.0]), EXPLICIT)[0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("feedback", ["explicit", "implicit"])
async def test_a_user_waits_for_a_request_only_until_its_horizon(autojump_clock, feedback) -> None:
    network = _network()
    if feedback == "explicit":
        user: User = ExplicitUser(_party(0), network, np.random.default_rng(0), [0], [4.0], EXPLICIT)
    else:
        user = ImplicitUser(_party(0), network, np.random.default_rng(0), [0], [1.0], IMPLICIT)
    user.horizon_s = trio.current_time() + 50.0
    network.attach(user.party)
    async with network.open():
        with pytest.raises(PartyTimeout, match=f"until t={user.horizon_s:.3f}s"):
            await user.run()  # type: ignore[attr-defined]
        assert trio.current_time() == pytest.approx(user.horizon_s)


# ------------------------------------------------------------------ implicit feedback


async def test_implicit_user_returns_the_gradient_with_confidence_one_plus_alpha_r(autojump_clock) -> None:
    network = _network()
    items, values = np.array([0, 3]), np.array([2.0, 0.5])
    user = ImplicitUser(_party(0), network, np.random.default_rng(0), items, values, IMPLICIT)
    V = np.random.default_rng(1).standard_normal((4, 2))
    network.attach(user.party)
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(user.run)
        network.send(SERVER, user.party, Model(3, V))
        await trio.sleep(1.0)
        (envelope,) = network.mailbox(SERVER).take_all(ModelGradient.KIND)
        nursery.cancel_scope.cancel()
    conf = 1.0 + 0.5 * values
    x = user_factors(V, items, conf, IMPLICIT.lam)
    np.testing.assert_allclose(user.x, x, rtol=0, atol=1e-12)
    assert envelope.body.round == 3
    np.testing.assert_allclose(envelope.body.gradient, item_gradient(V, x, items, conf), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 3), (3, 2), (2, 2)])
async def test_implicit_user_refuses_a_model_of_the_wrong_width_or_too_few_rows(autojump_clock, shape) -> None:
    # The user rated item 3, so it needs at least 4 rows of width d = 2.
    network = _network()
    user = ImplicitUser(_party(0), network, np.random.default_rng(0), [1, 3], [1.0, 1.0], IMPLICIT)
    network.attach(user.party)
    async with network.open():
        network.send(SERVER, user.party, Model(2, np.zeros(shape)))
        with pytest.raises(ProtocolViolation, match=exactly(f"user:0 received a model of shape {shape} in round 2")):
            await user.run()


async def test_implicit_round_averages_the_replies_as_the_reference_says(autojump_clock) -> None:
    network = _network()
    server = ImplicitServer(SERVER, network, np.random.default_rng(1), 4, IMPLICIT, 0)
    data = {0: ([0, 3], [1.0, 2.0]), 1: ([1], [1.0]), 2: ([0, 1, 2], [1.0, 1.0, 3.0])}
    users = [ImplicitUser(_party(u), network, np.random.default_rng(u), items, values, IMPLICIT) for u, (items, values) in data.items()]
    V0 = server.item_factors.copy()
    async with network.open(), trio.open_nursery() as nursery:
        for user in users:
            _online(nursery, network, user)
        await trio.sleep(1.0)
        report = await server.round(1, trio.current_time() + 10)
        nursery.cancel_scope.cancel()
    assert report == RoundReport(selected=3, replied=3, missing=0)
    total = np.zeros_like(V0)
    for items, values in data.values():
        conf = 1.0 + IMPLICIT.alpha * np.array(values)
        total += item_gradient(V0, user_factors(V0, np.array(items), conf, IMPLICIT.lam), np.array(items), conf)
    np.testing.assert_allclose(server.item_factors, V0 - IMPLICIT.gamma * (total / 3 + 2 * IMPLICIT.lam * V0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(server.item_factors, server_step(V0, total, 3, IMPLICIT), rtol=0, atol=1e-12)


async def test_implicit_server_selects_at_most_max_users(autojump_clock) -> None:
    network = _network()
    server = ImplicitServer(SERVER, network, np.random.default_rng(1), 4, IMPLICIT, 2)
    users = [ImplicitUser(_party(u), network, np.random.default_rng(u), [u], [1.0], IMPLICIT) for u in range(4)]
    async with network.open(), trio.open_nursery() as nursery:
        for user in users:
            _online(nursery, network, user)
        await trio.sleep(1.0)
        reports = [await server.round(r, trio.current_time() + 10) for r in (1, 2, 3)]
        nursery.cancel_scope.cancel()
    assert reports == [RoundReport(selected=2, replied=2, missing=0)] * 3
    assert network.ledger.summary()["kinds"]["fcf.model"]["msgs"] == 6


class WrongModelGradient(User):
    async def run(self) -> None:
        request = (await self.recv(Model, deadline=self.horizon_s)).body
        self.send(self.server, ModelGradient(request.round, np.zeros((2, 2))))


async def test_the_implicit_server_rejects_a_gradient_of_the_wrong_shape_and_goes_on(autojump_clock) -> None:
    network = _network()
    server = ImplicitServer(SERVER, network, np.random.default_rng(1), 4, IMPLICIT, 0)
    before = server.item_factors.copy()
    async with network.open(), trio.open_nursery() as nursery:
        _online(nursery, network, WrongModelGradient(_party(3), network, np.random.default_rng(0)))
        await trio.sleep(1.0)
        report = await server.round(1, trio.current_time() + 10)
        nursery.cancel_scope.cancel()
    assert report == RoundReport(selected=1, replied=0, missing=0, rejected=1)
    np.testing.assert_array_equal(server.item_factors, before)
    [rejection] = network.ledger.rejections
    assert rejection.problem == "server:0 expected a valid fcf.model_gradient from user:3: gradients of shape (4, 2), received (2, 2)"


class HugeModelGradient(User):
    async def run(self) -> None:
        request = (await self.recv(Model, deadline=self.horizon_s)).body
        self.send(self.server, ModelGradient(request.round, np.full((4, 2), 2.0e6)))


async def test_the_implicit_server_rejects_a_gradient_beyond_its_bound(autojump_clock) -> None:
    network = _network()
    server = ImplicitServer(SERVER, network, np.random.default_rng(1), 4, IMPLICIT, 0, max_abs=2.0e6)
    async with network.open(), trio.open_nursery() as nursery:
        _online(nursery, network, HugeModelGradient(_party(3), network, np.random.default_rng(0)))
        await trio.sleep(1.0)
        assert (await server.round(1, trio.current_time() + 10)).replied == 1  # at the bound: accepted
        server.max_abs = np.nextafter(2.0e6, 0.0)
        _online(nursery, network, HugeModelGradient(_party(3), network, np.random.default_rng(0)))
        await trio.sleep(1.0)
        assert (await server.round(2, trio.current_time() + 10)).rejected == 1
        nursery.cancel_scope.cancel()
    [rejection] = network.ledger.rejections
    assert rejection.problem.endswith("entries finite and at most 2e+06 in magnitude, received 2e+06")


class HugeItemGradients(User):
    """Registers two items and answers with gradient entries of 2e6."""

    async def run(self) -> None:
        self.send(self.server, Register(np.array([0, 1], dtype=np.int32)))
        request = (await self.recv(ItemVectors, deadline=self.horizon_s)).body
        self.send(self.server, ItemGradients(request.round, np.full((2, EXPLICIT.d), 2.0e6)))


@pytest.mark.parametrize("max_abs, replied", [(2.0e6, 1), (np.nextafter(2.0e6, 0.0), 0)])
async def test_the_explicit_server_accepts_gradients_up_to_its_bound_and_rejects_beyond(autojump_clock, max_abs, replied) -> None:
    network = _network()
    server = ExplicitServer(SERVER, network, np.random.default_rng(1), 4, EXPLICIT, 0, max_abs=max_abs)
    async with network.open(), trio.open_nursery() as nursery:
        _online(nursery, network, HugeItemGradients(_party(3), network, np.random.default_rng(0)))
        await trio.sleep(1.0)
        report = await server.round(1, trio.current_time() + 10)
        nursery.cancel_scope.cancel()
    assert report == RoundReport(selected=1, replied=replied, missing=0, rejected=1 - replied)


class FarItems(User):
    async def run(self) -> None:
        self.send(self.server, Register(np.array([1, 2, 4], dtype=np.int32)))


async def test_the_explicit_server_rejects_a_registration_of_items_it_does_not_have_and_goes_on(autojump_clock) -> None:
    network = _network()
    server = ExplicitServer(SERVER, network, np.random.default_rng(1), 4, EXPLICIT, 0)
    rater = ExplicitUser(_party(3), network, np.random.default_rng(3), [0, 3], [4.0, 2.0], EXPLICIT)
    async with network.open(), trio.open_nursery() as nursery:
        _online(nursery, network, FarItems(_party(2), network, np.random.default_rng(0)))
        await trio.sleep(0.5)  # the far registration arrives first
        _online(nursery, network, rater)
        await trio.sleep(0.5)
        assert await server.round(1, trio.current_time() + 10) == RoundReport(1, 1, 0, 0)
        nursery.cancel_scope.cancel()
    assert list(server.registered) == [rater.party]
    np.testing.assert_array_equal(server.registered[rater.party], [0, 3])
    [rejection] = network.ledger.rejections
    assert rejection.problem == "server:0 expected items below 4 from user:2; received item 4"


async def test_selection_caps_at_max_users_and_keeps_everyone_when_there_are_few_enough() -> None:
    network = _network()
    candidates = [_party(u) for u in range(6)]
    server = ImplicitServer(SERVER, network, np.random.default_rng(1), 4, IMPLICIT, 3)
    chosen = server.select(candidates)
    assert len(chosen) == 3 and len(set(chosen)) == 3 and chosen == sorted(chosen) and set(chosen) <= set(candidates)
    assert server.select(candidates[:3]) == candidates[:3]
    assert ImplicitServer(SERVER, network, np.random.default_rng(1), 4, IMPLICIT, 0).select(candidates) == candidates
