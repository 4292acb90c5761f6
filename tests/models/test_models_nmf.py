"""Ridge NMF (Ribero et al. eq. 2) and per-user NNLS, checked against the objective written out here:
updates never increase it, a planted non-negative low-rank matrix is recovered, the ridge shrinks,
NNLS solves the stated least-squares problem, and the configuration errors name their keys."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls

from fedrecsim.errors import ConfigError
from fedrecsim.models.nmf import NMFHyper, initial_factors, nmf_dense, nmf_observed, nnls_users, observed_matrix


def objective(X: np.ndarray, mask: np.ndarray, U: np.ndarray, V: np.ndarray, lam: float) -> float:
    """Eq. (2) with the data term summed: sum over observed (x - u.v)^2 + lam (||U||^2 + ||V||^2)."""
    residual = (X - U @ V.T) * mask
    return float((residual**2).sum() + lam * ((U**2).sum() + (V**2).sum()))


def planted(seed: int, m: int = 30, n: int = 20, rank: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(0.2, 1.5, size=(m, rank)) @ rng.uniform(0.2, 1.5, size=(n, rank)).T


# ------------------------------------------------------------------ hyper-parameters


@pytest.mark.parametrize(
    ("kwargs", "key", "shown"),
    [({"rank": 0}, "nmf.rank", "0"), ({"lam": -0.5}, "nmf.lam", "-0.5"), ({"iterations": -1}, "nmf.iterations", "-1")],
)
def test_hyper_refuses_out_of_range_values_naming_the_key(kwargs, key, shown) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(key)}: must be >= [01], got {re.escape(shown)}$"):
        NMFHyper(**kwargs)


def test_hyper_accepts_the_boundary_values_and_has_the_papers_defaults() -> None:
    hyper = NMFHyper(rank=1, lam=0.0, iterations=0)
    assert (hyper.rank, hyper.lam, hyper.iterations) == (1, 0.0, 0)
    assert NMFHyper() == NMFHyper(rank=10, lam=0.1, iterations=200)


# ------------------------------------------------------------------ observed_matrix and initial factors


def test_observed_matrix_holds_exactly_the_given_entries_explicit_zeros_included() -> None:
    rows = np.array([2, 0, 2, 0, 1])
    cols = np.array([3, 1, 0, 0, 2])
    values = np.array([5, 0, 1, 2, 0])  # integers: stored as float64
    X = observed_matrix(rows, cols, values, (4, 5))
    assert X.shape == (4, 5) and X.nnz == 5 and X.dtype == np.float64
    expected = np.zeros((4, 5))
    expected[rows, cols] = values
    np.testing.assert_array_equal(X.toarray(), expected)
    stored = {(int(r), int(c)) for r, c in zip(*X.nonzero(), strict=True)}
    pattern = {(r, c) for r in range(4) for c in X.indices[X.indptr[r] : X.indptr[r + 1]]}
    assert pattern == {(2, 3), (0, 1), (2, 0), (0, 0), (1, 2)}  # the two zeros are stored
    assert stored == {(2, 3), (2, 0), (0, 0)}
    np.testing.assert_array_equal(X.indptr, [0, 2, 3, 5, 5])
    np.testing.assert_array_equal(X.indices, [0, 1, 2, 0, 3])
    np.testing.assert_array_equal(X.data, [2.0, 0.0, 0.0, 1.0, 5.0])


def test_initial_factors_are_uniform_and_their_product_has_the_requested_mean() -> None:
    rng = np.random.default_rng(0)
    rank, mean = 4, 2.5
    U, V = initial_factors(rng, (3000, 2000), rank, mean)
    assert U.shape == (3000, rank) and V.shape == (2000, rank)
    scale = 2.0 * np.sqrt(mean / rank)  # uniform on [0, scale]: mean scale / 2, product mean rank (scale/2)^2
    for F in (U, V):
        assert F.min() >= 0.0 and F.max() <= scale
        assert F.max() > 0.99 * scale and F.min() < 0.01 * scale
        assert F.mean() == pytest.approx(scale / 2, rel=0.02)
    assert U.mean(axis=0) @ V.mean(axis=0) == pytest.approx(mean, rel=0.03)  # the mean of U V^T


def test_initial_factors_of_a_zero_mean_are_tiny_but_positive() -> None:
    U, V = initial_factors(np.random.default_rng(1), (5, 6), 2, 0.0)
    bound = 2.0 * np.sqrt(1e-12 / 2)
    assert 0.0 < U.max() <= bound and 0.0 < V.max() <= bound


# ------------------------------------------------------------------ dense NMF


def test_dense_updates_never_increase_the_objective() -> None:
    X = planted(1) + np.random.default_rng(2).uniform(0, 0.3, size=(30, 20))
    U, V = initial_factors(np.random.default_rng(3), X.shape, 3, float(X.mean()))
    start = previous = objective(X, np.ones_like(X), U, V, 0.5)
    for iterations in (1, 2, 5, 20, 60):
        U, V = nmf_dense(np.random.default_rng(3), X, NMFHyper(3, 0.5, iterations))
        value = objective(X, np.ones_like(X), U, V, 0.5)
        assert value <= previous * (1 + 1e-12)
        previous = value
    assert previous < 0.1 * start


def test_dense_with_no_iterations_returns_the_initial_factors() -> None:
    X = planted(4)
    U, V = nmf_dense(np.random.default_rng(5), X, NMFHyper(3, 0.1, 0))
    U0, V0 = initial_factors(np.random.default_rng(5), X.shape, 3, float(X.mean()))
    np.testing.assert_array_equal(U, U0)
    np.testing.assert_array_equal(V, V0)


def test_dense_recovers_a_planted_nonnegative_low_rank_matrix() -> None:
    X = planted(6)
    U, V = nmf_dense(np.random.default_rng(7), X, NMFHyper(rank=3, lam=0.0, iterations=2000))
    assert U.min() >= 0 and V.min() >= 0
    assert np.abs(U @ V.T - X).max() < 0.05 * X.max()
    assert np.linalg.norm(U @ V.T - X) / np.linalg.norm(X) < 0.01


def test_the_ridge_shrinks_the_factors() -> None:
    X = planted(8)
    norms = []
    for lam in (0.0, 5.0, 50.0):
        U, V = nmf_dense(np.random.default_rng(9), X, NMFHyper(rank=3, lam=lam, iterations=300))
        norms.append(float((U**2).sum() + (V**2).sum()))
    assert norms[0] > norms[1] > norms[2]
    # A penalty far above the data drives everything to zero.
    U, V = nmf_dense(np.random.default_rng(9), X, NMFHyper(rank=3, lam=1e6, iterations=50))
    assert np.abs(U).max() < 1e-6 and np.abs(V).max() < 1e-6


def test_dense_refuses_negative_values_naming_the_key() -> None:
    X = planted(10)
    X[3, 4] = -0.01
    with pytest.raises(ConfigError, match=r"^nmf\.X: .*non-negative values \(clip first\)$"):
        nmf_dense(np.random.default_rng(0), X, NMFHyper(3))
    # Zeros are fine.
    X[3, 4] = 0.0
    nmf_dense(np.random.default_rng(0), X, NMFHyper(3, iterations=2))


def test_dense_of_an_all_zero_matrix_is_zero() -> None:
    U, V = nmf_dense(np.random.default_rng(11), np.zeros((4, 3)), NMFHyper(2, 0.1, 5))
    assert np.all(U @ V.T == 0) or np.abs(U @ V.T).max() < 1e-20


# ------------------------------------------------------------------ observed-entries NMF


def _sampled(X: np.ndarray, fraction: float, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.random(X.shape) < fraction
    mask[np.arange(X.shape[0]), rng.integers(0, X.shape[1], size=X.shape[0])] = True
    mask[rng.integers(0, X.shape[0], size=X.shape[1]), np.arange(X.shape[1])] = True
    rows, cols = np.nonzero(mask)
    return observed_matrix(rows, cols, X[rows, cols], X.shape), mask.astype(float)


def test_observed_updates_never_increase_the_objective_over_the_observed_entries() -> None:
    X = planted(12) + np.random.default_rng(13).uniform(0, 0.3, size=(30, 20))
    S, mask = _sampled(X, 0.5, 14)
    U0, V0 = initial_factors(np.random.default_rng(15), X.shape, 3, float(S.data.mean()))
    previous = objective(X, mask, U0, V0, 0.3)
    for iterations in (1, 2, 4, 10, 40):
        U, V = nmf_observed(np.random.default_rng(15), S, NMFHyper(3, 0.3, iterations))
        value = objective(X, mask, U, V, 0.3)
        assert value <= previous * (1 + 1e-12)
        previous = value
    assert previous < 0.1 * objective(X, mask, U0, V0, 0.3)


def test_observed_on_a_full_mask_is_the_dense_factorization() -> None:
    X = planted(16, m=12, n=9)
    rows, cols = np.nonzero(np.ones_like(X))
    S = observed_matrix(rows, cols, X[rows, cols], X.shape)
    hyper = NMFHyper(rank=3, lam=0.2, iterations=25)
    U, V = nmf_observed(np.random.default_rng(17), S, hyper)
    Ud, Vd = nmf_dense(np.random.default_rng(17), X, hyper)
    np.testing.assert_allclose(U, Ud, rtol=1e-9)
    np.testing.assert_allclose(V, Vd, rtol=1e-9)


def test_observed_recovers_a_planted_matrix_including_the_unobserved_entries() -> None:
    X = planted(18, m=40, n=30)
    S, mask = _sampled(X, 0.6, 19)
    U, V = nmf_observed(np.random.default_rng(20), S, NMFHyper(rank=3, lam=0.0, iterations=300))
    assert U.min() >= 0 and V.min() >= 0
    fitted = U @ V.T
    assert np.linalg.norm((fitted - X) * mask) / np.linalg.norm(X * mask) < 0.01
    assert np.linalg.norm((fitted - X) * (1 - mask)) / np.linalg.norm(X * (1 - mask)) < 0.05


def test_observed_zeros_are_data_and_unobserved_entries_are_not() -> None:
    X = np.full((6, 5), 3.0)
    rows, cols = np.nonzero(np.ones_like(X))
    X[0] = 0.0
    with_zeros = observed_matrix(rows, cols, X[rows, cols], X.shape)
    keep = rows != 0
    without = observed_matrix(rows[keep], cols[keep], X[rows[keep], cols[keep]], X.shape)
    hyper = NMFHyper(rank=1, lam=0.0, iterations=300)
    U, V = nmf_observed(np.random.default_rng(21), with_zeros, hyper)
    assert np.abs((U @ V.T)[0]).max() < 0.05  # fitted to the observed zeros
    np.testing.assert_allclose((U @ V.T)[1:], 3.0, rtol=0.01)
    U, V = nmf_observed(np.random.default_rng(21), without, hyper)
    np.testing.assert_array_equal(U[0], 0.0)  # a user with no entry gets no signal: X V = 0
    np.testing.assert_allclose((U @ V.T)[1:], 3.0, rtol=0.01)


def test_observed_initial_factors_take_the_mean_of_the_stored_values() -> None:
    X = planted(22)
    S, _ = _sampled(X, 0.4, 23)
    U, V = nmf_observed(np.random.default_rng(24), S, NMFHyper(3, 0.1, 0))
    U0, V0 = initial_factors(np.random.default_rng(24), X.shape, 3, float(S.data.mean()))
    np.testing.assert_array_equal(U, U0)
    np.testing.assert_array_equal(V, V0)


def test_observed_refuses_negative_values_and_accepts_an_empty_matrix() -> None:
    S = observed_matrix(np.array([0, 1]), np.array([1, 0]), np.array([1.0, -2.0]), (2, 2))
    with pytest.raises(ConfigError, match=r"^nmf\.X: non-negative factorization needs non-negative values$"):
        nmf_observed(np.random.default_rng(0), S, NMFHyper(1))
    empty = sp.csr_matrix((3, 4))
    U, V = nmf_observed(np.random.default_rng(0), empty, NMFHyper(2, 0.1, 3))
    assert U.shape == (3, 2) and V.shape == (4, 2)
    np.testing.assert_array_equal(U, 0.0)
    assert np.all(np.isfinite(V))


def test_observed_accepts_a_dense_array_holding_its_entries() -> None:
    X = planted(25, m=8, n=6)
    hyper = NMFHyper(rank=2, lam=0.1, iterations=10)
    U, V = nmf_observed(np.random.default_rng(26), X, hyper)  # converted: every non-zero is observed
    Ud, Vd = nmf_dense(np.random.default_rng(26), X, hyper)
    np.testing.assert_allclose(U @ V.T, Ud @ Vd.T, rtol=1e-9)


# ------------------------------------------------------------------ NNLS per user


def _reference_nnls(x: np.ndarray, A: np.ndarray, lam: float) -> np.ndarray:
    """argmin_{u >= 0} ||x - A u||^2 + lam ||u||^2 as the augmented problem [A; sqrt(lam) I] u = [x; 0]."""
    rank = A.shape[1]
    solution, _ = nnls(np.vstack([A, np.sqrt(lam) * np.eye(rank)]), np.concatenate([x, np.zeros(rank)]))
    return solution


def test_nnls_users_solves_each_rows_ridge_problem_over_its_stored_entries() -> None:
    # Row 0: the unconstrained least squares has a negative coordinate, so the constraint binds.
    V = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 1.0]])
    rows = np.array([0, 0, 0, 2, 2, 2, 2])
    cols = np.array([0, 1, 2, 0, 1, 2, 3])
    values = np.array([3.0, 0.0, 1.0, 1.0, 2.0, 3.0, 4.0])
    X = observed_matrix(rows, cols, values, (3, 4))
    lam = 0.5
    U = nnls_users(X, V, lam)
    assert U.shape == (3, 2)
    assert U.min() >= 0
    np.testing.assert_array_equal(U[1], [0.0, 0.0])  # no stored entry
    np.testing.assert_allclose(U[0], _reference_nnls(values[:3], V[:3], lam), atol=1e-12)
    np.testing.assert_allclose(U[2], _reference_nnls(values[3:], V, lam), atol=1e-12)
    # By hand for row 0: the unconstrained ridge solution is negative in u_2, so u_2 = 0 and
    # u_1 = argmin (3 - u)^2 + (1 - u)^2 + lam u^2 = 4 / (2 + lam).
    unconstrained = np.linalg.solve(V[:3].T @ V[:3] + lam * np.eye(2), V[:3].T @ values[:3])
    assert unconstrained[1] < 0
    np.testing.assert_allclose(U[0], [4.0 / (2.0 + lam), 0.0], atol=1e-12)


def test_nnls_users_without_ridge_is_plain_least_squares_when_the_solution_is_positive() -> None:
    rng = np.random.default_rng(27)
    V = rng.uniform(0.1, 1.0, size=(10, 3))
    truth = np.array([[0.5, 1.0, 2.0], [1.5, 0.2, 0.7]])
    X = sp.csr_matrix(truth @ V.T)
    np.testing.assert_allclose(nnls_users(X, V, 0.0), truth, rtol=1e-9)
    # The ridge pulls toward zero: the solution is shorter.
    assert np.linalg.norm(nnls_users(X, V, 5.0), axis=1).max() < np.linalg.norm(truth, axis=1).min()
    ridge = nnls_users(X, V, 5.0)
    for row in range(2):
        np.testing.assert_allclose(ridge[row], _reference_nnls(truth[row] @ V.T, V, 5.0), atol=1e-10)


def test_nnls_users_uses_only_the_stored_items_of_each_row() -> None:
    V = np.array([[1.0], [2.0], [100.0]])
    X = observed_matrix(np.array([0, 0]), np.array([0, 1]), np.array([2.0, 4.0]), (1, 3))
    # Items 0 and 1 only: u = (1 * 2 + 2 * 4) / (1 + 4) = 2 exactly; item 2 (unobserved) must not pull it to 0.
    np.testing.assert_allclose(nnls_users(X, V, 0.0), [[2.0]], atol=1e-12)
    np.testing.assert_allclose(nnls_users(X, V, 1.0), [[10.0 / 6.0]], atol=1e-12)


def test_empty_matrices_start_from_tiny_factors() -> None:
    """No entry: the mean is taken as 0, so the initial factors are at most 2 sqrt(1e-12 / rank)."""
    bound = 2.0 * np.sqrt(1e-12 / 2)
    U, V = nmf_dense(np.random.default_rng(0), np.zeros((0, 4)), NMFHyper(2, 0.1, 0))
    assert U.shape == (0, 2) and V.shape == (4, 2) and 0 < V.max() <= bound
    U, V = nmf_dense(np.random.default_rng(0), np.zeros((0, 4)), NMFHyper(2, 0.1, 3))
    assert np.all(np.isfinite(V))
    U, V = nmf_observed(np.random.default_rng(0), sp.csr_matrix((3, 4)), NMFHyper(2, 0.1, 0))
    assert 0 < U.max() <= bound and 0 < V.max() <= bound
