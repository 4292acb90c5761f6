"""Reader for a user x item rating matrix saved with ``scipy.sparse.save_npz``.

Row ``u``, column ``j`` holding ``r`` means user ``u`` gave item ``j`` the value ``r``; every *stored*
entry is a rating, so an explicitly stored 0 is a rating of 0 (and an unstored cell is no rating). Rows
and columns are the dense indices; there are no original ids to keep. Any sparse format is accepted
(CSR is what the format is meant for) and converted.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse

from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError, DatasetError


def load_npz(path: str | Path, rating_range: tuple[float, float] | None = None) -> Ratings:
    """Read a sparse user x item matrix.

    Args:
        path: The ``.npz`` file.
        rating_range: The rating scale; default the smallest and largest stored value.

    Raises:
        ConfigError: ``rating_range`` is not a finite pair with min <= max.
        DatasetError: the file is missing or not a scipy sparse matrix, the matrix has no rows, no
            columns or no entries, a value is not finite or outside ``rating_range``, or a cell is
            stored twice.
    """
    if rating_range is not None:
        rating_range = _checked_range(rating_range)
    path = Path(path)
    if not path.is_file():
        raise DatasetError(path, "no such file")
    try:
        matrix = scipy.sparse.load_npz(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise DatasetError(path, f"not a matrix written by scipy.sparse.save_npz ({error})") from error
    n_users, n_items = matrix.shape
    if n_users == 0 or n_items == 0:
        raise DatasetError(path, f"the matrix has shape {matrix.shape}; users and items must both be > 0")
    coo = matrix.tocoo()
    users = coo.row.astype(np.int64)
    items = coo.col.astype(np.int64)
    values = np.asarray(coo.data)
    if values.dtype.kind not in "biuf":
        raise DatasetError(path, f"values must be real numbers, got dtype {values.dtype}")
    values = values.astype(np.float64)
    if not values.size:
        raise DatasetError(path, "the matrix has no stored entries")
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise DatasetError(path, f"entry (row {users[bad[0]]}, column {items[bad[0]]}) is {values[bad[0]]}")
    low, high = (float(values.min()), float(values.max())) if rating_range is None else rating_range
    outside = np.flatnonzero((values < low) | (values > high))
    if outside.size:
        at = outside[0]
        raise DatasetError(
            path, f"entry (row {users[at]}, column {items[at]}) = {values[at]:g} is outside [{low:g}, {high:g}]"
        )
    keys = users * n_items + items
    sorted_keys = np.sort(keys)
    repeated = np.flatnonzero(np.diff(sorted_keys) == 0)
    if repeated.size:
        user, item = divmod(int(sorted_keys[repeated[0]]), n_items)
        raise DatasetError(path, f"cell (row {user}, column {item}) is stored more than once")
    return Ratings(users, items, values, n_users, n_items, (low, high))


def _checked_range(rating_range: object) -> tuple[float, float]:
    try:
        low, high = (float(bound) for bound in rating_range)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ConfigError("data.rating_range", f"must be a pair of numbers, got {rating_range!r}") from None
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise ConfigError("data.rating_range", f"must be finite with min <= max, got {rating_range!r}")
    return low, high


__all__ = ["load_npz"]
