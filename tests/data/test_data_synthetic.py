"""Synthetic data: exact sizes, no duplicates, skew where asked, uniformity where not, typed errors."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrecsim.data import (
    NETFLIX_DENSITY,
    movielens_100k_shape,
    netflix_shape,
    synthetic_explicit,
    synthetic_implicit,
)
from fedrecsim.errors import ConfigError


def test_movielens_shaped_data_has_the_requested_shape() -> None:
    shape = movielens_100k_shape()
    r = synthetic_explicit(np.random.default_rng(0), **shape.as_kwargs())
    assert (r.n_users, r.n_items, len(r)) == (943, 1682, 100_000)
    assert np.all(np.diff(r.pair_keys()) > 0)  # sorted, hence no duplicate pair
    assert r.user_counts().min() >= 20
    assert set(np.unique(r.values).tolist()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert r.rating_range == (1.0, 5.0)


def test_activity_and_popularity_are_heavy_tailed_like_movielens() -> None:
    r = synthetic_explicit(np.random.default_rng(1), **movielens_100k_shape().as_kwargs())
    users, items = r.user_counts(), r.item_counts()
    # MovieLens-100k: median user 65 ratings, busiest 737; median item 27, busiest 583. The generator
    # should be in that regime: a long right tail on both sides, far from uniform.
    assert 40 <= np.median(users) <= 110 and users.max() >= 4 * np.median(users)
    assert 10 <= np.median(items) <= 60 and items.max() >= 10 * np.median(items)


def test_same_seed_same_data_different_seed_different_data() -> None:
    a = synthetic_explicit(np.random.default_rng(5), 50, 40, 600)
    b = synthetic_explicit(np.random.default_rng(5), 50, 40, 600)
    c = synthetic_explicit(np.random.default_rng(6), 50, 40, 600)
    assert np.array_equal(a.pair_keys(), b.pair_keys()) and np.array_equal(a.values, b.values)
    assert not np.array_equal(a.pair_keys(), c.pair_keys())


def test_without_skew_items_are_uniform() -> None:
    # One rating per user and no popularity skew: each user's item is uniform over 20 items.
    # Chi-square goodness of fit with a fixed seed; under the null p < 0.001 happens 1 time in 1000.
    r = synthetic_explicit(
        np.random.default_rng(11), 4000, 20, 4000, activity_skew=0.0, popularity_skew=0.0, min_per_user=1
    )
    assert np.all(r.user_counts() == 1)
    assert stats.chisquare(r.item_counts()).pvalue > 1e-3


def test_users_cannot_exceed_the_number_of_items() -> None:
    # A dense budget with strong skew: the heavy users must be capped at n_items, the rest redistributed.
    r = synthetic_explicit(np.random.default_rng(2), 30, 10, 280, activity_skew=3.0)
    assert len(r) == 280 and r.user_counts().max() == 10
    full = synthetic_explicit(np.random.default_rng(2), 7, 5, 35)
    assert len(full) == 35


def test_continuous_ratings_stay_in_range() -> None:
    r = synthetic_explicit(np.random.default_rng(3), 100, 50, 2000, integer=False, noise=2.0, rating_range=(0.5, 5.0))
    assert r.values.min() >= 0.5 and r.values.max() <= 5.0
    assert np.any(r.values != np.rint(r.values))


def test_ratings_carry_a_low_rank_signal() -> None:
    # Without noise a rank-1 truth clipped and rounded: the dense matrix of a full data set has one
    # dominant singular value beyond the constant part.
    r = synthetic_explicit(np.random.default_rng(4), 60, 40, 2400, rank=1, noise=0.0, integer=False)
    dense = np.zeros((60, 40))
    dense[r.users, r.items] = r.values
    singular = np.linalg.svd(dense - dense.mean(), compute_uv=False)
    assert singular[0] > 4 * singular[1]


def test_netflix_shape_density_is_documented_and_configurable() -> None:
    shape = netflix_shape()
    assert (shape.n_users, shape.n_items, shape.min_per_user) == (191_668, 100, 1)
    assert shape.n_ratings == round(NETFLIX_DENSITY * 191_668 * 100)
    assert netflix_shape(density=0.1).n_ratings == 1_916_680
    with pytest.raises(ConfigError, match="data.density"):
        netflix_shape(density=0.0)


def test_implicit_interactions_are_distinct_ones() -> None:
    r = synthetic_implicit(np.random.default_rng(7), 300, 80, 5000)
    assert len(r) == 5000 and np.all(r.values == 1.0) and r.rating_range == (0.0, 1.0)
    assert np.all(np.diff(r.pair_keys()) > 0)
    assert r.user_counts().min() >= 16


def test_implicit_affinity_creates_user_structure() -> None:
    # With affinity, which items a user picks depends on the user: item co-occurrence departs from
    # what popularity alone explains. Measured by how well the best rank-5 approximation of the
    # centred interaction matrix captures it.
    def captured(affinity: float) -> float:
        r = synthetic_implicit(np.random.default_rng(8), 400, 60, 8000, rank=3, affinity=affinity, popularity_skew=0.0)
        dense = np.zeros((400, 60))
        dense[r.users, r.items] = 1.0
        s = np.linalg.svd(dense - dense.mean(axis=0), compute_uv=False)
        return float(np.sum(s[:3] ** 2) / np.sum(s**2))

    assert captured(3.0) > captured(0.0) + 0.1


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"n_ratings": 10_000}, "data.ratings"),
        ({"n_users": 0}, "data.users"),
        ({"n_items": 2.5}, "data.items"),
        ({"rank": 0}, "data.rank"),
        ({"noise": -1.0}, "data.noise"),
        ({"activity_skew": float("nan")}, "data.activity_skew"),
        ({"popularity_skew": -0.1}, "data.popularity_skew"),
        ({"rating_range": (5, 1)}, "data.rating_range"),
        ({"min_per_user": 60}, "data.min_per_user"),
        ({"min_per_user": 30}, "data.min_per_user"),
    ],
)
def test_bad_parameters_name_their_key(kwargs: dict, key: str) -> None:
    params = {"n_users": 40, "n_items": 50, "n_ratings": 1000}
    params.update(kwargs)
    with pytest.raises(ConfigError) as caught:
        synthetic_explicit(np.random.default_rng(0), **params)
    assert caught.value.key_path == key


def test_implicit_budget_error_names_interactions() -> None:
    with pytest.raises(ConfigError) as caught:
        synthetic_implicit(np.random.default_rng(0), 3, 3, 10)
    assert caught.value.key_path == "data.interactions"
