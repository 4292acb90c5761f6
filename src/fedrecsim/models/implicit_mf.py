"""Implicit-feedback matrix factorization: FCF of Ammad-ud-din et al., as restated by Minto et al.

Every entry of the data is an interaction: user ``u`` has the preference ``p_ui = 1`` for the items it
interacted with and ``p_ui = 0`` for all others, with confidence ``c_ui = 1 + alpha r_ui`` (``r_ui``
the entry's value, 0 for items without one, so ``c = 1`` there). Use `Ratings.binarize` first if the
data holds ratings of which only the positive ones count. The loss (Minto et al. eq. (1)) is

    L(X, V) = sum_{u,i} c_ui (p_ui - x_u . v_i)^2 + lam (sum_u |x_u|^2 + sum_i |v_i|^2).

A round, as the federated protocol runs it:

1. each user solves its profile in closed form (eq. (4)),
   ``x_u = (V^T C_u V + lam I)^-1 V^T C_u p(u)``, which minimises its part of L for the current V;
2. each user computes its gradient with respect to the whole item matrix (eq. (5) with the factor of
   eq. (3)): ``grad_u[i] = -2 c_ui (p_ui - x_u . v_i) x_u`` for *every* item ``i`` (an M x F matrix;
   items it never touched contribute ``2 (x_u . v_i) x_u``). This is ``d/dV`` of user u's data term,
   i.e. ``-2 f(u, i)`` in the paper's notation; the regularizer is the server's;
3. the server steps ``V <- V - gamma (mean_u grad_u + 2 lam V)`` over the users that answered (Minto et
   al. average; ``normalize = False`` uses the sum, as eq. (3) writes it).

Because each ``x_u`` minimises L for the current V, ``sum_u grad_u + 2 lam V`` is exactly the gradient
of ``min_X L(X, V)`` (the envelope theorem), so with ``normalize = False`` and a small enough gamma a
round never increases `implicit_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse

from fedrecsim.data.ratings import FloatArray, IntArray, Ratings
from fedrecsim.models._checks import check_dimension, check_flag, check_number
from fedrecsim.models.mf import predict

# Users whose normal equations are built at once, in cells of the (users x F x F) stack.
_CELLS_PER_BLOCK = 1 << 21


@dataclass(frozen=True)
class ImplicitHyper:
    """Hyper-parameters of implicit MF (defaults: Minto et al. Sec. 4.2, and alpha = 1).

    Attributes:
        d: Number of latent factors F.
        gamma: Server learning rate, > 0.
        lam: The joint regularization lambda, >= 0 (> 0 keeps every user's system solvable).
        alpha: Confidence slope: ``c = 1 + alpha r``.
        normalize: Average the users' gradients (True) or sum them (False).
    """

    d: int = 5
    gamma: float = 1e-3
    lam: float = 1e-6
    alpha: float = 1.0
    normalize: bool = True

    def __post_init__(self) -> None:
        check_dimension("protocol.d", self.d)
        check_number("protocol.gamma", self.gamma, positive=True)
        check_number("protocol.lam", self.lam, positive=False)
        check_number("protocol.alpha", self.alpha, positive=False)
        check_flag("protocol.normalize", self.normalize)


def confidence(values: npt.ArrayLike, alpha: float) -> FloatArray:
    """``c = 1 + alpha r`` for interaction values ``r``."""
    return 1.0 + alpha * np.asarray(values, dtype=np.float64)


def user_factors(
    V: FloatArray, items: IntArray, conf: FloatArray, lam: float, gram: FloatArray | None = None
) -> FloatArray:
    """One user's closed-form profile, eq. (4): ``x = (V^T C V + lam I)^-1 V^T C p``.

    With ``c = 1`` and ``p = 0`` off the user's items, ``V^T C V = V^T V + V_J^T diag(c_J - 1) V_J``
    and ``V^T C p = V_J^T c_J``, so the cost is O(M F^2) once for ``V^T V`` (pass it as ``gram`` to
    share it between users) plus O(|J| F^2) per user.

    Args:
        V: ``float64[M, F]``, the item factors.
        items: ``int64[m_u]``, the user's distinct interacted items.
        conf: ``float64[m_u]``, their confidences ``c = 1 + alpha r``.
        lam: Regularization lambda.
        gram: ``V^T V``, if already computed.

    Returns:
        ``float64[F]``; zero for a user without interactions.
    """
    V = np.asarray(V, dtype=np.float64)
    items = np.asarray(items, dtype=np.int64)
    conf = np.asarray(conf, dtype=np.float64)
    if V.ndim != 2 or items.ndim != 1 or conf.shape != items.shape:
        raise ValueError(f"user_factors needs V[M, F], items[m], conf[m]; got {V.shape}, {items.shape}, {conf.shape}")
    V_J = V[items]
    A = (V.T @ V if gram is None else gram) + (V_J.T * (conf - 1.0)) @ V_J + lam * np.eye(V.shape[1])
    return np.linalg.solve(A, V_J.T @ conf)


def item_gradient(V: FloatArray, x_u: FloatArray, items: IntArray, conf: FloatArray) -> FloatArray:
    """User u's gradient of its data term with respect to all of V (eq. (5) times the -2 of eq. (3)).

    ``grad[i] = -2 c_ui (p_ui - x_u . v_i) x_u``: ``-2 conf_k (1 - x_u . v_i) x_u`` for the user's
    items, ``2 (x_u . v_i) x_u`` for every other item. The regularizer ``2 lam V`` is not included; the
    server adds it once (`server_step`).

    Returns:
        ``float64[M, F]``.
    """
    V = np.asarray(V, dtype=np.float64)
    x_u = np.asarray(x_u, dtype=np.float64)
    items = np.asarray(items, dtype=np.int64)
    conf = np.asarray(conf, dtype=np.float64)
    if V.ndim != 2 or x_u.shape != (V.shape[1],) or items.ndim != 1 or conf.shape != items.shape:
        raise ValueError(
            "item_gradient needs V[M, F], x_u[F], items[m], conf[m]; "
            f"got {V.shape}, {x_u.shape}, {items.shape}, {conf.shape}"
        )
    scores = V @ x_u
    coefficient = 2.0 * scores
    coefficient[items] = -2.0 * conf * (1.0 - scores[items])
    return coefficient[:, None] * x_u[None, :]


def server_step(V: FloatArray, gradient_sum: FloatArray, n_users: int, hyper: ImplicitHyper) -> FloatArray:
    """The server's update from the sum of ``n_users`` users' `item_gradient`: a new V.

    ``V - gamma (gradient_sum / n_users + 2 lam V)`` (``normalize``) or ``V - gamma (gradient_sum +
    2 lam V)``.
    """
    if n_users < 1:
        raise ValueError(f"server_step needs at least one user's gradient, got n_users={n_users}")
    gradient = gradient_sum / n_users if hyper.normalize else gradient_sum
    return V - hyper.gamma * (gradient + 2.0 * hyper.lam * V)


def all_user_factors(
    V: FloatArray, ratings: Ratings, alpha: float, lam: float, users: IntArray | None = None
) -> FloatArray:
    """`user_factors` of many users (all if ``users`` is None) at once: ``float64[len(users), F]``.

    The per-user systems are built with sparse products (``W @ vec(v v^T)``) and solved as one stack,
    in blocks of users to bound memory.
    """
    V = np.asarray(V, dtype=np.float64)
    users = np.arange(ratings.n_users) if users is None else np.asarray(users, dtype=np.int64)
    _check_items(V, ratings)
    F = V.shape[1]
    gram = V.T @ V
    outer = (V[:, :, None] * V[:, None, :]).reshape(V.shape[0], F * F)
    ridge = gram + lam * np.eye(F)
    X = np.empty((users.size, F))
    step = max(1, _CELLS_PER_BLOCK // (F * F))
    for start in range(0, users.size, step):
        block = users[start : start + step]
        rows, items, conf = _entries(ratings, block, alpha)
        extra = _sparse(rows, items, conf - 1.0, block.size, ratings.n_items)
        weights = _sparse(rows, items, conf, block.size, ratings.n_items)
        A = ridge + (extra @ outer).reshape(block.size, F, F)
        X[start : start + block.size] = np.linalg.solve(A, (weights @ V)[:, :, None])[:, :, 0]
    return X


def implicit_round(
    V: FloatArray,
    ratings: Ratings,
    alpha: float,
    lam: float,
    gamma: float,
    normalize: bool = True,
    participating_users_mask: npt.NDArray[np.bool_] | None = None,
) -> FloatArray:
    """One round for every user where the mask is true (all if None), vectorized: the new V.

    Equal (up to summation order) to each participating user running `user_factors` and
    `item_gradient` on V and the server running `server_step` on the sum, with ``n_users`` the
    number of participants.
    """
    V = np.asarray(V, dtype=np.float64)
    _check_items(V, ratings)
    hyper = ImplicitHyper(d=V.shape[1], gamma=gamma, lam=lam, alpha=alpha, normalize=normalize)
    if participating_users_mask is None:
        users = np.arange(ratings.n_users)
    else:
        mask = np.asarray(participating_users_mask)
        if mask.dtype != np.bool_ or mask.shape != (ratings.n_users,):
            raise ValueError(
                f"participating_users_mask must be bool[{ratings.n_users}], got {mask.dtype} {mask.shape}"
            )
        users = np.flatnonzero(mask)
    X = all_user_factors(V, ratings, alpha, lam, users)
    rows, items, conf = _entries(ratings, users, alpha)
    scores = predict(X, V, rows, items)
    # Every item gets 2 (x . v) x from every user (sum: 2 V X^T X); an interacted item gets
    # -2 c (1 - s) x instead, so its correction is the difference of the two.
    correction = _sparse(rows, items, -2.0 * conf * (1.0 - scores) - 2.0 * scores, users.size, ratings.n_items)
    gradient_sum = 2.0 * (V @ (X.T @ X)) + correction.T @ X
    return server_step(V, gradient_sum, users.size, hyper)


def implicit_loss(V: FloatArray, ratings: Ratings, alpha: float, lam: float) -> float:
    """``min_X L(X, V)``: the loss of the module docstring with every user's profile solved for V."""
    V = np.asarray(V, dtype=np.float64)
    X = all_user_factors(V, ratings, alpha, lam)
    users = np.arange(ratings.n_users)
    rows, items, conf = _entries(ratings, users, alpha)
    scores = predict(X, V, rows, items)
    # Over all cells (p = 0, c = 1): sum_u x_u^T V^T V x_u; interacted cells replace s^2 by c (1 - s)^2.
    data = float(np.sum((X @ (V.T @ V)) * X)) + float(np.sum(conf * (1.0 - scores) ** 2 - scores**2))
    return data + lam * (float(np.sum(X * X)) + float(np.sum(V * V)))


def _entries(ratings: Ratings, users: IntArray, alpha: float) -> tuple[IntArray, IntArray, FloatArray]:
    """(row in ``users``, item, confidence) of every entry of ``users``, user after user."""
    index = ratings.by_user()
    lengths = index.indptr[users + 1] - index.indptr[users]
    positions = index.positions(users)
    return np.repeat(np.arange(users.size), lengths), index.items[positions], confidence(index.values[positions], alpha)


def _sparse(rows: IntArray, items: IntArray, values: FloatArray, n_rows: int, n_items: int) -> scipy.sparse.csr_matrix:
    return scipy.sparse.csr_matrix((values, (rows, items)), shape=(n_rows, n_items))


def _check_items(V: FloatArray, ratings: Ratings) -> None:
    if V.ndim != 2 or V.shape[0] != ratings.n_items:
        raise ValueError(f"V must have shape ({ratings.n_items}, F), got {V.shape}")



__all__ = [
    "ImplicitHyper",
    "all_user_factors",
    "confidence",
    "implicit_loss",
    "implicit_round",
    "item_gradient",
    "server_step",
    "user_factors",
]
