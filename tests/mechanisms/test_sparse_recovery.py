"""Sparse recovery of a private centroid: the revealed values and the cluster size carry their own noise."""

from __future__ import annotations

import numpy as np

from fedrecsim.mechanisms.sparse_recovery import RecoveryNoise, sparse_recovery


def test_with_negligible_noise_the_centroid_is_the_cluster_mean_on_its_support() -> None:
    # Budgets of 1e12 make every noise scale about 1e-12: what is left is the exact arithmetic.
    noise = RecoveryNoise.calibrate(2, 1.0, 1e12, 1e12, 1e12)
    cluster_sum = np.array([0.0, 6.0, 1.0, 9.0])
    for size in (1, 3):
        centroid = sparse_recovery(np.random.default_rng(0), cluster_sum, size, 2, noise)
        assert np.allclose(centroid, np.array([0.0, 6.0, 0.0, 9.0]) / size, rtol=0, atol=1e-6)


def test_an_empty_cluster_divides_by_one() -> None:
    noise = RecoveryNoise.calibrate(1, 1.0, 1e12, 1e12, 1e12)
    centroid = sparse_recovery(np.random.default_rng(0), [0.0, 4.0], 0, 1, noise)
    assert np.allclose(centroid, [0.0, 4.0], rtol=0, atol=1e-6)


def test_each_revealed_value_has_its_own_noise() -> None:
    noise = RecoveryNoise.calibrate(3, 1.0, 1e12, 1.0, 1e12)
    centroid = sparse_recovery(np.random.default_rng(3), [5.0, 5.0, 5.0, 0.0, 0.0], 10, 3, noise)
    revealed = centroid[:3]
    assert np.unique(revealed).size == 3 and not centroid[3:].any()
