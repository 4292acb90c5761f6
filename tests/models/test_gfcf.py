"""GF-CF, Turbo-CF and the randomized power method (fedrecsim.models.gfcf)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedrecsim.data.ratings import Ratings
from fedrecsim.models.gfcf import (
    GFCFHyper,
    GraphFilters,
    exact_basis,
    fit_gfcf,
    gaussian_start,
    interaction_matrix,
    inverse_sqrt,
    normalized_item_item,
    power_method,
    qr_positive,
)


def _matrix(n_users: int = 40, n_items: int = 30, density: float = 0.2, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = (rng.random((n_users, n_items)) < density).astype(float)
    dense[0] = 0.0  # a user without interactions
    dense[:, -1] = 0.0  # an item without interactions
    return sp.csr_matrix(dense)


def test_item_item_matches_theorem_3_1() -> None:
    R = _matrix()
    dense = R.toarray()
    d_user, d_item = dense.sum(1), dense.sum(0)
    p_prime = sum(np.outer(row, row) / d for row, d in zip(dense, d_user) if d > 0)
    expected = p_prime * np.outer(inverse_sqrt(d_item), inverse_sqrt(d_item))
    np.testing.assert_allclose(normalized_item_item(R), expected, atol=1e-14)
    assert np.all(np.isfinite(normalized_item_item(R)))


def test_qr_positive_is_a_qr_with_a_non_negative_diagonal() -> None:
    Y = np.random.default_rng(1).standard_normal((20, 6))
    X, T = qr_positive(Y)
    np.testing.assert_allclose(X @ T, Y, atol=1e-12)
    np.testing.assert_allclose(X.T @ X, np.eye(6), atol=1e-12)
    assert np.all(np.diag(T) >= 0)
    assert np.allclose(np.tril(T, -1), 0)


def test_gaussian_start_is_seeded_and_orthonormal() -> None:
    a = gaussian_start(30, 5, np.random.default_rng(7))
    b = gaussian_start(30, 5, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a.T @ a, np.eye(5), atol=1e-12)
    with pytest.raises(ValueError, match="exceeds"):
        gaussian_start(4, 5, np.random.default_rng(0))


def test_power_method_converges_to_the_top_singular_subspace() -> None:
    R = _matrix(80, 40, 0.15, seed=3)
    P = normalized_item_item(R)
    X, T = power_method(lambda X: P @ X, gaussian_start(40, 6, np.random.default_rng(0)), 3000)
    exact = exact_basis(R, 4)
    # The leading 4 directions of the converged basis span the exact top-4 subspace.
    np.testing.assert_allclose(X[:, :4] @ X[:, :4].T, exact @ exact.T, atol=1e-6)
    eigenvalues = np.sort(np.linalg.eigvalsh(P))[::-1][:4]
    np.testing.assert_allclose(np.diag(T)[:4], eigenvalues, rtol=1e-6)


def test_gfcf_scores_are_the_paper_formula() -> None:
    R = _matrix()
    hyper = GFCFHyper(k=5, iterations=2)
    filters = fit_gfcf(R, hyper, np.random.default_rng(11))
    start = gaussian_start(R.shape[1], 5, np.random.default_rng(11))
    P = normalized_item_item(R)
    X, _ = power_method(lambda X: P @ X, start, 2)
    degrees = R.toarray().sum(0)
    F = np.diag(inverse_sqrt(degrees)) @ X @ X.T @ np.diag(np.sqrt(degrees))
    expected = R.toarray() @ (P + 0.3 * F)
    np.testing.assert_allclose(filters.gfcf_scores(R), expected, atol=1e-12)
    np.testing.assert_allclose(filters.gfcf_scores(R.toarray()[3]), expected[3:4], atol=1e-12)
    assert np.all(filters.gfcf_scores(R)[0] == 0)  # no interactions, no scores


def test_fit_accepts_ratings_and_is_deterministic() -> None:
    ratings = Ratings(np.array([0, 0, 1, 2, 2]), np.array([0, 2, 1, 0, 3]), np.array([5.0, 3.0, 1.0, 2.0, 4.0]), 3, 4, (1.0, 5.0))
    R = interaction_matrix(ratings)
    assert R.toarray().tolist() == [[1, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1]]
    one = fit_gfcf(ratings, GFCFHyper(k=2), np.random.default_rng(0)).gfcf_scores(R)
    two = fit_gfcf(R, GFCFHyper(k=2), np.random.default_rng(0)).gfcf_scores(R)
    np.testing.assert_array_equal(one, two)
    with pytest.raises(ValueError, match="exceeds the number of items"):
        fit_gfcf(R, GFCFHyper(k=5), np.random.default_rng(0))


def test_low_rank_item_item_at_full_rank_is_exact() -> None:
    R = _matrix(60, 12, 0.3, seed=5)
    filters = fit_gfcf(R, GFCFHyper(k=12, iterations=3000, low_rank=True), np.random.default_rng(2))
    P = normalized_item_item(R)
    rows = R.toarray()
    np.testing.assert_allclose(filters.item_item_apply(rows), rows @ P, atol=1e-8)
    assert filters.item_item is None and filters.spectrum is not None and filters.spectrum.shape == (12,)


def test_turbo_filters() -> None:
    R = _matrix()
    filters = fit_gfcf(R, GFCFHyper(k=4), np.random.default_rng(0))
    P, rows = normalized_item_item(R), R.toarray()
    np.testing.assert_allclose(filters.turbo_scores(R, 1), rows @ P, atol=1e-12)
    np.testing.assert_allclose(filters.turbo_scores(R, 2), rows @ (2 * P - P @ P), atol=1e-12)
    third = P + 0.01 * (-P @ P @ P + 10 * P @ P - 29 * P)
    np.testing.assert_allclose(filters.turbo_scores(R, 3), rows @ third, atol=1e-12)
    Pbar = P**0.7
    np.testing.assert_allclose(filters.turbo_scores(R, 2, power=0.7), rows @ (2 * Pbar - Pbar @ Pbar), atol=1e-12)
    with pytest.raises(ValueError, match="filter"):
        filters.turbo_scores(R, 4)
    low = fit_gfcf(R, GFCFHyper(k=4, low_rank=True), np.random.default_rng(0))
    with pytest.raises(ValueError, match="power = 1"):
        low.turbo_scores(R, 2, power=0.5)


def test_graph_filters_needs_one_item_item_form() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        GraphFilters(np.ones(2), np.eye(2))
    with pytest.raises(ValueError, match="exactly one"):
        GraphFilters(np.ones(2), np.eye(2), item_item=np.eye(2), spectrum=np.ones(2))


@pytest.mark.parametrize("field", ["k", "iterations", "oversample", "ideal_k"])
def test_hyper_checks(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GFCFHyper(**{field: -1})
    assert GFCFHyper(k=3, oversample=2).p == 5


def test_the_ideal_filter_can_use_the_leading_columns_only() -> None:
    R = _matrix()
    full = fit_gfcf(R, GFCFHyper(k=6), np.random.default_rng(4))
    lead = fit_gfcf(R, GFCFHyper(k=6, ideal_k=2), np.random.default_rng(4))
    degrees = R.toarray().sum(0)
    S = full.basis[:, :2]
    F = np.diag(inverse_sqrt(degrees)) @ S @ S.T @ np.diag(np.sqrt(degrees))
    np.testing.assert_allclose(lead.ideal_apply(R.toarray()), R.toarray() @ F, atol=1e-12)
    np.testing.assert_array_equal(lead.basis, full.basis)
    with pytest.raises(ValueError, match="ideal_k"):
        GFCFHyper(k=3, ideal_k=4)
