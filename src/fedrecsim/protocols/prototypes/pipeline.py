"""The computations of Algorithm 1, as pure functions: what the silo and server roles run, and what the
W6 benchmark calls directly (without actors or messages) as its floor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import nnls

from ...data.ratings import IntArray, Ratings
from ...mechanisms.private_kmeans import (
    MAX_PROJECTION_DIM,
    PrototypeBudget,
    PrototypeParams,
    PrototypeResult,
    private_prototypes,
    truncate_records,
)
from ...models.nmf import NMFHyper, nmf_dense, nnls_users, observed_matrix


@dataclass(frozen=True)
class SiloData:
    """One silo's users (global indices, ascending) and their training rows (CSR, all items)."""

    label: int
    users: IntArray
    rows: sp.csr_matrix


def silo_data(train: Ratings, labels: IntArray) -> list[SiloData]:
    """The silos that hold at least one user, by ascending label."""
    matrix = observed_matrix(train.users, train.items, train.values, (train.n_users, train.n_items))
    return [
        SiloData(int(label), users, matrix[users])
        for label in np.unique(labels)
        for users in [np.flatnonzero(labels == label)]
    ]


def projection_dim(configured: int, m: int) -> int:
    """``configured``, or (0) the authors' code's ``floor(0.5 ln m)``; within ``[1, MAX_PROJECTION_DIM]``."""
    if configured:
        return configured
    return min(MAX_PROJECTION_DIM, max(1, math.floor(0.5 * math.log(max(m, 1)))))


def silo_prototypes(
    rng: np.random.Generator, rows: sp.csr_matrix, params: PrototypeParams, budget: PrototypeBudget
) -> PrototypeResult:
    """Algorithm 1 line 2: truncate the silo's records to ``s`` entries in ``[0, bound]``, then Algorithm 2."""
    return private_prototypes(rng, truncate_records(rng, rows, params.s, params.bound), params, budget)


def item_factors(rng: np.random.Generator, prototypes: list[np.ndarray], hyper: NMFHyper) -> np.ndarray:
    """Algorithm 1 lines 5-6: stack the prototypes, clip negatives to 0, factorize (eq. 2); returns V."""
    stacked = np.maximum(np.concatenate(prototypes), 0.0)
    _, V = nmf_dense(rng, stacked, hyper)
    return V


def user_factors(rows: sp.csr_matrix, V: np.ndarray, lam: float, fill: str = "observed") -> np.ndarray:
    """Algorithm 1 line 9: each user's non-negative factors for the fixed V (eq. 2 in U alone).

    ``fill = "observed"``: over the user's stored entries (eq. 2's training set T). ``"zeros"``: over every
    item, a missing entry read as 0 (the authors' code) -- `zero_filled_users`.
    """
    if fill == "zeros":
        return zero_filled_users(rows, V, lam)
    return nnls_users(rows, V, lam)


def zero_filled_users(rows: sp.csr_matrix, V: np.ndarray, lam: float) -> np.ndarray:
    """``float64[m, l]``: each row's ``argmin_{u >= 0} ||x - V u||^2 + lam ||u||^2`` over all ``n`` items, the
    unstored entries of ``x`` being 0.

    The objective is ``u^T G u - 2 u^T V^T x + const`` with ``G = V^T V + lam I``, so with ``G = Q diag(w) Q^T``
    and ``R = diag(sqrt w) Q^T`` (positive ``w`` only; ``V^T x`` has no part in G's null space) it is
    ``||R u - b||^2 + const``, ``b = diag(1 / sqrt w) Q^T V^T x``: an ``l x l`` NNLS per user instead of
    one over ``n`` items.
    """
    rank = V.shape[1]
    w, Q = np.linalg.eigh(V.T @ V + lam * np.eye(rank))
    positive = w > w.max(initial=0.0) * 1e-12
    U = np.zeros((rows.shape[0], rank))
    if not positive.any():  # V = 0 and lam = 0: every u fits equally; the least one is 0
        return U
    R = np.sqrt(w[positive])[:, None] * Q[:, positive].T
    targets = np.asarray(sp.csr_matrix(rows) @ V) @ Q[:, positive] / np.sqrt(w[positive])
    for row in range(rows.shape[0]):
        U[row], _ = nnls(R, targets[row])
    return U


__all__ = [
    "SiloData", "item_factors", "projection_dim", "silo_data", "silo_prototypes", "user_factors", "zero_filled_users",
]
