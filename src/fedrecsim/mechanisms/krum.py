"""Krum and Multi-Krum (Blanchard, El Mhamdi, Guerraoui and Stainer, NIPS 2017): byzantine-tolerant choice
of gradients, FedVAE's SecureFilter (Polato, Algorithm 2, line 1).

Of n vectors, at most f byzantine, each vector i gets the score ``s(i) = sum of |V_i - V_j|^2 over the
n - f - 2 vectors j != i closest to it``. Krum picks the vector of least score; Multi-Krum the m vectors
of least scores (computed once, as Blanchard et al. define it), whose average is then the update. The
guarantee of the paper needs ``2f + 2 < n``; the scores exist whenever ``n - f - 2 >= 1``.

Ties of scores go to the lower index, so the choice is a deterministic function of the vectors in
their given order. Squared distances come from the Gram matrix, ``|a|^2 + |b|^2 - 2 a.b``, computed in
the vectors' dtype (one matrix product: O(n^2 d), the cost Blanchard et al. state; float32 vectors
give float32 sums, relative error about 1e-6 sqrt(d)); rounding can make a distance of equal vectors
slightly negative, which is clamped to 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import _checks


def pairwise_squared_distances(vectors: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """``[n, n]``: ``|V_i - V_j|^2`` for the rows of ``vectors`` (``[n, d]``, finite); 0 on the diagonal.

    Raises:
        ConfigError: ``vectors`` is not a two-dimensional float array of finite numbers.
    """
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2 or vectors.dtype.kind != "f":
        raise ConfigError("pairwise_squared_distances(vectors)", "must be a two-dimensional float array")
    if not np.isfinite(vectors).all():
        raise ConfigError("pairwise_squared_distances(vectors)", "must be finite")
    gram = (vectors @ vectors.T).astype(np.float64)
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
        raise ConfigError("krum_scores(distances)", f"must be a square matrix of non-negative numbers, got shape {matrix.shape}")
    tolerated = _checks.integer(f, "krum_scores(f)", 0)
    n = matrix.shape[0]
    neighbours = n - tolerated - 2
    if neighbours < 1:
        raise ConfigError("krum_scores(f)", f"{n} vectors with f = {tolerated} leave n - f - 2 = {neighbours} neighbours; need >= 1")
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
