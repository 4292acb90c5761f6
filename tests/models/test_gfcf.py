"""GF-CF, Turbo-CF and the randomized power method (fedrecsim.models.gfcf)."""

from __future__ import annotations

import re

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
    normalized_interactions,
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


def test_exact_basis_has_no_more_vectors_than_r_has_singular_values() -> None:
    # Three users and six items: R~ has at most three singular values, so asking for five
    # singular vectors gives the three that exist, orthonormal and spanning R~'s row space.
    R = sp.csr_matrix(np.array([[1, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 1], [1, 0, 0, 1, 0, 1]], dtype=float))
    basis = exact_basis(R, 5)
    assert basis.shape == (6, 3)
    np.testing.assert_allclose(basis.T @ basis, np.eye(3), atol=1e-12)
    Rt = normalized_interactions(R).toarray()
    np.testing.assert_allclose(Rt @ basis @ basis.T, Rt, atol=1e-12)


def test_interaction_matrix_keeps_users_and_items_without_entries() -> None:
    ratings = Ratings(np.array([0, 1]), np.array([1, 0]), np.array([4.0, 2.0]), 3, 4, (1.0, 5.0))
    assert interaction_matrix(ratings).toarray().tolist() == [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]


def test_inverse_sqrt_of_integer_and_fractional_degrees() -> None:
    np.testing.assert_array_equal(inverse_sqrt(np.array([4, 0, 1])), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(inverse_sqrt(np.array([0.25, 0.0, 1.0])), [2.0, 0.0, 1.0])


def test_normalized_interactions_of_any_dtype_are_float64() -> None:
    dense = _matrix(8, 6, 0.5, seed=2).toarray()
    d_user, d_item = dense.sum(1), dense.sum(0)
    expected = dense * np.outer(inverse_sqrt(d_user), inverse_sqrt(d_item))
    for dtype in (bool, np.int8, np.float32, np.longdouble):
        got = normalized_interactions(sp.csr_matrix(dense.astype(dtype)))
        assert got.dtype == np.float64
        np.testing.assert_allclose(got.toarray(), expected, rtol=1e-15)


def test_fit_from_a_boolean_matrix_has_float64_item_degrees() -> None:
    R = _matrix()
    filters = fit_gfcf(sp.csr_matrix(R.toarray().astype(bool)), GFCFHyper(k=3), np.random.default_rng(0))
    assert filters.degrees.dtype == np.float64
    np.testing.assert_array_equal(filters.degrees, R.toarray().sum(0))


def test_qr_positive_of_a_rank_deficient_matrix_keeps_orthonormal_columns() -> None:
    # The second column is zero, so T's second diagonal entry is 0: its sign is taken as +1.
    Y = np.array([[3.0, 0.0], [4.0, 0.0], [0.0, 0.0]])
    X, T = qr_positive(Y)
    np.testing.assert_allclose(X.T @ X, np.eye(2), atol=1e-12)
    np.testing.assert_allclose(X @ T, Y, atol=1e-12)
    np.testing.assert_allclose(np.diag(T), [5.0, 0.0], atol=1e-12)


def test_low_rank_gfcf_scores_use_the_spectrum_and_the_leading_ideal_columns() -> None:
    R = _matrix()
    rows = R.toarray()
    hyper = GFCFHyper(k=5, iterations=3, low_rank=True, ideal_k=2)
    filters = fit_gfcf(R, hyper, np.random.default_rng(3))
    start = gaussian_start(R.shape[1], 5, np.random.default_rng(3))
    P = normalized_item_item(R)
    X, T = power_method(lambda X: P @ X, start, 3)
    degrees = rows.sum(0)
    S = X[:, :2]
    F = np.diag(inverse_sqrt(degrees)) @ S @ S.T @ np.diag(np.sqrt(degrees))
    low_rank_P = X @ np.diag(np.diag(T)) @ X.T
    np.testing.assert_allclose(filters.gfcf_scores(R, gamma=0.5), rows @ (low_rank_P + 0.5 * F), atol=1e-12)


def test_low_rank_ideal_filter_uses_all_k_columns_by_default() -> None:
    R = _matrix()
    filters = fit_gfcf(R, GFCFHyper(k=4, low_rank=True), np.random.default_rng(1))
    S, degrees = filters.basis, R.toarray().sum(0)
    assert S.shape == (30, 4)
    F = np.diag(inverse_sqrt(degrees)) @ S @ S.T @ np.diag(np.sqrt(degrees))
    np.testing.assert_allclose(filters.ideal_apply(R.toarray()), R.toarray() @ F, atol=1e-12)


def test_turbo_defaults_to_filter_2_at_power_1_also_for_the_low_rank_form() -> None:
    R = _matrix()
    P, rows = normalized_item_item(R), R.toarray()
    dense = fit_gfcf(R, GFCFHyper(k=4), np.random.default_rng(0))
    np.testing.assert_allclose(dense.turbo_scores(R), rows @ (2 * P - P @ P), atol=1e-12)
    low = fit_gfcf(R, GFCFHyper(k=4, low_rank=True), np.random.default_rng(0))
    Q = low.basis @ np.diag(low.spectrum) @ low.basis.T
    np.testing.assert_allclose(low.turbo_scores(R), rows @ (2 * Q - Q @ Q), atol=1e-12)


def test_turbo_squares_the_item_item_entries_at_power_2() -> None:
    R = _matrix()
    P, rows = normalized_item_item(R), R.toarray()
    filters = fit_gfcf(R, GFCFHyper(k=4), np.random.default_rng(0))
    np.testing.assert_allclose(filters.turbo_scores(R, 1, power=2.0), rows @ (P * P), atol=1e-12)


def test_turbo_scores_of_integer_rows_equal_those_of_float_rows() -> None:
    R = _matrix()
    P = normalized_item_item(R)
    filters = fit_gfcf(R, GFCFHyper(k=4), np.random.default_rng(0))
    integer_rows = R.toarray().astype(np.int64)
    np.testing.assert_allclose(filters.turbo_scores(integer_rows, 1), R.toarray() @ P, atol=1e-12)


def test_turbo_refusals_name_the_problem() -> None:
    low = fit_gfcf(_matrix(), GFCFHyper(k=4, low_rank=True), np.random.default_rng(0))
    message = "the element-wise power of PriviRec-k's low-rank P~ needs it dense: use power = 1"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        low.turbo_scores(_matrix(), 2, power=0.5)


def test_graph_filters_refusal_names_both_forms() -> None:
    message = "give exactly one of item_item (PriviRec) and spectrum (PriviRec-k)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        GraphFilters(np.ones(2), np.eye(2))


@pytest.mark.parametrize(("field", "low"), [("k", 1), ("iterations", 1), ("oversample", 0), ("ideal_k", 0)])
def test_hyper_refusals_name_the_field_and_its_bound(field: str, low: int) -> None:
    for bad in (low - 1, 2.0, True):
        with pytest.raises(ValueError, match=f"^{field} must be an integer >= {low}, got {bad!r}$"):
            GFCFHyper(**{field: bad})


def test_hyper_accepts_its_bounds() -> None:
    hyper = GFCFHyper(k=1, iterations=1, oversample=0, ideal_k=1)
    assert (hyper.k, hyper.iterations, hyper.ideal_k, hyper.p) == (1, 1, 1, 1)
    assert GFCFHyper(k=3, ideal_k=3).ideal_k == 3
