"""`Ratings`: one feedback data set, as three parallel arrays in canonical order.

A data set is a list of ``(user, item, value)`` triples over dense indices ``0 <= user < n_users`` and
``0 <= item < n_items``. Everything downstream (splits, models, metrics, the protocols' per-user data)
works on the arrays directly, so the representation is the one numpy is fastest with: coordinate (COO)
arrays, kept sorted by user and then item. That order is an invariant, established at construction
whatever order the triples came in; it makes `Ratings.by_user` a zero-copy CSR view and a boolean
`Ratings.subset` of a valid data set valid by construction.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from fedrecsim.errors import DatasetError

# Shown as the "file" of a DatasetError raised for arrays that did not come from a file.
_WHERE = "Ratings"

# Pair keys ``user * n_items + item`` must fit in int64 with room to spare.
_MAX_CELLS = 2**62

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class UserIndex(NamedTuple):
    """A CSR view of a `Ratings`: user ``u`` rated ``items[indptr[u]:indptr[u + 1]]`` (ascending).

    ``items`` and ``values`` are the `Ratings` arrays themselves (read-only), not copies.
    """

    indptr: IntArray
    items: IntArray
    values: FloatArray

    def positions(self, users: IntArray) -> IntArray:
        """Entry positions of ``users``' entries, user after user in the given order, each ascending.

        ``items[positions(users)]`` lists those users' items without a Python loop over users.
        """
        starts = self.indptr[users]
        lengths = self.indptr[users + 1] - starts
        # Position p of the concatenation belongs to user block b: its entry is starts[b] + (p - offset[b]).
        offsets = np.cumsum(lengths) - lengths
        return np.repeat(starts - offsets, lengths) + np.arange(lengths.sum(), dtype=np.int64)


@dataclass(frozen=True, eq=False)
class Ratings:
    """Feedback of ``n_users`` users on ``n_items`` items; at most one value per ``(user, item)`` pair.

    Invariants, checked at construction (a violation raises `DatasetError`, which is a ValueError):
    the three arrays are one-dimensional and equally long; ids lie in ``[0, n_users)`` and
    ``[0, n_items)``; no pair occurs twice; values are finite and inside ``rating_range``. The arrays
    are copied, stored sorted by ``(user, item)`` and made read-only, so a `Ratings` never changes and
    never aliases its caller's buffers.

    Attributes:
        users: int64[n], the user of each entry.
        items: int64[n], the item of each entry.
        values: float64[n], the feedback value (a rating, or 1.0 for an implicit interaction).
        n_users: Number of users, including users without any entry.
        n_items: Number of items, including items without any entry.
        rating_range: ``(min_r, max_r)``, the scale the values come from (not their observed extremes).
        user_ids: int64[n_users], the id user ``u`` had in the source (a file's ids); None when the
            dense index is the id.
        item_ids: int64[n_items], likewise for items.
    """

    users: IntArray
    items: IntArray
    values: FloatArray
    n_users: int
    n_items: int
    rating_range: tuple[float, float]
    user_ids: IntArray | None = field(default=None, repr=False)
    item_ids: IntArray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n_users = _count("n_users", self.n_users)
        n_items = _count("n_items", self.n_items)
        if n_users * n_items > _MAX_CELLS:
            raise DatasetError(_WHERE, f"n_users * n_items = {n_users * n_items} exceeds {_MAX_CELLS}")
        low, high = _range(self.rating_range)
        users = _ids("users", self.users, n_users)
        items = _ids("items", self.items, n_items)
        values = _values(self.values)
        if not len(users) == len(items) == len(values):
            raise DatasetError(
                _WHERE,
                f"users, items and values differ in length ({len(users)}, {len(items)}, {len(values)})",
            )
        outside = np.flatnonzero((values < low) | (values > high))
        if outside.size:
            first = outside[0]
            raise DatasetError(
                _WHERE, f"values[{first}] = {float(values[first])} is outside rating_range [{low}, {high}]"
            )
        users, items, values = _canonical(users, items, values, n_items)
        for name, array in (("users", users), ("items", items), ("values", values)):
            array.flags.writeable = False
            object.__setattr__(self, name, array)
        object.__setattr__(self, "n_users", n_users)
        object.__setattr__(self, "n_items", n_items)
        object.__setattr__(self, "rating_range", (low, high))
        object.__setattr__(self, "user_ids", _labels("user_ids", self.user_ids, n_users))
        object.__setattr__(self, "item_ids", _labels("item_ids", self.item_ids, n_items))

    def __len__(self) -> int:
        return int(self.users.size)

    @functools.cached_property
    def _user_index(self) -> UserIndex:
        # The entries are already sorted by user, so the row pointer is all CSR needs.
        indptr = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(self.user_counts(), out=indptr[1:])
        indptr.flags.writeable = False
        return UserIndex(indptr, self.items, self.values)

    def by_user(self) -> UserIndex:
        """The CSR view (row pointer, items, values), computed once and cached."""
        return self._user_index

    def user_items(self, user: int) -> IntArray:
        """The items ``user`` has an entry for, ascending (a read-only view)."""
        start, stop = self._bounds(user)
        return self.items[start:stop]

    def user_ratings(self, user: int) -> tuple[IntArray, FloatArray]:
        """``(items, values)`` of ``user``, items ascending (read-only views)."""
        start, stop = self._bounds(user)
        return self.items[start:stop], self.values[start:stop]

    def user_counts(self) -> IntArray:
        """int64[n_users]: number of entries of each user."""
        return np.bincount(self.users, minlength=self.n_users).astype(np.int64, copy=False)

    def item_counts(self) -> IntArray:
        """int64[n_items]: number of entries of each item."""
        return np.bincount(self.items, minlength=self.n_items).astype(np.int64, copy=False)

    def pair_keys(self) -> IntArray:
        """int64[n]: ``user * n_items + item`` per entry; strictly increasing (the canonical order)."""
        return self.users * np.int64(self.n_items) + self.items

    def subset(self, mask: npt.ArrayLike) -> Ratings:
        """The entries where the boolean ``mask`` (one flag per entry) is true; same users and items."""
        keep = np.asarray(mask)
        if keep.dtype != np.bool_ or keep.shape != self.users.shape:
            raise ValueError(
                f"subset mask must be a boolean array of shape {self.users.shape}, "
                f"got {keep.dtype} {keep.shape}"
            )
        return self.with_entries(self.users[keep], self.items[keep], self.values[keep])

    def with_entries(
        self,
        users: npt.ArrayLike,
        items: npt.ArrayLike,
        values: npt.ArrayLike,
        rating_range: tuple[float, float] | None = None,
    ) -> Ratings:
        """New entries over the same users, items and id mappings (and rating range unless given)."""
        return Ratings(
            users,
            items,
            values,
            self.n_users,
            self.n_items,
            self.rating_range if rating_range is None else rating_range,
            self.user_ids,
            self.item_ids,
        )

    def binarize(self) -> Ratings:
        """Implicit feedback: the entries with a positive value, each set to 1.0, on the scale ``(0, 1)``.

        Implicit-feedback data lists only interactions (a preference ``p = 1``); a rating of zero or
        below is no interaction and is dropped, so every entry a model for implicit feedback sees is a
        positive one.
        """
        positive = self.values > 0
        return self.with_entries(
            self.users[positive], self.items[positive], np.ones(int(positive.sum())), (0.0, 1.0)
        )

    def _bounds(self, user: int) -> tuple[int, int]:
        if not 0 <= user < self.n_users:
            raise IndexError(f"user {user} is outside [0, {self.n_users})")
        indptr = self._user_index.indptr
        return int(indptr[user]), int(indptr[user + 1])


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise DatasetError(_WHERE, f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _range(rating_range: object) -> tuple[float, float]:
    try:
        low, high = (float(bound) for bound in rating_range)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise DatasetError(_WHERE, f"rating_range must be a pair of numbers, got {rating_range!r}") from None
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise DatasetError(_WHERE, f"rating_range must be finite with min <= max, got {rating_range!r}")
    return low, high


def _ids(name: str, raw: object, bound: int) -> IntArray:
    array = np.asarray(raw)
    if array.ndim != 1:
        raise DatasetError(_WHERE, f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise DatasetError(_WHERE, f"{name} must be integers, got dtype {array.dtype}")
    ids = np.array(array, dtype=np.int64)
    outside = np.flatnonzero((ids < 0) | (ids >= bound))
    if outside.size:
        first = outside[0]
        raise DatasetError(_WHERE, f"{name}[{first}] = {ids[first]} is outside [0, {bound})")
    return ids


def _values(raw: object) -> FloatArray:
    array = np.asarray(raw)
    if array.ndim != 1:
        raise DatasetError(_WHERE, f"values must be one-dimensional, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iuf":
        raise DatasetError(_WHERE, f"values must be real numbers, got dtype {array.dtype}")
    values = np.array(array, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise DatasetError(_WHERE, f"values[{bad[0]}] = {float(values[bad[0]])} is not finite")
    return values


def _canonical(
    users: IntArray, items: IntArray, values: FloatArray, n_items: int
) -> tuple[IntArray, IntArray, FloatArray]:
    """Sort by (user, item) and refuse duplicate pairs; O(n) when the input is already sorted."""
    keys = users * np.int64(n_items) + items
    steps = np.diff(keys)
    if np.all(steps > 0):
        return users, items, values
    order = np.argsort(keys, kind="stable")
    repeated = np.flatnonzero(np.diff(keys[order]) == 0)
    if repeated.size:
        first, second = order[repeated[0]], order[repeated[0] + 1]
        raise DatasetError(
            _WHERE,
            f"duplicate (user, item) pair ({users[first]}, {items[first]}) at entries {first} and {second}",
        )
    return users[order], items[order], values[order]


def _labels(name: str, raw: object, size: int) -> IntArray | None:
    if raw is None:
        return None
    array = np.asarray(raw)
    if array.shape != (size,) or (array.size and array.dtype.kind not in "iu"):
        raise DatasetError(_WHERE, f"{name} must be {size} integers, got {array.dtype} {array.shape}")
    labels = np.array(array, dtype=np.int64)
    labels.flags.writeable = False
    return labels


__all__ = ["Ratings", "UserIndex"]
