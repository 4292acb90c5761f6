"""Ranking the held-out users (Polato Sec. V-A), and the centralized Mult-VAE the paper plots beside FedVAE.

A held-out user is one with test entries; its training entries are its fold-in (80 % with ``split =
"heldout_users"``). The model ranks every item from the fold-in row in the evaluation pass (no dropout,
z = mu); the fold-in items are excluded from the ranking and its test items are the relevant ones:
``ndcg@K`` and ``recall@K`` (`fedrecsim.data.metrics`, Liang et al.'s normalization of recall) for each
cut-off, averaged over the held-out users. The simulator computes them with the server's ω -- what each
held-out user would compute on its own device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...data.metrics import ndcg_at_k, recall_at_k
from ...data.ratings import IntArray, Ratings
from ...mechanisms.adam import AdamHyper
from ...models.multvae import Batch, Layout, MultVAEHyper, scores, train_centralized

# Held-out users scored per pass, to bound the [users, items] score block.
_USERS_PER_PASS = 512


def ranking_metrics(
    omega: np.ndarray, layout: Layout, hyper: MultVAEHyper, train: Ratings, test: Ratings, cutoffs: Sequence[int]
) -> dict[str, float]:
    """``ndcg@K`` and ``recall@K`` of the held-out users of ``test``, ranked from their ``train`` rows; none
    (an empty dict) when a score is not finite: a diverged ω ranks nothing, and whether its overflow ends in
    inf or stays finite depends on the BLAS kernel, so no kernel may decide whether a run fails."""
    users = np.flatnonzero(test.user_counts())
    index = train.by_user()
    table = np.empty((users.size, train.n_items))
    for start in range(0, users.size, _USERS_PER_PASS):
        chosen = users[start : start + _USERS_PER_PASS]
        table[start : start + chosen.size] = scores(omega, layout, Batch.of_users(index, chosen, train.n_items), hyper)
    if not np.all(np.isfinite(table)):
        return {}
    position = np.full(train.n_users, -1, dtype=np.int64)
    position[users] = np.arange(users.size)

    def score(batch: IntArray) -> np.ndarray:
        return table[position[batch]]

    metrics = ndcg_at_k(score, test, train, cutoffs)
    metrics.update(recall_at_k(score, test, train, cutoffs))
    return metrics


def centralized_curve(
    omega: np.ndarray,
    layout: Layout,
    hyper: MultVAEHyper,
    adam: AdamHyper,
    train: Ratings,
    test: Ratings,
    training_users: IntArray,
    *,
    epochs: int,
    batch_size: int,
    cutoffs: Sequence[int],
    rng: np.random.Generator,
) -> list[dict[str, float]]:
    """The centralized Mult-VAE from the same ω_0 on the same training users: the held-out users' metrics
    after each of ``epochs`` epochs (`fedrecsim.models.multvae.train_centralized`)."""
    data = Batch.of_users(train.by_user(), training_users, train.n_items)
    trajectory = train_centralized(omega, layout, data, hyper, adam, epochs=epochs, batch_size=batch_size, rng=rng)
    return [ranking_metrics(params, layout, hyper, train, test, cutoffs) for params in trajectory]


__all__ = ["centralized_curve", "ranking_metrics"]
