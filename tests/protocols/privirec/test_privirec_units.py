"""PriviRec's local maths (`local`) and LightGCN-style evaluation (`evaluation`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedrecsim.data.metrics import ndcg_at_k, recall_at_k
from fedrecsim.data.ratings import Ratings
from fedrecsim.models.gfcf import inverse_sqrt, normalized_interactions, normalized_item_item
from fedrecsim.protocols.privirec import local
from fedrecsim.protocols.privirec.evaluation import evaluate, lightgcn_metrics, recommend, top_k


def _rows(seed: int = 0, n: int = 25, m: int = 15) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = [np.flatnonzero(rng.random(m) < 0.3) for _ in range(n)]
    rows[0] = np.empty(0, dtype=np.int64)
    return rows


def _matrix(rows: list[np.ndarray], m: int) -> sp.csr_matrix:
    dense = np.zeros((len(rows), m))
    for user, items in enumerate(rows):
        dense[user, items] = 1.0
    return sp.csr_matrix(dense)


def test_upper_triangle_positions_are_row_major() -> None:
    m = 5
    rows, columns = np.triu_indices(m)
    np.testing.assert_array_equal(local.upper_positions(rows, columns, m), np.arange(local.upper_length(m)))
    matrix = np.arange(25.0).reshape(5, 5)
    symmetric = matrix + matrix.T
    np.testing.assert_array_equal(local.symmetric_from_upper(symmetric[rows, columns], m), symmetric)


def test_the_users_inputs_sum_to_the_degrees_p_prime_and_p_tilde_x() -> None:
    m = 15
    rows = _rows(m=m)
    R = _matrix(rows, m)
    degrees = sum(local.degree_input(items, m) for items in rows)
    np.testing.assert_array_equal(degrees, np.asarray(R.sum(axis=0)).ravel())
    upper = sum(local.item_item_input(items, m) for items in rows)
    p_tilde = local.normalize_item_item(local.symmetric_from_upper(upper, m), degrees)
    np.testing.assert_allclose(p_tilde, normalized_item_item(R), atol=1e-14)
    X = np.linalg.qr(np.random.default_rng(1).standard_normal((m, 4)))[0]
    Y = sum(local.power_input(items, degrees, X) for items in rows)
    Rt = normalized_interactions(R)
    np.testing.assert_allclose(Y, Rt.T @ (Rt @ X), atol=1e-14)
    assert not np.any(local.power_input(rows[0], degrees, X))
    assert not np.any(local.item_item_input(rows[0], m))
    # A user's input is zero outside its items.
    assert set(np.flatnonzero(np.abs(local.power_input(rows[1], degrees, X)).sum(1))) <= set(rows[1].tolist())
    assert np.all(inverse_sqrt(np.array([0.0, 4.0])) == [0.0, 0.5])


def _ratings(pairs: list[tuple[int, int]], n: int, m: int) -> Ratings:
    users, items = zip(*pairs) if pairs else ((), ())
    return Ratings(np.array(users, dtype=np.int64), np.array(items, dtype=np.int64), np.ones(len(pairs)), n, m, (1.0, 1.0))


def test_top_k_excludes_cells_breaks_ties_by_index_and_pads() -> None:
    scores = np.array([[0.5, 0.9, 0.5, 0.1, 0.5], [1.0, 1.0, 1.0, 1.0, 1.0]])
    excluded = (np.array([0, 1, 1, 1]), np.array([1, 0, 1, 2]))
    assert top_k(scores, excluded, 3).tolist() == [[0, 2, 4], [3, 4, -1]]


def test_metrics_agree_with_fedrecsim_data_metrics() -> None:
    rng = np.random.default_rng(3)
    n, m = 30, 40
    cells = rng.permutation(n * m)[:300]
    pairs = [(int(c // m), int(c % m)) for c in cells]
    train, test = _ratings(pairs[:220], n, m), _ratings(pairs[220:], n, m)
    scores = np.round(rng.random((n, m)), 1)  # many ties
    ours = evaluate(lambda users: scores[users], train, test, 20)
    assert ours["ndcg@20"] == pytest.approx(ndcg_at_k(scores, test, train, [20])["ndcg@20"], abs=1e-12)
    users = np.flatnonzero(test.user_counts())
    assert test.user_counts()[users].max() <= 20  # then LightGCN's recall is Mult-VAE's
    assert ours["recall@20"] == pytest.approx(recall_at_k(scores, test, train, [20])["recall@20"], abs=1e-12)


def test_lightgcn_recall_divides_by_the_number_of_test_items() -> None:
    test = _ratings([(0, item) for item in range(4)] + [(1, 0)], 2, 10)
    recommended = np.array([[0, 9], [5, 0]])
    metrics = lightgcn_metrics(recommended, np.array([0, 1]), test, 2)
    assert metrics["recall@2"] == pytest.approx((1 / 4 + 1 / 1) / 2)
    ndcg_user0 = 1.0 / (1.0 + 1.0 / np.log2(3))
    ndcg_user1 = (1.0 / np.log2(3)) / 1.0
    assert metrics["ndcg@2"] == pytest.approx((ndcg_user0 + ndcg_user1) / 2)
    with pytest.raises(ValueError, match="test item"):
        lightgcn_metrics(recommended, np.array([0, 1]), _ratings([(0, 1)], 2, 10), 2)
    assert evaluate(lambda users: np.zeros((users.size, 10)), test, _ratings([], 2, 10)) == {}


def test_recommend_scores_in_blocks() -> None:
    train = _ratings([(0, 0), (1, 1)], 3, 4)
    scores = np.array([[4.0, 3.0, 2.0, 1.0]] * 3)
    calls = []

    def block(users: np.ndarray) -> np.ndarray:
        calls.append(users.tolist())
        return scores[users]

    assert recommend(block, train, np.array([0, 1, 2]), 2).tolist() == [[1, 2], [0, 2], [0, 1]]
    assert calls == [[0, 1, 2]]


def test_recommend_copies_a_read_only_or_integer_block_and_leaves_it_as_it_was() -> None:
    train = _ratings([(0, 0), (1, 1)], 2, 4)
    frozen = np.array([[4.0, 3.0, 2.0, 1.0]] * 2)
    frozen.flags.writeable = False
    assert recommend(lambda users: frozen[: users.size], train, np.array([0, 1]), 2).tolist() == [[1, 2], [0, 2]]
    integers = np.array([[4, 3, 2, 1]] * 2)
    assert recommend(lambda users: integers, train, np.array([0, 1]), 2).tolist() == [[1, 2], [0, 2]]
    assert integers.tolist() == [[4, 3, 2, 1]] * 2
