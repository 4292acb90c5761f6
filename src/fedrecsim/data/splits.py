"""Train/test splits and the filters that shape a data set before it is split.

Splits keep the index space: train and test have the same ``n_users``, ``n_items`` and id mappings as
the input, partition its entries (every entry is in exactly one of them) and are drawn from the
caller's generator only. Filters drop entries and then re-index users and items densely, keeping the
map back to the source ids in `Ratings.user_ids` / `Ratings.item_ids`.
"""

from __future__ import annotations

import math

import numpy as np

from fedrecsim.data.ratings import IntArray, Ratings
from fedrecsim.errors import ConfigError


def random_split(ratings: Ratings, test_fraction: float, rng: np.random.Generator) -> tuple[Ratings, Ratings]:
    """Hold out ``round(test_fraction * n)`` entries chosen uniformly at random (halves round up)."""
    _check_fraction(test_fraction)
    n_test = math.floor(test_fraction * len(ratings) + 0.5)
    test = np.zeros(len(ratings), dtype=bool)
    test[rng.permutation(len(ratings))[:n_test]] = True
    return ratings.subset(~test), ratings.subset(test)


def per_user_split(
    ratings: Ratings, test_fraction: float, rng: np.random.Generator, min_train: int = 1
) -> tuple[Ratings, Ratings]:
    """Hold out a fraction of each user's entries, but always leave the user ``min_train`` of them.

    A user with ``m`` entries gives ``min(round(test_fraction * m), max(m - min_train, 0))`` of them,
    chosen uniformly, to the test set (halves round up). With ``min_train >= 1`` no user who has any
    entry loses all of them to the test set.

    Raises:
        ConfigError: ``test_fraction`` outside (0, 1) (``data.test_fraction``) or ``min_train`` not a
            non-negative integer (``data.min_train``).
    """
    _check_fraction(test_fraction)
    if isinstance(min_train, bool) or not isinstance(min_train, (int, np.integer)) or min_train < 0:
        raise ConfigError("data.min_train", f"must be a non-negative integer, got {min_train!r}")
    counts = ratings.user_counts()
    n_test = np.minimum(np.floor(test_fraction * counts + 0.5).astype(np.int64), np.maximum(counts - min_train, 0))
    rank = _random_rank_within_user(ratings, rng)
    test = rank < n_test[ratings.users]
    return ratings.subset(~test), ratings.subset(test)


def leave_one_out(ratings: Ratings, rng: np.random.Generator) -> tuple[Ratings, Ratings]:
    """Hold out one entry, chosen uniformly, of every user who has at least two.

    The data sets here carry no timestamps, so the held-out interaction is a random one rather than
    the latest; users with a single entry keep it for training and are not evaluated.
    """
    rank = _random_rank_within_user(ratings, rng)
    test = (rank == 0) & (ratings.user_counts()[ratings.users] >= 2)
    return ratings.subset(~test), ratings.subset(test)


def user_holdout_split(
    ratings: Ratings, user_fraction: float, entries: int, rng: np.random.Generator
) -> tuple[Ratings, Ratings]:
    """Hold out ``entries`` random entries of each of a ``user_fraction`` share of the users (Ribero et al. 4.3).

    The test users are ``round(user_fraction * n)`` drawn uniformly among the ``n`` users with more than
    ``entries`` entries (so each keeps at least one for training; halves round up); each gives
    ``entries`` of its entries, chosen uniformly, to the test set.

    Raises:
        ConfigError: ``user_fraction`` outside (0, 1) (``data.test_fraction``) or ``entries`` not a
            positive integer (``data.test_entries``).
    """
    _check_fraction(user_fraction)
    if isinstance(entries, bool) or not isinstance(entries, (int, np.integer)) or entries < 1:
        raise ConfigError("data.test_entries", f"must be a positive integer, got {entries!r}")
    eligible = np.flatnonzero(ratings.user_counts() > entries)
    chosen = np.zeros(ratings.n_users, dtype=bool)
    chosen[rng.permutation(eligible)[: math.floor(user_fraction * eligible.size + 0.5)]] = True
    rank = _random_rank_within_user(ratings, rng)
    test = chosen[ratings.users] & (rank < entries)
    return ratings.subset(~test), ratings.subset(test)


def heldout_users_split(
    ratings: Ratings, user_fraction: float, test_share: float, rng: np.random.Generator
) -> tuple[Ratings, Ratings]:
    """Held-out users, each with a share of its entries tested (Liang et al.'s and Polato's protocol, Sec. V-A).

    The held-out users are ``round(user_fraction * n)`` drawn uniformly among the ``n`` users with at
    least two entries (halves round up). Each gives ``round(test_share * m)`` of its ``m`` entries,
    chosen uniformly, to the test set -- at least one, and never all: its other entries stay in the
    training set as the fold-in input a model ranks it from. Every other user keeps all its entries.

    Raises:
        ConfigError: ``user_fraction`` (``data.test_fraction``) or ``test_share`` (``data.test_share``)
            outside (0, 1).
    """
    _check_fraction(user_fraction)
    _check_fraction(test_share, "data.test_share")
    counts = ratings.user_counts()
    eligible = np.flatnonzero(counts >= 2)
    chosen = np.zeros(ratings.n_users, dtype=bool)
    chosen[rng.permutation(eligible)[: math.floor(user_fraction * eligible.size + 0.5)]] = True
    n_test = np.clip(np.floor(test_share * counts + 0.5).astype(np.int64), 1, np.maximum(counts - 1, 1))
    rank = _random_rank_within_user(ratings, rng)
    test = chosen[ratings.users] & (rank < n_test[ratings.users])
    return ratings.subset(~test), ratings.subset(test)


def filter_min_interactions(ratings: Ratings, min_user: int, min_item: int) -> Ratings:
    """Keep only users with >= ``min_user`` and items with >= ``min_item`` entries, re-indexed densely.

    Dropping an item can push a user below ``min_user`` and vice versa, so the filter repeats until
    nothing changes: in the result every user and every item meets its threshold. Users and items left
    without entries are dropped too (whatever the thresholds), so indices stay dense.
    """
    for key, value in (("data.min_user", min_user), ("data.min_item", min_item)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ConfigError(key, f"must be a non-negative integer, got {value!r}")
    keep = np.ones(len(ratings), dtype=bool)
    while True:
        user_counts = np.bincount(ratings.users[keep], minlength=ratings.n_users)
        item_counts = np.bincount(ratings.items[keep], minlength=ratings.n_items)
        still = keep & (user_counts[ratings.users] >= min_user) & (item_counts[ratings.items] >= min_item)
        if np.array_equal(still, keep):
            return _reindex(ratings, keep)
        keep = still


def subsample(ratings: Ratings, n_users: int, n_items: int, rng: np.random.Generator) -> Ratings:
    """The ``n_items`` most popular items and ``n_users`` random users among those who rated them.

    Items are ranked by their number of entries (ties broken at random); then users are drawn
    uniformly without replacement from those with at least one entry on the kept items (all of them
    if there are fewer than ``n_users``). The result is re-indexed densely; items without an entry from
    the chosen users are dropped.

    Raises:
        ConfigError: ``n_users`` (``data.users``) or ``n_items`` (``data.items``) not a positive
            integer.
    """
    for key, value in (("data.users", n_users), ("data.items", n_items)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ConfigError(key, f"must be a positive integer, got {value!r}")
    tie_break = rng.random(ratings.n_items)
    popularity_order = np.lexsort((tie_break, -ratings.item_counts()))
    kept_items = np.zeros(ratings.n_items, dtype=bool)
    kept_items[popularity_order[:n_items]] = True
    on_kept = kept_items[ratings.items]
    candidates = np.unique(ratings.users[on_kept])
    chosen = np.zeros(ratings.n_users, dtype=bool)
    chosen[rng.permutation(candidates)[:n_users]] = True
    return _reindex(ratings, on_kept & chosen[ratings.users])


def _check_fraction(test_fraction: float, key: str = "data.test_fraction") -> None:
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float, np.integer, np.floating)):
        raise ConfigError(key, f"must be a number in (0, 1), got {test_fraction!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(key, f"must be in (0, 1), got {test_fraction!r}")


def _random_rank_within_user(ratings: Ratings, rng: np.random.Generator) -> IntArray:
    """A uniformly random permutation of each user's entries: entry -> its 0-based position."""
    priority = rng.random(len(ratings))
    # Entries are sorted by user, so sorting by (user, priority) permutes within each user's block.
    order = np.lexsort((priority, ratings.users))
    rank = np.empty(len(ratings), dtype=np.int64)
    rank[order] = np.arange(len(ratings)) - ratings.by_user().indptr[ratings.users[order]]
    return rank


def _reindex(ratings: Ratings, keep: np.ndarray) -> Ratings:
    users, items = ratings.users[keep], ratings.items[keep]
    user_used = np.zeros(ratings.n_users, dtype=bool)
    user_used[users] = True
    item_used = np.zeros(ratings.n_items, dtype=bool)
    item_used[items] = True
    # Dense new index of each old index (meaningful where used): order-preserving compaction.
    new_user = np.cumsum(user_used) - 1
    new_item = np.cumsum(item_used) - 1
    old_user_ids = np.arange(ratings.n_users) if ratings.user_ids is None else ratings.user_ids
    old_item_ids = np.arange(ratings.n_items) if ratings.item_ids is None else ratings.item_ids
    return Ratings(
        new_user[users],
        new_item[items],
        ratings.values[keep],
        int(user_used.sum()),
        int(item_used.sum()),
        ratings.rating_range,
        old_user_ids[user_used],
        old_item_ids[item_used],
    )


__all__ = [
    "filter_min_interactions",
    "heldout_users_split",
    "leave_one_out",
    "per_user_split",
    "random_split",
    "subsample",
    "user_holdout_split",
]
