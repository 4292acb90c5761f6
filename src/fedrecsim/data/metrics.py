"""Evaluation metrics, named as in docs/architecture.md ("Metric names") and returned as plain Python floats.

Rating prediction: `rmse`, `mae`, and `error_summary` (the distribution of absolute errors, which is
how Hua et al. report accuracy). Ranking: `hit_rate_at_k` (leave-one-out, the held-out item ranked
against sampled negatives, as Minto et al. and the NCF line of work evaluate), `ndcg_at_k` and
`recall_at_k` (full ranking of every item the user did not train on, as Mult-VAE and its successors
evaluate).

Scores for ranking come either as a dense ``float[n_users, n_items]`` matrix or as a function, so a
factor model never has to materialise the full matrix: see each function for the function's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from fedrecsim.data.ratings import FloatArray, IntArray, Ratings, UserIndex

SampledScores = Callable[[IntArray, IntArray], FloatArray]
FullScores = Callable[[IntArray], FloatArray]

# Rows of candidates scored per batch, to bound memory at about this many cells.
_CELLS_PER_BATCH = 1 << 21


def rmse(predicted: npt.ArrayLike, actual: npt.ArrayLike) -> float:
    """Root mean squared error of two equally long, non-empty arrays."""
    error = _errors(predicted, actual)
    return float(np.sqrt(np.mean(error * error)))


def mae(predicted: npt.ArrayLike, actual: npt.ArrayLike) -> float:
    """Mean absolute error of two equally long, non-empty arrays."""
    return float(np.mean(np.abs(_errors(predicted, actual))))


def rating_errors(predicted: npt.ArrayLike, actual: npt.ArrayLike, scale: tuple[float, float], split: str) -> dict[str, float]:
    """``{split}_rmse`` and ``{split}_mae`` of the predictions, and ``{split}_rmse_clipped`` /
    ``{split}_mae_clipped`` of the predictions clipped to the rating ``scale`` ``(low, high)``.

    Clipping is post-processing of the released model with a public bound (the data's declared scale),
    so it costs no privacy; it can only lower either error, since every actual rating lies in the scale.
    """
    values = np.asarray(predicted, dtype=np.float64)
    clipped = np.clip(values, scale[0], scale[1])
    return {
        f"{split}_rmse": rmse(values, actual),
        f"{split}_mae": mae(values, actual),
        f"{split}_rmse_clipped": rmse(clipped, actual),
        f"{split}_mae_clipped": mae(clipped, actual),
    }


def mean_predictor_errors(train: Ratings, test: Ratings) -> dict[str, float]:
    """The errors of the trivial predictor that predicts the training ratings' mean for every pair:
    ``train_rmse_mean_predictor`` (the training ratings' standard deviation), ``train_mae_mean_predictor``
    and, when ``test`` has entries, ``test_rmse_mean_predictor`` and ``test_mae_mean_predictor``."""
    mean = float(np.mean(train.values))
    metrics = {
        "train_rmse_mean_predictor": rmse(np.full(len(train), mean), train.values),
        "train_mae_mean_predictor": mae(np.full(len(train), mean), train.values),
    }
    if len(test):
        metrics["test_rmse_mean_predictor"] = rmse(np.full(len(test), mean), test.values)
        metrics["test_mae_mean_predictor"] = mae(np.full(len(test), mean), test.values)
    return metrics


def item_mean_predictor_errors(train: Ratings, test: Ratings) -> dict[str, float]:
    """The errors of the reference predictor that predicts, for every pair, its item's mean training rating
    (the training ratings' mean for an item without any): ``train_rmse_item_mean_predictor``,
    ``train_mae_item_mean_predictor`` and, when ``test`` has entries, the same two on ``test``."""
    counts = train.item_counts()
    sums = np.bincount(train.items, weights=train.values, minlength=train.n_items)
    means = np.full(train.n_items, float(np.mean(train.values)))
    rated = counts > 0
    means[rated] = sums[rated] / counts[rated]
    metrics = {
        "train_rmse_item_mean_predictor": rmse(means[train.items], train.values),
        "train_mae_item_mean_predictor": mae(means[train.items], train.values),
    }
    if len(test):
        metrics["test_rmse_item_mean_predictor"] = rmse(means[test.items], test.values)
        metrics["test_mae_item_mean_predictor"] = mae(means[test.items], test.values)
    return metrics


def random_ranking_expectation(
    test: Ratings, train: Ratings, k_list: Iterable[int], recall_by: str = "min"
) -> dict[str, float]:
    """The exact expected ``ndcg@K`` and ``recall@K`` of a uniformly random ranking of each test user's
    candidates (the items it has no training entry for), averaged over the users with test items: the
    trivial predictor of a full-ranking evaluation, as `ndcg_at_k` / `recall_at_k` (``recall_by = "min"``:
    hits over min(K, test items), Liang et al.) or LightGCN (``"count"``: hits over the test items) rank.

    A user with ``h`` test items among ``c`` candidates finds each of the first ``min(K, c)`` positions a
    hit with probability ``h / c``: E[hits@K] = min(K, c) h / c, E[DCG@K] = h / c sum_{r < min(K, c)}
    1 / log2(r + 2), and the ideal DCG is that of ``min(h, K)`` hits.

    Returns:
        ``{"ndcg@K_random": float, "recall@K_random": float}`` for each K; empty without test entries.
    """
    test_counts = test.user_counts()
    users = np.flatnonzero(test_counts)
    if not users.size:
        return {}
    relevant = test_counts[users].astype(np.float64)
    candidates = (train.n_items - train.user_counts()[users]).astype(np.float64)
    share = relevant / np.maximum(candidates, 1.0)
    discounts = 1.0 / np.log2(np.arange(train.n_items) + 2.0)
    cumulative = np.r_[0.0, np.cumsum(discounts)]
    result = {}
    for k in _cutoffs(k_list, None):
        depth = min(k, train.n_items)
        reach = np.minimum(depth, candidates).astype(np.int64)
        ideal = cumulative[np.minimum(relevant, depth).astype(np.int64)]
        result[f"ndcg@{k}_random"] = float(np.mean(share * cumulative[reach] / ideal))
        denominator = np.minimum(relevant, depth) if recall_by == "min" else relevant
        result[f"recall@{k}_random"] = float(np.mean(share * reach / denominator))
    return result


def error_summary(abs_errors: npt.ArrayLike) -> dict[str, float]:
    """Mean and quartiles (plus the 90th percentile) of absolute errors.

    Returns:
        ``{"err_mean", "err_q25", "err_q50", "err_q75", "err_q90"}``; quantiles interpolate linearly.
    """
    errors = np.asarray(abs_errors, dtype=np.float64)
    if errors.ndim != 1 or not errors.size:
        raise ValueError(f"abs_errors must be a non-empty 1-D array, got shape {errors.shape}")
    if not np.all(np.isfinite(errors)) or np.any(errors < 0):
        raise ValueError("abs_errors must be finite and non-negative")
    q25, q50, q75, q90 = np.quantile(errors, [0.25, 0.5, 0.75, 0.9])
    return {
        "err_mean": float(errors.mean()),
        "err_q25": float(q25),
        "err_q50": float(q50),
        "err_q75": float(q75),
        "err_q90": float(q90),
    }


def hit_rate_at_k(
    scores: npt.ArrayLike | SampledScores,
    test: Ratings,
    train: Ratings,
    k_list: Iterable[int],
    *,
    rng: np.random.Generator,
    n_negatives: int = 99,
) -> dict[str, float]:
    """Leave-one-out hit rate: is each held-out item among the top K of itself plus sampled negatives?

    For every test entry ``(u, i)``, ``n_negatives`` distinct items that ``u`` has no entry for (in
    train or test) are drawn uniformly; ``i`` is ranked among the ``n_negatives + 1`` candidates by
    score, a tie with a negative broken uniformly at random (so a constant scorer scores ``K / (n + 1)``
    on average, not 0 or 1). ``hr@K`` is the fraction of test entries ranked within the top ``K``.

    Args:
        scores: ``float[n_users, n_items]``, or ``f(users: int64[b], items: int64[b, c]) ->
            float[b, c]`` scoring item ``items[r, s]`` for user ``users[r]``.
        test: The held-out entries (usually one per user, from `leave_one_out`).
        train: The training entries; with ``test``, what counts as interacted.
        k_list: Cut-offs K, each in ``1..n_negatives + 1``.
        rng: Draws the negatives and breaks ties.
        n_negatives: Negatives per test entry.

    Returns:
        ``{"hr@K": float}`` for each K.

    Raises:
        ValueError: inconsistent shapes, a cut-off out of range, non-finite scores, an empty test
            set, or a test user with fewer than ``n_negatives`` items left to sample.
    """
    _check_pair(test, train)
    if not len(test):
        raise ValueError("the test set is empty")
    if isinstance(n_negatives, bool) or not isinstance(n_negatives, (int, np.integer)) or n_negatives < 1:
        raise ValueError(f"n_negatives must be a positive integer, got {n_negatives!r}")
    cutoffs = _cutoffs(k_list, n_negatives + 1)
    negatives = _sample_negatives(test, train, n_negatives, rng)
    candidates = np.concatenate([test.items[:, None], negatives], axis=1)
    candidate_scores = _score_candidates(scores, test.users, candidates, test.n_users, test.n_items)
    positive = candidate_scores[:, :1]
    above = (candidate_scores[:, 1:] > positive).sum(axis=1)
    tied = (candidate_scores[:, 1:] == positive).sum(axis=1)
    rank = above + rng.integers(0, tied + 1)
    return {f"hr@{k}": float(np.mean(rank < k)) for k in cutoffs}


def ndcg_at_k(
    scores: npt.ArrayLike | FullScores, test: Ratings, train: Ratings, k_list: Iterable[int]
) -> dict[str, float]:
    """Normalized discounted cumulative gain of the full ranking, averaged over users with test items.

    Each user's items are ranked by score with the user's training items removed; relevance is 1 for
    the user's test items. ``DCG@K = sum_{r < K} rel_r / log2(r + 2)``, divided by the best possible
    DCG@K for the user's number of test items. Ties rank the lower item index first.

    Args:
        scores: ``float[n_users, n_items]``, or ``f(users: int64[b]) -> float[b, n_items]``.
        test: The held-out entries (any number per user).
        train: The training entries, excluded from each user's ranking.
        k_list: Cut-offs K >= 1 (capped at ``n_items``).

    Returns:
        ``{"ndcg@K": float}`` for each K.
    """
    cutoffs, hits, n_relevant = _full_ranking_hits(scores, test, train, k_list)
    discounts = 1.0 / np.log2(np.arange(hits.shape[1]) + 2.0)
    ideal_cumulative = np.cumsum(discounts)
    result = {}
    for k in cutoffs:
        depth = min(k, hits.shape[1])
        dcg = hits[:, :depth] @ discounts[:depth]
        idcg = ideal_cumulative[np.minimum(n_relevant, depth) - 1]
        result[f"ndcg@{k}"] = float(np.mean(dcg / idcg))
    return result


def recall_at_k(
    scores: npt.ArrayLike | FullScores, test: Ratings, train: Ratings, k_list: Iterable[int]
) -> dict[str, float]:
    """Recall of the full ranking, normalised by ``min(K, number of test items)``, averaged over users.

    The normalisation is Liang et al.'s (Mult-VAE): a user with more than K test items can still
    reach 1. Ranking, exclusion of training items and ties as in `ndcg_at_k`.

    Returns:
        ``{"recall@K": float}`` for each K.
    """
    cutoffs, hits, n_relevant = _full_ranking_hits(scores, test, train, k_list)
    cumulative_hits = np.cumsum(hits, axis=1)
    result = {}
    for k in cutoffs:
        depth = min(k, hits.shape[1])
        result[f"recall@{k}"] = float(np.mean(cumulative_hits[:, depth - 1] / np.minimum(n_relevant, depth)))
    return result


def _errors(predicted: npt.ArrayLike, actual: npt.ArrayLike) -> FloatArray:
    p = np.asarray(predicted, dtype=np.float64)
    a = np.asarray(actual, dtype=np.float64)
    if p.ndim != 1 or p.shape != a.shape or not p.size:
        raise ValueError(f"need two non-empty 1-D arrays of equal length, got shapes {p.shape} and {a.shape}")
    return p - a


def _check_pair(test: Ratings, train: Ratings) -> None:
    if (test.n_users, test.n_items) != (train.n_users, train.n_items):
        raise ValueError(
            f"test is {test.n_users} x {test.n_items} but train is {train.n_users} x {train.n_items}"
        )


def _cutoffs(k_list: Iterable[int], limit: int | None) -> list[int]:
    cutoffs = list(k_list)
    if not cutoffs:
        raise ValueError("k_list is empty")
    for k in cutoffs:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or (limit is not None and k > limit):
            bound = f"1..{limit}" if limit is not None else ">= 1"
            raise ValueError(f"cut-off {k!r} must be an integer in {bound}")
    return [int(k) for k in cutoffs]


def _sample_negatives(test: Ratings, train: Ratings, n_negatives: int, rng: np.random.Generator) -> IntArray:
    """``int64[len(test), n_negatives]``: per test entry, distinct items its user has no entry for."""
    n_items = test.n_items
    interacted = np.sort(np.concatenate([train.pair_keys(), test.pair_keys()]))
    interacted = interacted[np.concatenate([[True], np.diff(interacted) != 0])]
    per_user = np.bincount(interacted // n_items, minlength=test.n_users)
    short = np.flatnonzero(n_items - per_user[test.users] < n_negatives)
    if short.size:
        user = int(test.users[short[0]])
        raise ValueError(
            f"user {user} has only {n_items - per_user[user]} items without an entry; {n_negatives} negatives needed"
        )
    result = np.empty((len(test), n_negatives), dtype=np.int64)
    rows = max(1, _CELLS_PER_BATCH // (2 * n_negatives))
    for start in range(0, len(test), rows):
        block = slice(start, min(start + rows, len(test)))
        result[block] = _negatives_of(test.users[block], interacted, n_items, n_negatives, rng)
    return result


def _negatives_of(
    users: IntArray, interacted: IntArray, n_items: int, n_negatives: int, rng: np.random.Generator
) -> IntArray:
    """One row of distinct negatives per user in ``users`` (each known to have enough to draw from)."""
    result = np.empty((users.size, n_negatives), dtype=np.int64)
    pending = np.arange(users.size)
    draws = 2 * n_negatives + 8
    while pending.size:
        # Draw with replacement, drop interacted items and repeats (keeping first draws), and keep the
        # first n_negatives survivors: a uniform sample without replacement of the allowed items. Rows
        # that come up short are redrawn from scratch with twice the draws.
        candidates = rng.integers(0, n_items, size=(pending.size, draws))
        keys = users[pending, None] * np.int64(n_items) + candidates
        position = np.minimum(np.searchsorted(interacted, keys), interacted.size - 1)
        allowed = interacted[position] != keys
        order = np.argsort(candidates, axis=1, kind="stable")
        ordered = np.take_along_axis(candidates, order, axis=1)
        repeat = np.zeros_like(allowed)
        np.put_along_axis(repeat, order[:, 1:], ordered[:, 1:] == ordered[:, :-1], axis=1)
        allowed &= ~repeat
        taken = allowed & (np.cumsum(allowed, axis=1) <= n_negatives)
        complete = taken.sum(axis=1) == n_negatives
        result[pending[complete]] = candidates[complete][taken[complete]].reshape(-1, n_negatives)
        pending = pending[~complete]
        draws *= 2
    return result


def _score_candidates(
    scores: npt.ArrayLike | SampledScores, users: IntArray, candidates: IntArray, n_users: int, n_items: int
) -> FloatArray:
    if callable(scores):
        rows = max(1, _CELLS_PER_BATCH // candidates.shape[1])
        parts = [
            np.asarray(scores(users[start : start + rows], candidates[start : start + rows]), dtype=np.float64)
            for start in range(0, users.size, rows)
        ]
        result = np.concatenate(parts) if parts else np.empty(candidates.shape)
        if result.shape != candidates.shape:
            raise ValueError(f"the score function returned shape {result.shape}, expected {candidates.shape}")
    else:
        result = _matrix(scores, n_users, n_items)[users[:, None], candidates]
    if not np.all(np.isfinite(result)):
        raise ValueError("scores must be finite")
    return result


def _full_ranking_hits(
    scores: npt.ArrayLike | FullScores, test: Ratings, train: Ratings, k_list: Iterable[int]
) -> tuple[list[int], npt.NDArray[np.bool_], IntArray]:
    """Per evaluated user (one with test items): hit flags of the top ``max(K)`` and the test count."""
    _check_pair(test, train)
    cutoffs = _cutoffs(k_list, None)
    n_items = test.n_items
    depth = min(max(cutoffs), n_items)
    test_counts = test.user_counts()
    users = np.flatnonzero(test_counts)
    if not users.size:
        raise ValueError("the test set is empty")
    matrix = None if callable(scores) else _matrix(scores, test.n_users, n_items)
    train_index, test_index = train.by_user(), test.by_user()
    hits = np.empty((users.size, depth), dtype=bool)
    rows = max(1, _CELLS_PER_BATCH // n_items)
    for start in range(0, users.size, rows):
        batch = users[start : start + rows]
        if matrix is None:
            block = np.array(scores(batch), dtype=np.float64)  # type: ignore[operator]
            if block.shape != (batch.size, n_items):
                raise ValueError(f"the score function returned shape {block.shape}, expected {(batch.size, n_items)}")
        else:
            block = matrix[batch].astype(np.float64)
        if not np.all(np.isfinite(block)):
            raise ValueError("scores must be finite")
        relevant = np.zeros_like(block, dtype=bool)
        relevant[_entries(test_index, batch)] = True
        # A training item is never recommended, so it is neither ranked nor counted as a hit.
        trained = _entries(train_index, batch)
        block[trained] = -np.inf
        relevant[trained] = False
        # Sorting by (-score, item) makes ties deterministic: the lower item index ranks first.
        top = np.argsort(-block, axis=1, kind="stable")[:, :depth]
        hits[start : start + batch.size] = np.take_along_axis(relevant, top, axis=1)
    return cutoffs, hits, test_counts[users]


def _entries(index: UserIndex, batch: IntArray) -> tuple[IntArray, IntArray]:
    """(row in ``batch``, item) of every entry of the batch's users: fancy indices into a block."""
    lengths = index.indptr[batch + 1] - index.indptr[batch]
    return np.repeat(np.arange(batch.size), lengths), index.items[index.positions(batch)]


def _matrix(scores: npt.ArrayLike, n_users: int, n_items: int) -> FloatArray:
    matrix = np.asarray(scores)
    if matrix.shape != (n_users, n_items):
        raise ValueError(f"the score matrix has shape {matrix.shape}, expected {(n_users, n_items)}")
    return matrix


__all__ = ["error_summary", "hit_rate_at_k", "item_mean_predictor_errors", "mae", "mean_predictor_errors", "ndcg_at_k", "random_ranking_expectation", "rating_errors", "recall_at_k", "rmse"]
