"""Ribero et al.'s synthetic counts: ``X ~ Poisson(exp(U V^T))`` with Gaussian ``U``, ``V`` (Sec. 4.1).

Scaling. The paper draws ``U, V`` with standard normal entries; with rank ``l`` the log-rate ``u . v``
then has variance ``l`` (100 in the paper), so rates ``exp(u . v)`` reach ``e^30`` and beyond -- not
finite counts anyone could rate. We draw the entries with variance ``l^(-1/2)``, so that ``u . v``
has variance exactly 1 whatever the rank (rates of median 1, 95 % below ``e^2``), and clip counts at
`COUNT_CAP` (10; about 2 % of entries reach it), which is the public bound of the data's scale
``(0, COUNT_CAP)`` the private protocols calibrate their noise to.

Observation. The paper's matrix is fully observed. A data set here holds ``n_entries`` (user, item)
cells, spread as evenly as possible over the users (``n_entries // n_users`` each, one more for the
first ``n_entries % n_users``) with items drawn uniformly without replacement; each holds its count,
zero included: an observed zero is data. ``n_entries = n_users * n_items`` is the paper's full matrix.
"""

from __future__ import annotations

import numpy as np

from fedrecsim.data.ratings import Ratings
from fedrecsim.errors import ConfigError

#: Counts are clipped to this public bound; the data's scale is ``(0, COUNT_CAP)``.
COUNT_CAP = 10.0


def synthetic_poisson(
    rng: np.random.Generator, n_users: int, n_items: int, n_entries: int, rank: int = 10
) -> Ratings:
    """Poisson counts with log-rates ``u . v`` of unit variance on ``n_entries`` observed cells (module docstring).

    Raises:
        ConfigError: a size is out of range (named ``data.users``, ``data.items``, ``data.ratings``,
            ``data.rank``).
    """
    for key, value, low in (("data.users", n_users, 1), ("data.items", n_items, 1), ("data.rank", rank, 1),
                            ("data.ratings", n_entries, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ConfigError(key, f"must be an integer >= {low}, got {value!r}")
    if n_entries > n_users * n_items:
        raise ConfigError("data.ratings", f"{n_entries} exceeds users * items = {n_users * n_items}")
    scale = rank**-0.25
    U = rng.normal(0.0, scale, size=(n_users, rank))
    V = rng.normal(0.0, scale, size=(n_items, rank))
    counts = np.full(n_users, n_entries // n_users, dtype=np.int64)
    counts[: n_entries % n_users] += 1
    # Uniform items without replacement for every user at once: the counts[u] smallest random keys.
    keys = rng.random((n_users, n_items))
    order = np.argsort(keys, axis=1)
    taken = np.arange(n_items)[None, :] < counts[:, None]
    users = np.repeat(np.arange(n_users), counts)
    items = order[taken]
    rates = np.exp(np.einsum("ij,ij->i", U[users], V[items]))
    values = np.minimum(rng.poisson(rates), COUNT_CAP).astype(np.float64)
    return Ratings(users, items, values, n_users, n_items, (0.0, COUNT_CAP))


__all__ = ["COUNT_CAP", "synthetic_poisson"]
