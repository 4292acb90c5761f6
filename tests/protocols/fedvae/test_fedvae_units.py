"""FedVAE's server maths and checks without actors: GlobalUpdate (Algorithm 2 + eq. (4)), validation, forgeries."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from fedrecsim.errors import ProtocolViolation
from fedrecsim.mechanisms.adam import AdamHyper, adam_init, adam_step
from fedrecsim.models.multvae import Layout
from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.fedvae.aggregation import (
    FilterSettings,
    OrderedSum,
    adam_in_place,
    average,
    descend,
    global_update,
    secure_filter,
    unfiltered,
)
from fedrecsim.protocols.fedvae.byzantine import as_message, choose_attackers, forge
from fedrecsim.protocols.fedvae.messages import Gradient, SparseGradient
from fedrecsim.protocols.fedvae.validation import DENSE, InvalidGradient, dense_values, validated_gradient, values_fault

LAYOUT = Layout(5, 3, 2)
USER = Party(Role.USER, 7)
REST = LAYOUT.size - LAYOUT.first_layer_size


def gradients(seed: int, n: int, size: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, size)).astype(np.float32)


def test_without_a_filter_the_update_is_one_adam_step_along_the_mean() -> None:
    omega = np.linspace(-1, 1, 40).astype(np.float32)
    batch = gradients(0, 6)
    hyper = AdamHyper()
    before = omega.copy()
    update = global_update(omega, batch, adam_init(omega), hyper, FilterSettings("none"), 0.0)
    expected, state = adam_step(before, batch.mean(axis=0), adam_init(before), hyper)
    assert np.allclose(update.omega, expected, rtol=0, atol=1e-7) and update.adam.t == state.t == 1
    assert update.selection.kept.tolist() == list(range(6)) and update.applied
    assert update.omega is omega  # the server's ω is stepped in place


def test_the_decay_step_scales_the_adam_move_by_one_plus_gamma_t() -> None:
    """Polato's derivation after eq. (5): w_t = w_{t-1} - (1 + gamma_t) eta m_hat / (sqrt(v_hat) + eps)."""
    omega = np.zeros(40)
    batch = gradients(1, 5).astype(np.float64)
    hyper = AdamHyper(eta=0.01)
    plain = global_update(omega.copy(), batch, adam_init(omega), hyper, FilterSettings("none"), 0.0)
    boosted = global_update(omega.copy(), batch, adam_init(omega), hyper, FilterSettings("none"), 2.5)
    assert np.allclose(boosted.omega - omega, 3.5 * (plain.omega - omega), rtol=1e-12, atol=0)
    # Adam's moments do not see the boost.
    assert np.array_equal(boosted.adam.m, plain.adam.m) and np.array_equal(boosted.adam.v, plain.adam.v)


def test_the_in_place_adam_step_and_decay_are_bit_for_bit_the_pure_formulas() -> None:
    """Five rounds of `descend` (in place) against `adam_step` and eq. (4) written out, float32, exact."""
    rng = np.random.default_rng(5)
    hyper = AdamHyper(eta=0.01, beta1=0.8, beta2=0.99, epsilon=1e-7)
    omega = rng.standard_normal(1000).astype(np.float32)
    reference, reference_state = omega.copy(), adam_init(omega)
    state = adam_init(omega)
    for round_index, gamma_t in enumerate((0.0, 1.5, 0.0, 0.3, 2.0)):
        mean = rng.standard_normal(1000).astype(np.float32) * np.float32(10.0**-round_index)
        stepped, reference_state = adam_step(reference, mean, reference_state, hyper)
        if gamma_t:
            stepped = stepped + np.float32(gamma_t) * (stepped - reference)
        reference = stepped
        update = descend(omega, mean.copy(), state, hyper, unfiltered(3), gamma_t)
        assert update.omega is omega and update.adam.t == reference_state.t == round_index + 1
        state = update.adam
        assert np.array_equal(omega, reference) and np.array_equal(state.m, reference_state.m)
        assert np.array_equal(state.v, reference_state.v)
    scratch = rng.standard_normal(1000).astype(np.float32)
    kept_m = state.m.copy()
    adam_in_place(omega, scratch, state, hyper)
    assert not np.array_equal(state.m, kept_m)  # the moments are the state's own arrays, overwritten


@pytest.mark.parametrize("gamma_t", [0.0, 0.7])
def test_the_in_place_step_taken_a_block_at_a_time_is_the_pure_formula_bit_for_bit(gamma_t: float) -> None:
    """Blocks of 64 over 1,000 entries (the last one short), three steps, with and without eq. (4)."""
    rng = np.random.default_rng(6)
    hyper = AdamHyper(eta=0.01, beta1=0.8, beta2=0.99, epsilon=1e-7)
    omega = rng.standard_normal(1000).astype(np.float32)
    reference, reference_state, state = omega.copy(), adam_init(omega), adam_init(omega)
    for _ in range(3):
        mean = rng.standard_normal(1000).astype(np.float32)
        stepped, reference_state = adam_step(reference, mean, reference_state, hyper)
        reference = stepped + np.float32(gamma_t) * (stepped - reference) if gamma_t else stepped
        state = adam_in_place(omega, mean, state, hyper, gamma_t, block=64)
        assert np.array_equal(omega, reference) and np.array_equal(state.m, reference_state.m)
        assert np.array_equal(state.v, reference_state.v) and state.t == reference_state.t


def test_the_ordered_sum_is_the_mean_in_party_order_whatever_the_arrival_order() -> None:
    """Gradients whose float32 sum depends on the order (1e8 + 1 - 1e8 = 0, 1e8 - 1e8 + 1 = 1) arrive in
    every order; some parties are rejected, some never answer. The mean is each coordinate summed in party
    order, one float32 addition at a time, divided by the count -- computed here from that definition."""
    parties = [Party(Role.USER, index) for index in range(6)]
    rng = np.random.default_rng(9)
    values = rng.choice(np.array([1e8, -1e8, 1.0, 3.0, -0.0, 0.5], dtype=np.float32), size=(6, 70))
    answering = {0: "add", 1: "skip", 2: "add", 3: "add", 5: "add"}  # user:4 never answers
    expected = np.empty(70, dtype=np.float32)
    for i in range(70):
        total = None
        for position, what in sorted(answering.items()):
            if what == "add":
                total = values[position, i] if total is None else np.float32(total + values[position, i])
        expected[i] = np.float32(total / np.float32(4))
    for seed in range(30):
        arrival = np.random.default_rng(seed).permutation(sorted(answering))
        copies = values.copy()
        copies.setflags(write=False)  # as a zero-copy decoded message's array is
        ordered = OrderedSum(parties, group=2, block=16)
        for position in arrival:
            if answering[int(position)] == "add":
                ordered.add(parties[position], copies[position], checked=bool(seed % 2))
            else:
                ordered.skip(parties[position])
            if seed % 3 == 0:
                assert ordered.settle(False) == []  # the gather waits here: every gradient so far checked
        assert ordered.settle(True) == []
        mean = ordered.mean()
        assert ordered.count == 4 and mean.dtype == np.float32
        assert np.array_equal(mean, expected) and np.array_equal(np.signbit(mean), np.signbit(expected)), arrival
        assert np.array_equal(copies, values)  # the gradients are only read
    empty = OrderedSum(parties)
    assert empty.settle(True) == [] and empty.mean() is None


def test_gradients_read_in_place_from_their_messages_misaligned_are_checked_and_summed_as_aligned_copies() -> None:
    """The trusted decoder gives a gradient as a read-only view of its message's bytes, misaligned for most
    senders (`messages`): validation rejects the same ones, with the same words, and the ordered sum is the
    same bits as for aligned copies (and as `average`)."""
    from fedrecsim.network.wire import decode_trusted, encode

    # P = 9,156: ext 16 payloads, under SHARED_BODY_BYTES, where a gradient sits in its message wherever the
    # envelope before it ends (a larger one is padded into alignment: wire, "Alignment").
    layout = Layout(100, 40, 8)
    rng = np.random.default_rng(3)
    values = rng.standard_normal((6, layout.size)).astype(np.float32)
    values[2, 7] = np.float32(-0.0)
    bad = values[0].copy()
    bad[[5, 900]] = [np.nan, np.inf]
    huge = np.zeros(layout.size, np.float32)
    huge[-1] = 1e30
    server = Party(Role.SERVER, 0)
    parties = [Party(Role.USER, index) for index in (3, 130, 300, 70_000, 131, 4)]

    def received(party: Party, gradient: np.ndarray) -> np.ndarray:
        return decode_trusted(encode(party, server, 0.5, Gradient(3, gradient))).body.values

    views = [received(party, gradient) for party, gradient in zip(parties, values)]
    assert sum(not view.flags.aligned for view in views) >= 3 and not any(view.flags.writeable for view in views)
    expected = average(values, np.arange(6), block=1000)
    for checked in (True, False):
        ordered = OrderedSum(parties, group=4, block=1000)
        for party, view in zip(parties, views):
            if checked:
                ordered.add(party, validated_gradient(party, 3, Gradient(3, view), layout))
            else:
                ordered.add(party, dense_values(party, 3, Gradient(3, view), layout), checked=False)
        assert ordered.settle(True) == []
        mean = ordered.mean()
        assert np.array_equal(mean, expected) and np.array_equal(np.signbit(mean), np.signbit(expected))
    for wrong, problem in ((bad, "the gradient holds 2 NaN or Inf entries, the first at flat index 5"),
                           (huge, "the gradient has an L2 norm of 1e+30 > 1e+15")):
        for party in parties:
            view = received(party, wrong)
            with pytest.raises(InvalidGradient) as caught:
                validated_gradient(party, 3, Gradient(3, view), layout)
            assert caught.value.problem == problem, (party, view.flags.aligned)


def test_a_large_gradient_is_read_aligned_in_place_from_its_message_whoever_sends_it() -> None:
    """A gradient of SHARED_BODY_BYTES or more reaches the server as an aligned, read-only view of its
    message's bytes for every sender and round (the envelope before it has other lengths), and those bytes
    are exactly the message's."""
    import msgpack

    from fedrecsim.network.wire import SHARED_BODY_BYTES, decode_trusted, encode

    layout = Layout(300, 40, 8)  # P = 25,256: ext 32 payloads
    gradient = np.random.default_rng(4).standard_normal(layout.size).astype(np.float32)
    assert gradient.nbytes >= SHARED_BODY_BYTES
    server = Party(Role.SERVER, 0)
    offsets = set()
    for party in (Party(Role.USER, index) for index in (3, 130, 300, 70_000)):
        for round_index in (3, 200, 70_000):
            data = encode(party, server, 0.5, Gradient(round_index, gradient))
            frame = msgpack.unpackb(bytes(data))
            assert frame[6] == round_index and bytes(data).endswith(gradient.tobytes())
            view = decode_trusted(data).body.values
            assert view.flags.aligned and not view.flags.writeable and np.array_equal(view, gradient)
            assert np.shares_memory(view, np.frombuffer(data, np.uint8))
            offsets.add((len(data) - gradient.nbytes) % 4)
    assert len(offsets) > 1  # the gradient starts at other offsets in the messages, and is aligned in each


def test_the_ordered_sum_holds_no_gradient_it_has_summed() -> None:
    """Replies in party order are summed a group at a time and let go: the sum keeps at most a group."""
    parties = [Party(Role.USER, index) for index in range(40)]
    ordered = OrderedSum(parties, group=4, block=8)
    alive = []
    for party in parties:
        gradient = np.full(20, float(party.index), dtype=np.float32)
        alive.append(weakref.ref(gradient))
        ordered.add(party, gradient)
        del gradient
        assert sum(reference() is not None for reference in alive) < 4
    assert ordered.settle(True) == []
    assert np.array_equal(ordered.mean(), np.full(20, sum(range(40)) / 40, dtype=np.float32))


def _in_party_order(values: np.ndarray, kept: list[int]) -> np.ndarray:
    """The mean of ``values[kept]``, one float32 addition at a time in the order of ``kept``, the first
    copied (so a -0.0 stays -0.0): what the server's sum must be, to the bit."""
    total = values[kept[0]].copy()
    for index in kept[1:]:
        total = np.add(total, values[index], dtype=np.float32)
    return total / np.float32(len(kept))


@pytest.mark.parametrize("fault", ["nan", "inf", "norm"])
@pytest.mark.parametrize("bad", [(0,), (2,), (4,), (3, 5), (6,), (0, 1, 2)])
def test_a_gradient_refused_at_its_last_block_leaves_no_trace_in_the_sum(fault: str, bad: tuple[int, ...]) -> None:
    """Seven unchecked gradients of 40 entries, summed 3 at a time in blocks of 8. Each gradient of ``bad``
    passes its first four blocks and fails its last one (a NaN, an Inf, or a finite entry that puts its
    norm beyond 1e15), so the pass has added its earlier blocks -- and the blocks of the group's others --
    when it finds out. The mean is, to the bit, that of the others summed here in party order (values
    whose float32 sum depends on the order: any partial undo by subtraction shows); `settle` hands over
    the refused ones, in the words `validated_gradient` gives for them."""
    parties = [Party(Role.USER, index) for index in range(7)]
    values = np.random.default_rng(sum(bad)).choice(
        np.array([1e8, -1e8, 1.0, 3.0, -0.0, 0.5], dtype=np.float32), size=(7, 40)
    )
    for index in bad:
        values[index, 37] = {"nan": np.nan, "inf": -np.inf, "norm": 3e15}[fault]
    ordered = OrderedSum(parties, group=3, block=8)
    for party, row in zip(parties, values):
        ordered.add(party, row, checked=False)
    refused = ordered.settle(True)
    assert [party for party, _ in refused] == [parties[index] for index in bad] and ordered.count == 7 - len(bad)
    expected = _in_party_order(values, [index for index in range(7) if index not in bad])
    mean = ordered.mean()
    assert np.array_equal(mean, expected) and np.array_equal(np.signbit(mean), np.signbit(expected))
    layout = Layout(4, 2, 2)
    assert layout.size == 40
    for party, gradient in refused:
        with pytest.raises(InvalidGradient) as caught:
            validated_gradient(party, 3, Gradient(3, gradient), layout)
        assert caught.value.problem == values_fault(party, 3, gradient, DENSE).problem


def test_a_gradient_refused_before_its_group_is_complete_is_checked_on_its_own_and_never_summed() -> None:
    """The gather waits between arrivals: `settle(False)` gives the verdict on every gradient added since,
    checking those whose group is not complete on their own; they are summed with their group later, not
    checked again, and the refused one is never summed."""
    parties = [Party(Role.USER, index) for index in range(5)]
    values = gradients(4, 5)
    values[1, 39] = np.nan
    ordered = OrderedSum(parties, group=4, block=8)
    ordered.add(parties[0], values[0], checked=False)
    assert ordered.settle(False) == []
    ordered.add(parties[2], values[2], checked=False)  # waits for user:1
    ordered.add(parties[1], values[1], checked=False)
    [(party, gradient)] = ordered.settle(False)
    assert party == parties[1] and np.array_equal(gradient, values[1], equal_nan=True) and ordered.count == 2
    ordered.add(parties[3], values[3], checked=False)
    ordered.skip(parties[4])
    assert ordered.settle(True) == []
    expected = _in_party_order(values, [0, 2, 3])
    assert np.array_equal(ordered.mean(), expected)


def test_the_sum_is_handed_over_only_once_every_gradient_is_settled() -> None:
    ordered = OrderedSum([USER])
    ordered.add(USER, np.ones(4, np.float32), checked=False)
    with pytest.raises(RuntimeError, match="settle"):
        ordered.mean()


def test_krum_keeps_the_honest_gradient_closest_to_the_others_and_multi_krum_averages_m() -> None:
    honest = np.ones((8, 40), dtype=np.float32) + 0.1 * gradients(2, 8)
    attackers = np.full((2, 40), -100.0, dtype=np.float32)
    batch = np.concatenate([attackers[:1], honest, attackers[1:]])
    krum = secure_filter(batch, FilterSettings("krum", 0.2, 1))
    assert krum.f == 2 and krum.kept.size == 1 and krum.kept[0] not in (0, 9)
    multi = secure_filter(batch, FilterSettings("krum", 0.2, 5))
    assert multi.kept.size == 5 and not set(multi.kept.tolist()) & {0, 9}
    everyone_but_f = secure_filter(batch, FilterSettings("krum", 0.2, 0))
    assert everyone_but_f.kept.size == 8 and set(everyone_but_f.kept.tolist()) == set(range(1, 9))
    capped = secure_filter(batch, FilterSettings("krum", 0.2, 50))
    assert capped.kept.size == 8
    update = global_update(np.zeros(40, np.float32), batch, adam_init(np.zeros(40, np.float32)), AdamHyper(),
                           FilterSettings("krum", 0.2, 0), 0.0)
    assert (update.omega < 0).all()  # the step follows the honest mean (+1 everywhere), not the attackers' -100


def krum_choice(points: list[list[float]], f: int, m: int) -> set[int]:
    """Blanchard et al. (2017), from the definition: each point's score is the sum of its squared distances
    to its n - f - 2 nearest other points; Krum keeps the lowest score, Multi-Krum the m lowest."""
    n = len(points)
    scores = []
    for i, point in enumerate(points):
        distances = sorted(sum((a - b) ** 2 for a, b in zip(point, other)) for j, other in enumerate(points) if j != i)
        scores.append(sum(distances[: n - f - 2]))
    return set(sorted(range(n), key=scores.__getitem__)[:m])


def test_krum_and_multi_krum_keep_the_gradients_of_lowest_score_over_their_n_minus_f_minus_2_nearest() -> None:
    """Five hand-made gradients, f = floor(0.2 * 5) = 1, so each is scored over its 2 nearest others:
    scores 10, 5, 13, 52 and 458 (no ties)."""
    points = [[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [7.0, 0.0], [20.0, 0.0]]
    batch = np.array(points, dtype=np.float32)
    for m, keeps in ((1, 1), (2, 2), (3, 3), (0, 4), (9, 4)):
        selection = secure_filter(batch, FilterSettings("krum", 0.2, m))
        assert (selection.n, selection.f) == (5, 1)
        assert set(selection.kept.tolist()) == krum_choice(points, 1, keeps), m
    assert set(secure_filter(batch, FilterSettings("krum", 0.2, 1)).kept.tolist()) == {1}


def test_krum_scores_three_gradients_without_byzantine_ones_and_not_three_with_one() -> None:
    """n = 3: with f = 0 each is scored over its one nearest other (scores 1, 1 and 4); with f = 1
    (krum_f = 0.4) n - f - 2 = 0, nothing to score on, and the round is left unfiltered (no update)."""
    points = [[0.0], [1.0], [3.0]]
    batch = np.array(points, dtype=np.float32)
    scored = secure_filter(batch, FilterSettings("krum", 0.0, 2))
    assert (scored.n, scored.f, set(scored.kept.tolist())) == (3, 0, krum_choice(points, 0, 2)) == (3, 0, {0, 1})
    unscored = secure_filter(batch, FilterSettings("krum", 0.4, 1))
    assert (unscored.n, unscored.f, unscored.kept) == (3, 1, None)


def test_a_round_krum_cannot_filter_applies_no_update() -> None:
    omega = np.ones(40, dtype=np.float32)
    state = adam_init(omega)
    for n in (0, 1, 2):
        update = global_update(omega, gradients(3, n), state, AdamHyper(), FilterSettings("krum", 0.1, 1), 1.0)
        assert not update.applied and update.omega is omega and update.adam is state
    assert not global_update(omega, [], state, AdamHyper(), FilterSettings("none"), 0.0).applied
    assert global_update(omega, gradients(3, 1), state, AdamHyper(), FilterSettings("none"), 0.0).applied


def test_the_average_sums_in_the_order_given_and_never_writes_to_its_inputs() -> None:
    batch = [np.array([1e8, 1.0], dtype=np.float32), np.array([1.0, 1.0], dtype=np.float32), np.array([-1e8, 1.0], dtype=np.float32)]
    copies = [vector.copy() for vector in batch]
    # float32: (1e8 + 1) - 1e8 = 0 but (1e8 - 1e8) + 1 = 1; the order is the one given.
    assert average(batch, np.array([0, 1, 2]))[0] == 0.0
    assert average(batch, np.array([0, 2, 1]))[0] == np.float32(1.0) / 3
    assert all(np.array_equal(a, b) for a, b in zip(batch, copies))


def dense_of(message) -> np.ndarray:
    return validated_gradient(USER, 3, message, LAYOUT)


def test_a_sparse_gradient_expands_to_the_dense_one_it_stands_for() -> None:
    dense = np.arange(LAYOUT.size, dtype=np.float32)
    W1 = dense[: LAYOUT.first_layer_size].reshape(5, 3)
    W1[[0, 2, 3]] = 0.0
    message = as_message(3, dense, LAYOUT, sparse=True)
    assert isinstance(message, SparseGradient) and message.items.tolist() == [1, 4]
    assert np.array_equal(dense_of(message), dense)
    out = np.full(LAYOUT.size, np.nan, dtype=np.float32)
    assert validated_gradient(USER, 3, message, LAYOUT, out) is out and np.array_equal(out, dense)
    plain = Gradient(3, dense)
    assert dense_of(plain) is plain.values and np.array_equal(validated_gradient(USER, 3, plain, LAYOUT, out), dense)


@pytest.mark.parametrize(
    "message, fault",
    [
        (Gradient(3, np.zeros(LAYOUT.size - 1, np.float32)), "expected"),
        (Gradient(3, np.array([np.nan] + [0.0] * (LAYOUT.size - 1), np.float32)), "NaN or Inf"),
        (Gradient(3, np.array([0.0] * (LAYOUT.size - 1) + [np.inf], np.float32)), "NaN or Inf"),
        (Gradient(3, np.array([-2e15] + [0.0] * (LAYOUT.size - 1), np.float32)), "L2 norm of 2e+15 > 1e+15"),
        (SparseGradient(3, np.array([2, 1], np.int32), np.zeros((2, 3), np.float32), np.zeros(REST, np.float32)), "increasing"),
        (SparseGradient(3, np.array([1, 1], np.int32), np.zeros((2, 3), np.float32), np.zeros(REST, np.float32)), "increasing"),
        (SparseGradient(3, np.array([5], np.int32), np.zeros((1, 3), np.float32), np.zeros(REST, np.float32)), "within"),
        (SparseGradient(3, np.array([-1], np.int32), np.zeros((1, 3), np.float32), np.zeros(REST, np.float32)), "within"),
        (SparseGradient(3, np.array([1], np.int32), np.zeros((1, 2), np.float32), np.zeros(REST, np.float32)), "W1 rows"),
        (SparseGradient(3, np.array([1], np.int32), np.zeros((1, 3), np.float32), np.zeros(REST - 1, np.float32)),
         f"expected {REST} entries after W1, received {REST - 1}"),
        (SparseGradient(3, np.array([1], np.int32), np.full((1, 3), np.nan, np.float32), np.zeros(REST, np.float32)), "W1 rows holds"),
        (SparseGradient(3, np.array([1], np.int32), np.zeros((1, 3), np.float32), np.full(REST, np.inf, np.float32)), "after W1 holds"),
    ],
)
def test_a_malformed_gradient_is_a_protocol_violation_naming_party_round_and_fault(message, fault: str) -> None:
    with pytest.raises(InvalidGradient) as caught:
        dense_of(message)
    assert isinstance(caught.value, ProtocolViolation)
    assert caught.value.party == USER and caught.value.round == 3 and fault in caught.value.problem
    assert "user:7" in str(caught.value) and "round 3" in str(caught.value)


def test_the_forgeries_are_what_the_policies_say() -> None:
    rng = np.random.default_rng(4)
    honest = np.linspace(-1.0, 1.0, 30).astype(np.float32)
    assert np.array_equal(forge("scaled_negative", honest, 10.0, rng), -10.0 * honest)
    noise = forge("gaussian", np.zeros(20_000, np.float32), 3.0, rng)
    # 20,000 N(0, 9) draws: the sample deviation is within 2 % of 3 with overwhelming probability.
    assert noise.std() == pytest.approx(3.0, rel=0.02) and abs(noise.mean()) < 0.1
    assert (forge("same_value", honest, 7.0, rng) == 7.0).all()
    poisoned = forge("non_finite", honest, 0.0, rng)
    assert np.isnan(poisoned).sum() == 1 and np.array_equal(poisoned[~np.isnan(poisoned)], honest[~np.isnan(poisoned)])
    assert np.array_equal(forge("wrong_shape", honest, 0.0, rng), honest[:-1])


def test_attackers_are_a_rounded_share_of_the_users_drawn_from_the_generator() -> None:
    users = np.arange(100, 131)
    chosen = choose_attackers(np.random.default_rng(5), users, 0.1)
    assert len(chosen) == 3 and chosen <= set(users.tolist())
    assert chosen == choose_attackers(np.random.default_rng(5), users, 0.1)
    assert choose_attackers(np.random.default_rng(5), users, 0.0) == frozenset()


def test_the_held_out_users_are_ranked_in_passes_that_together_score_every_one_of_them() -> None:
    """1,100 held-out users (three passes of 512) and 20 training users over 8 items: the metrics are those
    of one pass over all of them, fold-in items excluded (`fedrecsim.data.metrics`)."""
    from fedrecsim.data.metrics import ndcg_at_k, recall_at_k
    from fedrecsim.data.ratings import Ratings
    from fedrecsim.models.multvae import Batch, MultVAEHyper, init_params, scores
    from fedrecsim.protocols.fedvae.evaluation import ranking_metrics

    n_users, n_items, held = 1_120, 8, np.arange(20, 1_120)
    users = np.concatenate([np.repeat(np.arange(n_users), 2)])
    items = np.stack([users[::2] % n_items, (users[::2] + 1 + users[::2] // n_items % 3) % n_items], axis=1).ravel()
    train = Ratings(users, items, np.ones(users.size), n_users, n_items, (0.0, 1.0))
    test = Ratings(held, (held + 4) % n_items, np.ones(held.size), n_users, n_items, (0.0, 1.0))
    hyper = MultVAEHyper(hidden=5, latent=3)
    layout = Layout.of(n_items, hyper)
    omega = init_params(np.random.default_rng(8), layout, dtype=np.float64)
    table = np.zeros((n_users, n_items))
    table[held] = scores(omega, layout, Batch.of_users(train.by_user(), held, n_items), hyper)
    expected = {**ndcg_at_k(table, test, train, (2, 5)), **recall_at_k(table, test, train, (2, 5))}
    assert ranking_metrics(omega, layout, hyper, train, test, (2, 5)) == pytest.approx(expected, rel=1e-12)
    assert 0.0 < expected["ndcg@5"] < 1.0


def _context(split: str = "heldout_users", test_path: str = "", train=None, test=None):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    return SimpleNamespace(scenario=SimpleNamespace(data=SimpleNamespace(split=split, test_path=test_path)), train=train, test=test)


def test_training_users_are_those_with_training_entries_and_no_test_entries() -> None:
    from fedrecsim.data.ratings import Ratings
    from fedrecsim.protocols.fedvae.protocol import training_users

    # users 0..4 hold 0, 1, 2, 3, 1 training entries; user 3 also has a test entry, user 4 only a test one.
    users, items = np.array([1, 2, 2, 3, 3, 3, 4]), np.array([0, 0, 1, 0, 1, 2, 0])
    train = Ratings(users, items, np.ones(7), 6, 4, (0.0, 1.0))
    test = Ratings(np.array([3, 5]), np.array([3, 3]), np.ones(2), 6, 4, (0.0, 1.0))
    assert training_users(_context(train=train, test=test)).tolist() == [1, 2, 4]


def test_an_epoch_is_ceil_of_training_users_over_r_and_at_least_one_round() -> None:
    from fedrecsim.protocols.fedvae.protocol import epoch_rounds

    assert [epoch_rounds(n, 5) for n in (0, 1, 5, 6, 10, 11)] == [1, 1, 1, 2, 2, 3]


def test_a_split_that_holds_no_user_out_or_leaves_none_to_train_is_refused_naming_the_key() -> None:
    from fedrecsim.errors import ConfigError
    from fedrecsim.protocols.fedvae.protocol import _check

    some = np.arange(3)
    with pytest.raises(ConfigError) as caught:
        _check(_context(split="per_user"), some)
    assert caught.value.key_path == "data.split" and "data.split = 'per_user' does not hold users out" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        _check(_context(test_path="test.csv"), some)
    assert "data.test_path = 'test.csv' does not hold users out" in str(caught.value)
    assert str(caught.value).endswith('use split = "heldout_users" (or "users") and no test_path')
    _check(_context(split="users"), some)
    with pytest.raises(ConfigError) as caught:
        _check(_context(), np.arange(0))
    assert caught.value.key_path == "data.test_fraction"
    assert str(caught.value) == "data.test_fraction: no user is left to train: every user with data is held out"


def test_the_warnings_count_idle_rounds_and_name_the_first_rejection() -> None:
    from fedrecsim.protocols.fedvae.protocol import _warnings

    rows = [{"updated": 1}, {"updated": 0}, {"updated": 0}]
    assert _warnings(rows, ["first fault", "second fault"], evaluated=True, unranked=[]) == [
        "2 of 3 rounds applied no update: no gradient was accepted, or Krum had fewer than 3 to choose from "
        "(see the gradients and missing metrics)",
        "2 gradients were rejected by the server's validation; the first: first fault",
    ]
    assert _warnings(rows[:1], [], evaluated=True, unranked=[]) == []
    assert _warnings(rows[:1], [], evaluated=True, unranked=[4, 8]) == [
        "the model's scores were not finite when it was to be evaluated in round(s) 4, 8: omega diverged (a learning "
        "rate too large, or byzantine gradients let through), so ndcg and recall were not measured there"
    ]


def test_a_rejection_counts_the_non_finite_entries_in_words_and_overflow_is_no_warning() -> None:
    import warnings

    one = np.zeros(LAYOUT.size, np.float32)
    one[4] = np.nan
    two = one.copy()
    two[6] = np.inf
    with pytest.raises(InvalidGradient) as caught:
        dense_of(Gradient(3, one))
    assert caught.value.problem == "the gradient holds 1 NaN or Inf entry, the first at flat index 4"
    with pytest.raises(InvalidGradient) as caught:
        dense_of(Gradient(3, two))
    assert caught.value.problem == "the gradient holds 2 NaN or Inf entries, the first at flat index 4"
    # Squares beyond float32's range: the check overflows on purpose and says so without a RuntimeWarning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InvalidGradient, match="L2 norm of 1e\\+30 > 1e\\+15"):
            dense_of(Gradient(3, np.array([1e30] + [0.0] * (LAYOUT.size - 1), np.float32)))


def test_the_config_hands_its_own_values_to_the_model_and_to_adam() -> None:
    from fedrecsim.models.multvae import MultVAEHyper
    from fedrecsim.protocols.fedvae.config import FedVAEConfig

    config = FedVAEConfig(hidden=7, latent=3, dropout=0.25, beta=0.5, eta=0.02, adam_beta1=0.8, adam_beta2=0.99,
                          adam_epsilon=1e-6)
    assert config.hyper() == MultVAEHyper(hidden=7, latent=3, dropout=0.25, beta=0.5)
    assert config.adam() == AdamHyper(eta=0.02, beta1=0.8, beta2=0.99, epsilon=1e-6)


def test_the_average_of_long_vectors_sums_every_block_and_plain_averaging_keeps_all() -> None:
    batch = gradients(9, 5, size=21)
    mean = average(batch, np.array([0, 2, 4]), block=4)  # blocks [0, 4), [4, 8), ..., [20, 21)
    np.testing.assert_allclose(mean, batch[[0, 2, 4]].mean(axis=0), rtol=0, atol=1e-6)
    selection = secure_filter(batch, FilterSettings("none"))
    assert (selection.n, selection.f, selection.kept.tolist()) == (5, 0, [0, 1, 2, 3, 4])


def test_the_cutoffs_must_be_a_non_empty_list_of_positive_integers() -> None:
    from fedrecsim.errors import ConfigError
    from fedrecsim.protocols.fedvae.config import FedVAEConfig

    for cutoffs in ((), (10, 0)):
        with pytest.raises(ConfigError) as caught:
            FedVAEConfig(cutoffs=cutoffs)
        assert str(caught.value) == f"protocol.cutoffs: must be a non-empty list of positive integers, got {list(cutoffs)}"
    assert FedVAEConfig(cutoffs=(1,)).cutoffs == (1,)
