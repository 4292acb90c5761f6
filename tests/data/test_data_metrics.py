"""Metrics: exact values on hand-worked cases, sampling properties of the leave-one-out protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedrecsim.data import Ratings, error_summary, hit_rate_at_k, mae, ndcg_at_k, recall_at_k, rmse


def ratings(users: list[int], items: list[int], n_users: int, n_items: int) -> Ratings:
    return Ratings(np.array(users), np.array(items, dtype=np.int64), np.ones(len(users)), n_users, n_items, (0.0, 1.0))


def test_rmse_and_mae() -> None:
    assert rmse([1.0, 2.0, 3.0], [1.0, 4.0, 3.0]) == pytest.approx(math.sqrt(4 / 3))
    assert mae([1.0, 2.0, 3.0], [2.0, 4.0, 3.0]) == pytest.approx(1.0)
    assert isinstance(rmse([1.0], [1.0]), float)
    with pytest.raises(ValueError):
        rmse([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        mae([], [])


def test_error_summary() -> None:
    errors = np.arange(11, dtype=np.float64)
    summary = error_summary(errors)
    assert summary == {"err_mean": 5.0, "err_q25": 2.5, "err_q50": 5.0, "err_q75": 7.5, "err_q90": 9.0}
    assert all(type(value) is float for value in summary.values())
    with pytest.raises(ValueError):
        error_summary([-1.0])
    with pytest.raises(ValueError):
        error_summary([])


def loo_data(n_users: int = 300, n_items: int = 150) -> tuple[Ratings, Ratings]:
    """Every user trained on items u % 7 + (0, 10, 20) and holds out item (u * 13) % n_items + ... ."""
    train_u, train_i, test_u, test_i = [], [], [], []
    for u in range(n_users):
        base = u % 7
        train_u += [u, u, u]
        train_i += [base, base + 10, base + 20]
        test_u.append(u)
        test_i.append(30 + (u * 13) % (n_items - 30))
    return ratings(train_u, train_i, n_users, n_items), ratings(test_u, test_i, n_users, n_items)


def test_perfect_and_worst_scorers() -> None:
    train, test = loo_data()
    perfect = np.zeros((train.n_users, train.n_items))
    perfect[test.users, test.items] = 1.0
    assert hit_rate_at_k(perfect, test, train, [1, 10], rng=np.random.default_rng(0)) == {"hr@1": 1.0, "hr@10": 1.0}
    worst = -perfect
    result = hit_rate_at_k(worst, test, train, [1, 99, 100], rng=np.random.default_rng(0))
    assert result == {"hr@1": 0.0, "hr@99": 0.0, "hr@100": 1.0}


def test_constant_scorer_breaks_ties_at_random() -> None:
    # All 101 candidates tie, so the held-out item's rank is uniform: hr@10 ~ Binomial(n, 10/100) / n.
    # Two-sided binomial test with a fixed seed, rejecting only at p < 0.001.
    train, test = loo_data(n_users=2000)
    result = hit_rate_at_k(np.zeros((2000, 150)), test, train, [10], rng=np.random.default_rng(1))
    hits = round(result["hr@10"] * 2000)
    assert stats.binomtest(hits, 2000, 0.1).pvalue > 1e-3


def test_negatives_are_distinct_unseen_and_uniform() -> None:
    # Every user saw items 0-4 (4 in test); negatives must come from items 5-29, uniformly.
    n_users, n_items, n_negatives = 2000, 30, 10
    train = ratings(list(np.repeat(np.arange(n_users), 4)), list(np.tile(np.arange(4), n_users)), n_users, n_items)
    test = ratings(list(range(n_users)), [4] * n_users, n_users, n_items)
    seen: list[np.ndarray] = []

    def scores(users: np.ndarray, items: np.ndarray) -> np.ndarray:
        seen.append(items.copy())
        return np.zeros(items.shape)

    hit_rate_at_k(scores, test, train, [1], rng=np.random.default_rng(2), n_negatives=n_negatives)
    candidates = np.concatenate(seen)
    assert candidates.shape == (n_users, n_negatives + 1)
    assert np.all(candidates[:, 0] == 4)
    negatives = candidates[:, 1:]
    assert negatives.min() >= 5
    assert all(np.unique(row).size == n_negatives for row in negatives)
    # Chi-square goodness of fit against uniform over the 25 allowed items; reject only at p < 0.001.
    assert stats.chisquare(np.bincount(negatives.ravel(), minlength=n_items)[5:]).pvalue > 1e-3


def test_matrix_and_function_scores_agree() -> None:
    train, test = loo_data()
    matrix = np.random.default_rng(3).random((train.n_users, train.n_items))
    from_matrix = hit_rate_at_k(matrix, test, train, [5, 10], rng=np.random.default_rng(4))
    function = lambda u, i: matrix[u[:, None], i]  # noqa: E731
    from_function = hit_rate_at_k(function, test, train, [5, 10], rng=np.random.default_rng(4))
    assert from_matrix == from_function


def test_hit_rate_input_errors() -> None:
    train, test = loo_data(n_users=10, n_items=40)
    rng = np.random.default_rng(0)
    scores = np.zeros((10, 40))
    with pytest.raises(ValueError, match="cut-off"):
        hit_rate_at_k(scores, test, train, [0], rng=rng)
    with pytest.raises(ValueError, match="cut-off"):
        hit_rate_at_k(scores, test, train, [11], rng=rng, n_negatives=9)
    with pytest.raises(ValueError, match="negatives needed"):
        hit_rate_at_k(scores, test, train, [10], rng=rng)
    with pytest.raises(ValueError, match="shape"):
        hit_rate_at_k(np.zeros((3, 3)), test, train, [1], rng=rng, n_negatives=5)
    with pytest.raises(ValueError, match="finite"):
        hit_rate_at_k(np.full((10, 40), np.nan), test, train, [1], rng=rng, n_negatives=5)
    with pytest.raises(ValueError, match="empty"):
        hit_rate_at_k(scores, test.subset(np.zeros(len(test), dtype=bool)), train, [1], rng=rng, n_negatives=5)


def ranking_case() -> tuple[np.ndarray, Ratings, Ratings]:
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.5], [0.0, 0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]])
    train = ratings([0], [0], 3, 5)  # user 0's best-scored item is a training item: never ranked
    test = ratings([0, 0, 1], [2, 4, 0], 3, 5)  # user 2 has no test items: not evaluated
    return scores, train, test


def test_ndcg_by_hand() -> None:
    scores, train, test = ranking_case()
    # User 0 ranks 1, 2, 3, 4: hits at positions 1 and 3. User 1 ranks 4, then ties 0 < 1 < 2 < 3.
    user0_at2 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    user1_at2 = 1 / math.log2(3)
    user0_at10 = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    result = ndcg_at_k(scores, test, train, [2, 10])
    assert result["ndcg@2"] == pytest.approx((user0_at2 + user1_at2) / 2)
    assert result["ndcg@10"] == pytest.approx((user0_at10 + user1_at2) / 2)


def test_recall_by_hand() -> None:
    scores, train, test = ranking_case()
    result = recall_at_k(scores, test, train, [1, 2, 4])
    assert result == pytest.approx({"recall@1": 0.0, "recall@2": (0.5 + 1.0) / 2, "recall@4": 1.0})


def test_full_ranking_function_scores() -> None:
    scores, train, test = ranking_case()
    assert ndcg_at_k(lambda users: scores[users], test, train, [3]) == ndcg_at_k(scores, test, train, [3])
    with pytest.raises(ValueError, match="shape"):
        recall_at_k(lambda users: scores[users, :2], test, train, [3])
    with pytest.raises(ValueError, match="empty"):
        recall_at_k(scores, train.subset(np.zeros(1, dtype=bool)), train, [3])


def test_full_ranking_never_counts_a_training_item() -> None:
    scores, train, _ = ranking_case()
    # Item 0 is both trained on and (wrongly) held out for user 0: it must not count as a hit.
    test = ratings([0, 0], [0, 1], 3, 5)
    assert recall_at_k(scores, test, train, [5]) == {"recall@5": pytest.approx(0.5)}


def test_mae_averages_absolute_errors_so_opposite_errors_do_not_cancel() -> None:
    assert mae([1.0, -1.0], [0.0, 0.0]) == 1.0
    assert rmse([1.0, -1.0], [0.0, 0.0]) == 1.0


def test_recall_denominator_is_capped_at_k() -> None:
    # User 0 has three test items and ranks two of them first: recall@2 is 2 / min(2, 3) = 1, not 2 / 3.
    scores = np.array([[0.9, 0.8, 0.1, 0.7, 0.2]])
    train = ratings([0], [4], 1, 5)
    test = ratings([0, 0, 0], [0, 1, 2], 1, 5)
    assert recall_at_k(scores, test, train, [2, 3]) == {"recall@2": 1.0, "recall@3": pytest.approx(2 / 3)}
