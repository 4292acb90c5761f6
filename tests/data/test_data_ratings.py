"""The Ratings container: canonical order, validation, and the views everything else is built on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrecsim.data import Ratings
from fedrecsim.errors import DatasetError


def small() -> Ratings:
    # Deliberately unsorted input: construction must sort it by (user, item).
    return Ratings(
        users=np.array([2, 0, 1, 0, 2]),
        items=np.array([1, 3, 0, 0, 2]),
        values=np.array([5.0, 4.0, 3.0, 1.0, 2.0]),
        n_users=4,
        n_items=4,
        rating_range=(1.0, 5.0),
    )


def test_entries_are_stored_sorted_by_user_then_item() -> None:
    r = small()
    assert r.users.tolist() == [0, 0, 1, 2, 2]
    assert r.items.tolist() == [0, 3, 0, 1, 2]
    assert r.values.tolist() == [1.0, 4.0, 3.0, 5.0, 2.0]
    assert np.all(np.diff(r.pair_keys()) > 0)
    assert len(r) == 5


def test_arrays_are_read_only_copies() -> None:
    users = np.array([0, 1])
    r = Ratings(users, np.array([0, 0]), np.array([1.0, 2.0]), 2, 1, (1.0, 5.0))
    users[0] = 1
    assert r.users.tolist() == [0, 1]
    with pytest.raises(ValueError):
        r.values[0] = 3.0
    assert r.users.dtype == np.int64 and r.values.dtype == np.float64


def test_by_user_is_a_cached_csr_view() -> None:
    r = small()
    index = r.by_user()
    assert index is r.by_user()
    assert index.indptr.tolist() == [0, 2, 3, 5, 5]
    assert r.user_items(0).tolist() == [0, 3]
    items, values = r.user_ratings(2)
    assert items.tolist() == [1, 2] and values.tolist() == [5.0, 2.0]
    assert r.user_items(3).size == 0
    with pytest.raises(IndexError):
        r.user_items(4)


def test_counts() -> None:
    r = small()
    assert r.user_counts().tolist() == [2, 1, 2, 0]
    assert r.item_counts().tolist() == [2, 1, 1, 1]


def test_subset_keeps_the_index_space_and_mappings() -> None:
    ids = {"user_ids": np.array([10, 20]), "item_ids": np.array([7, 9])}
    r = Ratings(np.array([0, 1]), np.array([1, 0]), np.array([1.0, 2.0]), 2, 2, (1.0, 5.0), **ids)
    s = r.subset(np.array([False, True]))
    assert (s.n_users, s.n_items, len(s)) == (2, 2, 1)
    assert s.user_ids.tolist() == [10, 20] and s.item_ids.tolist() == [7, 9]
    with pytest.raises(ValueError, match="boolean"):
        r.subset(np.array([0, 1]))


def test_binarize_keeps_positive_entries_as_ones() -> None:
    r = Ratings(np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([-1.0, 0.0, 3.5]), 2, 2, (-5.0, 5.0))
    b = r.binarize()
    assert b.users.tolist() == [1] and b.items.tolist() == [0] and b.values.tolist() == [1.0]
    assert b.rating_range == (0.0, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"users": np.array([0, 1, 0])}, "differ in length"),
        ({"users": np.array([0, 4])}, r"users\[1\] = 4 is outside \[0, 4\)"),
        ({"items": np.array([-1, 0])}, r"items\[0\] = -1"),
        ({"values": np.array([1.0, np.nan])}, r"values\[1\] = nan is not finite"),
        ({"values": np.array([1.0, 6.0])}, r"values\[1\] = 6.0 is outside rating_range"),
        ({"users": np.array([0.0, 1.0])}, "must be integers"),
        (
            {"users": np.array([1, 1]), "items": np.array([2, 2])},
            r"duplicate \(user, item\) pair \(1, 2\) at entries 0 and 1",
        ),
        ({"n_users": -1}, "n_users must be a non-negative integer"),
        ({"rating_range": (5.0, 1.0)}, "min <= max"),
        ({"rating_range": "bad"}, "pair of numbers"),
        ({"users": np.zeros((1, 2), dtype=np.int64)}, "one-dimensional"),
        ({"user_ids": np.array([1, 2])}, "user_ids must be 4 integers"),
    ],
)
def test_invalid_arrays_raise_dataset_error(kwargs: dict, message: str) -> None:
    fields = {
        "users": np.array([0, 1]),
        "items": np.array([0, 1]),
        "values": np.array([1.0, 2.0]),
        "n_users": 4,
        "n_items": 4,
        "rating_range": (1.0, 5.0),
    }
    fields.update(kwargs)
    with pytest.raises(DatasetError, match=message) as caught:
        Ratings(**fields)
    assert isinstance(caught.value, ValueError)


def test_empty_ratings_are_valid() -> None:
    r = Ratings([], [], [], 3, 2, (1.0, 5.0))
    assert len(r) == 0
    assert r.by_user().indptr.tolist() == [0, 0, 0, 0]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, 11), max_size=12),
)
def test_positions_lists_each_users_entries(n_users: int, n_items: int, seed: int, wanted: list[int]) -> None:
    rng = np.random.default_rng(seed)
    cells = rng.permutation(n_users * n_items)[: rng.integers(0, n_users * n_items + 1)]
    r = Ratings(cells // n_items, cells % n_items, np.ones(cells.size), n_users, n_items, (0.0, 1.0))
    users = np.array([u % n_users for u in wanted], dtype=np.int64)
    expected = [item for u in users for item in r.user_items(int(u)).tolist()]
    assert r.items[r.by_user().positions(users)].tolist() == expected
    # And by_user agrees with a dense reconstruction.
    dense = np.zeros((n_users, n_items), dtype=bool)
    dense[cells // n_items, cells % n_items] = True
    for u in range(n_users):
        assert r.user_items(u).tolist() == np.flatnonzero(dense[u]).tolist()
