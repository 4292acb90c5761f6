"""DP-MF's five invariant monitors, judged on hand-built pre-sharing attempts and iterations: each violation
counted with its exact detail, and each boundary where the invariant still holds.

The `Verifier` reads what the parties recorded (the users' pieces and contributions, the recommender's
tau^ and `Update`, the third party's alpha and pre-sharers) and never raises: it counts checks and
violations and keeps the first three details (`fedrecsim.invariants`). So each test asserts a monitor's
whole ``report()`` -- the message a violated run prints in ``result.json`` -- and the per-round
measurements ``after_round`` returns, against values the test works out by hand: every real here is a
multiple of 1/8, so it encodes exactly in the ring Z_{2^32} with 16 fractional bits used throughout.

The parties are stand-ins holding only the state the Verifier reads, set as the real parties set it
(``user.py``, ``recommender.py``, ``third_party.py``); the aggregates are summed here from the users'
contributions, the way the third party and the recommender sum them.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fedrecsim.mechanisms.ring import Ring
from fedrecsim.models.mf import MFHyper
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.dpmf.monitors import ShortfallMonitor, TallyMonitor, Verifier
from fedrecsim.protocols.dpmf.noise import PublicCoin
from fedrecsim.protocols.dpmf.public import PublicParameters
from fedrecsim.protocols.dpmf.recommender import Served, Update

D, N_ITEMS, SCALE = 2, 5, 2.0
ALICE, BOB, CAROL, DAVE = (Party(Role.USER, index) for index in range(4))

ETA = "the noise in every unmasked aggregate is exactly eta_j"
PIECES = "every updated item's eta_j holds all k pieces it was drawn for"
MASKS = "removing the contributors' masks leaves exactly their sum"
RHO = "every updated item is divided by the number of rho~ pieces really in its sum"
OVERFLOW = "every encoded value and every aggregate fits the ring"

# S2: the fixed eta-pieces of the noise setup, one row per rated item. Alice rates items 0 and 2, Bob 2 and 3,
# Dave (set up, but he drops out where a test says so) 2 and 3; Carol rates item 4 and is never set up.
ALICE_ETA = [[0.5, -0.25], [1.0, 0.75]]
BOB_ETA = [[-0.5, 0.25], [2.0, -1.0]]
DAVE_ETA = [[0.25, 0.25], [-1.0, 0.5]]
# What Alice and Bob add every iteration: grad + rho~ (``last_real``) and the rho~ pieces in it.
ALICE_REAL, ALICE_RHO = [[0.25, 0.5], [-0.75, 1.25]], [[0.125, -0.5], [0.25, 0.25]]
BOB_REAL, BOB_RHO = [[1.5, -0.5], [0.25, 0.25]], [[-0.25, 0.5], [0.5, -0.125]]
S2_ITEMS = [0, 2, 3]
"""The items Alice and Bob contribute to: item 0 from Alice, item 2 from both, item 3 from Bob."""
S2_ETA_ABS = 0.75 + 1.5 + 3.0
"""sum |eta_j| over items 0, 2, 3 of Alice's and Bob's pieces: |(0.5, -0.25)| + |(0.5, 1.0)| + |(2.0, -1.0)|."""
S2_RHO_ABS = 0.625 + 0.75 + 0.625
"""sum |rho~_j| over items 0, 2, 3: |(0.125, -0.5)| + |(0, 0.75)| + |(0.5, -0.125)|."""

# S3, attempt 1: Alice and Bob pre-share items 0, 1, 2, each piece drawn for k = 2 sharers.
ALICE_SHARE = [[0.5, 0.25], [1.0, -1.0], [0.25, 0.0]]
BOB_SHARE = [[-0.25, 0.5], [0.5, 0.5], [0.75, -0.5]]


def _public(scenario: str, variant: str = "protected") -> PublicParameters:
    return PublicParameters(
        scenario, variant, "explicit", MFHyper(d=D), Ring(32, 16), SCALE, N_ITEMS, (1.0, 5.0), PublicCoin(1, N_ITEMS, D)
    )


def _encoded(ring: Ring, rows: list[list[float]]) -> np.ndarray:
    encoded, clamped = ring.encode(np.array(rows, dtype=np.float64))
    assert clamped == 0
    return encoded


def _user(public: PublicParameters, party: Party, items: list[int], eta: list[list[float]] | None = None) -> SimpleNamespace:
    """A private user as it stands before its first contribution; ``eta``: its S2 pieces, fixed at the setup."""
    ring = public.ring
    nothing = np.empty((0, D), dtype=ring.dtype)
    return SimpleNamespace(
        party=party, items=np.array(items, dtype=np.int64), eta=None if eta is None else _encoded(ring, eta), shared={},
        setup_values=0 if eta is None else len(items) * D, setup_overflow=0, last_round=-1, last_signal=nothing,
        last_plain=nothing, last_real=np.empty((0, D)), last_rho=np.empty((0, D)), last_overflow=0,
    )


def _contribute(
    public: PublicParameters, user: SimpleNamespace, round_index: int, real: list[list[float]], rho: list[list[float]],
    noise: np.ndarray,
) -> None:
    """What `PrivateUser._contribute` records: signal = encode(grad + rho~), plain = signal + noise piece."""
    user.last_real, user.last_rho = np.array(real, dtype=np.float64), np.array(rho, dtype=np.float64)
    user.last_signal, user.last_overflow = public.ring.encode(user.last_real)
    user.last_plain = public.ring.add(user.last_signal, noise)
    user.last_round = round_index


def _recommender(public: PublicParameters, raters_set_up: list[int] | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        tau_hat=np.zeros((N_ITEMS, D), dtype=public.ring.dtype), attempt=0, vector_values=0, vector_overflow=0,
        eta_pieces=np.array(raters_set_up or [0] * N_ITEMS, dtype=np.int64),
    )


def _served(
    recommender: SimpleNamespace, round_index: int, users: list[SimpleNamespace], raters: list[int],
    known_raters: list[int] | None = None,
) -> Served:
    """The recommender serves ``users``: it encodes their item vectors (d values per rated item)."""
    row_items = np.concatenate([user.items for user in users])
    recommender.vector_values += row_items.size * D
    offsets = np.cumsum([0] + [user.items.size for user in users])
    known = None if known_raters is None else np.array(known_raters, dtype=np.int64)
    return Served(round_index, [user.party for user in users], offsets, row_items, np.array(raters, dtype=np.int64), known)


def _update(
    round_index: int, contributors: list[Party], items: list[int], unmasked: np.ndarray, before_addback: np.ndarray,
    counts: list[int], divisors: list[float], updated: list[int],
) -> Update:
    return Update(
        round_index, contributors, np.array(items, dtype=np.int64), unmasked, before_addback,
        np.array(counts, dtype=np.int64), np.array(divisors, dtype=np.float64), np.array(updated, dtype=np.int64),
    )


def _s2_world(
    *, dave_set_up: bool = False, variant: str = "protected",
) -> tuple[PublicParameters, dict[Party, SimpleNamespace], SimpleNamespace, Verifier]:
    """S2 after the noise setup: Alice and Bob set up (Dave too if ``dave_set_up``), Carol never."""
    public = _public("S2", variant)
    users = [
        _user(public, ALICE, [0, 2], ALICE_ETA), _user(public, BOB, [2, 3], BOB_ETA), _user(public, CAROL, [4]),
        _user(public, DAVE, [2, 3], DAVE_ETA if dave_set_up else None),
    ]
    raters_set_up = [1, 0, 3, 2, 0] if dave_set_up else [1, 0, 2, 1, 0]
    recommender = _recommender(public, raters_set_up)
    by_party = {user.party: user for user in users}
    return public, by_party, recommender, Verifier(public, by_party, recommender, None)


def _s2_iteration(
    public: PublicParameters, users: dict[Party, SimpleNamespace], recommender: SimpleNamespace, round_index: int,
    *, bob_real: list[list[float]] = BOB_REAL, dave_served: bool = False,
) -> tuple[Served, Update]:
    """Alice and Bob contribute grad + rho~ + their eta-pieces; A_j is their per-item sum (S2 has no alpha)."""
    ring = public.ring
    alice, bob = users[ALICE], users[BOB]
    _contribute(public, alice, round_index, ALICE_REAL, ALICE_RHO, alice.eta)
    _contribute(public, bob, round_index, bob_real, BOB_RHO, bob.eta)
    served_users = [alice, bob, users[DAVE]] if dave_served else [alice, bob]
    served = _served(recommender, round_index, served_users, [1, 0, 3, 2, 0] if dave_served else [1, 0, 2, 1, 0])
    sums = np.stack([alice.last_plain[0], ring.add(alice.last_plain[1], bob.last_plain[0]), bob.last_plain[1]])
    return served, _update(round_index, [ALICE, BOB], S2_ITEMS, sums, sums.copy(), [1, 2, 1], [1.0, 2.0, 1.0], S2_ITEMS)


def _s3_world(*, sharers: tuple[Party, ...] = (ALICE, BOB)) -> tuple[PublicParameters, dict[Party, SimpleNamespace], SimpleNamespace, SimpleNamespace, Verifier]:
    """S3 after pre-sharing attempt 1 of items 0, 1, 2 (drawn for k = 2): the third party summed the shares of
    ``sharers`` under a fresh alpha_j, and the recommender kept tau^_j = alpha_j + their sum for all three."""
    public = _public("S3")
    ring = public.ring
    users = [_user(public, party, items) for party, items in ((ALICE, [0, 2]), (BOB, [3]), (CAROL, [1, 2]), (DAVE, [2]))]
    by_party = {user.party: user for user in users}
    shared_items = np.array([0, 1, 2], dtype=np.int64)
    for party, share in ((ALICE, ALICE_SHARE), (BOB, BOB_SHARE)):
        by_party[party].shared[1] = (shared_items, _encoded(ring, share), np.full(3, 2, dtype=np.int64))
        by_party[party].setup_values += 3 * D
    aggregator = SimpleNamespace(
        alpha=ring.uniform(np.random.default_rng(7), (N_ITEMS, D)), alpha_attempt=np.zeros(N_ITEMS, dtype=np.int64),
        presharers={1: sharers},
    )
    aggregator.alpha_attempt[shared_items] = 1
    recommender = _recommender(public)
    recommender.attempt = 1
    eta = np.zeros((3, D), dtype=ring.dtype)
    for party in sharers:
        eta = ring.add(eta, by_party[party].shared[1][1])
    recommender.tau_hat[shared_items] = ring.add(aggregator.alpha[shared_items], eta)
    recommender.eta_pieces[shared_items] = 2
    return public, by_party, recommender, aggregator, Verifier(public, by_party, recommender, aggregator)


def _s3_iteration(
    public: PublicParameters, users: dict[Party, SimpleNamespace], recommender: SimpleNamespace, aggregator: SimpleNamespace,
) -> tuple[Served, Update]:
    """Iteration 1: Alice (items 0, 2), Carol (1, 2) and Dave (2) are served with pieces of tau^; Dave drops out.

    k'_j (served raters) = 1, 1, 3 and k_j (known raters) = 2, 1, 4 for items 0, 1, 2, so c_j = n_j k_j / k'_j
    = 2, 1, 8/3. The third party subtracts alpha_j; the recommender removes the masks and adds back Dave's piece.
    """
    ring = public.ring
    alice, carol, dave = users[ALICE], users[CAROL], users[DAVE]
    served = _served(recommender, 1, [alice, carol, dave], [1, 1, 3, 0, 0], [2, 1, 4, 0, 0])
    alice_item_2, carol_item_2 = ring.uniform(np.random.default_rng(11), (2, D))
    dave_item_2 = ring.sub(recommender.tau_hat[2], ring.add(alice_item_2, carol_item_2))
    _contribute(public, alice, 1, [[0.5, -0.5], [0.25, 0.125]], [[0.25, -0.25], [0.125, 0.0]], np.stack([recommender.tau_hat[0], alice_item_2]))
    _contribute(public, carol, 1, [[-1.0, 0.75], [0.5, 0.5]], [[-0.5, 0.25], [0.375, -0.25]], np.stack([recommender.tau_hat[1], carol_item_2]))
    sums = np.stack([alice.last_plain[0], carol.last_plain[0], ring.add(alice.last_plain[1], carol.last_plain[1])])
    before_addback = ring.sub(sums, aggregator.alpha[[0, 1, 2]])
    unmasked = before_addback.copy()
    unmasked[2] = ring.add(unmasked[2], dave_item_2)
    return served, _update(1, [ALICE, CAROL], [0, 1, 2], unmasked, before_addback, [1, 1, 2], [2.0, 1.0, 8 / 3], [0, 1, 2])


def _holds(name: str, description: str, checked: int) -> dict[str, Any]:
    return {"name": name, "checked": checked, "violations": 0, "detail": description}


def _violated(name: str, checked: int, violations: int, detail: str) -> dict[str, Any]:
    return {"name": name, "checked": checked, "violations": violations, "detail": detail}


def _shortfall(short: int, updates: int, min_scale: str) -> str:
    """The detail of a ``rho_shortfall`` that holds: the description and the measured shortfall."""
    return f"{RHO}; {short} of {updates} item updates had fewer rho~ pieces than users served (min effective Laplace scale {min_scale} of 2)"


def _reports(verifier: Verifier) -> dict[str, dict[str, Any]]:
    return {monitor.name: monitor.report() for monitor in verifier.monitors}


# ---------------------------------------------------------------------------------------------- the monitors


def test_a_fresh_verifier_names_and_describes_its_five_invariants() -> None:
    public, users, recommender, verifier = _s2_world()
    assert [monitor.report() for monitor in verifier.monitors] == [
        _holds("eta_invariant", ETA, 0), _holds("eta_pieces", PIECES, 0), _holds("masks_cancel", MASKS, 0),
        _holds("rho_shortfall", _shortfall(0, 0, "2"), 0), _holds("ring_overflow", OVERFLOW, 0),
    ]
    assert verifier.rho.summary() == {
        "item_updates": 0, "short_updates": 0, "short_fraction": 0.0, "target_scale": SCALE, "min_effective_scale": SCALE,
    }
    assert (verifier.eta_abs_sum, verifier.eta_values, verifier.rho_abs_sum, verifier.rho_values) == (0.0, 0, 0.0, 0)
    assert verifier.last_rho is None


def test_a_tally_keeps_the_details_of_its_first_three_violating_batches_only() -> None:
    monitor = TallyMonitor("ring_overflow", OVERFLOW)
    monitor.tally(5, 0, "a batch that fits")
    assert monitor.report() == _holds("ring_overflow", OVERFLOW, 5)
    for index, violations in enumerate((1, 2, 1, 3), start=1):
        monitor.tally(2, violations, f"batch {index}")
    assert monitor.report() == _violated("ring_overflow", 13, 7, "batch 1; batch 2; batch 3")


def test_the_shortfall_accumulates_across_rounds_and_is_reported_while_the_accounting_holds() -> None:
    monitor = ShortfallMonitor(SCALE)
    monitor.measure(1, 4, 1.5)
    monitor.measure(0, 2, 1.75)
    monitor.measure(2, 2, 1.25)
    assert monitor.summary() == {
        "item_updates": 8, "short_updates": 3, "short_fraction": 3 / 8, "target_scale": SCALE, "min_effective_scale": 1.25,
    }
    monitor.tally(8, 0, "")
    assert monitor.report() == _holds("rho_shortfall", _shortfall(3, 8, "1.25"), 8)
    monitor.tally(1, 1, "round 4: 1 items divided by another count than their rho~ pieces")
    assert monitor.report() == _violated("rho_shortfall", 9, 1, "round 4: 1 items divided by another count than their rho~ pieces")


# ---------------------------------------------------------------------------------------------- S2 eta ground truth


def test_s2_eta_is_zero_before_any_user_is_set_up() -> None:
    public, users, recommender, verifier = _s2_world()
    for user in users.values():
        user.eta, user.setup_values = None, 0
    assert np.array_equal(verifier.eta_truth(np.arange(N_ITEMS)), np.zeros((N_ITEMS, D), dtype=public.ring.dtype))
    assert verifier.overflow.report() == _holds("ring_overflow", OVERFLOW, 0)


def test_s2_eta_is_the_sum_of_the_pieces_of_the_users_set_up_so_far() -> None:
    public, users, recommender, verifier = _s2_world()
    ring, every_item = public.ring, np.arange(N_ITEMS)
    users[BOB].eta, users[BOB].setup_values = None, 0
    alice_only = np.zeros((N_ITEMS, D))
    alice_only[[0, 2]] = ALICE_ETA
    assert np.array_equal(ring.decode(verifier.eta_truth(every_item)), alice_only)
    assert verifier.overflow.report() == _holds("ring_overflow", OVERFLOW, 4)
    # Bob is set up later with one piece clamped: eta_j now holds his pieces, and only his are tallied.
    users[BOB].eta, users[BOB].setup_values, users[BOB].setup_overflow = _encoded(ring, BOB_ETA), 4, 1
    both = alice_only.copy()
    both[[2, 3]] += BOB_ETA
    assert np.array_equal(ring.decode(verifier.eta_truth(every_item)), both)
    assert np.array_equal(ring.decode(verifier.eta_truth(np.array([3, 0]))), both[[3, 0]])
    assert verifier.overflow.report() == _violated("ring_overflow", 8, 1, "S2 eta-pieces did not fit")


# ---------------------------------------------------------------------------------------------- S2 iterations


def test_an_s2_iteration_whose_parties_kept_the_protocol_holds_everywhere() -> None:
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    assert verifier.after_round(served, update) == {"rho_short": 0.0, "rho_scale_min": SCALE}
    # ring_overflow: 8 item-vector values, 8 contributed, 8 eta-pieces of the setup, 6 aggregate values.
    assert _reports(verifier) == {
        "eta_invariant": _holds("eta_invariant", ETA, 3), "eta_pieces": _holds("eta_pieces", PIECES, 3),
        "masks_cancel": _holds("masks_cancel", MASKS, 3), "rho_shortfall": _holds("rho_shortfall", _shortfall(0, 3, "2"), 3),
        "ring_overflow": _holds("ring_overflow", OVERFLOW, 30),
    }
    assert (verifier.eta_abs_sum, verifier.eta_values, verifier.rho_abs_sum, verifier.rho_values) == (S2_ETA_ABS, 6, S2_RHO_ABS, 6)
    items, rho_sums = verifier.last_rho
    assert np.array_equal(items, S2_ITEMS)
    assert np.array_equal(rho_sums, [[0.125, -0.5], [0.0, 0.75], [0.5, -0.125]])


def test_the_measurements_accumulate_over_iterations_and_the_setup_is_tallied_once() -> None:
    public, users, recommender, verifier = _s2_world()
    for round_index in (1, 2):
        served, update = _s2_iteration(public, users, recommender, round_index)
        assert verifier.after_round(served, update) == {"rho_short": 0.0, "rho_scale_min": SCALE}
    assert (verifier.eta_abs_sum, verifier.eta_values, verifier.rho_abs_sum, verifier.rho_values) == (2 * S2_ETA_ABS, 12, 2 * S2_RHO_ABS, 12)
    assert verifier.rho.summary()["item_updates"] == 6
    # Each round adds its own 8 + 8 + 6 values; the 8 eta-pieces of the setup count once.
    assert verifier.overflow.report() == _holds("ring_overflow", OVERFLOW, 8 + 2 * 22)


def test_a_naive_iteration_measures_eta_and_no_rho() -> None:
    public, users, recommender, verifier = _s2_world(variant="naive")
    served, update = _s2_iteration(public, users, recommender, 1)
    verifier.after_round(served, update)
    assert (verifier.eta_abs_sum, verifier.eta_values, verifier.rho_abs_sum, verifier.rho_values) == (S2_ETA_ABS, 6, 0.0, 0)
    assert verifier.last_rho is None


def test_a_set_up_rater_missing_from_the_aggregate_leaves_eta_short_and_rho_short() -> None:
    # Dave, set up for items 2 and 3 and served, drops out: A_2 and A_3 lack his eta-pieces (the eta check and
    # the pieces check fail for both) and his rho~ pieces (a shortfall, not a violation: n_j is still the divisor).
    public, users, recommender, verifier = _s2_world(dave_set_up=True)
    served, update = _s2_iteration(public, users, recommender, 1, dave_served=True)
    effective = SCALE * math.sqrt(1 / 2)
    assert verifier.after_round(served, update) == {"rho_short": 2 / 3, "rho_scale_min": pytest.approx(effective, rel=1e-15)}
    assert _reports(verifier) == {
        "eta_invariant": _violated("eta_invariant", 3, 2, "round 1: the noise left is not eta_j"),
        "eta_pieces": _violated("eta_pieces", 3, 2, "round 1: 2 items updated with fewer eta pieces than k (min 1)"),
        "masks_cancel": _holds("masks_cancel", MASKS, 3), "rho_shortfall": _holds("rho_shortfall", _shortfall(2, 3, "1.414"), 3),
        "ring_overflow": _holds("ring_overflow", OVERFLOW, 12 + 8 + 12 + 6),
    }
    assert verifier.rho.summary()["min_effective_scale"] == pytest.approx(effective, rel=1e-15)


def test_contributors_reported_for_an_iteration_they_did_not_answer_void_its_checks() -> None:
    # Round 2's aggregate names all four users, but Alice and Bob last contributed in round 1, Carol and Dave never.
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    served.round = update.round = 2
    update.contributors = [ALICE, BOB, CAROL, DAVE]
    assert verifier.after_round(served, update) == {}
    assert verifier.masks.report() == _violated(
        "masks_cancel", 3, 3, "round 2: reported contributors ['user:0', 'user:1', 'user:2'] did not contribute"
    )
    assert verifier.eta.checked == verifier.rho.checked == 0


def test_an_aggregate_over_other_items_than_the_contributors_rated_voids_its_checks() -> None:
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    update.items = np.array([0, 2, 3, 4])
    update.unmasked = update.before_addback = np.zeros((4, D), dtype=public.ring.dtype)
    assert verifier.after_round(served, update) == {}
    assert verifier.masks.report() == _violated("masks_cancel", 4, 4, "round 1: aggregated items differ from the contributors'")
    assert verifier.eta.checked == verifier.rho.checked == 0


def test_an_iteration_nobody_contributed_to_checks_nothing_but_the_item_vectors() -> None:
    public, users, recommender, verifier = _s2_world()
    served = _served(recommender, 1, [users[ALICE], users[BOB]], [1, 0, 2, 1, 0])
    nothing = np.empty((0, D), dtype=public.ring.dtype)
    update = _update(1, [], [], nothing, nothing, [], [], [])
    assert verifier.after_round(served, update) == {"rho_short": 0.0}
    assert verifier.after_round(served, None) == {}
    assert _reports(verifier) == {
        "eta_invariant": _holds("eta_invariant", ETA, 0), "eta_pieces": _holds("eta_pieces", PIECES, 0),
        "masks_cancel": _holds("masks_cancel", MASKS, 0), "rho_shortfall": _holds("rho_shortfall", _shortfall(0, 0, "2"), 0),
        "ring_overflow": _holds("ring_overflow", OVERFLOW, 8),
    }


def test_masks_left_in_two_aggregates_are_two_violations() -> None:
    # The recommender removed the wrong masks from items 0 and 3 (one ring unit off); A_j itself is right.
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    update.before_addback[[0, 2]] = public.ring.add(update.before_addback[[0, 2]], np.ones((2, D), dtype=public.ring.dtype))
    verifier.after_round(served, update)
    assert verifier.masks.report() == _violated("masks_cancel", 3, 2, "round 1: masks did not cancel")
    assert verifier.eta.report() == _holds("eta_invariant", ETA, 3)


RHO_WRONG = "round 1: 1 items divided by another count than their rho~ pieces"


@pytest.mark.parametrize(
    ("counts", "divisors", "raters", "wrong"),
    [
        pytest.param([1, 2, 1], [1.0, 2.0, 1.0], [1, 0, 2, 1, 0], 0, id="n_j-rho-pieces-in-the-sum"),
        pytest.param([1, 2, 1], [1.0, 2.0 * (1 + 2e-13), 1.0], [1, 0, 2, 1, 0], 0, id="divisor-within-float-rounding"),
        pytest.param([2, 2, 1], [1.0, 2.0, 1.0], [2, 0, 2, 1, 0], 1, id="n_j-counts-a-rater-whose-rho-is-missing"),
        pytest.param([1, 2, 1], [1.0, 2.0, 1.0], [1, 0, 1, 1, 0], 1, id="more-rho-pieces-than-raters-served"),
        pytest.param([1, 2, 1], [1.0, 2.0 * (1 + 1e-9), 1.0], [1, 0, 2, 1, 0], 1, id="divisor-off-by-1e-9"),
        pytest.param([1, 2, 1], [1.0, 3.0, 1.0], [1, 0, 2, 1, 0], 1, id="divisor-not-n_j"),
    ],
)
def test_the_rho_accounting_holds_only_when_n_j_counts_the_rho_pieces_served_and_divides(
    counts: list[int], divisors: list[float], raters: list[int], wrong: int,
) -> None:
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    served.raters = np.array(raters, dtype=np.int64)
    update.counts, update.divisors = np.array(counts, dtype=np.int64), np.array(divisors)
    verifier.after_round(served, update)
    expected = _violated("rho_shortfall", 3, 1, RHO_WRONG) if wrong else _holds("rho_shortfall", _shortfall(0, 3, "2"), 3)
    assert verifier.rho.report() == expected


def test_item_vectors_that_did_not_fit_are_counted_per_iteration() -> None:
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    recommender.vector_overflow = 2
    verifier.after_round(served, update)
    served, update = _s2_iteration(public, users, recommender, 2)
    recommender.vector_overflow = 3
    verifier.after_round(served, update)
    assert verifier.overflow.report() == _violated(
        "ring_overflow", 8 + 2 * 22, 3, "round 1: 2 item-vector values did not fit; round 2: 1 item-vector values did not fit"
    )


def test_a_clamped_contribution_is_counted() -> None:
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1)
    users[BOB].last_overflow = 1
    verifier.after_round(served, update)
    assert verifier.overflow.report() == _violated("ring_overflow", 30, 1, "round 1: contributions did not fit")


@pytest.mark.parametrize(
    ("bob_item_3", "beyond"),
    [
        # Bob's grad + rho~ for item 3 fits the ring; with eta_3 = (2, -1) the aggregate does too, up to the top.
        pytest.param([32765.75, -32765.75], 0, id="aggregate-just-inside"),
        pytest.param([32767.0, 0.25], 1, id="aggregate-plus-eta-beyond-the-top"),
        # Ring(32, 16) holds (2^31 - 1) 2^-16 at the top and -2^15 at the bottom: both ends fit, a step past does not.
        pytest.param([(2**31 - 1) / 2**16 - 2.0, -32767.0], 0, id="aggregate-at-both-ends"),
        pytest.param([32766.0, 0.0], 1, id="aggregate-one-step-past-the-top"),
        pytest.param([0.0, -32767.0 - 2**-16], 1, id="aggregate-one-step-past-the-bottom"),
    ],
)
def test_an_aggregate_beyond_the_ring_wraps_and_is_counted(bob_item_3: list[float], beyond: int) -> None:
    public, users, recommender, verifier = _s2_world()
    served, update = _s2_iteration(public, users, recommender, 1, bob_real=[BOB_REAL[0], bob_item_3])
    verifier.after_round(served, update)
    expected = (
        _violated("ring_overflow", 30, 1, "round 1: 1 aggregate values exceed the ring's range and wrapped") if beyond
        else _holds("ring_overflow", OVERFLOW, 30)
    )
    assert verifier.overflow.report() == expected
    assert verifier.eta.report() == _holds("eta_invariant", ETA, 3)


# ---------------------------------------------------------------------------------------------- S3


def test_tau_hat_kept_from_the_sum_of_the_pre_shared_pieces_holds() -> None:
    public, users, recommender, aggregator, verifier = _s3_world()
    verifier.after_presharing(np.array([0, 1, 2]))
    assert verifier.eta.report() == _holds("eta_invariant", ETA, 3)
    assert verifier.overflow.report() == _holds("ring_overflow", OVERFLOW, 12)
    assert np.array_equal(public.ring.decode(verifier.eta_truth(np.array([2, 0]))), [[1.0, -0.5], [0.25, 0.75]])


def test_tau_hat_one_ring_unit_off_the_pre_shared_sum_is_a_violation_per_item() -> None:
    public, users, recommender, aggregator, verifier = _s3_world()
    ring = public.ring
    recommender.tau_hat[[0, 2]] = ring.add(recommender.tau_hat[[0, 2]], np.array([[0, 1], [1, 0]], dtype=ring.dtype))
    verifier.after_presharing(np.array([0, 1, 2]))
    assert verifier.eta.report() == _violated(
        "eta_invariant", 3, 2, "attempt 1: 2 items' tau^ - alpha is not the sum of their pre-shared pieces"
    )


def test_each_attempt_tallies_only_the_pre_shared_values_it_added() -> None:
    # Attempt 1: one of Alice's six values was clamped. Attempt 2: Carol and Dave pre-share item 3, all fitting.
    public, users, recommender, aggregator, verifier = _s3_world()
    ring = public.ring
    users[ALICE].setup_overflow = 1
    verifier.after_presharing(np.array([0, 1, 2]))
    pieces = {CAROL: [[0.5, -0.25]], DAVE: [[-0.125, 1.0]]}
    for party, piece in pieces.items():
        users[party].shared[2] = (np.array([3]), _encoded(ring, piece), np.array([2]))
        users[party].setup_values += D
    aggregator.alpha_attempt[3], aggregator.presharers[2], recommender.attempt = 2, (CAROL, DAVE), 2
    recommender.tau_hat[3] = ring.add(aggregator.alpha[3], _encoded(ring, [[0.375, 0.75]])[0])
    verifier.after_presharing(np.array([3]))
    assert verifier.eta.report() == _holds("eta_invariant", ETA, 4)
    assert verifier.overflow.report() == _violated("ring_overflow", 12 + 4, 1, "attempt 1: pre-shared eta-pieces did not fit")


def test_an_s3_iteration_with_a_dropout_recovered_holds_and_measures_the_rho_shortfall() -> None:
    public, users, recommender, aggregator, verifier = _s3_world()
    verifier.after_presharing(np.array([0, 1, 2]))
    served, update = _s3_iteration(public, users, recommender, aggregator)
    effective = SCALE * math.sqrt(2 / 3)
    assert verifier.after_round(served, update) == {"rho_short": 1 / 3, "rho_scale_min": pytest.approx(effective, rel=1e-15)}
    # ring_overflow: 12 pre-shared values, 10 item-vector values, 8 contributed, 6 aggregate values.
    assert _reports(verifier) == {
        "eta_invariant": _holds("eta_invariant", ETA, 3 + 3), "eta_pieces": _holds("eta_pieces", PIECES, 3),
        "masks_cancel": _holds("masks_cancel", MASKS, 3), "rho_shortfall": _holds("rho_shortfall", _shortfall(1, 3, "1.633"), 3),
        "ring_overflow": _holds("ring_overflow", OVERFLOW, 12 + 10 + 8 + 6),
    }
    assert (verifier.eta_abs_sum, verifier.eta_values) == (1.0 + 2.0 + 1.5, 6)


def test_an_s3_divisor_without_the_known_raters_weight_is_wrong() -> None:
    # c_j must be n_j k_j / k'_j; dividing by n_j is wrong for items 0 (weight 2) and 2 (weight 4/3), not item 1.
    public, users, recommender, aggregator, verifier = _s3_world()
    verifier.after_presharing(np.array([0, 1, 2]))
    served, update = _s3_iteration(public, users, recommender, aggregator)
    update.divisors = update.counts.astype(np.float64)
    verifier.after_round(served, update)
    assert verifier.rho.report() == _violated("rho_shortfall", 3, 2, "round 1: 2 items divided by another count than their rho~ pieces")


def test_an_s3_item_updated_with_the_pieces_of_only_some_sharers_is_short() -> None:
    # Bob's share of attempt 1 never reached the third party, yet the recommender kept tau^ for all three items.
    public, users, recommender, aggregator, verifier = _s3_world(sharers=(ALICE,))
    verifier.after_presharing(np.array([0, 1, 2]))
    served, update = _s3_iteration(public, users, recommender, aggregator)
    verifier.after_round(served, update)
    assert verifier.eta.report() == _holds("eta_invariant", ETA, 6)
    assert verifier.pieces.report() == _violated("eta_pieces", 3, 3, "round 1: 3 items updated with fewer eta pieces than k (min 1)")


def test_an_s3_iteration_before_any_item_is_whole_updates_and_measures_nothing() -> None:
    public, users, recommender, aggregator, verifier = _s3_world()
    recommender.tau_hat[:] = 0
    alice = users[ALICE]
    served = _served(recommender, 1, [alice], [1, 0, 1, 0, 0], [1, 0, 1, 0, 0])
    _contribute(public, alice, 1, [[0.5, -0.5], [0.25, 0.125]], [[0.25, -0.25], [0.125, 0.0]], np.zeros((2, D), dtype=public.ring.dtype))
    before_addback = public.ring.sub(alice.last_plain, aggregator.alpha[[0, 2]])
    update = _update(1, [ALICE], [0, 2], before_addback, before_addback.copy(), [1, 1], [1.0, 1.0], [])
    assert verifier.after_round(served, update) == {"rho_short": 0.0, "rho_scale_min": SCALE}
    assert _reports(verifier) == {
        "eta_invariant": _holds("eta_invariant", ETA, 0), "eta_pieces": _holds("eta_pieces", PIECES, 0),
        "masks_cancel": _holds("masks_cancel", MASKS, 2), "rho_shortfall": _holds("rho_shortfall", _shortfall(0, 0, "2"), 0),
        "ring_overflow": _holds("ring_overflow", OVERFLOW, 4 + 4),
    }
