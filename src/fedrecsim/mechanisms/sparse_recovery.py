"""Sparse recovery of one cluster's centroid (Ribero et al. Algorithm 3), with its exact noise scales.

A cluster's records ``x_i`` lie in ``[0, bound]^n`` with at most ``s`` non-zero entries each. From the
cluster's sum ``S = sum_i x_i`` and size ``c``, the released centroid ``v`` is:

1. **support**: the top ``s`` entries of ``S + Gumbel(0, b)``, ``b = 2 s bound / eps_support``. Adding
   or removing one record moves each ``S_j`` by at most ``bound``, so this is ``s`` peeled exponential
   mechanisms of ``eps_support / s`` each (`fedrecsim.mechanisms.exponential`): ``eps_support``-DP.
2. **values**: ``S_j + Laplace(s bound / eps_values)`` on the support. One record changes at most ``s``
   of the revealed sums by at most ``bound`` each: L1 sensitivity ``s bound``, ``eps_values``-DP.
3. **size**: ``c + Laplace(1 / eps_count)``, floored at 1 (sensitivity 1), ``eps_count``-DP.

``v_j = noisy S_j / noisy c`` on the support and 0 elsewhere. For one cluster the whole is
``(eps_support + eps_values + eps_count)``-DP with respect to adding, removing or replacing one of
its records (a replacement inside the cluster moves each ``S_j`` by at most ``bound`` and at most
``s`` revealed sums, since ``x`` and ``x'`` lie in ``[0, bound]``).

Paper reading. Algorithm 3 writes ``mu + Lap(2 Lambda s / (eps n))`` on the mean ``mu = S / n`` of a
cluster of ``n`` records; that is ``Lap(2 s Lambda / eps)`` on the sum, i.e. the scale above with
``eps_values = eps / 2``: the factor 2 pays for a replacement that moves a record between two clusters
(the caller halves the budget for exactly that reason). The paper divides by the true ``n``, whose value
is private; we divide by a noisy size and account for it. Its garbled Gumbel scale is read through the
proof of Theorem 3.1: ``Gumbel(2 Delta q / eps)`` per selection, ``Delta q = bound`` on the sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.exponential import gumbel_top_s


@dataclass(frozen=True)
class RecoveryNoise:
    """The three noise scales of `sparse_recovery` for a support of ``s`` entries bounded by ``bound``.

    Attributes:
        gumbel: Scale of the Gumbel noise on each sum (support selection).
        values: Laplace scale on each revealed sum.
        count: Laplace scale on the cluster size.
    """

    gumbel: float
    values: float
    count: float

    @classmethod
    def calibrate(cls, s: int, bound: float, eps_support: float, eps_values: float, eps_count: float) -> RecoveryNoise:
        """The scales that make each step spend its budget (module docstring)."""
        for name, value in (("bound", bound), ("eps_support", eps_support), ("eps_values", eps_values),
                            ("eps_count", eps_count)):
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(f"sparse_recovery.{name}", f"must be a finite number > 0, got {value!r}")
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1:
            raise ConfigError("sparse_recovery.s", f"must be a positive integer, got {s!r}")
        return cls(gumbel=2.0 * s * bound / eps_support, values=s * bound / eps_values, count=1.0 / eps_count)


def sparse_recovery(
    rng: np.random.Generator, cluster_sum: npt.ArrayLike, size: int, s: int, noise: RecoveryNoise
) -> np.ndarray:
    """A private centroid with exactly ``min(s, n)`` revealed entries (module docstring).

    Args:
        rng: The caller's generator.
        cluster_sum: ``float64[n]``, the sum of the cluster's records.
        size: The number of records in the cluster (may be 0: the output is then noise only).
        s: The support size.
        noise: The calibrated scales.

    Returns:
        ``float64[n]``: zero outside the selected support. Revealed values may be negative (noise).
    """
    cluster_sum = np.asarray(cluster_sum, dtype=np.float64)
    support = gumbel_top_s(rng, cluster_sum, min(s, cluster_sum.size), noise.gumbel)
    values = cluster_sum[support] + rng.laplace(0.0, noise.values, size=support.size)
    noisy_size = max(1.0, size + rng.laplace(0.0, noise.count))
    centroid = np.zeros(cluster_sum.size)
    centroid[support] = values / noisy_size
    return centroid


__all__ = ["RecoveryNoise", "sparse_recovery"]
