"""The S2 / S3 recommender: its bookkeeping of item requests and of the raters it knows of, whom it
serves (S2: the users of the noise setup; S3: at most K, drawing from its generator only to choose among
more than K), what it unmasks and steps, and what it records (the encoding counters, the last two
iterations' aggregates)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest
import trio

from fedrecsim.actors.membership import Join, Leave
from fedrecsim.errors import ProtocolViolation
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
    ItemVectors,
    NaiveContribution,
    NoiseSetup,
    PresharingAggregate,
    PresharingRequest,
    PresharingShare,
    Roster,
)
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.recommender import Recommender
from fedrecsim.protocols.dpmf.ringops import expand_masks, from_words, to_words
from fedrecsim.protocols.dpmf.third_party import Aggregator
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


async def test_a_leave_also_withdraws_a_request_still_waiting_for_its_join(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _recommender(network)
    async with network.open():
        _send(network, BOB, ItemRequest(np.array([1, 3], dtype=np.int32)))
        await trio.sleep(0.01)
        recommender.refresh()
        _send(network, BOB, Join())
        await trio.sleep(0.01)
        _send(network, BOB, Leave())  # the join and the leave are applied in one refresh
        await trio.sleep(0.01)
        recommender.refresh()
        _send(network, BOB, Join())  # back, without asking again
        await trio.sleep(0.01)
        recommender.refresh()
        assert recommender.members == {BOB}
        assert recommender.requests == {}, "the request sent before the leave is gone"


def test_a_fresh_recommender_counts_nothing_and_has_served_and_updated_nothing() -> None:
    recommender = _recommender(Network(Links(0, LinkSpec(Constant(0.0))), Ledger()))
    for counts in (recommender.known_raters, recommender.eta_pieces):
        assert counts.dtype.kind == "i" and counts.tolist() == [0] * N_ITEMS
    assert (recommender.set_up, recommender.served, recommender.last, list(recommender.recent)) == (None, None, None, [])


async def test_collecting_before_serving_is_refused(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _recommender(network)
    async with network.open():
        with pytest.raises(ProtocolViolation, match="^server:0 was asked to collect before it served an iteration$"):
            await recommender.collect(trio.current_time() + 1.0)


# ---------------------------------------------------------------------------------------------- S2 iterations

RING = Ring(64, 32)
D = 2
CAROL, DAVE = Party(Role.USER, 2), Party(Role.USER, 3)
RATED = {ALICE: [0, 2, 5], BOB: [2, 3], CAROL: [1, 2, 5], DAVE: [3]}  # nobody rated item 4


def _s2_recommender(network: Network, variant: str, transport: str = "explicit") -> Recommender:
    public = PublicParameters(
        "S2", variant, transport, MFHyper(d=D), RING, 1.0, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, D)
    )
    network.attach(SERVER)
    return Recommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), public, max_users=10, k_presharing=2)


async def _join_and_set_up(network: Network, recommender: Recommender) -> None:
    for party, items in RATED.items():
        _send(network, party, Join())
        _send(network, party, ItemRequest(np.array(items, dtype=np.int32)))
    await trio.sleep(0.01)
    assert await recommender.set_up_noise(trio.current_time() + 1.0) == len(RATED)


def _user_plain(party: Party, vectors: np.ndarray) -> np.ndarray:
    """What user ``party`` adds up (ring): its gradient rows -2 e_ij u_i (eq. (13)) plus eta-pieces, all drawn here."""
    rng = np.random.default_rng(100 + party.index)
    u = rng.standard_normal(D) / 2
    ratings = rng.integers(1, 6, size=vectors.shape[0]).astype(np.float64)
    v = RING.decode(from_words(RING, vectors, D, "test"))
    gradients = -2.0 * (ratings - v @ u)[:, None] * u[None, :]
    eta = rng.laplace(0.0, 1.0, size=gradients.shape)
    return RING.add(RING.encode(gradients)[0], RING.encode(eta)[0])


def _ring_sums(rows_by_party: dict[Party, np.ndarray]) -> dict[int, list[int]]:
    """Per item, the sum of the given parties' rows mod 2^64, in Python integers."""
    sums: dict[int, list[int]] = {}
    for party, rows in rows_by_party.items():
        for item, row in zip(RATED[party], rows):
            total = sums.setdefault(item, [0] * D)
            for column in range(D):
                total[column] = (total[column] + int(row[column])) % RING.modulus
    return dict(sorted(sums.items()))


def _expected_step(before: np.ndarray, sums: dict[int, list[int]], counts: dict[int, int]) -> np.ndarray:
    """Eq. (9), normalized: v_j -= gamma (A_j / n_j + 2 mu v_j) for every item with a contribution."""
    hyper, after = MFHyper(d=D), before.copy()
    for item, total in sums.items():
        signed = np.array([value - RING.modulus if value >= RING.modulus // 2 else value for value in total], dtype=np.float64)
        gradient = signed / 2.0**RING.frac_bits / counts[item]
        after[item] = before[item] - hyper.gamma * (gradient + 2.0 * hyper.mu * before[item])
    return after


async def test_naive_sums_are_the_gradients_plus_eta_pieces_of_the_valid_current_replies(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "naive")
    async with network.open():
        await _join_and_set_up(network, recommender)
        served = recommender.serve(2, 10.0)
        await trio.sleep(0.01)
        plain = {}
        for party in RATED:
            vectors = network.mailbox(party).take(ItemVectors.KIND, SERVER).body.vectors
            plain[party] = _user_plain(party, vectors)
        # Alice: a late reply of round 1 first (discarded), then round 2's; Bob: one row too many (refused);
        # Carol: round 2's; Dave: nothing (left out at the deadline).
        network.send(ALICE, SERVER, NaiveContribution(1, to_words(RING, RING.uniform(np.random.default_rng(9), (3, D)))))
        network.send(ALICE, SERVER, NaiveContribution(2, to_words(RING, plain[ALICE])))
        network.send(BOB, SERVER, NaiveContribution(2, to_words(RING, np.vstack([plain[BOB], plain[BOB][:1]]))))
        network.send(CAROL, SERVER, NaiveContribution(2, to_words(RING, plain[CAROL])))
        before = recommender.item_factors.copy()
        start = trio.current_time()
        with trio.move_on_after(100.0):
            update = await recommender.collect(start + 5.0)
        assert trio.current_time() == pytest.approx(start + 5.0), "the recommender waits for Dave until the deadline"
    assert served.parties == [ALICE, BOB, CAROL, DAVE]
    expected = _ring_sums({ALICE: plain[ALICE], CAROL: plain[CAROL]})
    counts = {0: 1, 1: 1, 2: 2, 5: 2}
    assert update.round == 2
    assert update.contributors == [ALICE, CAROL]
    np.testing.assert_array_equal(update.items, list(expected))
    assert [[int(value) for value in row] for row in update.unmasked] == list(expected.values())
    np.testing.assert_array_equal(update.before_addback, update.unmasked)
    np.testing.assert_array_equal(update.counts, [counts[item] for item in expected])
    np.testing.assert_array_equal(update.divisors, [float(counts[item]) for item in expected])
    np.testing.assert_array_equal(update.updated, list(expected))
    np.testing.assert_allclose(recommender.item_factors, _expected_step(before, expected, counts), rtol=0, atol=1e-12)
    # What the difference attack of eq. (11) reads: this round's decoded per-item sums and their divisors.
    assert recommender.last is update
    round_index, items, decoded, divisors = recommender.recent[-1]
    assert round_index == 2 and items.tolist() == list(expected) and divisors.tolist() == [float(counts[i]) for i in expected]
    np.testing.assert_array_equal(decoded, RING.decode(update.unmasked))
    [rejection] = network.ledger.rejections
    assert (rejection.src, rejection.kind, rejection.reason) == (BOB, NaiveContribution.KIND, RejectReason.INVALID)
    assert rejection.problem == "server:0 expected a valid dpmf.naive_contribution from user:1: words of shape (2, 4), received (3, 4)"


async def test_a_naive_iteration_nobody_answered_updates_nothing(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "naive")
    async with network.open():
        await _join_and_set_up(network, recommender)
        recommender.serve(1, 10.0)
        before = recommender.item_factors.copy()
        update = await recommender.collect(trio.current_time() + 1.0)
    assert update.contributors == [] and update.items.size == 0 and update.unmasked.shape == (0, D)
    np.testing.assert_array_equal(recommender.item_factors, before)


async def test_s2_serves_the_set_up_users_only_and_nobody_before_the_setup(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "protected")
    erin = Party(Role.USER, 4)
    network.attach(THIRD_PARTY)
    async with network.open():
        _send(network, ALICE, Join())
        _send(network, ALICE, ItemRequest(np.array(RATED[ALICE], dtype=np.int32)))
        await trio.sleep(0.01)
        nobody = recommender.serve(1, 10.0)
        assert list(recommender.requests) == [ALICE], "a request stays pending until its sender is set up"
        await _join_and_set_up(network, recommender)
        _send(network, erin, Join())  # joins after the setup: no eta-pieces, never served
        _send(network, erin, ItemRequest(np.array([0, 4], dtype=np.int32)))
        await trio.sleep(0.01)
        served = recommender.serve(2, 10.0)
    assert nobody.parties == [] and nobody.row_items.size == 0
    assert nobody.offsets.tolist() == [0] and nobody.offsets.dtype.kind == "i"
    assert nobody.raters.tolist() == [0] * N_ITEMS
    assert served.parties == sorted(RATED) and list(recommender.requests) == [erin]
    assert served.offsets.tolist() == [0, 3, 5, 8, 9] and served.raters.tolist() == [1, 1, 3, 2, 0, 2]


async def test_the_encoding_counters_add_up_over_the_iterations(autojump_clock) -> None:
    """Every serve encodes all of V (N_ITEMS x D values); 1e12 does not fit 2^31 and overflows each time."""
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "naive")
    async with network.open():
        await _join_and_set_up(network, recommender)
        recommender.item_factors[3] = [1e12, 0.0]
        for round_index in (1, 2, 3):
            recommender.serve(round_index, 10.0)
            await recommender.collect(trio.current_time() + 1.0)
    assert (recommender.vector_values, recommender.vector_overflow) == (3 * N_ITEMS * D, 3)
    assert [round_index for round_index, *_ in recommender.recent] == [2, 3], "the last two iterations only"


async def _protected_round(network: Network, recommender: Recommender, answering: list[Party]) -> tuple[dict[Party, np.ndarray], object]:
    """Serve round 1; each of ``answering`` masks its plain values with the masks its key stands for and
    sends them to the (real) third party; returns the plain values and the recommender's update."""
    async with trio.open_nursery() as nursery:
        network.attach(THIRD_PARTY)
        nursery.start_soon(Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), recommender.public).run)
        await _join_and_set_up(network, recommender)
        recommender.serve(1, 10.0)
        await trio.sleep(0.01)
        plain = {}
        for party in RATED:
            request = network.mailbox(party).take(ItemVectors.KIND, SERVER).body
            assert request.masks is None and len(request.mask_seed) == 16
            plain[party] = _user_plain(party, request.vectors)
            if party in answering:
                masked = RING.add(plain[party], expand_masks(RING, request.mask_seed, len(RATED[party]), D))
                network.send(party, THIRD_PARTY, Contribution(1, np.array(RATED[party], dtype=np.int32), to_words(RING, masked)))
        update = await recommender.collect(trio.current_time() + 10.0)
        nursery.cancel_scope.cancel()
    return plain, update


async def test_seeded_masks_unmask_to_the_sum_of_the_contributors_plain_values(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "protected", "seeded")
    async with network.open():
        plain, update = await _protected_round(network, recommender, [BOB, CAROL, DAVE])
    expected = _ring_sums({party: plain[party] for party in (BOB, CAROL, DAVE)})
    assert update.contributors == [BOB, CAROL, DAVE]
    np.testing.assert_array_equal(update.items, list(expected))
    assert [[int(value) for value in row] for row in update.unmasked] == list(expected.values())
    np.testing.assert_array_equal(update.counts, [1, 2, 2, 1])


async def test_a_seeded_round_nobody_answered_unmasks_nothing(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "protected", "seeded")
    async with network.open():
        before = recommender.item_factors.copy()
        _, update = await _protected_round(network, recommender, [])
    assert update.contributors == [] and update.items.size == 0 and update.unmasked.shape == (0, D)
    np.testing.assert_array_equal(recommender.item_factors, before)


async def test_the_noise_setup_waits_for_late_item_requests_and_sends_every_rater_its_h_and_k(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "protected")
    late = {CAROL, DAVE}
    async with network.open():
        for party, items in RATED.items():
            _send(network, party, Join())
            if party not in late:
                _send(network, party, ItemRequest(np.array(items, dtype=np.int32)))
        await trio.sleep(0.01)
        async with trio.open_nursery() as nursery:
            async def late_requests() -> None:
                await trio.sleep(0.5)
                for party in sorted(late):
                    network.send(party, SERVER, ItemRequest(np.array(RATED[party], dtype=np.int32)))
            nursery.start_soon(late_requests)
            assert await recommender.set_up_noise(trio.current_time() + 2.0) == 4
        await trio.sleep(0.01)
        setups = {party: network.mailbox(party).take(NoiseSetup.KIND, SERVER).body for party in RATED}
    raters = np.zeros(N_ITEMS, dtype=np.int64)
    for items in RATED.values():
        raters[items] += 1
    assert raters.tolist() == [1, 1, 3, 2, 0, 2]
    assert recommender.set_up == frozenset(RATED)
    assert {party: items.tolist() for party, items in recommender.rated_items.items()} == RATED
    np.testing.assert_array_equal(recommender.known_raters, raters)
    np.testing.assert_array_equal(recommender.eta_pieces, raters)
    assert recommender.eta_pieces.dtype.kind == "i", "pieces are counted"
    np.testing.assert_array_equal(recommender.eta_whole, raters > 0)
    h_of: dict[int, np.ndarray] = {}
    for party, setup in setups.items():
        np.testing.assert_array_equal(setup.raters, raters[RATED[party]])
        assert setup.h.shape == (len(RATED[party]), D) and (setup.h >= 0).all()
        for item, row in zip(RATED[party], setup.h):
            np.testing.assert_array_equal(h_of.setdefault(item, row), row)  # one H_j for all raters of item j
    assert sorted(h_of) == [0, 1, 2, 3, 5]


# ---------------------------------------------------------------------------------------------- S3


def _s3_recommender(network: Network, max_users: int = 10) -> Recommender:
    public = PublicParameters("S3", "protected", "explicit", MFHyper(d=D), RING, 1.0, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, D))
    network.attach(SERVER)
    return Recommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), public, max_users=max_users, k_presharing=2)


async def test_s3_presharing_with_nobody_online_or_nothing_short_asks_nobody(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger(), record_views=[THIRD_PARTY])
    recommender = _s3_recommender(network)
    network.attach(THIRD_PARTY)
    async with network.open():
        assert (await recommender.preshare(10.0)).size == 0
        for party in RATED:
            _send(network, party, Join())
        await trio.sleep(0.01)
        recommender.eta_whole[:] = True
        assert (await recommender.preshare(10.0)).size == 0
        await trio.sleep(0.01)
    assert recommender.attempt == 0 and recommender.presharing == [] and network.view(THIRD_PARTY) == []


async def _answer_presharing(
    network: Network, rng: np.random.Generator, silent: int = 0
) -> dict[Party, tuple[int, np.ndarray, np.ndarray]]:
    """The asked users' side of a pre-sharing attempt: each draws its eta-piece for the items it is asked
    about and sends the third party the piece added to beta -- but the first ``silent`` of them, who stay
    silent. Returns each asked user's (attempt, items, piece)."""
    await trio.sleep(0.01)
    drawn: dict[Party, tuple[int, np.ndarray, np.ndarray]] = {}
    for party in RATED:
        envelope = network.mailbox(party).take(PresharingRequest.KIND, SERVER)
        if envelope is None:
            continue
        request = envelope.body
        piece = RING.uniform(rng, (request.items.size, D))
        drawn[party] = (request.attempt, request.items.astype(np.int64), piece)
        if len(drawn) > silent:
            tau = RING.add(piece, from_words(RING, request.beta, D, "test"))
            network.send(party, THIRD_PARTY, PresharingShare(request.attempt, request.items, to_words(RING, tau)))
    return drawn


async def test_s3_unmasking_leaves_the_contributors_values_plus_exactly_the_presharers_eta(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s3_recommender(network)
    network.attach(THIRD_PARTY)
    third_party = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), recommender.public)
    rng = np.random.default_rng(12)
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(third_party.run)
        for party, items in RATED.items():
            _send(network, party, Join())
            _send(network, party, ItemRequest(np.array(items, dtype=np.int32)))
        await trio.sleep(0.01)
        shared: dict[Party, tuple[int, np.ndarray, np.ndarray]] = {}

        async def run_presharers() -> None:
            shared.update(await _answer_presharing(network, rng))

        nursery.start_soon(run_presharers)
        accepted = await recommender.preshare(10.0)
        assert len(shared) == 2, "k = 2 common sharers"
        eta = np.zeros((N_ITEMS, D), dtype=RING.dtype)
        for _, items, piece in shared.values():
            assert items.tolist() == list(range(N_ITEMS))
            eta[items] = RING.add(eta[items], piece)
        np.testing.assert_array_equal(accepted, np.arange(N_ITEMS))
        np.testing.assert_array_equal(RING.sub(recommender.tau_hat, third_party.alpha), eta)
        assert recommender.eta_whole.all() and recommender.eta_pieces.tolist() == [2] * N_ITEMS
        assert recommender.presharing == [{"attempt": 1, "items": N_ITEMS, "sharers": 2, "whole": N_ITEMS, "pieces_min": 2}]
        # Iteration 1: Alice and Bob contribute; Carol (alone on item 1) and Dave are silent.
        served = recommender.serve(1, 10.0)
        await trio.sleep(0.01)
        plain, pieces_of = {}, {}
        for party in RATED:
            request = network.mailbox(party).take(ItemVectors.KIND, SERVER).body
            plain[party] = _user_plain(party, request.vectors)
            pieces_of[party] = from_words(RING, request.eta_pieces, D, "test")
            if party not in (CAROL, DAVE):
                phi = RING.add(RING.add(plain[party], pieces_of[party]), from_words(RING, request.masks, D, "test"))
                network.send(party, THIRD_PARTY, Contribution(1, np.array(RATED[party], dtype=np.int32), to_words(RING, phi)))
        update = await recommender.collect(trio.current_time() + 10.0)
        nursery.cancel_scope.cancel()
    contributors = {party: plain[party] for party in (ALICE, BOB)}
    sums = _ring_sums(contributors)
    items = list(sums)
    assert update.round == 1 and update.contributors == [ALICE, BOB] and served.parties == list(RATED)
    np.testing.assert_array_equal(update.items, items)
    expected = RING.add(np.array(list(sums.values()), dtype=RING.dtype), eta[items])
    np.testing.assert_array_equal(update.unmasked, expected)
    # Before the silent users' pieces of tau^ are added back, their shares of eta_j are missing (Carol's
    # piece of item 1, which nobody contributed to, is not needed).
    back = np.zeros_like(expected)
    back[items.index(2)] = pieces_of[CAROL][1]
    back[items.index(5)] = pieces_of[CAROL][2]
    back[items.index(3)] = pieces_of[DAVE][0]
    np.testing.assert_array_equal(update.before_addback, RING.sub(expected, back))
    counts = np.array([sum(item in RATED[p] for p in contributors) for item in items])
    served_raters = np.array([sum(item in RATED[p] for p in RATED) for item in items])
    np.testing.assert_array_equal(update.counts, counts)
    np.testing.assert_allclose(update.divisors, counts * served_raters / served_raters)
    np.testing.assert_array_equal(update.updated, items)


async def test_s3_items_that_come_back_short_of_k_pieces_are_preshared_again_from_scratch(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s3_recommender(network)
    network.attach(THIRD_PARTY)
    third_party = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), recommender.public)
    rng = np.random.default_rng(13)
    attempts: list[dict[Party, tuple[int, np.ndarray, np.ndarray]]] = []

    async def answer(silent: int) -> None:
        attempts.append(await _answer_presharing(network, rng, silent))

    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(third_party.run)
        for party in RATED:
            _send(network, party, Join())
        await trio.sleep(0.01)
        nursery.start_soon(answer, 1)
        assert (await recommender.preshare(10.0)).size == 0, "one of the two sharers is silent: every item is short"
        assert not recommender.eta_whole.any() and recommender.eta_pieces.tolist() == [0] * N_ITEMS
        np.testing.assert_array_equal(recommender.tau_hat, 0)
        nursery.start_soon(answer, 0)
        accepted = await recommender.preshare(10.0)
        nursery.cancel_scope.cancel()
    first, second = attempts
    assert len(first) == len(second) == 2 and {a for a, _, _ in first.values()} == {1} and {a for a, _, _ in second.values()} == {2}
    eta = np.zeros((N_ITEMS, D), dtype=RING.dtype)
    for _, items, piece in second.values():
        assert items.tolist() == list(range(N_ITEMS))
        eta[items] = RING.add(eta[items], piece)
    np.testing.assert_array_equal(accepted, np.arange(N_ITEMS))
    np.testing.assert_array_equal(RING.sub(recommender.tau_hat, third_party.alpha), eta)
    assert third_party.alpha_attempt.tolist() == [2] * N_ITEMS
    assert recommender.eta_whole.all() and recommender.eta_pieces.tolist() == [2] * N_ITEMS
    assert recommender.presharing == [
        {"attempt": 1, "items": N_ITEMS, "sharers": 2, "whole": 0, "pieces_min": 1},
        {"attempt": 2, "items": N_ITEMS, "sharers": 2, "whole": N_ITEMS, "pieces_min": 2},
    ]


async def test_s3_serves_at_most_k_users_and_does_not_step_items_whose_eta_is_not_whole(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s3_recommender(network, max_users=2)
    network.attach(THIRD_PARTY)
    async with network.open():
        for party, items in RATED.items():
            _send(network, party, Join())
            _send(network, party, ItemRequest(np.array(items, dtype=np.int32)))
        await trio.sleep(0.01)
        recommender.eta_whole[2] = True  # as if item 2 had been pre-shared
        start = trio.current_time()
        served = recommender.serve(1, 10.0)
        await trio.sleep(0.01)
        assert len(served.parties) == 2 and served.parties == sorted(served.parties)
        [roster] = network.mailbox(THIRD_PARTY).take_all(Roster.KIND)
        assert roster.body == Roster(1, tuple(served.parties), start + 0.5 * 10.0), "collect for half the round"
        assert (recommender.vector_values, recommender.vector_overflow) == (N_ITEMS * D, 0), "every V value encoded, all fit"
        assert sorted(recommender.requests) == sorted(set(RATED) - set(served.parties)), "the others stay pending"
        vectors = {party: network.mailbox(party).take(ItemVectors.KIND, SERVER) for party in RATED}
        known = np.zeros(N_ITEMS, dtype=np.int64)
        for items in RATED.values():
            known[items] += 1
        served_raters = np.zeros(N_ITEMS, dtype=np.int64)
        for party in served.parties:
            served_raters[RATED[party]] += 1
        for party in RATED:
            if party not in served.parties:
                assert vectors[party] is None
                continue
            body = vectors[party].body
            np.testing.assert_array_equal(body.raters, served_raters[RATED[party]])
            np.testing.assert_array_equal(body.known_raters, known[RATED[party]])
        # Both contributed: the sums are arbitrary here, only which items step and by what divisor matters.
        items = np.flatnonzero(served_raters)
        sums = RING.encode(np.full((items.size, D), 0.25))[0]
        masks = np.zeros((items.size, D), dtype=RING.dtype)
        for row, item in zip(served.masks, served.row_items):
            masks[np.searchsorted(items, item)] = RING.add(masks[np.searchsorted(items, item)], row)
        forged = Aggregate(1, items.astype(np.int32), np.zeros((items.size, 2 * D), np.uint32), tuple(served.parties))
        network.send(DAVE, SERVER, forged)  # only the third party's aggregate counts
        await trio.sleep(0.01)
        network.send(THIRD_PARTY, SERVER, Aggregate(1, items.astype(np.int32), to_words(RING, RING.add(sums, masks)), tuple(served.parties)))
        before = recommender.item_factors.copy()
        update = await recommender.collect(trio.current_time() + 5.0)
    assert update.round == 1
    np.testing.assert_array_equal(update.items, items)
    np.testing.assert_array_equal(update.before_addback, sums)
    np.testing.assert_array_equal(update.divisors, served_raters[items] * known[items] / served_raters[items])
    whole = [item for item in items if item == 2]
    np.testing.assert_array_equal(update.updated, whole)
    assert recommender.eta_skipped == items.size - len(whole)
    untouched = [item for item in range(N_ITEMS) if item not in whole]
    np.testing.assert_array_equal(recommender.item_factors[untouched], before[untouched])
    assert not np.allclose(recommender.item_factors[whole], before[whole])


async def test_s3_with_exactly_k_users_pending_serves_them_all_without_drawing_a_choice(autojump_clock) -> None:
    """K = 4 pending users: all are served, and the recommender's first draw is the explicit masks."""
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s3_recommender(network, max_users=len(RATED))
    network.attach(THIRD_PARTY)
    async with network.open():
        for party, items in RATED.items():
            _send(network, party, Join())
            _send(network, party, ItemRequest(np.array(items, dtype=np.int32)))
        await trio.sleep(0.01)
        rng = copy.deepcopy(recommender.rng)
        served = recommender.serve(1, 10.0)
    assert served.parties == sorted(RATED) and recommender.requests == {}
    np.testing.assert_array_equal(served.masks, RING.uniform(rng, (served.row_items.size, D)))
    assert served.known_raters.dtype.kind == "i" and served.known_raters.tolist() == [1, 1, 3, 2, 0, 2]


async def test_s3_presharing_accepts_nothing_from_a_silent_or_empty_third_party_and_refuses_a_wrong_one(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s3_recommender(network)
    network.attach(THIRD_PARTY)
    all_items = np.arange(N_ITEMS, dtype=np.int32)

    async def third_party(answer: Callable[[Roster], object] | None) -> None:
        await trio.sleep(0.01)
        roster = network.mailbox(THIRD_PARTY).take(Roster.KIND, SERVER).body
        assert roster.round == 0 and len(roster.parties) == 2
        if answer is not None:
            network.send(THIRD_PARTY, SERVER, answer(roster))

    async def attempt(answer: Callable[[Roster], object] | None) -> np.ndarray | str:
        """The items accepted, or the text of the recommender's refusal."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(third_party, answer)
            try:
                return await recommender.preshare(10.0)
            except ProtocolViolation as refusal:
                return str(refusal)

    async with network.open():
        for party in RATED:
            _send(network, party, Join())
        await trio.sleep(0.01)
        assert (await attempt(None)).size == 0  # no aggregate by the deadline
        assert (await attempt(lambda r: PresharingAggregate(r.attempt, all_items[:0], np.zeros((0, 2 * D), np.uint32), ()))).size == 0
        problems = []
        for answer in (
            lambda r: PresharingAggregate(r.attempt, all_items, np.zeros((N_ITEMS, 2 * D), np.uint32), (*r.parties, Party(Role.USER, 9))),
            lambda r: PresharingAggregate(r.attempt, all_items[:-1], np.zeros((N_ITEMS - 1, 2 * D), np.uint32), r.parties),
            lambda r: PresharingAggregate(r.attempt, all_items, np.zeros((N_ITEMS, 2 * D - 1), np.uint32), r.parties),
        ):
            problems.append(await attempt(answer))
    assert recommender.presharing[:2] == [
        {"attempt": 1, "items": N_ITEMS, "sharers": 2, "whole": 0, "pieces_min": 0},
        {"attempt": 2, "items": N_ITEMS, "sharers": 2, "whole": 0, "pieces_min": 0},
    ]
    assert not recommender.eta_whole.any()
    assert problems == [
        "server:0: the third party reported pre-sharers it was not asked about",
        "server:0: the pre-sharing aggregate's items do not match its sharers'",
        "server:0 tau~: expected 4 words per row, got shape (6, 3)",
    ]


async def test_a_request_for_unknown_items_and_a_wrong_aggregate_are_refused(autojump_clock) -> None:
    network = Network(Links(0, LinkSpec(Constant(0.0))), Ledger())
    recommender = _s2_recommender(network, "protected")
    network.attach(THIRD_PARTY)
    strangers = tuple(Party(Role.USER, index) for index in range(10, 15))
    async with network.open():
        await _join_and_set_up(network, recommender)
        _send(network, ALICE, ItemRequest(np.array([1, 2, N_ITEMS], dtype=np.int32)))
        await trio.sleep(0.01)
        served = recommender.serve(1, 10.0)
        assert recommender.rated_items[ALICE].tolist() == RATED[ALICE], "the refused request changed nothing"
        items = np.unique(served.row_items).astype(np.int32)
        problems = []
        for aggregate in (
            Aggregate(1, items, np.zeros((items.size, 2 * D), np.uint32), (ALICE, *strangers)),
            Aggregate(1, items[:-1], np.zeros((items.size - 1, 2 * D), np.uint32), tuple(RATED)),
            Aggregate(1, items, np.zeros((items.size, 2 * D - 1), np.uint32), tuple(RATED)),
        ):
            network.send(THIRD_PARTY, SERVER, aggregate)
            with pytest.raises(ProtocolViolation) as caught:
                await recommender.collect(trio.current_time() + 5.0)
            problems.append(str(caught.value))
    [rejection] = network.ledger.rejections
    assert (rejection.src, rejection.kind, rejection.reason) == (ALICE, ItemRequest.KIND, RejectReason.INVALID)
    assert rejection.problem == "server:0 expected a valid dpmf.item_request from user:0: items below 6, received item 6"
    assert problems == [
        "server:0: the third party reported contributors it did not serve: "
        f"{[Party(Role.USER, index) for index in range(10, 13)]}",
        "server:0: the aggregate of round 1 covers other items than its contributors rated",
        "server:0 aggregate: expected 4 words per row, got shape (5, 3)",
    ]
