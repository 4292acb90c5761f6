"""DP-MF's parties one at a time, against what the test computes from the paper's equations.

S1: the trusted recommender keeps each user's latest valid upload (refusing unknown items and ratings
outside the public range), runs eqs. (2)-(5) over the users whose ratings it holds, and publishes V refit
with Theorem 1's noise. S2/S3: the private user answers the third party with
phi_j = grad_j + noise_j + rho~_j + psi_j (mod P), naive users send grad_j + eta_j to the recommender, and
the third party forwards per-item sums minus its alpha_j. A user's generator draws u_i before any noise,
and a user takes its setup and item vectors from the recommender only (an S2 user never pre-shares).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import trio

from fedrecsim.actors.membership import Join
from fedrecsim.mechanisms.laplace import theorem1_noise
from fedrecsim.mechanisms.ring import Ring
from fedrecsim.models.mf import MFHyper, unit_rows, user_step
from fedrecsim.network.ledger import Ledger, RejectReason
from fedrecsim.network.links import Constant, LinkSpec, Links
from fedrecsim.network.network import Network
from fedrecsim.network.party import SERVER, THIRD_PARTY, Party, Role
from fedrecsim.errors import PartyTimeout, ProtocolViolation
from fedrecsim.protocols.dpmf.central import project_unit_ball
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
    RatingsUpload,
    Roster,
)
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.recommender import TrustedRecommender
from fedrecsim.protocols.dpmf.ringops import expand_masks, from_words, to_words
from fedrecsim.protocols.dpmf.third_party import Aggregator
from fedrecsim.protocols.dpmf.user import PrivateUser, TrustingUser
from fedrecsim.seeding import Stream, generator

N_ITEMS, D, N_USERS = 6, 2, 4
ALICE, BOB, CAROL, DAVE = (Party(Role.USER, index) for index in range(4))
HYPER = MFHyper(d=D)


def _public(scenario: str, variant: str = "protected", transport: str = "explicit", ring: Ring = Ring(64, 32)) -> PublicParameters:
    return PublicParameters(scenario, variant, transport, HYPER, ring, 1.0, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, D))


def _network() -> Network:
    return Network(Links(0, LinkSpec(Constant(0.0))), Ledger())


def _trusted(network: Network) -> TrustedRecommender:
    network.attach(SERVER)
    return TrustedRecommender(SERVER, network, generator(0, Stream.ACTOR, 2, 0), _public("S1"), N_USERS)


def _upload(network: Network, party: Party, items: list[int], values: list[float]) -> None:
    if not network.is_attached(party):
        network.attach(party)
        network.send(party, SERVER, Join())
    network.send(party, SERVER, RatingsUpload(np.array(items, dtype=np.int32), np.array(values, dtype=np.float64)))


# ---------------------------------------------------------------------------------------------- S1


async def test_the_trusted_recommender_keeps_each_users_latest_valid_upload_and_refuses_the_rest(autojump_clock) -> None:
    network = _network()
    recommender = _trusted(network)
    async with network.open():
        empty = recommender.ratings()
        assert (empty.users.size, empty.items.size, empty.values.size) == (0, 0, 0), "nothing is held before any upload"
        assert (empty.n_users, empty.n_items) == (N_USERS, N_ITEMS)
        _upload(network, ALICE, [0, 2, 5], [4.0, 2.0, 5.0])
        _upload(network, BOB, [1, 2, 6], [3.0, 3.0, 3.0])  # item 6 is not in the model (its 2nd item is)
        _upload(network, CAROL, [1, 3], [0.5, 3.0])  # below the public rating range
        _upload(network, DAVE, [4], [5.5])  # above it
        await trio.sleep(0.01)
        assert recommender.collect() == 1
        held = recommender.ratings()
        assert (held.users.tolist(), held.items.tolist(), held.values.tolist()) == ([0, 0, 0], [0, 2, 5], [4.0, 2.0, 5.0])
        _upload(network, ALICE, [1, 4], [1.0, 3.0])  # replaces her first upload
        _upload(network, BOB, [3], [2.0])
        await trio.sleep(0.01)
        assert recommender.collect() == 2
        held = recommender.ratings()
        assert (held.users.tolist(), held.items.tolist(), held.values.tolist()) == ([0, 0, 1], [1, 4, 3], [1.0, 3.0, 2.0])
    problems = [(r.src, r.kind, r.reason, r.problem) for r in network.ledger.rejections]
    expected = "server:0 expected valid dpmf.ratings from {}: {}"
    assert problems == [
        (BOB, RatingsUpload.KIND, RejectReason.INVALID, expected.format(BOB, "items below 6, received item 6")),
        (CAROL, RatingsUpload.KIND, RejectReason.INVALID, expected.format(CAROL, "ratings in [1, 5], received 0.5 .. 3")),
        (DAVE, RatingsUpload.KIND, RejectReason.INVALID, expected.format(DAVE, "ratings in [1, 5], received 5.5 .. 5.5")),
    ]


async def test_a_trusted_iteration_steps_only_the_users_it_holds_ratings_of_by_eqs_2_to_5(autojump_clock) -> None:
    network = _network()
    recommender = _trusted(network)
    rated = {ALICE: ([0, 2, 5], [4.0, 2.0, 5.0]), CAROL: ([2, 3], [1.0, 3.0])}
    async with network.open():
        for party, (items, values) in rated.items():
            _upload(network, party, items, values)
        await trio.sleep(0.01)
        recommender.collect()
        U, V = recommender.user_factors.copy(), recommender.item_factors.copy()
        assert recommender.iterate().tolist() == [0, 2]
    gamma, lam, mu = HYPER.gamma, HYPER.lam, HYPER.mu
    expected_u, gradient_sums, counts = U.copy(), np.zeros_like(V), np.zeros(N_ITEMS)
    for party, (items, values) in rated.items():
        u = U[party.index]
        errors = np.array(values) - V[items] @ u
        grad_u = -2.0 * errors @ V[items] / len(items)
        new_u = u - gamma * (grad_u + 2.0 * lam * u)
        expected_u[party.index] = new_u / max(1.0, np.linalg.norm(new_u))
        for item, error in zip(items, errors):
            gradient_sums[item] += -2.0 * error * u
            counts[item] += 1
    expected_v = V.copy()
    for item in np.flatnonzero(counts):
        expected_v[item] = V[item] - gamma * (gradient_sums[item] / counts[item] + 2.0 * mu * V[item])
    np.testing.assert_allclose(recommender.user_factors, expected_u, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(recommender.user_factors[[1, 3]], U[[1, 3]])  # Bob and Dave: no ratings held
    np.testing.assert_allclose(recommender.item_factors, expected_v, rtol=0, atol=1e-12)


async def test_the_trusted_recommender_publishes_with_theorem_1_noise_it_draws_then(autojump_clock) -> None:
    network = _network()
    recommender = _trusted(network)
    async with network.open():
        _upload(network, ALICE, [0, 2], [4.0, 2.0])
        await trio.sleep(0.01)
        recommender.collect()
        assert recommender.eta is None, "no noise before publishing"
        rng = copy.deepcopy(recommender.rng)
        recommender.publish("theorem1", 0.5, 4.0)
    np.testing.assert_array_equal(recommender.eta, theorem1_noise(rng, N_ITEMS, D, 0.5, 4.0))


async def test_a_trusting_user_uploads_its_ratings_and_one_without_ratings_sends_nothing(autojump_clock) -> None:
    network = _network()
    network.attach(SERVER)
    users = [
        TrustingUser(ALICE, network, generator(0, Stream.ACTOR, 1, 0), np.array([1, 4]), np.array([2, 5])),  # integer ratings: sent as float64
        TrustingUser(BOB, network, generator(0, Stream.ACTOR, 1, 1), np.array([], dtype=np.int64), np.array([])),
    ]
    async with network.open():
        for user in users:
            network.attach(user.party)
            await user.run()
            await user.resume()
        await trio.sleep(0.01)
        uploads = network.mailbox(SERVER).take_all(RatingsUpload.KIND)
    assert [(e.src, e.body.items.tolist(), e.body.values.tolist()) for e in uploads] == [(ALICE, [1, 4], [2.0, 5.0])]
    assert uploads[0].body.items.dtype == np.int32


# ---------------------------------------------------------------------------------------------- S2 / S3 users

ITEMS, RATINGS = [1, 3, 4], [5.0, 2.0, 4.0]


def _private(network: Network, public: PublicParameters, seed: int = 0) -> PrivateUser:
    network.attach(ALICE)
    return PrivateUser(ALICE, network, generator(seed, Stream.ACTOR, 1, 0), np.array(ITEMS), np.array(RATINGS), public)


def _vectors(ring: Ring, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Item vectors as the recommender encodes them: the ring words and the values they stand for."""
    encoded = ring.encode(unit_rows(np.random.default_rng(seed), len(ITEMS), D) * 0.8)[0]
    return to_words(ring, encoded), ring.decode(encoded)


def _expected(user_u: np.ndarray, v: np.ndarray, public: PublicParameters, rng: np.random.Generator, round_index: int,
              raters: np.ndarray, weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the user's new u, its grad + rho~ weighted) by eq. (13), with rho~ = b sqrt(2 H_j(t) / k'_j) N(0, 1) drawn from ``rng``."""
    errors = np.array(RATINGS) - v @ user_u
    grad_u = -2.0 * errors @ v / len(ITEMS)
    new_u = user_u - HYPER.gamma * (grad_u + 2.0 * HYPER.lam * user_u)
    new_u /= max(1.0, np.linalg.norm(new_u))
    real = -2.0 * errors[:, None] * user_u[None, :]
    if public.protected:
        h = public.coin.h(round_index)[ITEMS]
        real = real + public.scale * np.sqrt(2.0 * h / raters[:, None]) * rng.standard_normal(h.shape)
    if weight is not None:
        real = real * weight[:, None]
    return new_u, real


def i32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _ring_words(ring: Ring, words: np.ndarray) -> np.ndarray:
    return from_words(ring, words, D, "test")


@pytest.mark.parametrize("transport", ["explicit", "seeded"])
async def test_an_s2_user_sends_its_gradient_plus_eta_and_rho_pieces_under_the_masks(autojump_clock, transport: str) -> None:
    public = _public("S2", transport=transport)
    ring, network = public.ring, _network()
    user = _private(network, public)
    network.attach(THIRD_PARTY)
    raters = np.array([2, 1, 3], dtype=np.int32)
    words, v = _vectors(ring)
    masks = ring.uniform(np.random.default_rng(4), (len(ITEMS), D))
    async with network.open():
        user._set_up(NoiseSetup(np.full((len(ITEMS), D), 0.5), raters))
        eta = user.eta.copy()
        u, rng = user.u.copy(), copy.deepcopy(user.rng)
        seed = bytes(range(16))
        request = ItemVectors.of(2, words, raters, masks=to_words(ring, masks)) if transport == "explicit" else ItemVectors.of(2, words, raters, mask_seed=seed)
        user._contribute(request)
        await trio.sleep(0.01)
        [envelope] = network.mailbox(THIRD_PARTY).take_all(Contribution.KIND)
    if transport == "seeded":
        masks = expand_masks(ring, seed, len(ITEMS), D)
    new_u, real = _expected(u, v, public, rng, 2, raters)
    assert (envelope.src, envelope.body.round, envelope.body.items.tolist()) == (ALICE, 2, ITEMS)
    plain = ring.sub(_ring_words(ring, envelope.body.phi), masks)
    np.testing.assert_array_equal(plain, ring.add(ring.encode(real)[0], eta))
    np.testing.assert_allclose(user.u, new_u, rtol=0, atol=1e-12)
    np.testing.assert_allclose(user.last_real, real, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(user.last_plain, plain)
    assert user.last_round == 2


async def test_a_naive_user_sends_its_gradient_plus_eta_straight_to_the_recommender(autojump_clock) -> None:
    public = _public("S2", variant="naive")
    ring, network = public.ring, _network()
    network.attach(SERVER)
    user = _private(network, public)
    raters = np.array([2, 1, 3], dtype=np.int32)
    words, v = _vectors(ring)
    async with network.open():
        user._set_up(NoiseSetup(np.full((len(ITEMS), D), 0.5), raters))
        eta, u = user.eta.copy(), user.u.copy()
        user._contribute(ItemVectors.of(1, words, raters))
        await trio.sleep(0.01)
        [envelope] = network.mailbox(SERVER).take_all(NaiveContribution.KIND)
    _, real = _expected(u, v, public, np.random.default_rng(), 1, raters)
    assert envelope.body.round == 1
    np.testing.assert_array_equal(_ring_words(ring, envelope.body.values), ring.add(ring.encode(real)[0], eta))
    assert user.last_rho.shape == (len(ITEMS), D)
    np.testing.assert_array_equal(user.last_rho, 0.0)


async def test_an_s3_user_weights_gradient_and_rho_by_known_over_served_raters_and_adds_its_tau_pieces(autojump_clock) -> None:
    public = _public("S3")
    ring, network = public.ring, _network()
    user = _private(network, public)
    network.attach(THIRD_PARTY)
    raters, known = np.array([2, 1, 3], dtype=np.int32), np.array([4, 1, 6], dtype=np.int32)
    words, v = _vectors(ring)
    masks = ring.uniform(np.random.default_rng(4), (len(ITEMS), D))
    tau_pieces = ring.uniform(np.random.default_rng(5), (len(ITEMS), D))
    async with network.open():
        u, rng = user.u.copy(), copy.deepcopy(user.rng)
        user._contribute(ItemVectors.of(3, words, raters, masks=to_words(ring, masks), eta_pieces=to_words(ring, tau_pieces), known_raters=known))
        await trio.sleep(0.01)
        [envelope] = network.mailbox(THIRD_PARTY).take_all(Contribution.KIND)
    _, real = _expected(u, v, public, rng, 3, raters, weight=known / raters)
    expected = ring.add(ring.add(ring.encode(real)[0], tau_pieces), masks)
    np.testing.assert_array_equal(_ring_words(ring, envelope.body.phi), expected)


async def test_a_fresh_user_draws_u_first_then_its_noise_and_has_contributed_nothing(autojump_clock) -> None:
    """u_i is the first draw of the user's generator (one unit row); the C of its eta-pieces come right after.

    Before its first contribution the ``last_*`` records are empty (no rows, nothing overflowed) and it serves
    no round; its items and ratings are kept as int64 and float64 whatever they came in.
    """
    public = _public("S2")
    ring, network = public.ring, _network()
    network.attach(ALICE)
    user = PrivateUser(ALICE, network, generator(0, Stream.ACTOR, 1, 0), np.array(ITEMS, dtype=np.int32), np.array([5, 2, 4]), public)
    rng = generator(0, Stream.ACTOR, 1, 0)
    np.testing.assert_array_equal(user.u, unit_rows(rng, 1, D)[0])
    assert (user.items.dtype, user.ratings.dtype) == (np.int64, np.float64)
    assert (user.items.tolist(), user.ratings.tolist()) == (ITEMS, RATINGS)
    for record, dtype in ((user.last_signal, ring.dtype), (user.last_plain, ring.dtype), (user.last_real, np.float64), (user.last_rho, np.float64)):
        assert (record.shape, record.dtype) == ((0, D), dtype)
    assert user.last_overflow == 0 and user.serving is None
    h, raters = np.array([[0.5, 2.0], [1.0, 0.1], [3.0, 0.7]]), np.array([2, 1, 3], dtype=np.int32)
    async with network.open():
        user._set_up(NoiseSetup(h, raters))
    expected = ring.encode(public.scale * np.sqrt(2.0 * h / raters[:, None]) * rng.standard_normal(h.shape))[0]
    np.testing.assert_array_equal(user.eta, expected)


async def test_a_user_takes_its_setup_and_item_vectors_from_the_recommender_only(autojump_clock) -> None:
    """Another user's setup and item vectors are left unread, and an S2 user never pre-shares: with nothing
    else from the recommender it waits until its horizon and times out, having sent nothing to the third party."""
    public = _public("S2")
    ring, network = public.ring, _network()
    for party in (SERVER, THIRD_PARTY, BOB):
        network.attach(party)
    user = _private(network, public)
    user.horizon_s = 5.0
    h, raters = np.full((len(ITEMS), D), 0.5), np.array([2, 1, 3], dtype=np.int32)
    words, _ = _vectors(ring)
    masks = to_words(ring, ring.uniform(np.random.default_rng(4), (len(ITEMS), D)))
    beta = to_words(ring, ring.uniform(np.random.default_rng(6), (1, D)))
    async with network.open():
        rng = copy.deepcopy(user.rng)
        network.send(BOB, ALICE, NoiseSetup(np.zeros((len(ITEMS), D)), raters))
        await trio.sleep(0.01)  # Bob's setup is delivered first
        network.send(SERVER, ALICE, NoiseSetup(h, raters))
        network.send(SERVER, ALICE, PresharingRequest(1, i32(1), np.ones((1, D)), i32(1), beta))
        network.send(BOB, ALICE, ItemVectors.of(1, words, raters, masks=masks))
        with pytest.raises(PartyTimeout) as caught:
            await user.run()
        assert trio.current_time() == pytest.approx(5.0)
        sent = network.mailbox(THIRD_PARTY).take_all(PresharingShare.KIND) + network.mailbox(THIRD_PARTY).take_all(Contribution.KIND)
    assert str(caught.value) == "user:0 waited for the recommender until t=5.000s; nothing came"
    expected = ring.encode(public.scale * np.sqrt(2.0 * h / raters[:, None]) * rng.standard_normal(h.shape))[0]
    np.testing.assert_array_equal(user.eta, expected)
    assert (sent, user.shared, user.last_real.shape) == ([], {}, (0, D))


def _refusal(user: PrivateUser, request: object, method: str = "_contribute") -> str:
    with pytest.raises(ProtocolViolation) as caught:
        getattr(user, method)(request)
    return str(caught.value)


async def test_a_user_refuses_item_vectors_and_setups_that_do_not_fit_its_items_or_scenario(autojump_clock) -> None:
    ring = Ring(64, 32)
    words, _ = _vectors(ring)
    raters = np.ones(len(ITEMS), dtype=np.int32)
    masks = to_words(ring, ring.uniform(np.random.default_rng(4), (len(ITEMS), D)))
    network = _network()
    async with network.open():
        s2 = _private(network, _public("S2"))
        assert _refusal(s2, NoiseSetup(np.ones((2, D)), np.ones(2, np.int32)), "_set_up") == "user:0 expected H of shape (3, 2), received (2, 2)"
        assert _refusal(s2, ItemVectors.of(1, words, raters, masks=masks)) == "user:0 round 1: served before the noise setup"
        s2._set_up(NoiseSetup(np.ones((len(ITEMS), D)), raters))
        assert _refusal(s2, ItemVectors.of(1, words[:2], raters[:2])) == "user:0 round 1: expected vectors of 3 items, received 2"
        assert _refusal(s2, ItemVectors.of(1, words[:, :3], raters, masks=masks[:, :3])) == (
            "user:0 round 1 vectors: expected 4 words per row, got shape (3, 3)")
        profile = s2.u.copy()
        assert _refusal(s2, ItemVectors.of(1, words, raters)) == "user:0 round 1: protected item vectors must carry masks or a mask seed"
        # Refused before it changed anything: u_i and the records of its last contribution are as they were.
        np.testing.assert_array_equal(s2.u, profile)
        assert s2.last_round == -1 and s2.last_signal.size == 0
        s3 = _private(_network(), _public("S3"))  # refuses before it sends anything
        assert _refusal(s3, ItemVectors.of(2, words, raters, masks=masks, known_raters=raters)) == (
            "user:0 round 2: S3 item vectors must carry the pieces of tau^")
        assert _refusal(s3, ItemVectors.of(2, words, raters, masks=masks, eta_pieces=masks)) == (
            "user:0 round 2: S3 item vectors carry the known raters k_j exactly when the step is normalized")


async def test_noise_setups_count_every_value_drawn_and_every_overflow(autojump_clock) -> None:
    public = _public("S2", ring=Ring(32, 16))
    network = _network()
    async with network.open():
        user = _private(network, public)
        raters = np.array([1, 2, 3], dtype=np.int32)
        user._set_up(NoiseSetup(np.zeros((len(ITEMS), D)), raters))  # H = 0: no noise, nothing overflows
        np.testing.assert_array_equal(user.eta, 0)
        assert (user.setup_values, user.setup_overflow) == (len(ITEMS) * D, 0)
        user._set_up(NoiseSetup(np.full((len(ITEMS), D), 1e30), raters))  # pieces ~1e15: none fits 2^15
        user._set_up(NoiseSetup(np.full((len(ITEMS), D), 1e30), raters))
        assert (user.setup_values, user.setup_overflow) == (3 * len(ITEMS) * D, 2 * len(ITEMS) * D)


async def test_a_presharer_sends_its_pieces_under_beta_once_per_attempt(autojump_clock) -> None:
    public = _public("S3")
    ring, network = public.ring, _network()
    network.attach(THIRD_PARTY)
    h = np.array([[0.5, 2.0], [1.0, 0.0]])
    sharers = np.array([2, 5], dtype=np.int32)
    beta = ring.uniform(np.random.default_rng(6), (2, D))
    async with network.open():
        user = _private(network, public)
        rng = copy.deepcopy(user.rng)
        request = PresharingRequest(2, np.array([0, 5], dtype=np.int32), h, sharers, to_words(ring, beta))
        user._preshare(request)
        user._preshare(request)  # a copy: ignored
        assert _refusal(user, PresharingRequest(3, np.array([0, 6], dtype=np.int32), h, sharers, to_words(ring, beta)), "_preshare") == (
            "user:0 received a pre-sharing request for items or H out of range")
        assert _refusal(user, PresharingRequest(4, np.array([0, 5], dtype=np.int32), np.ones((2, 3)), sharers, to_words(ring, beta)), "_preshare") == (
            "user:0 received a pre-sharing request for items or H out of range")
        assert _refusal(user, PresharingRequest(4, np.array([0, 5], dtype=np.int32), h, sharers, to_words(ring, beta)[:, :3]), "_preshare") == (
            "user:0 pre-sharing beta: expected 4 words per row, got shape (2, 3)")
        assert (user.setup_values, user.setup_overflow) == (2 * D, 0)
        values_1, overflow_1 = user.setup_values, user.setup_overflow
        for attempt in (5, 6):
            user._preshare(PresharingRequest(attempt, np.array([1], dtype=np.int32), np.full((1, D), 1e40), np.array([1], dtype=np.int32), to_words(ring, beta[:1])))
        assert (user.setup_values, user.setup_overflow) == (values_1 + 2 * D, overflow_1 + 2 * D), "pieces ~1e20 do not fit 2^31"
        await trio.sleep(0.01)
        shares = network.mailbox(THIRD_PARTY).take_all(PresharingShare.KIND)[:1]
    pieces_drawn = ring.encode(public.scale * np.sqrt(2.0 * h / sharers[:, None]) * rng.standard_normal(h.shape))[0]
    assert [(e.body.attempt, e.body.items.tolist()) for e in shares] == [(2, [0, 5])]
    np.testing.assert_array_equal(_ring_words(ring, shares[0].body.tau), ring.add(pieces_drawn, beta))
    items, kept, k = user.shared[2]
    assert (items.tolist(), k.tolist(), sorted(user.shared)) == ([0, 5], [2, 5], [2, 5, 6])
    assert items.dtype.kind == k.dtype.kind == "i"
    np.testing.assert_array_equal(kept, pieces_drawn)


# ---------------------------------------------------------------------------------------------- third party


async def test_the_third_party_sums_valid_contributions_per_item_minus_alpha_and_refuses_the_rest(autojump_clock) -> None:
    public = _public("S3")
    ring, network = public.ring, _network()
    for party in (SERVER, THIRD_PARTY, ALICE, BOB, CAROL, DAVE):
        network.attach(party)
    third_party = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), public)
    rng = np.random.default_rng(21)
    rows = {ALICE: [0, 2], BOB: [2, 5], CAROL: [1], DAVE: [3]}
    values = {party: ring.uniform(rng, (len(items), D)) for party, items in rows.items()}
    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(third_party.run)
        # Pre-sharing attempt 1 by Alice and Bob; a late share of attempt 1 comes in after it.
        network.send(SERVER, THIRD_PARTY, Roster(0, (ALICE, BOB), 5.0, 1))
        for party in (ALICE, BOB):
            network.send(party, THIRD_PARTY, PresharingShare(1, i32(*rows[party]), to_words(ring, values[party])))
        await trio.sleep(1.0)
        alpha = third_party.alpha.copy()
        [pre] = network.mailbox(SERVER).take_all(PresharingAggregate.KIND)
        network.send(CAROL, THIRD_PARTY, PresharingShare(1, i32(1), to_words(ring, values[CAROL])))
        await trio.sleep(0.5)
        # Iteration 1: Bob sends an item the model lacks, Carol rows of the wrong width, Dave a valid one.
        roster = Roster(1, (ALICE, BOB, CAROL, DAVE), 10.0)
        network.send(SERVER, THIRD_PARTY, roster)
        network.send(SERVER, THIRD_PARTY, roster)  # a copy: worked once
        network.send(ALICE, THIRD_PARTY, Contribution(1, i32(*rows[ALICE]), to_words(ring, values[ALICE])))
        network.send(BOB, THIRD_PARTY, Contribution(1, i32(2, 6), to_words(ring, values[BOB])))
        network.send(CAROL, THIRD_PARTY, Contribution(1, i32(1), np.zeros((1, 2 * D + 2), np.uint32)))
        network.send(DAVE, THIRD_PARTY, Contribution(1, i32(*rows[DAVE]), to_words(ring, values[DAVE])))
        await trio.sleep(11.0)
        aggregates = network.mailbox(SERVER).take_all(Aggregate.KIND)
        nursery.cancel_scope.cancel()
    # Pre-sharing: tau~_j = alpha_j + the shares of item j; alpha drawn for the attempt's items only.
    assert (pre.body.attempt, pre.body.items.tolist(), pre.body.contributors) == (1, [0, 2, 5], (ALICE, BOB))
    tau = _ring_words(ring, pre.body.tau_tilde)
    np.testing.assert_array_equal(tau[0], ring.add(alpha[0], values[ALICE][0]))
    np.testing.assert_array_equal(tau[1], ring.add(alpha[2], ring.add(values[ALICE][1], values[BOB][0])))
    np.testing.assert_array_equal(tau[2], ring.add(alpha[5], values[BOB][1]))
    assert third_party.alpha_attempt.tolist() == [1, 0, 1, 0, 0, 1] and third_party.presharers == {1: (ALICE, BOB)}
    # Iteration: only Alice's and Dave's values, minus alpha_j.
    [aggregate] = aggregates
    assert (aggregate.body.round, aggregate.body.items.tolist(), aggregate.body.contributors) == (1, [0, 2, 3], (ALICE, DAVE))
    sums = _ring_words(ring, aggregate.body.sums)
    np.testing.assert_array_equal(sums[0], ring.sub(values[ALICE][0], alpha[0]))
    np.testing.assert_array_equal(sums[1], ring.sub(values[ALICE][1], alpha[2]))
    np.testing.assert_array_equal(sums[2], ring.sub(values[DAVE][0], alpha[3]))
    problems = [(r.src, r.kind, r.reason, r.problem) for r in network.ledger.rejections]
    assert problems == [
        (CAROL, PresharingShare.KIND, RejectReason.UNEXPECTED,
         "third_party:0 expected dpmf.contribution of iteration 1 from user:2; received dpmf.presharing_share of attempt 1, which is not under way"),
        (BOB, Contribution.KIND, RejectReason.INVALID,
         "third_party:0 expected a valid dpmf.contribution from user:1: items below 6, received item 6"),
        (CAROL, Contribution.KIND, RejectReason.INVALID,
         "third_party:0 expected a valid dpmf.contribution from user:2: rows of 4 words, received 6"),
    ]


async def test_an_s2_third_party_refuses_a_presharing_roster(autojump_clock) -> None:
    network = _network()
    for party in (SERVER, THIRD_PARTY):
        network.attach(party)
    third_party = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), _public("S2"))
    assert third_party.alpha is None
    network.attach(ALICE)
    async with network.open():
        network.send(ALICE, THIRD_PARTY, PresharingShare(1, i32(0), np.zeros((1, 2 * D), np.uint32)))  # not an S2 kind
        network.send(SERVER, THIRD_PARTY, Roster(1, (ALICE,), 1.0))  # nobody answers
        await trio.sleep(0.5)
        network.send(SERVER, THIRD_PARTY, Roster(0, (), 1.0, 1))
        with pytest.raises(ProtocolViolation, match="^third_party:0 received a pre-sharing roster in S2; only S3 pre-shares$"):
            await third_party.run()
        await trio.sleep(0.01)
        [aggregate] = network.mailbox(SERVER).take_all(Aggregate.KIND)
    assert (aggregate.body.round, aggregate.body.items.size, aggregate.body.sums.shape, aggregate.body.contributors) == (1, 0, (0, 2 * D), ())
    [rejection] = network.ledger.rejections
    assert (rejection.src, rejection.kind, rejection.reason) == (ALICE, PresharingShare.KIND, RejectReason.UNEXPECTED)
    assert rejection.problem == "third_party:0 expected one of dpmf.contribution, dpmf.roster; received dpmf.presharing_share from user:0"


async def test_the_third_party_waits_for_rosters_until_its_horizon(autojump_clock) -> None:
    network = _network()
    for party in (SERVER, THIRD_PARTY):
        network.attach(party)
    third_party = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), _public("S3"))
    third_party.horizon_s = 3.0
    async with network.open():
        with trio.move_on_after(100.0), pytest.raises(PartyTimeout):
            await third_party.run()
        assert trio.current_time() == pytest.approx(3.0)


async def test_the_third_party_works_each_server_roster_once_and_discards_stale_or_foreign_values(autojump_clock) -> None:
    public = _public("S3")
    ring, network = public.ring, _network()
    for party in (SERVER, THIRD_PARTY, ALICE, BOB, CAROL, DAVE):
        network.attach(party)
    third_party = Aggregator(THIRD_PARTY, network, generator(0, Stream.ACTOR, 3, 0), public)
    rng = np.random.default_rng(22)

    def share(party: Party, attempt: int, items: list[int]) -> np.ndarray:
        values = ring.uniform(rng, (len(items), D))
        network.send(party, THIRD_PARTY, PresharingShare(attempt, i32(*items), to_words(ring, values)))
        return values

    def contribute(party: Party, round_index: int, items: list[int]) -> np.ndarray:
        values = ring.uniform(rng, (len(items), D))
        network.send(party, THIRD_PARTY, Contribution(round_index, i32(*items), to_words(ring, values)))
        return values

    async with network.open(), trio.open_nursery() as nursery:
        nursery.start_soon(third_party.run)
        # Attempt 1: Alice shares, Bob's share has an item the model lacks, Carol is silent (deadline t=5).
        network.send(SERVER, THIRD_PARTY, Roster(0, (ALICE, BOB, CAROL), 5.0, 1))
        a1 = share(ALICE, 1, [0, 1])
        share(BOB, 1, [2, 3, 6])
        network.send(ALICE, THIRD_PARTY, ItemRequest(i32(0)))  # a kind the third party never receives
        await trio.sleep(6.0)
        alpha_1 = third_party.alpha.copy()
        # Attempt 2: a late share of attempt 1 is discarded; Alice and Bob share.
        share(CAROL, 1, [4])
        network.send(SERVER, THIRD_PARTY, Roster(0, (ALICE, BOB), 10.0, 2))
        a2 = share(ALICE, 2, [4])
        b2 = share(BOB, 2, [1, 4])
        await trio.sleep(1.0)
        alpha_2 = third_party.alpha.copy()
        # A roster from a user is not the recommender's: never worked.
        network.send(DAVE, THIRD_PARTY, Roster(7, (DAVE,), 12.0))
        contribute(DAVE, 7, [0])
        # Iteration 1 (sent twice): Alice and Bob contribute, Carol is silent (deadline t=15).
        network.send(SERVER, THIRD_PARTY, Roster(1, (ALICE, BOB, CAROL), 15.0))
        network.send(SERVER, THIRD_PARTY, Roster(1, (ALICE, BOB, CAROL), 15.0))
        r1 = {ALICE: contribute(ALICE, 1, [0, 4]), BOB: contribute(BOB, 1, [1, 4])}
        await trio.sleep(9.0)
        # Iteration 2: a copy of Alice's round-1 contribution comes late, then her round-2 one.
        network.send(ALICE, THIRD_PARTY, Contribution(1, i32(0, 4), to_words(ring, r1[ALICE])))
        network.send(SERVER, THIRD_PARTY, Roster(2, (ALICE,), 20.0))
        r2 = contribute(ALICE, 2, [1])
        await trio.sleep(1.0)
        # Iteration 3: nobody answers.
        network.send(SERVER, THIRD_PARTY, Roster(3, (CAROL,), 25.0))
        await trio.sleep(30.0)
        presharing = [e.body for e in network.mailbox(SERVER).take_all(PresharingAggregate.KIND)]
        aggregates = [e.body for e in network.mailbox(SERVER).take_all(Aggregate.KIND)]
        nursery.cancel_scope.cancel()
    first, second = presharing
    assert (first.attempt, first.items.tolist(), first.contributors) == (1, [0, 1], (ALICE,))
    np.testing.assert_array_equal(_ring_words(ring, first.tau_tilde), ring.add(alpha_1[[0, 1]], a1))
    assert (second.attempt, second.items.tolist(), second.contributors) == (2, [1, 4], (ALICE, BOB))
    tau = _ring_words(ring, second.tau_tilde)
    np.testing.assert_array_equal(tau[0], ring.add(alpha_2[1], b2[0]))
    np.testing.assert_array_equal(tau[1], ring.add(alpha_2[4], ring.add(a2[0], b2[1])))
    assert not np.array_equal(alpha_2[1], alpha_1[1]), "item 1, pre-shared again, has a fresh alpha"
    np.testing.assert_array_equal(alpha_2[0], alpha_1[0])
    assert len({tuple(row) for row in alpha_2[[0, 1, 4]]}) == 3, "alpha_j is drawn per item"
    assert third_party.alpha_attempt.tolist() == [1, 2, 0, 0, 2, 0] and third_party.alpha_attempt.dtype.kind == "i"
    assert third_party.presharers == {1: (ALICE,), 2: (ALICE, BOB)}
    assert [(a.round, a.items.tolist(), a.contributors) for a in aggregates] == [
        (1, [0, 1, 4], (ALICE, BOB)), (2, [1], (ALICE,)), (3, [], ()),
    ]
    one = _ring_words(ring, aggregates[0].sums)
    np.testing.assert_array_equal(one[0], ring.sub(r1[ALICE][0], alpha_2[0]))
    np.testing.assert_array_equal(one[1], ring.sub(r1[BOB][0], alpha_2[1]))
    np.testing.assert_array_equal(one[2], ring.sub(ring.add(r1[ALICE][1], r1[BOB][1]), alpha_2[4]))
    np.testing.assert_array_equal(_ring_words(ring, aggregates[1].sums), ring.sub(r2, alpha_2[[1]]))
    assert aggregates[2].sums.shape == (0, 2 * D)
    problems = [(r.src, r.kind, r.reason, r.problem) for r in network.ledger.rejections]
    assert problems[1:] == [
        (BOB, PresharingShare.KIND, RejectReason.INVALID,
         "third_party:0 expected a valid dpmf.presharing_share from user:1: items below 6, received item 6"),
    ]
    assert (problems[0][0], problems[0][1], problems[0][2]) == (ALICE, ItemRequest.KIND, RejectReason.UNEXPECTED)


@pytest.mark.parametrize("normalize", [True, False])
def test_a_users_step_is_the_models_user_step_bit_for_bit(normalize: bool) -> None:
    """`PrivateUser._step` (in place, fewer numpy calls) moves u_i and returns the gradient rows exactly as
    `user_step` followed by the unit-ball projection, for any number of rated items (none included)."""
    hyper = MFHyper(d=7, gamma=0.3, lam=0.01, normalize=normalize)
    public = PublicParameters("S2", "protected", "explicit", hyper, Ring(64, 32), 1.0, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, 7))
    rng = np.random.default_rng(21)
    for rows in (0, 1, 2, 5):
        for scale in (0.1, 3.0):  # 3.0: steps that leave the unit ball, so the projection acts
            user = PrivateUser(ALICE, _network(), np.random.default_rng(rows), np.arange(rows), rng.uniform(1, 5, rows), public)
            user.u = rng.standard_normal(7) * scale
            v_rows = rng.standard_normal((rows, 7)) * scale
            expected_u, expected_gradients = user_step(user.u.copy(), v_rows, user.ratings, hyper)
            gradients = user._step(v_rows.copy())
            np.testing.assert_array_equal(gradients.view(np.uint64), expected_gradients.view(np.uint64))
            np.testing.assert_array_equal(user.u.view(np.uint64), project_unit_ball(expected_u).view(np.uint64))


def test_a_user_waiting_for_its_next_iteration_holds_no_message_it_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a user answered an iteration, nothing of that iteration's item vectors stays alive while it waits
    (at W3's shape 1,000 users a round each kept their last message until served again). Freed by reference
    counting the moment the answer is sent, so the check is exact: every request answered in an earlier
    iteration is gone when a later one is answered."""
    import weakref

    import fedrecsim

    answered: list[tuple[int, weakref.ref]] = []
    alive_later: list[int] = []
    contribute = PrivateUser._contribute

    def spying(self: PrivateUser, request: ItemVectors) -> None:
        alive_later.extend(r for r, ref in answered if r < request.round and ref() is not None)
        contribute(self, request)
        answered.append((request.round, weakref.ref(request)))

    monkeypatch.setattr(PrivateUser, "_contribute", spying)
    fedrecsim.run({
        "run": {"protocol": "dpmf", "name": "held", "seed": 3, "rounds": 4, "round_timeout_s": 10.0},
        "data": {"source": "synthetic", "users": 20, "items": 30, "ratings": 300},
        "network": {"latency": {"model": "constant", "seconds": 0.01}},
        "availability": {"model": "always"},
        "protocol": {"scenario": "S3", "d": 4, "epsilon": 0.8, "max_users": 6, "k_presharing": 3},
    })
    assert len({r for r, _ in answered}) == 4 and len(answered) == 24
    assert alive_later == []
