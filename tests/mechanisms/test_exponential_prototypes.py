"""The private-prototype mechanisms: Gumbel top-s is peeled exponential mechanisms, sparse recovery
reveals s entries with the calibrated noise, the partition keeps a child with the Laplace-threshold
probability, and the budget split adds up to epsilon."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.exponential import (
    exponential_mechanism,
    exponential_probabilities,
    gumbel_scale,
    gumbel_top_s,
    peeling_selection,
)
from fedrecsim.mechanisms.private_kmeans import (
    PrototypeBudget,
    PrototypeParams,
    keep_probability,
    local_swap,
    private_partition,
    private_prototypes,
    truncate_records,
)
from fedrecsim.mechanisms.sparse_recovery import RecoveryNoise, sparse_recovery
from fedrecsim.protocols.prototypes.accounting import budget_split


def _ordered_selection_probability(utilities: np.ndarray, scale: float, order: tuple[int, ...]) -> float:
    """P(peeling draws exactly ``order``): the product of the successive exponential-mechanism draws."""
    remaining = list(range(utilities.size))
    probability = 1.0
    for index in order:
        weights = exponential_probabilities(utilities[remaining], scale)
        probability *= weights[remaining.index(index)]
        remaining.remove(index)
    return probability


def test_gumbel_top_s_is_distributed_as_repeated_exponential_mechanisms_chi_square() -> None:
    """Ordered top-2 of 5 items: 20 outcomes, 40,000 draws each way, chi-square against the exact law."""
    utilities = np.array([0.0, 0.5, 1.0, 1.5, 3.0])
    scale, s, draws = 1.0, 2, 40_000
    outcomes = list(itertools.permutations(range(utilities.size), s))
    expected = np.array([_ordered_selection_probability(utilities, scale, order) for order in outcomes])
    assert expected.sum() == pytest.approx(1.0)
    for sampler, seed in ((gumbel_top_s, 1), (peeling_selection, 2)):
        rng = np.random.default_rng(seed)
        counts = dict.fromkeys(outcomes, 0)
        for _ in range(draws):
            counts[tuple(int(i) for i in sampler(rng, utilities, s, scale))] += 1
        observed = np.array([counts[order] for order in outcomes])
        result = stats.chisquare(observed, expected * draws)
        assert result.pvalue > 0.001, (sampler.__name__, result)


def test_gumbel_top_s_at_a_wrong_scale_fails_the_same_chi_square() -> None:
    """The test has power: Gumbel noise at twice the scale is detected against the scale-1 law."""
    utilities = np.array([0.0, 0.5, 1.0, 1.5, 3.0])
    outcomes = list(itertools.permutations(range(5), 2))
    expected = np.array([_ordered_selection_probability(utilities, 1.0, order) for order in outcomes])
    rng = np.random.default_rng(3)
    counts = dict.fromkeys(outcomes, 0)
    for _ in range(40_000):
        counts[tuple(int(i) for i in gumbel_top_s(rng, utilities, 2, 2.0))] += 1
    assert stats.chisquare(np.array([counts[o] for o in outcomes]), expected * 40_000).pvalue < 1e-6


def test_exponential_mechanism_frequencies_follow_exp_eps_q_over_2_delta() -> None:
    scores = np.array([0.0, 1.0, 2.0])
    rng = np.random.default_rng(4)
    draws = np.bincount([exponential_mechanism(rng, scores, 1.0, 1.0) for _ in range(30_000)], minlength=3)
    expected = np.exp(scores / 2) / np.exp(scores / 2).sum()
    assert stats.chisquare(draws, expected * 30_000).pvalue > 0.001
    assert gumbel_scale(0.5, 3.0) == 12.0


def test_sparse_recovery_reveals_exactly_s_entries_and_zero_elsewhere() -> None:
    rng = np.random.default_rng(5)
    noise = RecoveryNoise.calibrate(s=7, bound=5.0, eps_support=0.4, eps_values=0.4, eps_count=0.2)
    for size in (0, 1, 30):
        cluster_sum = rng.integers(0, 6, size=200).astype(float) * size
        centroid = sparse_recovery(rng, cluster_sum, size, 7, noise)
        assert np.count_nonzero(centroid) == 7
    assert np.count_nonzero(sparse_recovery(rng, np.ones(4), 3, 7, noise)) == 4  # s capped at n


def test_recovery_noise_scales_are_the_calibrated_ones() -> None:
    """Gumbel 2 s bound / eps_support, Laplace s bound / eps_values on the sums, 1 / eps_count on the size."""
    noise = RecoveryNoise.calibrate(s=10, bound=5.0, eps_support=0.5, eps_values=0.25, eps_count=0.1)
    assert (noise.gumbel, noise.values, noise.count) == (200.0, 200.0, 10.0)
    # Empirically: with a huge cluster the size noise vanishes relative to it, so the revealed mean's
    # spread is the Laplace scale / size: std = sqrt(2) * 200 / 10,000.
    rng = np.random.default_rng(6)
    size = 10_000
    cluster_sum = np.zeros(50)
    cluster_sum[:10] = 3.0 * size
    revealed = np.array([sparse_recovery(rng, cluster_sum, size, 10, noise)[:10] for _ in range(2000)])
    assert np.all(revealed != 0)  # the big entries win the support every time
    assert revealed.std() == pytest.approx(math.sqrt(2) * 200.0 / size, rel=0.05)


def test_keep_probability_is_the_laplace_threshold_test() -> None:
    counts = np.array([0, 5, 10, 15, 40])
    expected = 1 - stats.laplace.cdf(10 - counts, scale=1 / 0.3)
    np.testing.assert_allclose(keep_probability(counts, 0.3, 10.0), expected, rtol=1e-12)


def test_private_partition_returns_the_root_and_kept_children_inside_the_cube() -> None:
    rng = np.random.default_rng(7)
    Y = rng.normal(0, 0.2, size=(500, 2))
    centers = private_partition(rng, Y, np.array([-1.0, -1.0]), 2.0, epsilon=50.0, depth=3)
    np.testing.assert_allclose(centers[0], [0.0, 0.0])
    assert centers.shape[0] > 1  # a dense cluster at a large budget is refined
    assert np.all(np.abs(centers) < 1.0)


def test_local_swap_returns_k_candidate_indices() -> None:
    rng = np.random.default_rng(8)
    Y = rng.normal(size=(60, 2))
    candidates = rng.normal(size=(15, 2))
    chosen = local_swap(rng, Y, candidates, 4, epsilon=1.0, steps=5, radius=3.0)
    assert chosen.shape == (4,) and chosen.min() >= 0 and chosen.max() < 15


def test_truncation_keeps_at_most_s_entries_clipped_to_the_bound() -> None:
    rng = np.random.default_rng(9)
    X = sp.csr_matrix(rng.integers(0, 12, size=(20, 40)).astype(float))
    truncated = truncate_records(rng, X, 6, 10.0)
    assert np.diff(truncated.indptr).max() <= 6
    assert truncated.data.max() <= 10.0


def test_private_prototypes_shape_and_support() -> None:
    rng = np.random.default_rng(10)
    X = truncate_records(rng, sp.csr_matrix(rng.poisson(1.0, size=(80, 30)).astype(float)), 8, 10.0)
    params = PrototypeParams(k=4, s=8, bound=10.0, projection_dim=2, trials=2, grids=2, swap_steps=3)
    budget = budget_split(1.0, 2, 0.125, 0.125, 0.25, 0.45, 0.45)
    result = private_prototypes(rng, X, params, budget)
    assert result.prototypes.shape == (4, 30)
    assert np.all(np.count_nonzero(result.prototypes, axis=1) == 8)
    assert result.cluster_sizes.sum() == 80


@pytest.mark.parametrize("trials", [1, 3])
@pytest.mark.parametrize("epsilon", [0.01, 1.0, 7.5])
def test_the_budget_split_adds_up_to_epsilon(trials: int, epsilon: float) -> None:
    budget = budget_split(epsilon, trials, 0.1, 0.2, 0.3, 0.5, 0.3)
    assert budget.total == pytest.approx(epsilon, rel=1e-12)
    parts = budget.recovery * (budget.support_share + budget.values_share + budget.count_share)
    assert parts == pytest.approx(budget.recovery)
    assert budget.selection == (pytest.approx(0.3 * epsilon) if trials > 1 else 0.0)
    assert budget.candidates == pytest.approx(0.1 * epsilon) and budget.localswap == pytest.approx(0.2 * epsilon)


def test_a_split_that_leaves_the_recovery_nothing_is_refused() -> None:
    with pytest.raises(ConfigError, match="protocol.budget_candidates"):
        budget_split(1.0, 2, 0.5, 0.3, 0.3, 0.45, 0.45)
    with pytest.raises(ConfigError, match="protocol.recovery_support"):
        budget_split(1.0, 1, 0.1, 0.1, 0.1, 0.6, 0.5)
    assert PrototypeBudget(0.1, 0.1, 0.7, 0.1).total == pytest.approx(1.0)
