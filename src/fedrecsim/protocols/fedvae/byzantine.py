"""Byzantine users: who they are and what they send instead of their gradient.

``round(byzantine_fraction * n)`` of the n training users (halves up), drawn uniformly from the run's
`Stream.PROTOCOL` generator, are attackers. Each still computes its honest gradient g (it holds real
data and spends the same compute) and sends, by ``byzantine_policy`` with ``s = byzantine_scale``:

* ``scaled_negative``: ``-s g``; averaged with the honest gradients it reverses the mean once
  ``s`` exceeds ``(1 - share) / share`` (9 at 10 % attackers);
* ``gaussian``: independent ``N(0, s^2)`` entries from the attacker's own generator;
* ``same_value``: ``s`` in every entry, the same vector from every attacker (collusion: the attackers
  are each other's nearest neighbours, the case Krum's ``n - f - 2`` neighbours are counted against);
* ``non_finite``: g with one entry, drawn uniformly, replaced by NaN;
* ``wrong_shape``: g one entry short.

The last two are malformed, not adversarial: they exist to exercise the server's validation, which
must reject them before they reach SecureFilter. With ``sparse = true`` an attacker uses the sparse
format too, with the W1 rows that are non-zero in what it forged (all of them for ``gaussian`` and
``same_value``).
"""

from __future__ import annotations

import math

import numpy as np

from ...models.multvae import Layout
from .config import Policy
from .messages import Gradient, SparseGradient


def choose_attackers(rng: np.random.Generator, users: np.ndarray, fraction: float) -> frozenset[int]:
    """``round(fraction * len(users))`` of ``users`` (halves up), uniformly without replacement."""
    count = math.floor(fraction * users.size + 0.5)
    return frozenset(int(user) for user in rng.permutation(users)[:count])


def forge(policy: Policy, honest: np.ndarray, scale: float, rng: np.random.Generator) -> np.ndarray:
    """What an attacker sends instead of its dense honest gradient ``honest`` (module docstring)."""
    dtype = honest.dtype.type
    if policy == "scaled_negative":
        return -dtype(scale) * honest
    if policy == "gaussian":
        return rng.normal(0.0, scale, honest.size).astype(honest.dtype)
    if policy == "same_value":
        return np.full_like(honest, scale)
    if policy == "non_finite":
        forged = honest.copy()
        forged[rng.integers(honest.size)] = np.nan
        return forged
    return honest[:-1].copy()


def as_message(round_index: int, gradient: np.ndarray, layout: Layout, sparse: bool) -> Gradient | SparseGradient:
    """``gradient`` (dense, possibly forged) in the run's format: dense, or W1 as its non-zero rows and
    the rest (a ``wrong_shape`` vector is short in the rest)."""
    if not sparse:
        return Gradient(round_index, gradient)
    first = layout.first_layer_size
    W1 = gradient[:first].reshape(layout.n_items, layout.hidden)
    items = np.flatnonzero((W1 != 0).any(axis=1))
    return SparseGradient(round_index, items.astype(np.int32), W1[items], gradient[first:].copy())


__all__ = ["as_message", "choose_attackers", "forge"]
