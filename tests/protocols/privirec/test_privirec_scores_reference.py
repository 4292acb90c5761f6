"""The GF-CF and Turbo-CF scores and LightGCN's metrics against a dense reference written here from the
formulas (issue 32: the scores keep a user block sparse and fuse the filters into one dense product, which
must change neither the scores beyond rounding nor a single recommended list).

Reference: with v the item degrees, B the basis, B' its first ideal_k columns (all when 0) and t the
spectrum, P = R~^T R~ (exact form) or B Diag(t) B^T (PriviRec-k), F = V^{alpha-1} B' B'^T V^{1-alpha};
GF-CF is R (P + gamma F), Turbo-CF R sum_j c_j Pbar^j with Pbar = P raised element-wise to ``power``.
Tolerance: 1e-9 of the block's largest score (the products only regroup float64 sums).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedrecsim.data.ratings import Ratings
from fedrecsim.models.gfcf import TURBO_FILTERS, GFCFHyper, fit_gfcf, interaction_matrix
from fedrecsim.protocols.privirec import evaluation
from fedrecsim.protocols.privirec.evaluation import evaluate

N_USERS, N_ITEMS = 70, 48


def _split(seed: int) -> tuple[Ratings, Ratings]:
    rng = np.random.default_rng(seed)
    dense = rng.random((N_USERS, N_ITEMS)) < rng.uniform(0.05, 0.35, N_ITEMS)  # items of unequal popularity
    dense[0] = False  # a user without interactions
    dense[:, 5] = False  # an item without interactions
    in_test = dense & (rng.random(dense.shape) < 0.25)

    def ratings(mask: np.ndarray) -> Ratings:
        users, items = np.nonzero(mask)
        return Ratings(users, items, np.ones(users.size), N_USERS, N_ITEMS, (1.0, 1.0))

    return ratings(dense & ~in_test), ratings(in_test)


def _degree_power(degrees: np.ndarray, exponent: float) -> np.ndarray:
    return np.array([d**exponent if d > 0 else 0.0 for d in degrees])


def _item_item(dense: np.ndarray, filters, alpha: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    if filters.spectrum is not None:
        return filters.basis @ np.diag(filters.spectrum) @ filters.basis.T
    normalized = np.diag(_degree_power(dense.sum(1), -alpha)) @ dense @ np.diag(_degree_power(dense.sum(0), alpha - 1))
    return normalized.T @ normalized


def _ideal(dense: np.ndarray, basis: np.ndarray, ideal_k: int, alpha: float) -> np.ndarray:
    columns = basis[:, :ideal_k] if ideal_k else basis
    degrees = dense.sum(0)
    return np.diag(_degree_power(degrees, alpha - 1)) @ columns @ columns.T @ np.diag(_degree_power(degrees, 1 - alpha))


def _reference(dense: np.ndarray, filters, scorer: str, alpha: float, ideal_k: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    P = _item_item(dense, filters, alpha)
    if scorer == "gfcf":
        return dense @ (P + 0.3 * _ideal(dense, filters.basis, ideal_k, alpha))
    name, filter_, power = scorer.split(":")
    bar = P ** float(power)
    polynomial = sum(c * np.linalg.matrix_power(bar, j + 1) for j, c in enumerate(TURBO_FILTERS[int(filter_)]))
    return dense @ polynomial


def _scores(filters, scorer: str):  # type: ignore[no-untyped-def]
    if scorer == "gfcf":
        return lambda rows: filters.gfcf_scores(rows, 0.3)
    _, filter_, power = scorer.split(":")
    return lambda rows: filters.turbo_scores(rows, int(filter_), float(power))


CASES = [
    (low_rank, alpha, ideal_k, scorer)
    for low_rank in (False, True)
    for alpha in (0.5, 0.6)
    for ideal_k in (0, 3)
    for scorer in ("gfcf", "turbo:1:1", "turbo:2:1", "turbo:3:1", *(() if low_rank else ("turbo:2:0.7",)))
]


@pytest.mark.parametrize(("low_rank", "alpha", "ideal_k", "scorer"), CASES)
def test_scores_of_sparse_and_dense_blocks_equal_the_dense_formula(low_rank: bool, alpha: float, ideal_k: int, scorer: str) -> None:
    train, _ = _split(1)
    R = interaction_matrix(train)
    filters = fit_gfcf(R, GFCFHyper(k=6, iterations=3, low_rank=low_rank, ideal_k=ideal_k, alpha=alpha), np.random.default_rng(2))
    dense = R.toarray()
    expected = _reference(dense, filters, scorer, alpha, ideal_k)
    score = _scores(filters, scorer)
    tolerance = 1e-9 * np.abs(expected).max()
    for block in (np.arange(N_USERS), np.array([3, 0, 17]), np.array([9])):
        np.testing.assert_allclose(score(R[block]), expected[block], rtol=0, atol=tolerance)
        np.testing.assert_allclose(score(dense[block]), expected[block], rtol=0, atol=tolerance)
    np.testing.assert_allclose(score(sp.csr_matrix(dense[4:5], dtype=np.int8)), expected[4:5], rtol=0, atol=tolerance)
    np.testing.assert_allclose(score(dense[4]), expected[4:5], rtol=0, atol=tolerance)
    assert np.all(score(R[[0]]) == 0)  # no interactions, no scores


def _metrics_by_formula(scores: np.ndarray, train: Ratings, test: Ratings, k: int) -> dict[str, float]:
    """Every row sorted whole by (score descending, item ascending) without its training items."""
    recalls, ndcgs = [], []
    for user in range(train.n_users):
        relevant = set(test.user_items(user).tolist())
        if not relevant:
            continue
        seen = set(train.user_items(user).tolist())
        ranked = sorted((-scores[user, item], item) for item in range(train.n_items) if item not in seen)
        hits = [item in relevant for _, item in ranked[:k]]
        dcg = sum(1.0 / np.log2(rank + 2) for rank, hit in enumerate(hits) if hit)
        idcg = sum(1.0 / np.log2(rank + 2) for rank in range(min(k, len(relevant))))
        recalls.append(sum(hits) / len(relevant))
        ndcgs.append(dcg / idcg)
    return {f"recall@{k}": float(np.mean(recalls)), f"ndcg@{k}": float(np.mean(ndcgs))}


@pytest.mark.parametrize(("low_rank", "scorer"), [(False, "gfcf"), (True, "gfcf"), (False, "turbo:2:1"), (True, "turbo:3:1")])
@pytest.mark.parametrize("k", [5, 20])
def test_metrics_in_several_blocks_equal_the_dense_reference(monkeypatch: pytest.MonkeyPatch, low_rank: bool, scorer: str, k: int) -> None:
    monkeypatch.setattr(evaluation, "_CELLS_PER_BLOCK", 11 * N_ITEMS)  # blocks of 11 users
    train, test = _split(4)
    R = interaction_matrix(train)
    filters = fit_gfcf(R, GFCFHyper(k=8, iterations=2, low_rank=low_rank), np.random.default_rng(0))
    score = _scores(filters, scorer)
    expected = _metrics_by_formula(_reference(R.toarray(), filters, scorer, 0.5, 0), train, test, k)
    ours = evaluate(lambda users: score(R[users]), train, test, k)
    assert ours == pytest.approx(expected, rel=1e-9, abs=0)
