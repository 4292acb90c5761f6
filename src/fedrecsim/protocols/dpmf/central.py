"""The centralized maths of DP-MF: the unit ball, S1's re-optimization of V, and the unprotected baselines.

- `project_unit_ball`: Theorem 1's proof bounds ||eta_j - eta'_j|| <= 2 Delta using ||u_p|| <= 1, so every
  user profile is kept in the unit ball: after each step of eq. (2), u is scaled back onto the ball if it
  left it (the paper's rows start on the unit sphere and it states the bound without saying how it is
  kept; projection is the standard way). The baselines project too, so that a comparison measures only
  what privacy costs.
- `refit_items`: S1 minimizes objective (6) over V with U fixed. Per item (with the per-item-mean
  normalization of `fedrecsim.models.mf`) the minimizer solves
  ``(U_j^T U_j + mu n_j I) v_j = U_j^T r_j - eta_j / 2`` -- the fixed point of the normalized step with the
  noise inside the item's sum -- and that exact minimizer is what Theorem 1 proves private. An item nobody
  rated is published as the minimizer of its part of objective (6) with no data term, ``mu ||v||^2 +
  eta_j . v``: ``v_j = -eta_j / (2 mu)`` (n_j read as 1, the paper's unnormalized objective). Keeping its
  starting profile instead -- as an earlier version did -- published whether the item has a rating without
  noise: the audit (`fedrecsim.protocols.dpmf.audit`, ``item_norm``) told an item rated only by the target
  from an unrated one at eps 2.43 against a claim of 1.
- `train_baseline` / `replay`: the unprotected MF of eqs. (2)-(5) (`fedrecsim.models.mf.CentralizedMF`),
  over every user (the paper's baseline) or over the users that really took part in each iteration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from ...data.metrics import error_summary, rating_errors
from ...data.ratings import Ratings
from ...models.mf import CentralizedMF, MFHyper, predict


def project_unit_ball(rows: np.ndarray) -> np.ndarray:
    """Scale every row with norm > 1 back to norm 1 (in place); returns ``rows``."""
    if rows.ndim == 1:
        # sqrt(rows . rows): what np.linalg.norm computes for a vector, without its dispatch.
        norm = math.sqrt(float(rows.dot(rows)))
        if norm > 1.0:
            rows /= norm
        return rows
    norms = np.linalg.norm(rows, axis=1)
    outside = norms > 1.0
    rows[outside] /= norms[outside, None]
    return rows


def refit_items(U: np.ndarray, V: np.ndarray, ratings: Ratings, eta: np.ndarray, hyper: MFHyper) -> np.ndarray:
    """The V minimizing objective (6) with U fixed (see the module docstring), unrated items included; a new
    array (``V`` gives only the shape: the minimizer does not depend on the starting point).

    With ``hyper.normalize`` false the steps of eqs. (2)-(5) use raw sums, whose fixed point is the
    minimizer of E + mu ||V||^2 + sum eta_j . v_j: the regularizer then weighs ``mu`` in every item's system.
    """
    n_items, d = V.shape
    counts = np.bincount(ratings.items, minlength=n_items)
    weight = counts.astype(np.float64) if hyper.normalize else np.ones(n_items)
    rated = np.flatnonzero(counts)
    order = np.argsort(ratings.items, kind="stable")
    users, values = ratings.users[order], ratings.values[order]
    bounds = np.r_[0, np.cumsum(counts[rated])]
    # One d x d Gram matrix per rated item; a loop over items keeps memory at O(m d^2) where the
    # vectorized outer products of every rating would need O(W d^2).
    gram = np.empty((rated.size, d, d))
    rhs = np.empty((rated.size, d))
    for position in range(rated.size):
        block = slice(bounds[position], bounds[position + 1])
        rows = U[users[block]]
        gram[position] = rows.T @ rows
        rhs[position] = values[block] @ rows
    rhs -= 0.5 * eta[rated]
    gram += (hyper.mu * weight[rated])[:, None, None] * np.eye(d)
    refit = -0.5 * eta / hyper.mu
    refit[rated] = np.linalg.solve(gram, rhs[..., None])[..., 0]
    return refit


def train_baseline(U0: np.ndarray, V0: np.ndarray, ratings: Ratings, hyper: MFHyper, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """Unprotected full-batch MF: ``rounds`` rounds over every user with ratings, U kept in the unit ball."""
    return replay(U0, V0, ratings, hyper, (None for _ in range(rounds)))


def replay(
    U0: np.ndarray, V0: np.ndarray, ratings: Ratings, hyper: MFHyper, participants: Iterable[np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray]:
    """Unprotected MF, one round per entry of ``participants``: the user indices that took part (None: all)."""
    model = CentralizedMF(hyper)
    U, V = project_unit_ball(np.array(U0, dtype=np.float64)), np.array(V0, dtype=np.float64)
    everyone = ratings.user_counts() > 0
    for users in participants:
        if users is None:
            mask = everyone
        else:
            mask = np.zeros(ratings.n_users, dtype=bool)
            mask[users] = True
        U, V = model.round(U, V, ratings, participating_users_mask=mask)
        project_unit_ball(U)
    return U, V


def accuracy(U: np.ndarray, V: np.ndarray, train: Ratings, test: Ratings) -> dict[str, float]:
    """``err_mean``, ``err_q25``..``err_q90`` (absolute errors over the training ratings, the paper's measure,
    unclipped), and train/test RMSE, MAE, raw and of the predictions clipped to the data's declared rating
    scale (``*_clipped``: post-processing of the published model, no privacy cost)."""
    predicted = predict(U, V, train.users, train.items)
    metrics = error_summary(np.abs(predicted - train.values))
    metrics.update(rating_errors(predicted, train.values, train.rating_range, "train"))
    if len(test):
        metrics.update(rating_errors(predict(U, V, test.users, test.items), test.values, train.rating_range, "test"))
    return metrics


#: The quantiles at which a run records its absolute prediction errors (`error_distribution`): every 5%.
ERROR_QUANTILES = tuple(round(0.05 * step, 2) for step in range(21))


def error_distribution(U: np.ndarray, V: np.ndarray, ratings: Ratings, of: str) -> dict[str, Any]:
    """The empirical CDF of the absolute prediction errors over ``ratings``, as its `ERROR_QUANTILES`
    (linear interpolation): 21 numbers whatever the data size, the shape of Hua et al.'s Fig. 7. ``of``
    says whose errors over which ratings (the report's legend)."""
    errors = np.abs(predict(U, V, ratings.users, ratings.items) - ratings.values)
    values = np.quantile(errors, ERROR_QUANTILES) if errors.size else np.zeros(len(ERROR_QUANTILES))
    return {"of": of, "unit": "rating units", "quantiles": list(ERROR_QUANTILES), "values": values.tolist()}


def train_error(U: np.ndarray, V: np.ndarray, train: Ratings) -> float:
    """The mean absolute error over the training ratings (``err_mean``)."""
    return float(np.mean(np.abs(predict(U, V, train.users, train.items) - train.values)))


__all__ = ["ERROR_QUANTILES", "accuracy", "error_distribution", "project_unit_ball", "refit_items", "replay", "train_baseline", "train_error"]
