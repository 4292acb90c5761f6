"""prepare_data: a scenario's [data] table and a seed to a reproducible train/test split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fedrecsim.data import prepare_data
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.scenario import DataConfig


def Spec(**keys: object) -> DataConfig:  # noqa: N802 -- stands for the [data] table
    """The scenario's real [data] section at a small size, with ``keys`` replaced."""
    small = DataConfig(users=80, items=60, ratings=1500, rank=5, test_fraction=0.2)
    return dataclasses.replace(small, **keys)


def test_synthetic_explicit_random_split() -> None:
    train, test = prepare_data(Spec(), seed=3)
    assert len(train) + len(test) == 1500 and len(test) == 300
    assert (train.n_users, train.n_items) == (80, 60)


def test_same_seed_same_split_and_split_does_not_change_the_data() -> None:
    a_train, a_test = prepare_data(Spec(), seed=3)
    b_train, b_test = prepare_data(Spec(), seed=3)
    assert np.array_equal(a_test.pair_keys(), b_test.pair_keys()) and np.array_equal(a_train.values, b_train.values)
    c_train, c_test = prepare_data(Spec(split="per_user"), seed=3)
    whole = np.sort(np.concatenate([a_train.pair_keys(), a_test.pair_keys()]))
    assert np.array_equal(whole, np.sort(np.concatenate([c_train.pair_keys(), c_test.pair_keys()])))
    other_train, _ = prepare_data(Spec(), seed=4)
    assert not np.array_equal(other_train.pair_keys(), a_train.pair_keys())


def test_implicit_leave_one_out() -> None:
    train, test = prepare_data(Spec(feedback="implicit", split="leave_one_out"), seed=0)
    assert np.all(test.user_counts() == 1)
    assert np.all(train.values == 1.0)


def test_loaded_binarized_and_filtered(tmp_path: Path) -> None:
    lines = [f"{u}\t{i}\t{1 + (u + i) % 5}\t0" for u in range(1, 21) for i in range(1, 16) if (u * i) % 4]
    (tmp_path / "u.data").write_text("\n".join(lines) + "\n")
    spec = Spec(source="movielens-100k", path=str(tmp_path), binarize=True, min_user_interactions=12, split="per_user")
    train, test = prepare_data(spec, seed=0)
    assert np.all(train.values == 1.0) and train.rating_range == (0.0, 1.0)
    assert np.all((train.user_counts() + test.user_counts()) >= 12)
    assert train.n_users < 20


def test_errors_surface_typed() -> None:
    with pytest.raises(DatasetError):
        prepare_data(Spec(source="movielens-100k", path="/nonexistent/ml-100k"), seed=0)
    with pytest.raises(ConfigError) as caught:
        prepare_data(Spec(ratings=10**6), seed=0)
    assert caught.value.key_path == "data.ratings"
    with pytest.raises(ConfigError) as caught:
        prepare_data(Spec(split="by_time"), seed=0)
    assert caught.value.key_path == "data.split"
    with pytest.raises(ConfigError) as caught:
        prepare_data(Spec(min_user_interactions=1000), seed=0)
    assert caught.value.key_path == "data"


def test_subsampling_keeps_the_most_popular_items_then_random_users() -> None:
    full, _ = prepare_data(Spec(split="per_user"), seed=3)
    train, test = prepare_data(Spec(split="per_user", subsample_items=20, subsample_users=30), seed=3)
    assert (train.n_users, train.n_items) == (30, 20)
    assert len(train) + len(test) < len(full)


def test_min_per_user_sets_the_least_active_users_share() -> None:
    # Netflix-shaped data has fewer ratings per user than MovieLens' rule of 20 (netflix_shape: 1).
    train, test = prepare_data(Spec(ratings=200, min_per_user=1, test_fraction=0.1), seed=3)
    counts = np.bincount(np.r_[train.users, test.users], minlength=80)
    assert counts.min() >= 1 and counts.sum() == 200
    default_train, default_test = prepare_data(Spec(ratings=200, test_fraction=0.1), seed=3)
    assert np.bincount(np.r_[default_train.users, default_test.users], minlength=80).min() >= 200 // 80
    with pytest.raises(ConfigError, match="data.min_per_user"):
        prepare_data(Spec(ratings=200, min_per_user=3), seed=3)


def test_counts_from_unit_norm_factors_and_the_key_needs_counts() -> None:
    scaled, _ = prepare_data(Spec(feedback="counts", ratings=4800, rank=50), seed=3)
    unit, _ = prepare_data(Spec(feedback="counts", ratings=4800, rank=50, factors="unit-norm"), seed=3)
    again, _ = prepare_data(Spec(feedback="counts", ratings=4800, rank=50, factors="unit-norm"), seed=3)
    np.testing.assert_array_equal(unit.values, again.values)
    assert unit.rating_range == (0.0, 10.0) and len(unit) == len(scaled)
    # Log-rates of variance 1/50 against 1: mean counts near e^0.01 ~ 1.01 against e^0.5 ~ 1.65 (4,800
    # counts, standard error ~0.02 each).
    assert unit.values.mean() < 1.15 < 1.4 < scaled.values.mean()
    with pytest.raises(ConfigError, match=r"^data\.factors: 'unit-norm' draws Poisson counts' factors; it needs data\.feedback = 'counts'$"):
        prepare_data(Spec(factors="unit-norm"), seed=3)


def test_data_rating_range_declares_an_npz_scale_and_is_refused_elsewhere(tmp_path: Path) -> None:
    import scipy.sparse

    path = tmp_path / "m.npz"
    scipy.sparse.save_npz(path, scipy.sparse.csr_matrix(np.array([[1.0, 0.0, 3.0], [0.0, 2.0, 4.0], [2.0, 3.0, 0.0]])))
    base = Spec(source="npz", path=str(path), split="random", test_fraction=0.2)
    train, _ = prepare_data(base, seed=0)
    assert train.rating_range == (1.0, 4.0)  # undeclared: the matrix's own extremes
    train, test = prepare_data(dataclasses.replace(base, rating_range=(0.0, 5.0)), seed=0)
    assert train.rating_range == test.rating_range == (0.0, 5.0)
    with pytest.raises(DatasetError, match=r"= 4 is outside \[1, 3\]"):
        prepare_data(dataclasses.replace(base, rating_range=(1.0, 3.0)), seed=0)
    with pytest.raises(ConfigError, match=r"^data\.rating_range: must be a pair of numbers"):
        prepare_data(dataclasses.replace(base, rating_range=(1.0, 3.0, 5.0)), seed=0)
    with pytest.raises(ConfigError, match=r"^data\.rating_range: synthetic data sets its own scale; only source 'npz'"):
        prepare_data(Spec(rating_range=(1.0, 5.0)), seed=0)
    with pytest.raises(ConfigError, match=r"^data\.rating_range: not an option of source 'movielens-100k'"):
        prepare_data(Spec(source="movielens-100k", path=str(tmp_path), rating_range=(1.0, 5.0)), seed=0)
