"""Splits partition the data in the same index space; filters re-index densely."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrecsim.data import (
    Ratings,
    filter_min_interactions,
    leave_one_out,
    per_user_split,
    random_split,
    subsample,
    synthetic_explicit,
    user_holdout_split,
)
from fedrecsim.errors import ConfigError


def data(seed: int = 0) -> Ratings:
    return synthetic_explicit(np.random.default_rng(seed), 60, 40, 900, min_per_user=1)


def assert_partition(whole: Ratings, train: Ratings, test: Ratings) -> None:
    assert (train.n_users, train.n_items) == (test.n_users, test.n_items) == (whole.n_users, whole.n_items)
    assert len(train) + len(test) == len(whole)
    keys = np.concatenate([train.pair_keys(), test.pair_keys()])
    order = np.argsort(keys)
    assert np.array_equal(keys[order], whole.pair_keys())
    assert np.array_equal(np.concatenate([train.values, test.values])[order], whole.values)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.01, 0.99))
def test_random_split_partitions_with_the_requested_size(seed: int, fraction: float) -> None:
    whole = data(seed % 7)
    train, test = random_split(whole, fraction, np.random.default_rng(seed))
    assert_partition(whole, train, test)
    assert len(test) == int(np.floor(fraction * len(whole) + 0.5))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.01, 0.99), st.integers(0, 3))
def test_per_user_split_holds_out_a_share_of_each_user(seed: int, fraction: float, min_train: int) -> None:
    whole = data(seed % 7)
    train, test = per_user_split(whole, fraction, np.random.default_rng(seed), min_train=min_train)
    assert_partition(whole, train, test)
    counts = whole.user_counts()
    expected = np.minimum(np.floor(fraction * counts + 0.5), np.maximum(counts - min_train, 0))
    assert np.array_equal(test.user_counts(), expected)
    assert np.all(train.user_counts() >= np.minimum(counts, min_train))


def test_leave_one_out_holds_out_one_item_of_users_with_two() -> None:
    whole = data(3)
    train, test = leave_one_out(whole, np.random.default_rng(0))
    assert_partition(whole, train, test)
    counts = whole.user_counts()
    assert np.array_equal(test.user_counts(), (counts >= 2).astype(np.int64))


def test_leave_one_out_picks_uniformly() -> None:
    # One user with 5 items, 5000 independent splits from one generator: each item should be held out
    # equally often. Chi-square with fixed seed; a false alarm at p < 0.001 has probability 1/1000.
    r = Ratings(np.zeros(5, dtype=np.int64), np.arange(5), np.ones(5), 1, 5, (1.0, 5.0))
    rng = np.random.default_rng(42)
    held = [int(leave_one_out(r, rng)[1].items[0]) for _ in range(5000)]
    assert stats.chisquare(np.bincount(held, minlength=5)).pvalue > 1e-3


def test_splits_are_reproducible() -> None:
    whole = data(1)
    a = per_user_split(whole, 0.3, np.random.default_rng(9))[1]
    b = per_user_split(whole, 0.3, np.random.default_rng(9))[1]
    assert np.array_equal(a.pair_keys(), b.pair_keys())


@pytest.mark.parametrize("fraction", [0, 1, -0.1, 1.5, float("nan"), "0.2", True])
def test_fractions_outside_the_open_interval_are_config_errors(fraction: object) -> None:
    for split in (random_split, per_user_split):
        with pytest.raises(ConfigError) as caught:
            split(data(), fraction, np.random.default_rng(0))  # type: ignore[arg-type]
        assert caught.value.key_path == "data.test_fraction"


def test_filter_reaches_a_fixed_point_and_keeps_the_source_ids() -> None:
    whole = data(4)
    kept = filter_min_interactions(whole, 10, 15)
    assert kept.user_counts().min() >= 10 and kept.item_counts().min() >= 15
    # The same fixed point as a plain-Python reference (the largest subset meeting both thresholds is
    # unique, so removal order does not matter).
    pairs = set(zip(whole.users.tolist(), whole.items.tolist()))
    while True:
        users, items = Counter(u for u, _ in pairs), Counter(i for _, i in pairs)
        survivors = {(u, i) for u, i in pairs if users[u] >= 10 and items[i] >= 15}
        if survivors == pairs:
            break
        pairs = survivors
    assert len(kept) == len(pairs) > 0
    # Every kept triple is a triple of the original, through the id maps.
    original = set(zip(whole.users.tolist(), whole.items.tolist(), whole.values.tolist()))
    mapped = zip(kept.user_ids[kept.users].tolist(), kept.item_ids[kept.items].tolist(), kept.values.tolist())
    assert set(mapped) <= original
    # And nothing that should have survived was lost: filtering again changes nothing.
    again = filter_min_interactions(kept, 10, 15)
    assert np.array_equal(again.pair_keys(), kept.pair_keys())


def test_filter_cascades() -> None:
    # Item 1 has one rating; dropping it leaves user 1 with one rating, which drops user 1, which
    # leaves item 2 with one rating...
    r = Ratings(
        np.array([0, 0, 0, 1, 1, 2, 2, 2]),
        np.array([0, 2, 3, 1, 2, 0, 2, 3]),
        np.ones(8),
        3,
        4,
        (0.0, 1.0),
        np.array([100, 101, 102]),
    )
    kept = filter_min_interactions(r, 2, 2)
    assert kept.user_ids.tolist() == [100, 102] and kept.item_ids.tolist() == [0, 2, 3]
    assert len(kept) == 6
    assert len(filter_min_interactions(r, 5, 0)) == 0


def test_subsample_takes_the_most_popular_items() -> None:
    whole = data(5)
    part = subsample(whole, 20, 10, np.random.default_rng(0))
    assert part.n_users == 20 and part.n_items <= 10
    top = np.sort(whole.item_counts())[::-1][:10]
    assert np.all(whole.item_counts()[part.item_ids] >= top[-1])
    everyone = subsample(whole, 10_000, 10, np.random.default_rng(0))
    assert everyone.n_users == np.unique(whole.users[np.isin(whole.items, everyone.item_ids)]).size


@pytest.mark.parametrize(
    ("call", "key"),
    [
        (lambda r: filter_min_interactions(r, -1, 0), "data.min_user"),
        (lambda r: filter_min_interactions(r, 0, 1.5), "data.min_item"),
        (lambda r: subsample(r, 0, 5, np.random.default_rng(0)), "data.users"),
        (lambda r: subsample(r, 5, True, np.random.default_rng(0)), "data.items"),
        (lambda r: per_user_split(r, 0.5, np.random.default_rng(0), min_train=-1), "data.min_train"),
    ],
)
def test_bad_filter_parameters(call, key: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as caught:
        call(data())
    assert caught.value.key_path == key


def test_per_user_split_leaves_one_entry_by_default() -> None:
    # Two entries at fraction 0.9: round(1.8) = 2 would go to test, the default min_train = 1 keeps one.
    r = Ratings(np.zeros(2, dtype=np.int64), np.arange(2), np.ones(2), 1, 2, (1.0, 5.0))
    train, test = per_user_split(r, 0.9, np.random.default_rng(0))
    assert (len(train), len(test)) == (1, 1)


@pytest.mark.parametrize("min_train", [True, 1.5, -1])
def test_min_train_must_be_a_non_negative_integer(min_train: object) -> None:
    with pytest.raises(ConfigError) as caught:
        per_user_split(data(), 0.5, np.random.default_rng(0), min_train=min_train)  # type: ignore[arg-type]
    assert caught.value.key_path == "data.min_train"
    assert f"non-negative integer, got {min_train!r}" in caught.value.problem


@pytest.mark.parametrize(("fraction", "problem"), [("0.2", "a number in (0, 1), got '0.2'"), (1.5, "in (0, 1), got 1.5")])
def test_a_bad_fraction_is_named_in_the_message(fraction: object, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        random_split(data(), fraction, np.random.default_rng(0))  # type: ignore[arg-type]
    assert problem in caught.value.problem


def test_bad_filter_parameters_are_named_in_the_message() -> None:
    with pytest.raises(ConfigError, match=r"non-negative integer, got -1"):
        filter_min_interactions(data(), -1, 0)
    with pytest.raises(ConfigError, match=r"positive integer, got 0"):
        subsample(data(), 0, 5, np.random.default_rng(0))


def test_subsample_accepts_one_user_and_one_item() -> None:
    part = subsample(data(5), 1, 1, np.random.default_rng(0))
    assert (part.n_users, part.n_items, len(part)) == (1, 1, 1)


def test_filter_keeps_the_source_item_ids() -> None:
    # Item 1 (source id 71) has one rating and goes; the kept items keep their source ids 70 and 72.
    r = Ratings(
        np.array([0, 0, 1, 1, 1]), np.array([0, 2, 0, 1, 2]), np.ones(5), 2, 3, (0.0, 1.0),
        np.array([10, 11]), np.array([70, 71, 72]),
    )
    kept = filter_min_interactions(r, 1, 2)
    assert kept.item_ids.tolist() == [70, 72] and kept.user_ids.tolist() == [10, 11]


def test_user_holdout_split_holds_out_entries_of_a_share_of_the_users() -> None:
    whole = data(2)
    counts = whole.user_counts()
    entries = 3
    eligible = np.flatnonzero(counts > entries)
    assert 0 < eligible.size < whole.n_users  # the data has users the split must skip
    train, test = user_holdout_split(whole, 0.25, entries, np.random.default_rng(4))
    assert_partition(whole, train, test)
    test_users = np.flatnonzero(test.user_counts())
    assert test_users.size == int(np.floor(0.25 * eligible.size + 0.5))
    assert np.isin(test_users, eligible).all()
    assert (test.user_counts()[test_users] == entries).all()
    assert np.array_equal(train.user_counts()[test_users], counts[test_users] - entries)


def test_user_holdout_split_never_takes_a_users_last_entry() -> None:
    # User 0 has exactly `entries` entries, user 1 one more: only user 1 can be chosen, and it keeps one.
    r = Ratings(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 0, 1, 2]), np.ones(5), 2, 3, (0.0, 1.0))
    for seed in range(20):
        train, test = user_holdout_split(r, 0.99, 2, np.random.default_rng(seed))
        assert test.user_counts().tolist() == [0, 2] and train.user_counts().tolist() == [2, 1]


def test_user_holdout_split_picks_users_and_entries_uniformly() -> None:
    # Four users with three entries each, one user and one entry held out per draw (0.2 * 4 rounds to 1):
    # each user and each of a user's entries should be held out equally often.
    r = Ratings(np.repeat(np.arange(4), 3), np.tile(np.arange(3), 4), np.ones(12), 4, 3, (0.0, 1.0))
    rng = np.random.default_rng(11)
    held = [user_holdout_split(r, 0.2, 1, rng)[1] for _ in range(3000)]
    assert all(len(t) == 1 for t in held)
    assert stats.chisquare(np.bincount([int(t.users[0]) for t in held], minlength=4)).pvalue > 1e-3
    assert stats.chisquare(np.bincount([int(t.items[0]) for t in held], minlength=3)).pvalue > 1e-3


@pytest.mark.parametrize(
    ("fraction", "entries", "key", "problem"),
    [
        (0.0, 1, "data.test_fraction", "in (0, 1), got 0.0"),
        (1.0, 1, "data.test_fraction", "in (0, 1), got 1.0"),
        (0.5, 0, "data.test_entries", "positive integer, got 0"),
        (0.5, True, "data.test_entries", "positive integer, got True"),
        (0.5, 1.0, "data.test_entries", "positive integer, got 1.0"),
    ],
)
def test_user_holdout_split_refuses_bad_parameters(fraction: float, entries: object, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        user_holdout_split(data(), fraction, entries, np.random.default_rng(0))  # type: ignore[arg-type]
    assert caught.value.key_path == key and problem in caught.value.problem


def test_user_holdout_split_accepts_a_numpy_integer_and_one_entry() -> None:
    whole = data(2)
    train, test = user_holdout_split(whole, 0.5, np.int64(1), np.random.default_rng(0))
    assert_partition(whole, train, test)
    assert set(test.user_counts().tolist()) <= {0, 1} and len(test) > 0
