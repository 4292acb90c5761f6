"""Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui and Stainer, NIPS 2017): byzantine-tolerant choice
of gradients, FedVAE's SecureFilter (Polato, Algorithm 2, line 1).

Of n vectors, at most f byzantine, each vector i gets the score ``s(i) = sum of |V_i - V_j|^2 over the
n - f - 2 vectors j != i closest to it``. Krum picks the vector of least score; Multi-Krum the m vectors
of least scores (computed once, as Blanchard et al. define it), whose average is then the update. The
guarantee of the paper needs ``2f + 2 < n``; the scores exist whenever ``n - f - 2 >= 1``.

Ties of scores go to the lower index, so the choice is a deterministic function of the vectors in
their given order. Squared distances come from the Gram matrix, ``|a|^2 + |b|^2 - 2 a.b``: O(n^2 d), the cost
Blanchard et al. state, as matrix products over blocks of coordinates (`pairwise_squared_distances`);
rounding can make a distance of equal vectors slightly negative, which is clamped to 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks

# Coordinates per block of the Gram matrix: n x 65,536 float32 is 64 MB at n = 250.
_BLOCK = 1 << 16


def pairwise_squared_distances(
    vectors: npt.NDArray[np.floating] | Sequence[npt.NDArray[np.floating]], block: int = _BLOCK
) -> npt.NDArray[np.float64]:
    """``[n, n]``: ``|V_i - V_j|^2`` for n equally long float vectors (the rows of an array, or a sequence); 0 on
    the diagonal.

    The Gram matrix is accumulated over ``block`` coordinates at a time (each block's product in the
    vectors' dtype, the blocks' sum in float64), so the vectors never need to be one ``[n, d]`` array:
    a server can keep its n received gradients as they came.

    Raises:
        ConfigError: no vectors, vectors that are not one-dimensional float arrays of one length, or
            non-finite ones (NaN, Inf, or squared norms beyond the dtype's range).
    """
    where = "pairwise_squared_distances(vectors)"
    rows = list(vectors)
    if not rows or any(not isinstance(row, np.ndarray) or row.ndim != 1 or row.dtype.kind != "f" for row in rows):
        raise ConfigError(where, "must be one or more one-dimensional float arrays")
    length, dtype = rows[0].size, np.result_type(*rows)
    if any(row.size != length for row in rows):
        raise ConfigError(where, f"must be equally long, got lengths {sorted({row.size for row in rows})}")
    step = _checks.integer(block, "pairwise_squared_distances(block)", 1)
    gram = np.zeros((len(rows), len(rows)))
    part = np.empty((len(rows), min(step, length)), dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, length, step):
            width = min(step, length - start)
            for position, row in enumerate(rows):
                part[position, :width] = row[start : start + width]
            gram += part[:, :width] @ part[:, :width].T
    if not np.isfinite(gram).all():
        raise ConfigError(where, "must be finite, with squared norms within the range of their dtype")
    norms = np.diag(gram).copy()
    distances = norms[:, None] + norms[None, :] - 2.0 * gram
    np.maximum(distances, 0.0, out=distances)
    np.fill_diagonal(distances, 0.0)
    return distances


def krum_scores(distances: npt.ArrayLike, f: int) -> npt.NDArray[np.float64]:
    """``[n]``: each vector's Krum score, the sum of its ``n - f - 2`` smallest distances to the others.

    Raises:
        ConfigError: ``distances`` is not a square matrix of finite non-negative numbers, ``f`` is not
            an integer >= 0, or ``n - f - 2 < 1`` (no neighbour to score with).
    """
    matrix = _checks.float_array(distances, "krum_scores(distances)")
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or (matrix < 0).any():
        raise ConfigError(
            "krum_scores(distances)", f"must be a square matrix of non-negative numbers, got shape {matrix.shape}"
        )
    tolerated = _checks.integer(f, "krum_scores(f)", 0)
    n = matrix.shape[0]
    neighbours = n - tolerated - 2
    if neighbours < 1:
        raise ConfigError(
            "krum_scores(f)", f"{n} vectors with f = {tolerated} leave n - f - 2 = {neighbours} neighbours; need >= 1"
        )
    others = matrix.copy()
    np.fill_diagonal(others, np.inf)
    closest = np.partition(others, neighbours - 1, axis=1)[:, :neighbours]
    return closest.sum(axis=1)


def krum_select(distances: npt.ArrayLike, f: int, m: int = 1) -> npt.NDArray[np.int64]:
    """The indices (ascending) of the ``m`` vectors of least Krum score: Krum for ``m = 1``, Multi-Krum above.

    Raises:
        ConfigError: as `krum_scores`, or ``m`` outside ``1..n - f``.
    """
    scores = krum_scores(distances, f)
    count = _checks.integer(m, "krum_select(m)", 1)
    limit = scores.size - int(f)
    if count > limit:
        raise ConfigError("krum_select(m)", f"must be at most n - f = {limit}, got {count}")
    # A stable sort: of equal scores the lower index ranks first.
    return np.sort(np.argsort(scores, kind="stable")[:count]).astype(np.int64)


__all__ = ["krum_scores", "krum_select", "pairwise_squared_distances"]
