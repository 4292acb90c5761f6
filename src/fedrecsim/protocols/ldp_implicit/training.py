"""The server's update of Minto et al.'s Algorithm 2, and the non-private baseline trained the same way.

Steps per epoch (a documented choice). Algorithm 2 performs one update ``V <- V - gamma (grad + 2 lam
V)`` per epoch, while Sec. 4.2 says "each epoch of training performs 20 gradient descent steps to update
the global item matrix". Between two broadcasts of V the server holds exactly one gradient estimate --
the users computed their gradients at the V they received -- so the only readings that need no extra
communication are

(a) ``steps`` updates with the same estimate of the epoch, or
(b) ``steps`` updates each using the estimate from a disjoint ``1/steps`` share of the epoch's
    (already shuffled) reports, as a streaming server would do batch by batch.

The estimator of eq. (9) is linear in the reports, so with equal shares the sum of the ``steps``
share-wise estimates is exactly ``steps`` times the epoch's estimate and the two readings differ only
in how the ``2 lam V`` shrinkage compounds between the steps (relative size ``gamma * lam``, 1e-9 with
the paper's values). We implement (a): ``steps`` applications of `server_step` with the epoch's
estimate (``steps_per_epoch``, default 20). To first order this is one step of ``steps * gamma``; with
``steps_per_epoch = 1`` it is Algorithm 2 verbatim.

MF-NP, the paper's non-private baseline, is the same model trained from the same initial V on the same
schedule, with the exact, unclipped mean gradient of every user (`fedrecsim.models.implicit_mf`, the
non-private FCF) in place of the LDP estimate.
"""

from __future__ import annotations

import numpy as np

from ...data.ratings import FloatArray, Ratings
from ...models.implicit_mf import ImplicitHyper, implicit_round, server_step


def apply_steps(V: FloatArray, gradient: FloatArray, hyper: ImplicitHyper, steps: int) -> FloatArray:
    """``steps`` times ``V <- V - gamma (gradient + 2 lam V)`` with one gradient estimate: the new V."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    for _ in range(steps):
        V = server_step(V, gradient, 1, hyper)
    return V


def exact_mean_gradient(V: FloatArray, ratings: Ratings, hyper: ImplicitHyper) -> FloatArray:
    """The mean over all users of their unclipped item gradients (eq. (5) times -2) at ``V``.

    `implicit_round` with ``gamma = 1`` returns ``V - (mean + 2 lam V)``; the mean is read back from it
    so that the non-private baseline runs exactly the models module's vectorized FCF maths.
    """
    V = np.asarray(V, dtype=np.float64)
    stepped = implicit_round(V, ratings, hyper.alpha, hyper.lam, gamma=1.0, normalize=True)
    return (1.0 - 2.0 * hyper.lam) * V - stepped


def mf_np_trajectory(
    initial: FloatArray, ratings: Ratings, hyper: ImplicitHyper, steps: int, epochs: int
) -> list[FloatArray]:
    """MF-NP: V after each of ``epochs`` epochs of non-private training on the protocol's schedule."""
    trajectory = []
    V = np.asarray(initial, dtype=np.float64)
    for _ in range(epochs):
        V = apply_steps(V, exact_mean_gradient(V, ratings, hyper), hyper, steps)
        trajectory.append(V)
    return trajectory


__all__ = ["apply_steps", "exact_mean_gradient", "mf_np_trajectory"]
