"""Metrics: exact values on hand-worked cases, sampling properties of the leave-one-out protocol."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats

from fedrecsim.data import Ratings, error_summary, hit_rate_at_k, item_mean_predictor_errors, mae, ndcg_at_k, recall_at_k, rmse


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


def exactly(message: str) -> pytest.RaisesExc[ValueError]:
    """pytest.raises for a ValueError whose whole message is ``message``."""
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


def test_rmse_mae_and_error_summary_convert_like_numpy_float64() -> None:
    # Numeric text (as read from a CSV) is converted like np.asarray(..., dtype=float64) converts it.
    errors = [3.0 - 1.0, 5.0 - 5.0, 0.5 - 2.0]
    assert rmse(["3", "5", "0.5"], [1.0, 5.0, 2.0]) == pytest.approx(math.sqrt(sum(e * e for e in errors) / 3))
    assert mae([3.0, 5.0, 0.5], ["1", "5", "2"]) == pytest.approx(sum(abs(e) for e in errors) / 3)
    assert mae(["3", "5", "0.5"], [1.0, 5.0, 2.0]) == pytest.approx(3.5 / 3)
    assert rmse([3.0, 5.0, 0.5], ["1", "5", "2"]) == pytest.approx(math.sqrt(6.25 / 3))
    assert error_summary(["0", "4"]) == {"err_mean": 2.0, "err_q25": 1.0, "err_q50": 2.0, "err_q75": 3.0, "err_q90": 3.6}


def test_rating_metric_error_messages() -> None:
    with exactly("need two non-empty 1-D arrays of equal length, got shapes (2,) and (1,)"):
        rmse([1.0, 2.0], [1.0])
    with exactly("abs_errors must be a non-empty 1-D array, got shape (0,)"):
        error_summary([])
    with exactly("abs_errors must be finite and non-negative"):
        error_summary([1.0, -0.5])
    with exactly("abs_errors must be finite and non-negative"):
        error_summary([1.0, math.inf])


def test_ranking_input_error_messages() -> None:
    train, test = loo_data(n_users=10, n_items=40)
    rng = np.random.default_rng(0)
    scores = np.zeros((10, 40))
    other = ratings([0], [0], 11, 40)
    with exactly("test is 10 x 40 but train is 11 x 40"):
        hit_rate_at_k(scores, test, other, [1], rng=rng, n_negatives=5)
    with exactly("test is 10 x 40 but train is 11 x 40"):
        ndcg_at_k(scores, test, other, [1])
    with exactly("k_list is empty"):
        hit_rate_at_k(scores, test, train, [], rng=rng, n_negatives=5)
    with exactly("k_list is empty"):
        recall_at_k(scores, test, train, [])
    with exactly("cut-off 11 must be an integer in 1..10"):
        hit_rate_at_k(scores, test, train, [1, 11], rng=rng, n_negatives=9)
    with exactly("cut-off 0 must be an integer in >= 1"):
        ndcg_at_k(scores, test, train, [0])
    with exactly("cut-off 2.5 must be an integer in >= 1"):
        recall_at_k(scores, test, train, [2.5])  # type: ignore[list-item]
    with exactly("cut-off True must be an integer in 1..6"):
        hit_rate_at_k(scores, test, train, [True], rng=rng, n_negatives=5)  # type: ignore[list-item]
    with exactly("the test set is empty"):
        hit_rate_at_k(scores, test.subset(np.zeros(len(test), dtype=bool)), train, [1], rng=rng, n_negatives=5)
    with exactly("the test set is empty"):
        ndcg_at_k(scores, test.subset(np.zeros(len(test), dtype=bool)), train, [1])
    for bad in (0, -1, 2.5, True):
        with exactly(f"n_negatives must be a positive integer, got {bad!r}"):
            hit_rate_at_k(scores, test, train, [1], rng=rng, n_negatives=bad)  # type: ignore[arg-type]
    with exactly("scores must be finite"):
        hit_rate_at_k(np.full((10, 40), np.inf), test, train, [1], rng=rng, n_negatives=5)
    with exactly("scores must be finite"):
        ndcg_at_k(np.full((10, 40), np.nan), test, train, [1])
    with exactly("scores must be finite"):
        recall_at_k(lambda users: np.full((users.size, 40), np.nan), test, train, [1])
    with exactly("the score function returned shape (10, 5), expected (10, 6)"):
        hit_rate_at_k(lambda u, i: np.zeros((u.size, 5)), test, train, [1], rng=rng, n_negatives=5)


def test_too_few_items_to_sample_names_the_user_and_the_count() -> None:
    # n_items 4: user 0 trained on item 0 and holds out item 1, so exactly items 2 and 3 are left.
    # User 0 has the smallest pair key of all, so it must count like any other.
    train = ratings([0, 1], [0, 3], 2, 4)
    test = ratings([0, 1], [1, 2], 2, 4)
    scores = np.zeros((2, 4))
    with exactly("user 0 has only 2 items without an entry; 3 negatives needed"):
        hit_rate_at_k(scores, test, train, [1], rng=np.random.default_rng(0), n_negatives=3)
    # Exactly as many items as negatives is enough: the negatives are then exactly those items.
    seen: list[np.ndarray] = []

    def record(users: np.ndarray, items: np.ndarray) -> np.ndarray:
        seen.append(items.copy())
        return np.zeros(items.shape)

    for seed in range(20):
        hit_rate_at_k(record, test, train, [1], rng=np.random.default_rng(seed), n_negatives=2)
    candidates = np.concatenate(seen)
    assert all(sorted(row[1:]) == [2, 3] for row in candidates[::2])  # user 0
    assert all(sorted(row[1:]) == [0, 1] for row in candidates[1::2])  # user 1
    # A later user is named when it is the only short one.
    train = ratings([0, 1, 1], [0, 0, 3], 2, 4)
    with exactly("user 1 has only 1 items without an entry; 2 negatives needed"):
        hit_rate_at_k(scores, test, train, [1], rng=np.random.default_rng(0), n_negatives=2)


def test_every_unseen_item_can_be_a_negative_including_the_first_and_last() -> None:
    # Each user holds out item 5 and trained on nothing else: negatives come from items 0-4 and 6-9.
    n_users = 200
    test = ratings(list(range(n_users)), [5] * n_users, n_users, 10)
    train = test.subset(np.zeros(n_users, dtype=bool))
    seen: list[np.ndarray] = []

    def record(users: np.ndarray, items: np.ndarray) -> np.ndarray:
        seen.append(items.copy())
        return np.zeros(items.shape)

    hit_rate_at_k(record, test, train, [1], rng=np.random.default_rng(5), n_negatives=3)
    negatives = np.concatenate(seen)[:, 1:]
    assert set(np.unique(negatives)) == {0, 1, 2, 3, 4, 6, 7, 8, 9}


@pytest.mark.parametrize("n_negatives", [1, 2, 3, 4])
def test_few_negatives_tie_at_random(n_negatives: int) -> None:
    # A constant scorer ties the held-out item with all n negatives: its rank is uniform on 0..n, so
    # hr@1 ~ Binomial(users, 1 / (n + 1)) / users. Two-sided binomial test, rejecting at p < 0.001.
    train, test = loo_data(n_users=1000)
    result = hit_rate_at_k(np.zeros((1000, 150)), test, train, [1], rng=np.random.default_rng(6), n_negatives=n_negatives)
    hits = round(result["hr@1"] * 1000)
    assert stats.binomtest(hits, 1000, 1 / (n_negatives + 1)).pvalue > 1e-3


def test_one_negative_ranks_the_pair() -> None:
    train, test = loo_data(n_users=50)
    better = np.zeros((50, 150))
    better[test.users, test.items] = 1.0
    assert hit_rate_at_k(better, test, train, [1, 2], rng=np.random.default_rng(7), n_negatives=1) == {
        "hr@1": 1.0,
        "hr@2": 1.0,
    }
    assert hit_rate_at_k(-better, test, train, [1, 2], rng=np.random.default_rng(7), n_negatives=1) == {
        "hr@1": 0.0,
        "hr@2": 1.0,
    }


def test_full_ranking_ties_rank_the_lower_item_first_in_long_lists() -> None:
    # One user, 40 items all scored alike: the ranking is 0, 1, 2, ... (minus the training items).
    n_items = 40
    scores = np.zeros((1, n_items))
    train = ratings([0], [1], 1, n_items)
    test = ratings([0, 0, 0], [0, 2, 3], 1, n_items)
    assert recall_at_k(scores, test, train, [3]) == {"recall@3": 1.0}
    assert ndcg_at_k(scores, test, train, [3]) == {"ndcg@3": pytest.approx(1.0)}
    # Held-out items at the end of the tie rank last: ideal DCG@3 vs. hits at positions 36..38.
    test = ratings([0, 0, 0], [37, 38, 39], 1, n_items)
    assert recall_at_k(scores, test, train, [3, 36, 39]) == pytest.approx(
        {"recall@3": 0.0, "recall@36": 0.0, "recall@39": 1.0}
    )
    ideal = sum(1 / math.log2(r + 2) for r in range(3))
    dcg = sum(1 / math.log2(r + 2) for r in (36, 37, 38))
    assert ndcg_at_k(scores, test, train, [39]) == {"ndcg@39": pytest.approx(dcg / ideal)}


def test_full_ranking_accepts_integer_scores_from_a_function() -> None:
    # A popularity scorer returns counts (integers); the training items must still be excluded.
    scores, train, test = ranking_case()
    counts = np.array([[9, 8, 7, 6, 5], [0, 0, 0, 0, 1], [1, 1, 1, 1, 1]])
    by_function = recall_at_k(lambda users: counts[users], test, train, [1, 2, 4])
    assert by_function == pytest.approx({"recall@1": 0.0, "recall@2": (0.5 + 1.0) / 2, "recall@4": 1.0})
    assert ndcg_at_k(lambda users: counts[users], test, train, [2]) == ndcg_at_k(scores, test, train, [2])


def test_full_ranking_scores_each_user_once_in_bounded_batches() -> None:
    scores, train, test = ranking_case()
    asked: list[list[int]] = []

    def record(users: np.ndarray) -> np.ndarray:
        asked.append(users.tolist())
        return scores[users]

    ndcg_at_k(record, test, train, [2])
    assert asked == [[0, 1]]  # user 2 has no test item: never scored
    # A row of more than 2^20 items leaves room for one user per call (about 2^21 cells a batch).
    n_items = (1 << 20) + 1
    big_test = ratings([0, 1, 2], [0, 1, 2], 3, n_items)
    big_train = big_test.subset(np.zeros(3, dtype=bool))
    asked.clear()

    def constant(users: np.ndarray) -> np.ndarray:
        asked.append(users.tolist())
        return np.zeros((users.size, n_items))

    assert recall_at_k(constant, big_test, big_train, [3]) == {"recall@3": 1.0}
    assert asked == [[0], [1], [2]]


def test_full_ranking_ties_follow_item_order_for_many_users_and_tie_groups() -> None:
    # Scores from {0, 1, 2}: big tie groups. By definition the ranking is sorted by (-score, item); each
    # user holds out exactly the first 5 (after a few training items), so recall@5 and ndcg@5 are 1, and
    # the next 5 of the order make them 0.
    rng = np.random.default_rng(8)
    n_users, n_items = 20, 100
    scores = rng.integers(0, 3, size=(n_users, n_items)).astype(np.float64)
    train_u, train_i, first_u, first_i, next_u, next_i = [], [], [], [], [], []
    for u in range(n_users):
        trained = rng.choice(n_items, size=3, replace=False).tolist()
        order = [i for i in sorted(range(n_items), key=lambda i: (-scores[u, i], i)) if i not in trained]
        train_u += [u] * 3
        train_i += trained
        first_u += [u] * 5
        first_i += order[:5]
        next_u += [u] * 5
        next_i += order[5:10]
    train = ratings(train_u, train_i, n_users, n_items)
    first = ratings(first_u, first_i, n_users, n_items)
    after = ratings(next_u, next_i, n_users, n_items)
    assert recall_at_k(scores, first, train, [5]) == {"recall@5": 1.0}
    assert ndcg_at_k(scores, first, train, [5]) == {"ndcg@5": pytest.approx(1.0)}
    assert recall_at_k(scores, after, train, [5, 10]) == {"recall@5": 0.0, "recall@10": 1.0}


def test_item_mean_predictor_predicts_each_items_training_mean_and_the_global_mean_for_an_unrated_item() -> None:
    # Item 0 has training ratings 1 and 3 (mean 2), item 1 has 5; item 2 has none: the training mean 3.
    train = Ratings(np.array([0, 1, 2]), np.array([0, 0, 1]), np.array([1.0, 3.0, 5.0]), 3, 3, (1.0, 5.0))
    test = Ratings(np.array([0, 1]), np.array([1, 2]), np.array([4.0, 1.0]), 3, 3, (1.0, 5.0))
    errors = item_mean_predictor_errors(train, test)
    assert errors == {
        "train_rmse_item_mean_predictor": pytest.approx(math.sqrt(2 / 3)),
        "train_mae_item_mean_predictor": pytest.approx(2 / 3),
        "test_rmse_item_mean_predictor": pytest.approx(math.sqrt((1 + 4) / 2)),
        "test_mae_item_mean_predictor": pytest.approx(1.5),
    }
    empty = Ratings(np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([]), 3, 3, (1.0, 5.0))
    assert set(item_mean_predictor_errors(train, empty)) == {"train_rmse_item_mean_predictor", "train_mae_item_mean_predictor"}
