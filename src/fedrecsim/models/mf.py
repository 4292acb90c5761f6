"""Explicit-feedback matrix factorization after Hua et al. (2015), eqs. (1)-(5).

Ratings are approximated by ``r_ij ~ u_i . v_j`` with user profiles ``U`` (n x d) and item profiles
``V`` (m x d), both initialised with uniformly random unit rows. One *round* is one full-batch gradient
step over the users ``S`` taking part, every quantity computed from ``U(t-1), V(t-1)``:

- user ``i`` with rated items ``J_i`` and errors ``e_ij = r_ij - u_i . v_j`` has the gradient
  ``grad_u_i = -2 sum_j e_ij v_j`` (eq. 4) and moves to
  ``u_i(t) = u_i - gamma (grad_u_i / |J_i| + 2 lambda u_i)`` (eq. 2);
- it contributes ``g_ij = -2 e_ij u_i`` (with its *old* ``u_i``) to every item it rated;
- item ``j`` with ``n_j > 0`` contributions ``G_j = sum_i g_ij`` (eq. 5) moves to
  ``v_j(t) = v_j - gamma (G_j / n_j + 2 mu v_j)`` (eq. 3).

Normalization is a documented departure from the paper: eqs. (2)-(5) use the raw sums, which with the
paper's gamma = 2^-5 diverge as a full-batch step on MovieLens-sized data (an item's sum runs over
hundreds of raters). ``MFHyper.normalize = False`` restores the raw sums (drop the ``/ |J_i|`` and
``/ n_j``). A user without ratings has a zero gradient and only shrinks by its regularizer; an item
nobody rated this round is left unchanged, because the recommender only touches the items it received
gradients for.

The per-user and per-item steps (`user_step`, `item_step`) are what the federated protocols run on each
party; `CentralizedMF` is the same round vectorized over all users, the reference those protocols are
tested against.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse

from fedrecsim.data.ratings import FloatArray, IntArray, Ratings
from fedrecsim.models._checks import check_dimension, check_flag, check_number

# Predictions are computed in blocks of this many entries, to bound the gathered (block x d) arrays.
_ENTRIES_PER_BLOCK = 1 << 15


@dataclass(frozen=True)
class MFHyper:
    """Hyper-parameters of `user_step`, `item_step` and `CentralizedMF` (defaults: Hua et al. Sec. 5).

    Attributes:
        d: Dimension of the profiles.
        gamma: Gain factor (learning rate), > 0.
        lam: User regularization lambda, >= 0.
        mu: Item regularization mu, >= 0.
        normalize: Divide each gradient sum by its number of terms (see the module docstring).
    """

    d: int = 50
    gamma: float = 2.0**-5
    lam: float = 0.001
    mu: float = 0.001
    normalize: bool = True

    def __post_init__(self) -> None:
        check_dimension("protocol.d", self.d)
        check_number("protocol.gamma", self.gamma, positive=True)
        check_number("protocol.lam", self.lam, positive=False)
        check_number("protocol.mu", self.mu, positive=False)
        check_flag("protocol.normalize", self.normalize)


def unit_rows(rng: np.random.Generator, n: int, d: int) -> FloatArray:
    """``float64[n, d]`` whose rows are independent and uniform on the unit sphere.

    The paper's initialization ("uniformly random norm 1 rows"): a standard normal vector is
    rotation-invariant, so normalizing it gives the uniform distribution on the sphere.
    """
    rows = rng.standard_normal((n, d))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def user_step(
    u: FloatArray, v_rows: FloatArray, ratings: FloatArray, hyper: MFHyper
) -> tuple[FloatArray, FloatArray]:
    """One user's part of a round: its new profile and its gradient rows for the items it rated.

    Args:
        u: ``float64[d]``, the user's current profile.
        v_rows: ``float64[m_i, d]``, the current profiles of the user's rated items.
        ratings: ``float64[m_i]``, the user's ratings of those items, in the same order.
        hyper: The hyper-parameters.

    Returns:
        ``(new_u, item_grads)``: ``new_u`` per eq. (2) and ``item_grads[k] = -2 e_k u`` (``float64[m_i,
        d]``), computed with the *old* ``u``, row ``k`` for item ``k`` of ``v_rows``.
    """
    u = np.asarray(u, dtype=np.float64)
    v_rows = np.asarray(v_rows, dtype=np.float64)
    ratings = np.asarray(ratings, dtype=np.float64)
    if u.ndim != 1 or v_rows.shape != (ratings.size, u.size) or ratings.ndim != 1:
        raise ValueError(
            f"user_step needs u[d], v_rows[m, d], ratings[m]; got {u.shape}, {v_rows.shape}, {ratings.shape}"
        )
    errors = ratings - v_rows @ u
    grad_u = -2.0 * (errors @ v_rows)
    if hyper.normalize and ratings.size:
        grad_u /= ratings.size
    new_u = u - hyper.gamma * (grad_u + 2.0 * hyper.lam * u)
    return new_u, -2.0 * errors[:, None] * u[None, :]


def item_step(v_rows: FloatArray, grad_sums: FloatArray, counts: IntArray, hyper: MFHyper) -> FloatArray:
    """The recommender's update of item profiles from summed gradients, per eq. (3).

    Args:
        v_rows: ``float64[m, d]``, current item profiles.
        grad_sums: ``float64[m, d]``, ``G_j``: the sum of the gradient rows received for each item.
        counts: ``[m]``, ``n_j``: how many users contributed to each item (with ``normalize``, the
            divisor of ``G_j``; a weighted estimate may pass a float count); rows with 0 are returned
            unchanged.
        hyper: The hyper-parameters.

    Returns:
        ``float64[m, d]``, the new profiles (a new array).
    """
    v_rows = np.asarray(v_rows, dtype=np.float64)
    grad_sums = np.asarray(grad_sums, dtype=np.float64)
    counts = np.asarray(counts)
    if v_rows.ndim != 2 or grad_sums.shape != v_rows.shape or counts.shape != (v_rows.shape[0],):
        raise ValueError(
            f"item_step needs v_rows[m, d], grad_sums[m, d], counts[m]; "
            f"got {v_rows.shape}, {grad_sums.shape}, {counts.shape}"
        )
    touched = counts > 0
    gradient = grad_sums[touched]
    if hyper.normalize:
        gradient = gradient / counts[touched, None]
    new_rows = v_rows.copy()
    new_rows[touched] = v_rows[touched] - hyper.gamma * (gradient + 2.0 * hyper.mu * v_rows[touched])
    return new_rows


def predict(U: FloatArray, V: FloatArray, users: npt.ArrayLike, items: npt.ArrayLike) -> FloatArray:
    """``float64[n]``: ``U[users[k]] . V[items[k]]`` for every k, in bounded memory."""
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    if users.shape != items.shape or users.ndim != 1:
        raise ValueError(f"users and items must be equally long 1-D arrays, got {users.shape} and {items.shape}")
    out = np.empty(users.size)
    for start in range(0, users.size, _ENTRIES_PER_BLOCK):
        block = slice(start, start + _ENTRIES_PER_BLOCK)
        out[block] = np.einsum("ij,ij->i", U[users[block]], V[items[block]])
    return out


class CentralizedMF:
    """The round of the module docstring, vectorized across all users at once (no loop over users).

    This is the centralized reference: it computes exactly what every user running `user_step` and
    the recommender running `item_step` compute together, up to floating-point summation order.
    """

    def __init__(self, hyper: MFHyper) -> None:
        self.hyper = hyper

    def round(
        self,
        U: FloatArray,
        V: FloatArray,
        ratings: Ratings,
        participating_users_mask: npt.NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """One round over the users where the mask is true (all users if None); returns new ``(U, V)``.

        Users outside the mask keep their profiles and contribute nothing; the inputs are not modified.
        """
        _check_factors(U, V, ratings, self.hyper.d)
        if participating_users_mask is None:
            users = np.arange(ratings.n_users)
        else:
            mask = np.asarray(participating_users_mask)
            if mask.dtype != np.bool_ or mask.shape != (ratings.n_users,):
                raise ValueError(
                    f"participating_users_mask must be bool[{ratings.n_users}], got {mask.dtype} {mask.shape}"
                )
            users = np.flatnonzero(mask)
        index = ratings.by_user()
        lengths = index.indptr[users + 1] - index.indptr[users]
        positions = index.positions(users)
        items = index.items[positions]
        rows = np.repeat(np.arange(users.size), lengths)
        U_s = U[users]
        indptr = np.zeros(users.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        errors = index.values[positions] - predict(U_s, V, rows, items)
        E = scipy.sparse.csr_matrix((errors, items, indptr), shape=(users.size, ratings.n_items))
        grad_u = -2.0 * (E @ V)
        if self.hyper.normalize:
            grad_u /= np.maximum(lengths, 1)[:, None]
        new_U = U.copy()
        new_U[users] = U_s - self.hyper.gamma * (grad_u + 2.0 * self.hyper.lam * U_s)
        grad_sums = -2.0 * (E.T @ U_s)
        counts = np.bincount(items, minlength=ratings.n_items)
        return new_U, item_step(V, grad_sums, counts, self.hyper)

    def fit(
        self,
        U0: FloatArray,
        V0: FloatArray,
        ratings: Ratings,
        rounds: int,
        on_round: Callable[[int, FloatArray, FloatArray], None] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """``rounds`` rounds with every user taking part; ``on_round(t, U, V)`` after round t (1-based)."""
        if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 0:
            raise ValueError(f"rounds must be a non-negative integer, got {rounds!r}")
        U, V = np.array(U0, dtype=np.float64), np.array(V0, dtype=np.float64)
        for t in range(1, rounds + 1):
            U, V = self.round(U, V, ratings)
            if on_round is not None:
                on_round(t, U, V)
        return U, V


def sequential_sgd_epoch(
    U: FloatArray, V: FloatArray, ratings: Ratings, hyper: MFHyper, rng: np.random.Generator
) -> tuple[FloatArray, FloatArray]:
    """One pass of per-rating SGD (the paper's "SGD") over all ratings in a uniformly random order.

    Each rating ``(i, j, r)`` in turn applies eqs. (2)-(5) restricted to that one rating, both
    profiles computed from their values just before the step:
    ``u_i -= gamma (-2 e v_j + 2 lambda u_i)`` and ``v_j -= gamma (-2 e u_i + 2 mu v_j)``.
    ``hyper.normalize`` plays no part (every step has exactly one term). Inherently sequential: this
    is a Python loop over ratings, meant as a baseline, not for large data.

    Returns:
        New ``(U, V)``; the inputs are not modified.
    """
    _check_factors(U, V, ratings, hyper.d)
    U, V = np.array(U, dtype=np.float64), np.array(V, dtype=np.float64)
    gamma, lam2, mu2 = hyper.gamma, 2.0 * hyper.lam, 2.0 * hyper.mu
    order = rng.permutation(len(ratings))
    for i, j, r in zip(ratings.users[order].tolist(), ratings.items[order].tolist(), ratings.values[order].tolist()):
        u, v = U[i], V[j]
        error = r - float(u @ v)
        old_u = u.copy()
        u -= gamma * (-2.0 * error * v + lam2 * u)
        v -= gamma * (-2.0 * error * old_u + mu2 * v)
    return U, V


def _check_factors(U: FloatArray, V: FloatArray, ratings: Ratings, d: int) -> None:
    expected_u, expected_v = (ratings.n_users, d), (ratings.n_items, d)
    if np.shape(U) != expected_u or np.shape(V) != expected_v:
        raise ValueError(f"U and V must have shapes {expected_u} and {expected_v}, got {np.shape(U)} and {np.shape(V)}")



__all__ = ["CentralizedMF", "MFHyper", "item_step", "predict", "sequential_sgd_epoch", "unit_rows", "user_step"]
