"""What a user computes from its own row R^(u) (its items I_u, d_u = |I_u|) and the broadcasts, and the
server's algebra on the sums -- PriviRec's maths without the network.

- `degree_input`: R^(u) itself (0/1 over the items); the sum is diag(V).
- `item_item_input`: the upper triangle of d_u^{-2 alpha} R^(u)T R^(u); the sum is P' (Thm 3.1; 1/d_u at
  GF-CF's alpha = 1/2).
- `power_input`: A^(u)T A^(u) X with A^(u) = d_u^{-alpha} R^(u) V^{alpha-1}, the row of R~ the user holds
  (Alg. 1, step 2): nonzero only on the rows I_u.

Each is the dense form of a `RowBlock` (``degree_rows``, ``item_item_rows``, ``power_rows``), which is what
a user hands secure aggregation: in ideal mode the sum takes the nonzero rows only.

A user without interactions sends zeros: it still takes part in every sum, so that the server does not
learn who has none.
"""

from __future__ import annotations

import numpy as np

from ...models.gfcf import degree_power
from ..secagg import RowBlock


def upper_length(n_items: int) -> int:
    """m (m + 1) / 2: the length of the upper triangle of an m x m matrix, diagonal included."""
    return n_items * (n_items + 1) // 2


def upper_positions(rows: np.ndarray, columns: np.ndarray, n_items: int) -> np.ndarray:
    """The positions of the entries (i, j), i <= j, in the row-major upper triangle."""
    rows = np.asarray(rows, dtype=np.int64)
    columns = np.asarray(columns, dtype=np.int64)
    return rows * n_items - rows * (rows - 1) // 2 + (columns - rows)


def degree_rows(items: np.ndarray, n_items: int) -> RowBlock:
    """R^(u) by its nonzero entries: 1 at each of the user's items, in an m x 1 view."""
    return RowBlock(np.asarray(items, dtype=np.int64), np.ones((items.size, 1)), n_items)


def degree_input(items: np.ndarray, n_items: int) -> np.ndarray:
    return degree_rows(items, n_items).dense()


def item_item_rows(items: np.ndarray, n_items: int, alpha: float = 0.5) -> RowBlock:
    """The upper triangle of d_u^{-2 alpha} R^(u)T R^(u) by its nonzero entries: d_u^{-2 alpha} at every
    pair of the user's items (``items`` ascending)."""
    first, second = np.triu_indices(items.size)
    positions = upper_positions(items[first], items[second], n_items)
    weight = float(max(items.size, 1)) ** (-2.0 * alpha)
    return RowBlock(positions, np.full((positions.size, 1), weight), upper_length(n_items))


def item_item_input(items: np.ndarray, n_items: int, alpha: float = 0.5) -> np.ndarray:
    return item_item_rows(items, n_items, alpha).dense()


def row_weights(items: np.ndarray, degrees: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """A^(u)'s nonzero entries, on the user's items: d_u^-alpha V^(alpha-1) -- the same in every power
    iteration, so a user works them out once."""
    return degree_power(degrees[items], alpha - 1.0) * float(max(items.size, 1)) ** (-alpha)


def power_rows(
    items: np.ndarray, degrees: np.ndarray, basis: np.ndarray, alpha: float = 0.5, weights: np.ndarray | None = None
) -> RowBlock:
    """A^(u)T (A^(u) X) by its nonzero rows, the user's items, of the m x p matrix (``weights``: the
    user's `row_weights`, if it has them)."""
    a = row_weights(items, degrees, alpha) if weights is None else weights
    rows = np.asarray(items, dtype=np.int64)
    return RowBlock(rows, a[:, None] * (a @ basis.take(rows, axis=0)), basis.shape[0])


def power_input(items: np.ndarray, degrees: np.ndarray, basis: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """A^(u)T (A^(u) X) as a dense m x p matrix."""
    return power_rows(items, degrees, basis, alpha).dense().reshape(basis.shape)


def symmetric_from_upper(upper: np.ndarray, n_items: int) -> np.ndarray:
    """The symmetric m x m matrix whose row-major upper triangle is ``upper``."""
    matrix = np.zeros((n_items, n_items))
    rows, columns = np.triu_indices(n_items)
    matrix[rows, columns] = upper
    matrix[columns, rows] = upper
    return matrix


def normalize_item_item(p_prime: np.ndarray, degrees: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """P~ = V^{alpha-1} P' V^{alpha-1}."""
    scale = degree_power(degrees, alpha - 1.0)
    return p_prime * scale[:, None] * scale[None, :]


__all__ = [
    "degree_input",
    "item_item_input",
    "normalize_item_item",
    "power_input",
    "power_rows",
    "row_weights",
    "symmetric_from_upper",
    "upper_length",
    "upper_positions",
]
