"""Non-private k-means (Lloyd's algorithm with k-means++ seeding): the MF + k-means baseline's prototypes."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from fedrecsim.errors import ConfigError


def _squared_distances(X: sp.csr_matrix, squared_norms: np.ndarray, centers: np.ndarray) -> np.ndarray:
    cross = np.asarray(X @ centers.T)
    return np.maximum(squared_norms[:, None] - 2 * cross + (centers**2).sum(1)[None, :], 0.0)


def kmeans(rng: np.random.Generator, X: sp.csr_matrix | np.ndarray, k: int, iterations: int = 50) -> np.ndarray:
    """``float64[k, n]``: k-means centers of the rows of ``X``.

    Seeds by k-means++ and runs Lloyd's iterations until the assignment stops changing or ``iterations``
    passes. With fewer distinct rows than ``k`` some centers repeat; an emptied cluster keeps its center.
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    m = X.shape[0]
    if m == 0 or k < 1:
        raise ConfigError("kmeans.k", f"needs k >= 1 and at least one row, got k={k} and {m} rows")
    squared_norms = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    centers = np.empty((k, X.shape[1]))
    centers[0] = X[int(rng.integers(m))].toarray().ravel()
    closest = _squared_distances(X, squared_norms, centers[:1]).ravel()
    for index in range(1, k):
        total = closest.sum()
        pick = int(rng.choice(m, p=closest / total)) if total > 0 else int(rng.integers(m))
        centers[index] = X[pick].toarray().ravel()
        closest = np.minimum(closest, _squared_distances(X, squared_norms, centers[index : index + 1]).ravel())
    labels = np.full(m, -1)
    for _ in range(iterations):
        new_labels = np.argmin(_squared_distances(X, squared_norms, centers), axis=1)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
        membership = sp.csr_matrix((np.ones(m), (labels, np.arange(m))), shape=(k, m))
        sizes = np.bincount(labels, minlength=k)
        sums = np.asarray((membership @ X).todense())
        filled = sizes > 0
        centers[filled] = sums[filled] / sizes[filled, None]
    return centers


__all__ = ["kmeans"]
