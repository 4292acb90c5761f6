"""Synthetic feedback data shaped like the public data sets the papers use.

Two independent questions make up a synthetic data set: *which* (user, item) pairs are observed, and
*what value* each observed pair has.

Which pairs: real data sets are heavy-tailed on both sides (MovieLens-100k: every user has at least 20
ratings, the median user about 65, the most active 737; a few items have hundreds of ratings, many have
one). Here each user gets a number of entries ``k_u`` (a common minimum plus a multinomial share of the
rest, with lognormal activity weights of log-scale ``activity_skew``), and then draws ``k_u`` distinct
items by successive sampling without replacement, with item weights lognormal of log-scale
``popularity_skew`` (times a low-rank affinity for implicit data). The defaults (0.8 and 1.3) give
roughly MovieLens-100k's spread (real: median user 65, median item 27, both counts with a standard
deviation near 80-100; here medians about 80 and 30, deviations about 80).

Successive sampling is done for all users at once with exponential races: item ``j`` gets the key
``E_uj / w_uj`` with ``E_uj ~ Exp(1)``, and the ``k_u`` smallest keys win. That is exact, has no
duplicates by construction, and gives exactly ``sum(k_u)`` pairs.

What value: explicit ratings are ``center + spread * <x_u, y_j> + noise``, with ``x_u, y_j`` Gaussian of
rank ``rank`` (so the low-rank signal has unit variance), ``center`` the middle of the scale and
``spread`` a quarter of its width, then rounded (if ``integer``) and clipped to the scale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from fedrecsim.data.ratings import FloatArray, IntArray, Ratings
from fedrecsim.errors import ConfigError

# Users are processed in blocks of about this many (user, item) cells, to bound memory.
_CELLS_PER_BLOCK = 1 << 22

# MovieLens-100k: 943 users, 1682 items, 100,000 integer ratings 1-5, at least 20 per user.
_ML100K = (943, 1682, 100_000)

# The Netflix subset of Hua et al. (2015): 191,668 users' ratings of 100 movies drawn uniformly from
# the Netflix Prize data. The Prize data has 100,480,507 ratings of 17,770 movies, about 5,655 per
# movie, so 100 random movies carry about 565,500 ratings: a density of about 2.95 % over 191,668 x 100.
NETFLIX_DENSITY = 0.0295
_NETFLIX_USERS = 191_668
_NETFLIX_ITEMS = 100


@dataclasses.dataclass(frozen=True)
class SyntheticShape:
    """The size of a synthetic data set; ``synthetic_explicit(rng, **shape.as_kwargs())`` draws one.

    Attributes:
        n_users: Number of users.
        n_items: Number of items.
        n_ratings: Number of observed (user, item) pairs.
        min_per_user: Entries every user gets at least.
        rating_range: The rating scale ``(min_r, max_r)``.
    """

    n_users: int
    n_items: int
    n_ratings: int
    min_per_user: int
    rating_range: tuple[float, float] = (1.0, 5.0)

    def as_kwargs(self) -> dict[str, Any]:
        """The fields as keyword arguments of `synthetic_explicit`."""
        return dataclasses.asdict(self)


def movielens_100k_shape() -> SyntheticShape:
    """943 users, 1682 items, 100,000 ratings on 1-5, at least 20 per user (as in MovieLens-100k)."""
    n_users, n_items, n_ratings = _ML100K
    return SyntheticShape(n_users, n_items, n_ratings, min_per_user=20)


def netflix_shape(density: float = NETFLIX_DENSITY) -> SyntheticShape:
    """191,668 users x 100 items on 1-5, as the Netflix subset of Hua et al.; at least 1 rating per user.

    Args:
        density: Fraction of the 19,166,800 cells that are rated; the default `NETFLIX_DENSITY`
            (about 565,500 ratings) is what 100 random Netflix Prize movies carry on average.
    """
    if not 0.0 < density <= 1.0:
        raise ConfigError("data.density", f"must be in (0, 1], got {density!r}")
    n_ratings = max(_NETFLIX_USERS, round(density * _NETFLIX_USERS * _NETFLIX_ITEMS))
    return SyntheticShape(_NETFLIX_USERS, _NETFLIX_ITEMS, n_ratings, min_per_user=1)


def synthetic_explicit(
    rng: np.random.Generator,
    n_users: int,
    n_items: int,
    n_ratings: int,
    rank: int = 10,
    noise: float = 0.5,
    rating_range: tuple[float, float] = (1.0, 5.0),
    activity_skew: float = 0.8,
    popularity_skew: float = 1.3,
    integer: bool = True,
    min_per_user: int | None = None,
) -> Ratings:
    """Explicit ratings: low-rank signal plus Gaussian noise on skewed, duplicate-free observed pairs.

    Args:
        rng: The only source of randomness.
        n_users: Number of users (>= 1).
        n_items: Number of items (>= 1).
        n_ratings: Exact number of observed pairs, ``n_users * min_per_user <= n_ratings <=
            n_users * n_items``.
        rank: Rank of the true preference matrix.
        noise: Standard deviation of the Gaussian noise, in rating units.
        rating_range: The scale; ratings are clipped into it.
        activity_skew: Log-scale of the lognormal user activity weights (0: equally active users).
        popularity_skew: Log-scale of the lognormal item popularity weights (0: uniform items).
        integer: Round ratings to whole stars (after adding the noise, before clipping).
        min_per_user: Entries every user gets at least; default ``min(20, n_ratings // n_users)``,
            MovieLens' rule where the budget allows it.

    Returns:
        Ratings sorted by (user, item), with ``rating_range`` as given.

    Raises:
        ConfigError: a parameter is out of range (named ``data.<parameter>``).
    """
    low, high = _scale(rating_range)
    _check_real("data.rank", rank, minimum=1, integral=True)
    _check_real("data.noise", noise, minimum=0.0)
    counts = _counts(rng, n_users, n_items, n_ratings, activity_skew, min_per_user)
    log_popularity = _log_weights(rng, n_items, "data.popularity_skew", popularity_skew)
    x = rng.standard_normal((n_users, rank)) * rank**-0.5
    y = rng.standard_normal((n_items, rank))
    users, items = _sample_pairs(rng, counts, n_items, lambda block: log_popularity)
    signal = _rows_dot(x, y, users, items)
    values = 0.5 * (low + high) + 0.25 * (high - low) * signal + noise * rng.standard_normal(users.size)
    if integer:
        values = np.rint(values)
    return Ratings(users, items, np.clip(values, low, high), n_users, n_items, (low, high))


def synthetic_implicit(
    rng: np.random.Generator,
    n_users: int,
    n_items: int,
    n_interactions: int,
    rank: int = 10,
    affinity: float = 1.0,
    activity_skew: float = 0.8,
    popularity_skew: float = 1.3,
    min_per_user: int | None = None,
) -> Ratings:
    """Binary implicit feedback: who interacted with what, from a low-rank propensity with popularity.

    User ``u`` interacts with ``k_u`` distinct items drawn by successive sampling with weights
    ``w_uj = popularity_j * exp(affinity * <x_u, y_j>)`` (``<x_u, y_j>`` of unit variance), so the
    data set has both popularity skew and low-rank structure for a model to find. Every value is 1.0
    and the scale is ``(0, 1)``, as `Ratings.binarize` produces.

    Args:
        rng: The only source of randomness.
        n_users: Number of users (>= 1).
        n_items: Number of items (>= 1).
        n_interactions: Exact number of (user, item) interactions.
        rank: Rank of the propensity.
        affinity: Weight of the low-rank term against popularity (0: popularity only).
        activity_skew: Log-scale of the lognormal user activity weights.
        popularity_skew: Log-scale of the lognormal item popularity weights.
        min_per_user: Interactions every user gets at least; default ``min(20, n_interactions //
            n_users)``.

    Raises:
        ConfigError: a parameter is out of range (named ``data.<parameter>``).
    """
    _check_real("data.rank", rank, minimum=1, integral=True)
    _check_real("data.affinity", affinity, minimum=0.0)
    counts = _counts(rng, n_users, n_items, n_interactions, activity_skew, min_per_user, "data.interactions")
    log_popularity = _log_weights(rng, n_items, "data.popularity_skew", popularity_skew)
    x = rng.standard_normal((n_users, rank)) * rank**-0.5
    y = rng.standard_normal((n_items, rank))

    def log_weights(block: slice) -> FloatArray:
        return log_popularity + affinity * (x[block] @ y.T)

    users, items = _sample_pairs(rng, counts, n_items, log_weights)
    return Ratings(users, items, np.ones(users.size), n_users, n_items, (0.0, 1.0))


def _counts(
    rng: np.random.Generator,
    n_users: int,
    n_items: int,
    total: int,
    skew: float,
    min_per_user: int | None,
    total_key: str = "data.ratings",
) -> IntArray:
    """Entries per user: ``min_per_user`` each plus a skewed multinomial share, capped at ``n_items``."""
    _check_real("data.users", n_users, minimum=1, integral=True)
    _check_real("data.items", n_items, minimum=1, integral=True)
    _check_real(total_key, total, minimum=0, integral=True)
    if total > n_users * n_items:
        raise ConfigError(total_key, f"{total} exceeds n_users * n_items = {n_users * n_items}")
    if min_per_user is None:
        min_per_user = min(20, total // n_users, n_items)
    _check_real("data.min_per_user", min_per_user, minimum=0, integral=True)
    if min_per_user > n_items or n_users * min_per_user > total:
        raise ConfigError(
            "data.min_per_user",
            f"{min_per_user} per user needs {n_users * min_per_user} entries and at most {n_items} "
            f"items, but there are {total} entries over {n_items} items",
        )
    weights = np.exp(_log_weights(rng, n_users, "data.activity_skew", skew))
    counts = np.full(n_users, min_per_user, dtype=np.int64)
    remaining = total - n_users * min_per_user
    # A user cannot rate more items than exist: overflow is handed to users with room, in proportion
    # to their weights, until none is left. Each pass fills at least one user, so this terminates.
    while remaining:
        room = counts < n_items
        share = np.where(room, weights, 0.0)
        counts += rng.multinomial(remaining, share / share.sum())
        remaining = int(np.maximum(counts - n_items, 0).sum())
        np.minimum(counts, n_items, out=counts)
    return counts


def _sample_pairs(
    rng: np.random.Generator,
    counts: IntArray,
    n_items: int,
    log_weights: Callable[[slice], FloatArray],
) -> tuple[IntArray, IntArray]:
    """For each user ``u``, ``counts[u]`` distinct items by successive sampling; sorted by (user, item).

    ``log_weights(block)`` gives the log item weights of the users in ``block`` (shape ``(n_items,)``
    or ``(len(block), n_items)``).
    """
    n_users = counts.size
    rows_per_block = max(1, _CELLS_PER_BLOCK // n_items)
    users, items = [], []
    for start in range(0, n_users, rows_per_block):
        block = slice(start, min(start + rows_per_block, n_users))
        rows = block.stop - block.start
        keys = rng.standard_exponential((rows, n_items))
        keys *= np.exp(-log_weights(block))
        # rank[r, j] = position of item j in row r's race; the winners are the first counts[u].
        order = np.argsort(keys, axis=1)
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(n_items)[None, :], axis=1)
        row, item = np.nonzero(rank < counts[block, None])
        users.append(row + start)
        items.append(item)
    return np.concatenate(users).astype(np.int64), np.concatenate(items).astype(np.int64)


def _rows_dot(x: FloatArray, y: FloatArray, users: IntArray, items: IntArray) -> FloatArray:
    out = np.empty(users.size)
    step = max(1, _CELLS_PER_BLOCK // max(1, x.shape[1]))
    for start in range(0, users.size, step):
        part = slice(start, start + step)
        out[part] = np.einsum("ij,ij->i", x[users[part]], y[items[part]])
    return out


def _log_weights(rng: np.random.Generator, size: int, key: str, skew: float) -> FloatArray:
    _check_real(key, skew, minimum=0.0)
    return skew * rng.standard_normal(size)


def _scale(rating_range: tuple[float, float]) -> tuple[float, float]:
    try:
        low, high = (float(bound) for bound in rating_range)
    except (TypeError, ValueError):
        raise ConfigError("data.rating_range", f"must be a pair of numbers, got {rating_range!r}") from None
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise ConfigError("data.rating_range", f"must be finite with min < max, got {rating_range!r}")
    return low, high


def _check_real(key: str, value: object, *, minimum: float, integral: bool = False) -> None:
    kinds = (int, np.integer) if integral else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = "an integer" if integral else "a number"
        raise ConfigError(key, f"must be {expected} >= {minimum}, got {value!r}")
    if not (np.isfinite(value) and value >= minimum):
        raise ConfigError(key, f"must be >= {minimum}, got {value!r}")


__all__ = [
    "NETFLIX_DENSITY",
    "SyntheticShape",
    "movielens_100k_shape",
    "netflix_shape",
    "synthetic_explicit",
    "synthetic_implicit",
]
