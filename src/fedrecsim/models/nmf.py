"""Non-negative matrix factorization with ridge penalty (Ribero et al. eq. 2) and per-user NNLS.

The objective, over the observed entries ``T`` of ``X``:

    minimize over U, V >= 0:   sum_{(i,j) in T} (x_ij - u_i . v_j)^2 + lam (||U||_F^2 + ||V||_F^2)

Eq. (2) writes the data term as a mean (``1/N``) beside an unscaled penalty; taken literally with the
paper's ``lam = 0.1`` the penalty outweighs the data by orders of magnitude on any data set of
realistic size (it is ``lam * (m + n) * l`` against a mean squared error near 1) and drives U and V to
zero. We keep the penalty and the data term on the same (summed) scale, as the SGD literature the
paper builds on does; with a fully observed matrix this is ordinary regularized NMF.

`nmf_observed` minimizes it over the observed entries by the weighted multiplicative updates of Zhang
et al. (ICDM 2006, the paper's ref. [71]) with the ridge term in the denominator:

    U <- U * (X V) / ((W * U V^T) V + lam U),    V <- V * (X^T U) / ((W * U V^T)^T U + lam V)

where ``W`` is the observation mask; each update does not increase the objective. `nmf_dense` is the
same with every entry observed. `nnls_users` solves the U-step exactly for fixed V, one non-negative
least-squares problem per user (`scipy.optimize.nnls` on ``[V_I; sqrt(lam) I] u = [x; 0]``): what
a silo does with the broadcast item matrix (Algorithm 1 line 9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls

from fedrecsim.errors import ConfigError

_TINY = 1e-12


@dataclass(frozen=True)
class NMFHyper:
    """Rank ``rank`` (the paper's l), ridge weight ``lam`` and multiplicative-update ``iterations``."""

    rank: int = 10
    lam: float = 0.1
    iterations: int = 200

    def __post_init__(self) -> None:
        if self.rank < 1:
            raise ConfigError("nmf.rank", f"must be >= 1, got {self.rank}")
        if self.lam < 0:
            raise ConfigError("nmf.lam", f"must be >= 0, got {self.lam}")
        if self.iterations < 0:
            raise ConfigError("nmf.iterations", f"must be >= 0, got {self.iterations}")


def observed_matrix(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """A CSR matrix holding exactly the given entries, explicit zeros included (they are observations)."""
    order = np.lexsort((cols, rows))
    rows, cols, values = rows[order], cols[order], np.asarray(values, dtype=np.float64)[order]
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
    return sp.csr_matrix((values, cols.astype(np.int64), indptr), shape=shape)


def initial_factors(rng: np.random.Generator, shape: tuple[int, int], rank: int, mean: float) -> tuple[np.ndarray, np.ndarray]:
    """Uniform non-negative factors whose product has entries of mean ``mean`` on average."""
    scale = 2.0 * np.sqrt(max(mean, _TINY) / rank)
    return rng.uniform(0.0, scale, size=(shape[0], rank)), rng.uniform(0.0, scale, size=(shape[1], rank))


def nmf_observed(rng: np.random.Generator, X: sp.csr_matrix, hyper: NMFHyper) -> tuple[np.ndarray, np.ndarray]:
    """``(U, V)`` minimizing the objective over the stored entries of ``X`` (non-negative values)."""
    X = sp.csr_matrix(X)
    if X.nnz and X.data.min() < 0:
        raise ConfigError("nmf.X", "non-negative factorization needs non-negative values")
    U, V = initial_factors(rng, X.shape, hyper.rank, float(X.data.mean()) if X.nnz else 0.0)
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    cols = X.indices
    Xt = X.T.tocsr()
    for _ in range(hyper.iterations):
        fitted = _fitted(X, U, V, rows, cols)
        U *= (X @ V) / (fitted @ V + hyper.lam * U + _TINY)
        fitted = _fitted(X, U, V, rows, cols)
        V *= (Xt @ U) / (fitted.T @ U + hyper.lam * V + _TINY)
    return U, V


def _fitted(X: sp.csr_matrix, U: np.ndarray, V: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> sp.csr_matrix:
    """``W * (U V^T)``: the model's values at the stored entries of ``X``, in its sparsity pattern."""
    return sp.csr_matrix((np.einsum("ij,ij->i", U[rows], V[cols]), X.indices, X.indptr), shape=X.shape)


def nmf_dense(rng: np.random.Generator, X: np.ndarray, hyper: NMFHyper) -> tuple[np.ndarray, np.ndarray]:
    """``(U, V)`` minimizing the objective with every entry of the dense ``X >= 0`` observed."""
    X = np.asarray(X, dtype=np.float64)
    if X.size and X.min() < 0:
        raise ConfigError("nmf.X", "non-negative factorization needs non-negative values (clip first)")
    U, V = initial_factors(rng, X.shape, hyper.rank, float(X.mean()) if X.size else 0.0)
    for _ in range(hyper.iterations):
        U *= (X @ V) / (U @ (V.T @ V) + hyper.lam * U + _TINY)
        V *= (X.T @ U) / (V @ (U.T @ U) + hyper.lam * V + _TINY)
    return U, V


def nnls_users(X: sp.csr_matrix, V: np.ndarray, lam: float) -> np.ndarray:
    """``float64[m, l]``: each row's ``argmin_{u >= 0} ||x_I - V_I u||^2 + lam ||u||^2`` over its stored entries."""
    X = sp.csr_matrix(X)
    rank = V.shape[1]
    ridge = np.sqrt(lam) * np.eye(rank)
    zeros = np.zeros(rank)
    U = np.zeros((X.shape[0], rank))
    for row in range(X.shape[0]):
        start, stop = X.indptr[row], X.indptr[row + 1]
        if start == stop:
            continue
        items = X.indices[start:stop]
        U[row], _ = nnls(np.vstack([V[items], ridge]), np.concatenate([X.data[start:stop], zeros]))
    return U


__all__ = ["NMFHyper", "initial_factors", "nmf_dense", "nmf_observed", "nnls_users", "observed_matrix"]
