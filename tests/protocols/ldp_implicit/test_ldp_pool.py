"""The proxy's pool: a release is one uniformly random permutation of the held reports, cut in batches."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrecsim.network.party import Party, Role
from fedrecsim.protocols.ldp_implicit.pool import ReportPool


def _pool(n_users: int, k: int, epoch: int = 1) -> ReportPool:
    """User u's reports carry the indices u*k .. u*k + k - 1, so a report names its sender to the test."""
    pool = ReportPool(epoch, deadline=10.0)
    for user in range(n_users):
        signs = np.where(np.arange(k) % 2 == 0, 1, -1).astype(np.int8)
        pool.add(Party(Role.USER, user), np.arange(user * k, (user + 1) * k, dtype=np.int32), signs)
    return pool


def test_release_keeps_every_report_and_cuts_full_batches() -> None:
    pool = _pool(7, 10)
    assert (pool.users, pool.reports) == (7, 70)
    batches = pool.release(np.random.default_rng(0), batch_size=16)
    assert [indices.size for indices, _ in batches] == [16, 16, 16, 16, 6]
    indices = np.concatenate([indices for indices, _ in batches])
    signs = np.concatenate([signs for _, signs in batches])
    order = np.argsort(indices)
    np.testing.assert_array_equal(indices[order], np.arange(70))
    # Each report kept its own sign: index j was sent with + iff j % 10 is even.
    np.testing.assert_array_equal(signs[order], np.where(np.arange(70) % 10 % 2 == 0, 1, -1))
    assert indices.dtype == np.int32 and signs.dtype == np.int8


def test_the_same_user_twice_counts_once() -> None:
    pool = ReportPool(1, 0.0)
    user = Party(Role.USER, 1)
    pool.add(user, np.array([1], dtype=np.int32), np.array([1], dtype=np.int8))
    pool.add(user, np.array([2], dtype=np.int32), np.array([-1], dtype=np.int8))
    assert (pool.users, pool.reports) == (1, 2)


def test_mismatched_report_arrays_are_refused() -> None:
    with pytest.raises(ValueError, match="equally long"):
        ReportPool(1, 0.0).add(Party(Role.USER, 0), np.arange(3, dtype=np.int32), np.ones(2, dtype=np.int8))


def test_positions_of_one_users_reports_are_uniform_under_the_permutation_null() -> None:
    """User 0 arrived first; after release its reports sit at uniformly random positions of the batch.

    400 releases of 20 users x 5 reports: the 2,000 positions of user 0's reports (scaled to [0, 1))
    are tested against the uniform law; fixed seed, a KS test at level 0.01. The same test on the
    arrival order (no shuffle) rejects with p < 1e-100, so it has the power to see a leak.
    """
    rng = np.random.default_rng(2024)
    n_users, k = 20, 5
    positions, unshuffled = [], []
    for _ in range(400):
        pool = _pool(n_users, k)
        (indices, _), = pool.release(rng, batch_size=n_users * k)
        positions.append(np.flatnonzero(indices < k))
        unshuffled.append(np.arange(k))
    scaled = (np.concatenate(positions) + 0.5) / (n_users * k)
    assert stats.kstest(scaled, "uniform").pvalue > 0.01
    assert stats.kstest((np.concatenate(unshuffled) + 0.5) / (n_users * k), "uniform").pvalue < 1e-100


def test_every_user_is_equally_likely_to_lead_a_batch() -> None:
    """Who holds position 0 of the first batch is uniform over the 10 users (chi-square, 2,000 releases)."""
    rng = np.random.default_rng(7)
    leaders = [int(_pool(10, 4).release(rng, batch_size=8)[0][0][0]) // 4 for _ in range(2000)]
    counts = np.bincount(leaders, minlength=10)
    assert stats.chisquare(counts).pvalue > 0.01


def test_a_new_pool_holds_nothing_and_is_not_held_until_its_deadline() -> None:
    pool = ReportPool(3, deadline=12.5)
    assert (pool.epoch, pool.deadline, pool.held) == (3, 12.5, False) and pool.held is False
    assert (pool.users, pool.reports) == (0, 0)
    assert pool.release(np.random.default_rng(0), batch_size=4) == []  # an empty pool releases no batch


def test_a_batch_of_one_report_is_allowed_and_every_report_goes_out_alone() -> None:
    """batch_size 1: 2 users x 3 reports leave as 6 single-report batches, together the pool's reports."""
    batches = _pool(2, 3).release(np.random.default_rng(1), batch_size=1)
    assert [indices.size for indices, _ in batches] == [1] * 6
    assert sorted(int(indices[0]) for indices, _ in batches) == list(range(6))


@pytest.mark.parametrize("batch_size", [0, -3])
def test_a_batch_size_below_one_is_refused(batch_size: int) -> None:
    with pytest.raises(ValueError, match=f"^batch_size must be >= 1, got {batch_size}$"):
        _pool(2, 3).release(np.random.default_rng(1), batch_size=batch_size)


@pytest.mark.parametrize("indices, signs", [
    (np.zeros((2, 3), dtype=np.int32), np.ones((2, 3), dtype=np.int8)),  # equally shaped, but not 1-D
    (np.zeros(3, dtype=np.int32), np.ones(2, dtype=np.int8)),
], ids=["two-dimensional", "unequal-lengths"])
def test_only_equally_long_one_dimensional_report_arrays_join_a_pool(indices: np.ndarray, signs: np.ndarray) -> None:
    pool = ReportPool(1, 0.0)
    with pytest.raises(ValueError) as caught:
        pool.add(Party(Role.USER, 0), indices, signs)
    assert str(caught.value) == f"indices and signs must be equally long 1-D arrays, got {indices.shape} and {signs.shape}"
    assert (pool.users, pool.reports) == (0, 0)
