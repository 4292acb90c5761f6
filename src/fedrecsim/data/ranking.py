"""Ribero et al.'s ranking metrics: mean percentile rank (eq. 4) and MAP@k (eqs. 5-6).

Both rank, for every test user, the items the user has no training entry for (the candidates: what a
recommender would recommend), by the model's scores. Ties are shared: an item tied with ``t`` others
sits in the middle of the tie.

* ``rank_ui`` is the percentile of test item ``i`` among user ``u``'s candidates: ``(number of
  candidates scored higher + half the ties) / (candidates - 1)``, 0 at the top and 1 at the bottom, so
  a random scoring has expectation 0.5. Eq. (4) averages it over the test entries weighted by their
  values ``x_ui`` (an entry of value 0 weighs nothing).
* ``AP@k(u) = sum_{i <= k} P@i rel(i) / |relevant(u)|`` with the relevant items the user's test
  entries of positive value and ``P@i`` the precision of the top ``i`` (eq. 5 with ``p(u, i)`` read as
  precision, as the text defines it); ``MAP@k`` is its mean over the test users with a relevant item.
  Top-``k`` ties break by item index.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedrecsim.data.ratings import IntArray, Ratings


def ranking_metrics(
    scores_of: Callable[[IntArray], np.ndarray], train: Ratings, test: Ratings, k: int = 10
) -> dict[str, float]:
    """``{"mean_rank": ..., "map@k": ...}`` of the scores ``scores_of(users) -> float[len(users), n_items]``.

    ``nan`` when the test set has no positive entry (nothing to rank).
    """
    users = np.unique(test.users)
    if not users.size:
        return {"mean_rank": float("nan"), f"map@{k}": float("nan")}
    scores = scores_of(users)
    train_index, test_index = train.by_user(), test.by_user()
    weighted = weight = 0.0
    precisions = []
    for row, user in enumerate(users):
        seen = train_index.items[train_index.indptr[user] : train_index.indptr[user + 1]]
        candidate = np.ones(train.n_items, dtype=bool)
        candidate[seen] = False
        candidate_scores = scores[row][candidate]
        start, stop = test_index.indptr[user], test_index.indptr[user + 1]
        items, values = test_index.items[start:stop], test_index.values[start:stop]
        item_scores = scores[row][items]
        higher = (candidate_scores[None, :] > item_scores[:, None]).sum(axis=1)
        ties = (candidate_scores[None, :] == item_scores[:, None]).sum(axis=1) - 1
        percentile = (higher + 0.5 * ties) / max(candidate_scores.size - 1, 1)
        weighted += float((values * percentile).sum())
        weight += float(values.sum())
        relevant = items[values > 0]
        if relevant.size:
            ranked = np.flatnonzero(candidate)[np.argsort(-candidate_scores, kind="stable")[:k]]
            hits = np.isin(ranked, relevant)
            precision_at = np.cumsum(hits) / np.arange(1, ranked.size + 1)
            precisions.append(float((precision_at * hits).sum() / relevant.size))
    return {
        "mean_rank": weighted / weight if weight > 0 else float("nan"),
        f"map@{k}": float(np.mean(precisions)) if precisions else float("nan"),
    }


def chance_ranking_metrics(train: Ratings, test: Ratings, k: int = 10) -> dict[str, float]:
    """The exact expectation of `ranking_metrics` under a uniformly random ranking of each user's candidates:
    ``{"mean_rank_chance": 0.5, "map@k_chance": ...}`` (``nan`` where `ranking_metrics` has no value).

    Every test item's percentile is uniform on its candidates' positions, mean 1/2. For a user with ``R``
    relevant items among ``C`` candidates, position ``i`` holds a relevant item with probability ``R / C``,
    and then the top ``i`` holds ``1 + (i - 1)(R - 1)/(C - 1)`` of them on average, so ``E[AP@k] = (1 / C)
    sum_{i <= min(k, C)} (1 + (i - 1)(R - 1) / (C - 1)) / i``.
    """
    users = np.unique(test.users)
    positive = test.values > 0
    if not users.size:
        return {"mean_rank_chance": float("nan"), f"map@{k}_chance": float("nan")}
    candidates = (train.n_items - train.user_counts()[users]).astype(np.float64)
    relevant = np.bincount(test.users[positive], minlength=train.n_users)[users].astype(np.float64)
    has = relevant > 0
    expected = []
    for c, r in zip(candidates[has], relevant[has]):
        i = np.arange(1, int(min(k, c)) + 1, dtype=np.float64)
        expected.append(float(np.sum((1 + (i - 1) * (r - 1) / max(c - 1, 1)) / i) / c))
    weighted = float(test.values.sum()) > 0
    return {
        "mean_rank_chance": 0.5 if weighted else float("nan"),
        f"map@{k}_chance": float(np.mean(expected)) if expected else float("nan"),
    }


__all__ = ["chance_ranking_metrics", "ranking_metrics"]
