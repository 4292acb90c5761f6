"""Minto et al.'s Algorithm 1: exact ε-LDP, unbiased aggregation (eq. (9)), vectorized sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import (
    bit_probability,
    estimate_mean_gradient,
    ldp_reports,
    ldp_reports_batch,
    ldp_reports_lazy,
    likelihood_ratio_bound,
    output_distribution,
    report_magnitude,
)

GRADIENT = np.array([[0.3, -0.7], [3.0, -1.0], [0.0, -5.0]])  # M = 3, F = 2; two entries need clipping


def tolerance(clipped: np.ndarray, epsilon: float, n_reports: int) -> np.ndarray:
    """Five standard deviations of the estimate, entrywise.

    One report contributes B·β at its entry with probability 1/(MF) and 0 elsewhere, so its
    variance at entry j is B²/(MF) − g_j²; the mean of n reports has that over n.
    """
    magnitude = report_magnitude(epsilon, *clipped.shape)
    variance = magnitude**2 / clipped.size - clipped**2
    return 5 * np.sqrt(variance / n_reports)


def test_bit_probability_is_algorithm_1_line_5() -> None:
    g = np.linspace(-1, 1, 21)
    for epsilon in (0.1, 1.0, 3.0):
        e = math.exp(epsilon)
        paper = (g * (e - 1) + e + 1) / (2 * e + 2)
        assert np.allclose(bit_probability(g, epsilon), paper, rtol=1e-14, atol=0)
    assert bit_probability([7.0, -7.0], 1.0).tolist() == bit_probability([1.0, -1.0], 1.0).tolist()


def test_report_magnitude_is_eq_8() -> None:
    e = math.exp(0.5)
    assert report_magnitude(0.5, 30, 4) == pytest.approx((e + 1) / (e - 1) * 120, rel=1e-14)


def test_reports_are_well_formed() -> None:
    flat_index, bits = ldp_reports(np.random.default_rng(1), GRADIENT, 1.0, 1000)
    assert flat_index.dtype == np.int64 and flat_index.shape == (1000,)
    assert bits.dtype == np.int8 and set(np.unique(bits).tolist()) == {-1, 1}
    assert flat_index.min() >= 0 and flat_index.max() < GRADIENT.size
    assert len(np.unique(flat_index)) == GRADIENT.size  # every entry can be reported


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_the_estimate_of_one_gradient_is_unbiased(epsilon: float) -> None:
    n = 1_000_000
    flat_index, bits = ldp_reports(np.random.default_rng(31), GRADIENT, epsilon, n)
    estimate = estimate_mean_gradient(flat_index, bits, n, 3, 2, epsilon)
    clipped = np.clip(GRADIENT, -1, 1)
    assert np.all(np.abs(estimate - clipped) < tolerance(clipped, epsilon, n))
    # The same bound separates the clipped gradient from the raw one (3.0 and -5.0 are not reachable).
    assert np.any(np.abs(estimate - GRADIENT) > tolerance(clipped, epsilon, n))


def test_the_estimate_over_users_is_the_mean_clipped_gradient() -> None:
    """Eq. (9) with k reports per user: divide the sum by N·k, not by N."""
    users, items, factors, k, epsilon = 200, 4, 3, 5000, 1.0
    gradients = np.random.default_rng(8).normal(0.0, 1.0, size=(users, items, factors))
    flat_index, bits = ldp_reports_batch(np.random.default_rng(9), gradients, epsilon, k)
    assert flat_index.shape == bits.shape == (users, k)
    estimate = estimate_mean_gradient(flat_index, bits, users * k, items, factors, epsilon)
    target = np.clip(gradients, -1, 1).mean(axis=0)
    assert np.all(np.abs(estimate - target) < tolerance(target, epsilon, users * k))


def test_one_user_equals_a_batch_of_one() -> None:
    single = ldp_reports(np.random.default_rng(5), GRADIENT, 1.0, 50)
    batch = ldp_reports_batch(np.random.default_rng(5), GRADIENT[np.newaxis], 1.0, 50)
    assert np.array_equal(single[0], batch[0][0]) and np.array_equal(single[1], batch[1][0])


def test_lazy_entries_match_the_dense_stack() -> None:
    """Implicit-MF style: G_u[i, f] computed on demand from user and item factors."""
    rng = np.random.default_rng(12)
    users, items, factors = 6, 40, 5
    x = rng.normal(size=(users, factors))
    v = rng.normal(size=(items, factors))
    dense = (x @ v.T)[:, :, np.newaxis] * x[:, np.newaxis, :]  # G_u[i, f] = (x_u · v_i) x_u[f]

    def entries(item: np.ndarray, factor: np.ndarray) -> np.ndarray:
        rows = np.arange(users)[:, np.newaxis]
        return np.einsum("ukf,ukf->uk", x[rows], v[item]) * x[rows, factor]

    lazy = ldp_reports_lazy(np.random.default_rng(4), entries, users, items, factors, 1.5, 30)
    eager = ldp_reports_batch(np.random.default_rng(4), dense, 1.5, 30)
    assert np.array_equal(lazy[0], eager[0]) and np.array_equal(lazy[1], eager[1])


def test_sampled_reports_follow_the_exact_output_distribution() -> None:
    epsilon, n = 1.0, 60_000
    flat_index, bits = ldp_reports(np.random.default_rng(21), GRADIENT, epsilon, n)
    counts = np.bincount(flat_index * 2 + (bits + 1) // 2, minlength=2 * GRADIENT.size)
    expected = output_distribution(GRADIENT, epsilon).ravel() * n
    # 12 cells; chi-square rejected at p < 1e-3.
    assert stats.chisquare(counts, expected).pvalue > 1e-3


@given(
    hnp.arrays(np.float64, (3, 4), elements=st.floats(-3, 3)),
    hnp.arrays(np.float64, (3, 4), elements=st.floats(-3, 3)),
    st.floats(0.01, 8.0),
)
def test_every_output_ratio_is_at_most_e_to_the_epsilon(
    first: np.ndarray, second: np.ndarray, epsilon: float
) -> None:
    p = output_distribution(first, epsilon)
    q = output_distribution(second, epsilon)
    assert p.sum() == pytest.approx(1.0, abs=1e-12) and (p > 0).all()
    # Exact up to float rounding of the two probabilities (a few ulps).
    assert (p / q).max() <= likelihood_ratio_bound(epsilon) * (1 + 1e-12)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_the_bound_is_attained_by_opposite_extremes(epsilon: float) -> None:
    ones = np.ones((2, 2))
    ratio = output_distribution(ones, epsilon) / output_distribution(-ones, epsilon)
    assert ratio.max() == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert ratio.min() == pytest.approx(math.exp(-epsilon), rel=1e-12)


def test_likelihood_ratio_bound_saturates_instead_of_raising() -> None:
    assert likelihood_ratio_bound(2.0) == pytest.approx(math.exp(2.0))
    assert likelihood_ratio_bound(1000.0) == math.inf


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.nan, math.inf, True, "1"])
def test_epsilon_must_be_positive_and_finite(epsilon: object) -> None:
    calls = [
        (lambda: bit_probability([0.0], epsilon), "bit_probability(epsilon)"),
        (lambda: report_magnitude(epsilon, 2, 2), "report_magnitude(epsilon)"),
        (lambda: ldp_reports(np.random.default_rng(0), GRADIENT, epsilon, 3), "ldp_reports(epsilon)"),
        (lambda: likelihood_ratio_bound(epsilon), "likelihood_ratio_bound(epsilon)"),
        (lambda: output_distribution(GRADIENT, epsilon), "output_distribution(epsilon)"),
    ]
    for call, key in calls:
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.key_path == key


def wrong_shape(items: np.ndarray, factors: np.ndarray) -> np.ndarray:
    return np.zeros(items.size)


def zeros(items: np.ndarray, factors: np.ndarray) -> np.ndarray:
    return np.zeros(items.shape)


def test_bad_report_inputs_are_config_errors() -> None:
    rng = np.random.default_rng(0)
    stack = np.zeros((2, 3, 2))
    cases = [
        (lambda: ldp_reports(rng, np.zeros(4), 1.0, 3), "ldp_reports(gradient)"),
        (lambda: ldp_reports(rng, np.zeros((0, 2)), 1.0, 3), "ldp_reports(gradient)"),
        (lambda: ldp_reports(rng, np.full((2, 2), np.nan), 1.0, 3), "ldp_reports(gradient)"),
        (lambda: ldp_reports(rng, GRADIENT, 1.0, 0), "ldp_reports(k)"),
        (lambda: ldp_reports(0, GRADIENT, 1.0, 3), "ldp_reports(rng)"),
        (lambda: ldp_reports_batch(rng, GRADIENT, 1.0, 3), "ldp_reports_batch(gradients)"),
        (lambda: ldp_reports_lazy(rng, wrong_shape, 2, 3, 2, 1.0, 4), "ldp_reports_lazy(entries)"),
        (lambda: ldp_reports_lazy(rng, zeros, 0, 3, 2, 1.0, 4), "ldp_reports_lazy(n_users)"),
    ]
    for call, key in cases:
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.key_path == key
    stack[1, 2, 1] = np.nan  # 200 reports over 6 entries hit it with probability 1 - (5/6)^200
    with pytest.raises(ConfigError, match=r"user 1 has a non-finite entry nan at item 2, factor 1"):
        ldp_reports_batch(rng, stack, 1.0, 200)


def test_bad_estimate_inputs_are_config_errors() -> None:
    index = np.array([0, 5, 2])
    bits = np.array([1, -1, 1], dtype=np.int8)
    cases = [
        ((np.array([0, 6, 2]), bits, 3), "estimate_mean_gradient(flat_index)"),
        ((np.array([-1, 0, 2]), bits, 3), "estimate_mean_gradient(flat_index)"),
        ((index.astype(float), bits, 3), "estimate_mean_gradient(flat_index)"),
        ((index, np.array([1, 0, 1]), 3), "estimate_mean_gradient(bits)"),
        ((index, np.array([1.0, -1.0, 1.0]), 3), "estimate_mean_gradient(bits)"),
        ((index, bits[:2], 3), "estimate_mean_gradient(bits)"),
        ((index, bits, 0), "estimate_mean_gradient(n_reports)"),
    ]
    for (flat_index, signs, n_reports), key in cases:
        with pytest.raises(ConfigError) as info:
            estimate_mean_gradient(flat_index, signs, n_reports, 3, 2, 1.0)
        assert info.value.key_path == key


def test_estimate_places_each_report_at_its_entry() -> None:
    estimate = estimate_mean_gradient([0, 5, 5], np.array([1, -1, -1], np.int8), 3, 3, 2, 1.0)
    magnitude = report_magnitude(1.0, 3, 2)
    expected = np.zeros((3, 2))
    expected[0, 0] = magnitude / 3
    expected[2, 1] = -2 * magnitude / 3
    assert np.allclose(estimate, expected, rtol=1e-14, atol=0)


def test_a_non_finite_sampled_entry_is_named_after_the_gradient_argument() -> None:
    for call, key in [
        (lambda: ldp_reports(np.random.default_rng(0), np.full((2, 2), np.nan), 1.0, 3), "ldp_reports(gradient)"),
        (lambda: ldp_reports_batch(np.random.default_rng(0), np.full((1, 2, 2), np.inf), 1.0, 3),
         "ldp_reports_batch(gradients)"),
    ]:
        with pytest.raises(ConfigError, match=r"user 0 has a non-finite entry") as info:
            call()
        assert info.value.key_path == key


def test_each_user_of_a_batch_reads_its_own_gradient() -> None:
    # At epsilon = 100 the bit is the sign of the entry; user 0's gradient is all -1, user 1's all +1.
    stack = np.stack([-np.ones((3, 2)), np.ones((3, 2))])
    _, bits = ldp_reports_batch(np.random.default_rng(5), stack, 100.0, 50)
    assert (bits[0] == -1).all() and (bits[1] == 1).all()


def test_a_non_numeric_gradient_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        ldp_reports(np.random.default_rng(0), [["a", "b"]], 1.0, 3)
    assert info.value.key_path == "ldp_reports(gradient)"
    assert info.value.problem.startswith("must be an array of real numbers (")


def test_the_first_non_finite_report_is_named_when_there_is_only_one() -> None:
    def one_nan(items: np.ndarray, factors: np.ndarray) -> np.ndarray:
        values = np.zeros(items.shape)
        values[1, 0] = np.nan
        return values

    with pytest.raises(ConfigError, match=r"^ldp_reports_lazy\(entries\): user 1 has a non-finite entry nan at"):
        ldp_reports_lazy(np.random.default_rng(0), one_nan, 2, 3, 2, 1.0, 4)


def test_an_estimate_keeps_its_shape_when_reports_miss_the_last_entries() -> None:
    estimate = estimate_mean_gradient(np.array([0, 0]), np.array([1, 1]), 2, 3, 2, 1.0)
    assert estimate.shape == (3, 2)
    assert estimate[0, 0] == pytest.approx(report_magnitude(1.0, 3, 2)) and not estimate.ravel()[1:].any()


def test_bad_estimate_inputs_say_what_was_expected() -> None:
    index, bits = np.array([0, 5, 2]), np.array([1, -1, 1])
    for (flat_index, signs), problem in [
        ((index.astype(float), bits), "must be integers, got dtype float64"),
        ((index, bits[:2]), "must have the shape of flat_index (3,), got (2,)"),
        ((np.array([0, 6, 2]), bits), "must lie in [0, 6) for M=3, F=2, got values in [0, 6]"),
        ((index, np.array([1, 0, 1])), "must be integer signs in {-1, +1}"),
    ]:
        with pytest.raises(ConfigError) as info:
            estimate_mean_gradient(flat_index, signs, 3, 3, 2, 1.0)
        assert info.value.problem == problem


def test_the_output_distribution_needs_an_entry() -> None:
    with pytest.raises(ConfigError) as info:
        output_distribution(np.zeros((0, 2)), 1.0)
    assert (info.value.key_path, info.value.problem) == ("output_distribution(gradient)", "must have at least one entry")
    assert output_distribution([[1.0]], 1.0).tolist() == [[pytest.approx(1 / (math.e + 1)), pytest.approx(math.e / (math.e + 1))]]
