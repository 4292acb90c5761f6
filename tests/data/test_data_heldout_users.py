"""Held-out users with a share of their entries tested (Polato Sec. V-A), and MovieLens-1M as implicit data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrecsim.data import Ratings, heldout_users_split, prepare_data, synthetic_implicit
from fedrecsim.errors import ConfigError, DatasetError
from fedrecsim.scenario import DataConfig


def test_a_share_of_the_users_gives_a_fifth_of_its_entries_and_the_others_give_none() -> None:
    whole = synthetic_implicit(np.random.default_rng(0), 200, 80, 3000, min_per_user=1)
    counts = whole.user_counts()
    train, test = heldout_users_split(whole, 0.1, 0.2, np.random.default_rng(1))
    assert len(train) + len(test) == len(whole)
    assert np.array_equal(np.sort(np.concatenate([train.pair_keys(), test.pair_keys()])), whole.pair_keys())
    held_out = np.flatnonzero(test.user_counts())
    eligible = np.flatnonzero(counts >= 2)
    assert held_out.size == int(np.floor(0.1 * eligible.size + 0.5)) and np.isin(held_out, eligible).all()
    expected = np.clip(np.floor(0.2 * counts[held_out] + 0.5), 1, counts[held_out] - 1)
    assert np.array_equal(test.user_counts()[held_out], expected)
    assert (train.user_counts()[held_out] >= 1).all()
    others = np.setdiff1d(np.arange(whole.n_users), held_out)
    assert np.array_equal(train.user_counts()[others], counts[others])


def test_a_user_with_two_entries_tests_one_and_folds_in_one_and_a_single_entry_user_is_never_held_out() -> None:
    r = Ratings(np.array([0, 1, 1, 2, 2, 2, 2, 2]), np.array([0, 0, 1, 0, 1, 2, 3, 4]), np.ones(8), 3, 5, (0.0, 1.0))
    for seed in range(10):
        train, test = heldout_users_split(r, 0.99, 0.2, np.random.default_rng(seed))
        assert test.user_counts().tolist() == [0, 1, 1]
        assert train.user_counts().tolist() == [1, 1, 4]


def test_the_split_is_reproducible_from_its_generator() -> None:
    whole = synthetic_implicit(np.random.default_rng(2), 50, 30, 600)
    first = heldout_users_split(whole, 0.3, 0.2, np.random.default_rng(5))
    second = heldout_users_split(whole, 0.3, 0.2, np.random.default_rng(5))
    assert all(np.array_equal(a.pair_keys(), b.pair_keys()) for a, b in zip(first, second))


@pytest.mark.parametrize("user_fraction, share, key", [(0.0, 0.2, "data.test_fraction"), (0.1, 1.0, "data.test_share")])
def test_shares_outside_the_open_unit_interval_are_config_errors(user_fraction: float, share: float, key: str) -> None:
    whole = synthetic_implicit(np.random.default_rng(3), 20, 10, 100)
    with pytest.raises(ConfigError) as caught:
        heldout_users_split(whole, user_fraction, share, np.random.default_rng(0))
    assert caught.value.key_path == key


def write_ratings_dat(folder: Path) -> Path:
    """Users 1-3 of an ml-1m file: user 1 rates 6 movies (5 at >= 4), user 2 rates 5 (3 at >= 4), user 3 rates 5 (all >= 4)."""
    lines = [
        (1, 10, 5), (1, 20, 4), (1, 30, 4), (1, 40, 5), (1, 50, 4), (1, 60, 2),
        (2, 10, 4), (2, 20, 3), (2, 70, 1), (2, 30, 5), (2, 80, 4),
        (3, 20, 4), (3, 30, 4), (3, 90, 5), (3, 60, 4), (3, 10, 5),
    ]
    folder.mkdir()
    (folder / "ratings.dat").write_text("".join(f"{u}::{i}::{r}::978300760\n" for u, i, r in lines))
    return folder


def test_movielens_1m_as_polato_prepares_it_keeps_ratings_of_four_and_users_with_five(tmp_path: Path) -> None:
    spec = DataConfig(
        source="movielens-1m", path=str(write_ratings_dat(tmp_path / "ml-1m")), min_rating=4.0, binarize=True,
        min_user_interactions=5, split="heldout_users", test_fraction=0.5, test_share=0.2,
    )
    train, test = prepare_data(spec, seed=0)
    # User 2 keeps only 3 ratings of >= 4 and is dropped; movies 70 and 80 go with it (no other rating >= 4).
    assert train.n_users == 2 and train.user_ids.tolist() == [1, 3]
    assert train.item_ids.tolist() == [10, 20, 30, 40, 50, 60, 90]
    assert len(train) + len(test) == 10 and set(np.concatenate([train.values, test.values]).tolist()) == {1.0}
    # One of the two users is held out with one of its five entries (a fifth) tested.
    assert sorted(test.user_counts().tolist()) == [0, 1]


def test_a_malformed_ratings_line_is_a_dataset_error_naming_file_and_line(tmp_path: Path) -> None:
    folder = write_ratings_dat(tmp_path / "ml-1m")
    with open(folder / "ratings.dat", "a") as handle:
        handle.write("4::10::five::978300760\n")
    spec = DataConfig(source="movielens-1m", path=str(folder), min_rating=4.0, binarize=True, split="heldout_users")
    with pytest.raises(DatasetError) as caught:
        prepare_data(spec, seed=0)
    assert caught.value.line == 17 and caught.value.path.endswith("ratings.dat")
