"""Ribero et al.'s ranking metrics on hand-worked examples: the percentile rank of eq. (4) (ties share
the middle, weighted by the test values, training items excluded from the candidates) and MAP@k of
eqs. (5)-(6) (precision at each hit over the number of relevant items, top-k ties by item index)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fedrecsim.data.ranking import ranking_metrics
from fedrecsim.data.ratings import Ratings


def ratings(entries: list[tuple[int, int, float]], n_users: int, n_items: int) -> Ratings:
    users, items, values = (np.array(column) for column in zip(*entries, strict=True)) if entries else ([], [], [])
    return Ratings(np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64),
                   np.asarray(values, dtype=np.float64), n_users, n_items, (0.0, 5.0))


def fixed(table: dict[int, list[float]]):
    """A scorer returning the hand-written score row of each asked user, and recording the asks."""
    asked: list[list[int]] = []

    def scores_of(users: np.ndarray) -> np.ndarray:
        asked.append(users.tolist())
        return np.array([table[int(user)] for user in users], dtype=np.float64)

    scores_of.asked = asked  # type: ignore[attr-defined]
    return scores_of


def test_one_user_by_hand() -> None:
    # Item 0 is a training item (scored highest, but not a candidate); candidates 1..4 score 5, 6, 7, 1.
    # Test item 1 (value 2): items 2 and 3 score higher -> (2 + 0) / (4 - 1) = 2/3. Test item 3 (value 1):
    # nothing higher -> 0. Weighted: (2 * 2/3 + 1 * 0) / 3 = 4/9.
    # Ranking 3, 2, 1, 4: hits at positions 1 and 3: AP@3 = (1/1 + 2/3) / 2 = 5/6; AP@2 = (1/1) / 2.
    train = ratings([(0, 0, 4.0)], 1, 5)
    test = ratings([(0, 1, 2.0), (0, 3, 1.0)], 1, 5)
    scores = fixed({0: [9.0, 5.0, 6.0, 7.0, 1.0]})
    assert ranking_metrics(scores, train, test, k=3) == {"mean_rank": pytest.approx(4 / 9), "map@3": pytest.approx(5 / 6)}
    assert ranking_metrics(scores, train, test, k=2)["map@2"] == pytest.approx(0.5)
    assert ranking_metrics(scores, train, test, k=1)["map@1"] == pytest.approx(0.5)
    assert ranking_metrics(scores, train, test, k=10)["map@10"] == pytest.approx(5 / 6)
    assert set(ranking_metrics(scores, train, test)) == {"mean_rank", "map@10"}


def test_ties_share_the_middle_and_the_weights_are_the_values() -> None:
    # Five candidates (no training item): scores 3, 3, 3, 8, 0. Items 0-2 tie: each has one higher and
    # two ties -> (1 + 0.5 * 2) / 4 = 1/2. Item 4: four higher -> 1. Item 3: 0.
    train = ratings([], 1, 5)
    test = ratings([(0, 0, 1.0), (0, 4, 3.0), (0, 3, 0.0)], 1, 5)
    scores = fixed({0: [3.0, 3.0, 3.0, 8.0, 0.0]})
    result = ranking_metrics(scores, train, test, k=2)
    # The zero-valued test entry weighs nothing: (1 * 1/2 + 3 * 1) / 4 = 7/8.
    assert result["mean_rank"] == pytest.approx(7 / 8)
    # Relevant {0, 4} (item 3 has value 0). Top 2 by score, ties by index: 3, 0 -> one hit at 2: (1/2) / 2.
    assert result["map@2"] == pytest.approx(0.25)
    assert ranking_metrics(scores, train, test, k=5)["map@5"] == pytest.approx((1 / 2 + 2 / 5) / 2)


def test_training_items_are_not_candidates_even_when_scored_above_the_test_item() -> None:
    train = ratings([(0, 0, 5.0), (0, 1, 5.0)], 1, 4)
    test = ratings([(0, 2, 1.0)], 1, 4)
    scores = fixed({0: [10.0, 9.0, 2.0, 1.0]})
    result = ranking_metrics(scores, train, test, k=1)
    assert result == {"mean_rank": 0.0, "map@1": 1.0}
    worse = ranking_metrics(fixed({0: [10.0, 9.0, 1.0, 2.0]}), train, test, k=1)
    assert worse == {"mean_rank": 1.0, "map@1": 0.0}


def test_a_single_candidate_has_rank_zero() -> None:
    train = ratings([(0, 0, 5.0), (0, 1, 5.0)], 1, 3)
    test = ratings([(0, 2, 2.0)], 1, 3)
    assert ranking_metrics(fixed({0: [0.0, 0.0, -1.0]}), train, test, k=1) == {"mean_rank": 0.0, "map@1": 1.0}


def test_several_users_average_weighted_ranks_over_entries_and_ap_over_users_with_a_relevant_item() -> None:
    # Users 0 and 2 have test entries, user 1 none (not asked for); user 3's only test entry is 0.
    train = ratings([(0, 3, 1.0), (1, 0, 1.0), (2, 0, 2.0)], 4, 4)
    test = ratings([(0, 0, 1.0), (2, 1, 2.0), (2, 2, 2.0), (3, 1, 0.0)], 4, 4)
    scores = fixed({0: [1.0, 2.0, 3.0, 9.0], 2: [9.0, 1.0, 2.0, 3.0], 3: [0.0, 0.0, 0.0, 0.0]})
    result = ranking_metrics(scores, train, test, k=2)
    assert scores.asked == [[0, 2, 3]]
    # User 0: candidates 0, 1, 2 (scores 1, 2, 3): item 0 last -> 2 / 2 = 1 (weight 1).
    # User 2: candidates 1, 2, 3 (1, 2, 3): item 1 -> 1 (weight 2), item 2 -> 1/2 (weight 2).
    # User 3: item 1 ties all four -> 1.5 / 3, weight 0.
    assert result["mean_rank"] == pytest.approx((1 * 1 + 2 * 1 + 2 * 0.5) / 5)
    # AP@2: user 0 top 2 = 2, 1 -> no hit: 0. User 2 top 2 = 3, 2 -> hit at 2: (1/2) / 2. User 3 excluded.
    assert result["map@2"] == pytest.approx((0 + 0.25) / 2)


def test_an_empty_test_set_or_no_positive_entry_gives_nan() -> None:
    train = ratings([(0, 0, 1.0)], 2, 3)
    result = ranking_metrics(fixed({}), train, ratings([], 2, 3), k=4)
    assert set(result) == {"mean_rank", "map@4"} and all(math.isnan(value) for value in result.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mean of an empty list behind the nan
        zeros = ranking_metrics(fixed({1: [1.0, 2.0, 3.0]}), train, ratings([(1, 2, 0.0)], 2, 3), k=4)
    assert set(zeros) == {"mean_rank", "map@4"} and all(math.isnan(value) for value in zeros.values())


def test_random_scores_rank_in_the_middle_on_average() -> None:
    rng = np.random.default_rng(0)
    n_users, n_items = 200, 50
    entries = [(u, int(i), 1.0) for u in range(n_users) for i in rng.choice(n_items, 5, replace=False)]
    test = ratings(entries, n_users, n_items)
    train = ratings([], n_users, n_items)
    result = ranking_metrics(lambda users: rng.random((users.size, n_items)), train, test, k=10)
    # 1000 percentiles, each uniform on [0, 1] (sd 0.29): the mean's sd is 0.009; 0.04 is over 4 of them.
    assert result["mean_rank"] == pytest.approx(0.5, abs=0.04)
    # Perfect scores (the five test items tied on top): each shares the middle of the tie, 0.5 * 4 / 49;
    # every one of the top 5 is a hit, so AP = 1.
    perfect = np.zeros((n_users, n_items))
    perfect[test.users, test.items] = 1.0
    result = ranking_metrics(lambda users: perfect[users], train, test, k=10)
    assert result == {"mean_rank": pytest.approx(2 / 49), "map@10": 1.0}


def test_top_k_ties_break_by_item_index_among_many_candidates() -> None:
    # 300 items scored 0, -1 or -2 at random; the relevant item is the lowest-index item of the top
    # score, so it comes first only if ties keep item order (an unstable sort puts others first).
    rng = np.random.default_rng(1)
    row = -rng.integers(0, 3, 300).astype(float)
    top = int(np.flatnonzero(row == 0)[0])
    second = int(np.flatnonzero(row == 0)[1])
    test = ratings([(0, top, 1.0), (0, second, 1.0)], 1, 300)
    result = ranking_metrics(fixed({0: row.tolist()}), ratings([], 1, 300), test, k=2)
    assert result["map@2"] == 1.0
