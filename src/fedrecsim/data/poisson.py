"""Ribero et al.'s synthetic counts: ``X ~ Poisson(exp(U V^T))`` with Gaussian ``U``, ``V`` (Sec. 4.1).

Two ways to draw the factors (``factors``, the scenario key ``data.factors``):

* ``"scaled"`` (the default). The paper's text draws ``U, V`` with standard normal entries; with rank
  ``l`` the log-rate ``u . v`` then has variance ``l`` (100 in the paper), so rates ``exp(u . v)``
  reach ``e^30`` and beyond -- not finite counts anyone could rate. Here the entries have variance
  ``l^(-1/2)``, so that ``u . v`` has variance exactly 1 whatever the rank (rates of median 1, 95 %
  below ``e^2``).
* ``"unit-norm"``: what the authors' notebooks run. Every row of ``U`` and of ``V`` is a standard
  normal vector divided by its length, so ``u . v`` is a cosine in ``[-1, 1]`` of variance ``1/l``
  (0.01 at the notebooks' ``l = 100``): rates lie in ``[1/e, e]`` and at ``l = 100`` almost all within
  ``e^(+-0.3)``, so the counts are close to Poisson(1) noise around a weak low-rank signal. The
  notebooks draw 100,000 users x 500 items (10 silos of 10,000 users), fully observed.

Either way counts are clipped at `COUNT_CAP` (10), the public bound of the data's scale ``(0,
COUNT_CAP)`` that the private protocols calibrate their noise to: about 2 % of the scaled entries reach
it; a unit-norm entry exceeds it with probability at most ``P(Poisson(e) > 10) ~ 1.3e-4`` (the notebooks'
counts are not clipped).

Observation. The paper's matrix is fully observed. A data set here holds ``n_entries`` (user, item)
cells, spread as evenly as possible over the users (``n_entries // n_users`` each, one more for the
first ``n_entries % n_users``) with items drawn uniformly without replacement; each holds its count,
zero included: an observed zero is data. ``n_entries = n_users * n_items`` is the paper's full matrix.
"""

from __future__ import annotations

import numpy as np

from fedrecsim.data.ratings import Ratings
from fedrecsim.data.synthetic import _rows_dot
from fedrecsim.errors import ConfigError

#: Counts are clipped to this public bound; the data's scale is ``(0, COUNT_CAP)``.
COUNT_CAP = 10.0

#: The ways `poisson_factors` draws ``U`` and ``V`` (module docstring).
FACTORS = ("scaled", "unit-norm")


def poisson_factors(
    rng: np.random.Generator, n_users: int, n_items: int, rank: int, factors: str = "scaled"
) -> tuple[np.ndarray, np.ndarray]:
    """``(U, V)`` of shapes ``(n_users, rank)`` and ``(n_items, rank)``, drawn as ``factors`` says.

    Raises:
        ConfigError: ``factors`` is not one of `FACTORS` (named ``data.factors``).
    """
    if factors == "scaled":
        scale = rank**-0.25
        return rng.normal(0.0, scale, size=(n_users, rank)), rng.normal(0.0, scale, size=(n_items, rank))
    if factors == "unit-norm":
        U, V = rng.standard_normal((n_users, rank)), rng.standard_normal((n_items, rank))
        return U / np.linalg.norm(U, axis=1, keepdims=True), V / np.linalg.norm(V, axis=1, keepdims=True)
    raise ConfigError("data.factors", f"got {factors!r}; allowed values: {', '.join(map(repr, FACTORS))}")


def synthetic_poisson(
    rng: np.random.Generator, n_users: int, n_items: int, n_entries: int, rank: int = 10, factors: str = "scaled"
) -> Ratings:
    """Poisson counts with log-rates ``u . v`` on ``n_entries`` observed cells, the factors drawn as
    ``factors`` says (module docstring).

    Raises:
        ConfigError: a size is out of range (named ``data.users``, ``data.items``, ``data.ratings``,
            ``data.rank``) or ``factors`` is unknown (``data.factors``).
    """
    for key, value, low in (("data.users", n_users, 1), ("data.items", n_items, 1), ("data.rank", rank, 1),
                            ("data.ratings", n_entries, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ConfigError(key, f"must be an integer >= {low}, got {value!r}")
    if n_entries > n_users * n_items:
        raise ConfigError("data.ratings", f"{n_entries} exceeds users * items = {n_users * n_items}")
    U, V = poisson_factors(rng, n_users, n_items, rank, factors)
    counts = np.full(n_users, n_entries // n_users, dtype=np.int64)
    counts[: n_entries % n_users] += 1
    # Uniform items without replacement for every user at once: the counts[u] smallest random keys.
    keys = rng.random((n_users, n_items))
    order = np.argsort(keys, axis=1)
    taken = np.arange(n_items)[None, :] < counts[:, None]
    users = np.repeat(np.arange(n_users), counts)
    items = order[taken]
    rates = np.exp(_rows_dot(U, V, users, items))
    values = np.minimum(rng.poisson(rates), COUNT_CAP).astype(np.float64)
    return Ratings(users, items, values, n_users, n_items, (0.0, COUNT_CAP))


__all__ = ["COUNT_CAP", "FACTORS", "poisson_factors", "synthetic_poisson"]
