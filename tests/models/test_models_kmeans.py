"""Lloyd's k-means with k-means++ seeding: planted clusters are found, centers are the means of their
clusters, k above the number of distinct rows repeats rows instead of failing, and bad arguments name
``kmeans.k``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedrecsim.errors import ConfigError
from fedrecsim.models.kmeans import kmeans

PLANTED = np.array([[0.0, 0.0, 10.0], [10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [10.0, 10.0, 10.0]])


def _clusters(seed: int, per: int = 25, spread: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(PLANTED)), per)
    return PLANTED[labels] + rng.normal(0, spread, size=(labels.size, 3)), labels


def _match(centers: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each target, the distance to its nearest center; asserts the matching is one-to-one."""
    distances = np.linalg.norm(centers[:, None, :] - targets[None, :, :], axis=2)
    nearest = distances.argmin(axis=0)
    assert len(set(nearest.tolist())) == len(targets)
    return distances.min(axis=0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_planted_well_separated_clusters_are_found_and_centers_are_their_means(seed) -> None:
    X, labels = _clusters(seed)
    order = np.random.default_rng(seed + 10).permutation(labels.size)
    X, labels = X[order], labels[order]
    centers = kmeans(np.random.default_rng(seed), sp.csr_matrix(X), 4)
    assert centers.shape == (4, 3)
    means = np.stack([X[labels == j].mean(axis=0) for j in range(4)])
    # Lloyd's fixed point is the planted partition: each center is exactly its cluster's mean.
    assert _match(centers, means).max() < 1e-9


def test_a_dense_array_gives_the_same_centers_as_its_csr_form() -> None:
    X, _ = _clusters(4)
    np.testing.assert_array_equal(kmeans(np.random.default_rng(5), X, 4), kmeans(np.random.default_rng(5), sp.csr_matrix(X), 4))


def test_no_iterations_returns_kmeans_plus_plus_seeds_which_are_rows() -> None:
    X, _ = _clusters(6)
    seeds = kmeans(np.random.default_rng(7), X, 4, iterations=0)
    rows = {tuple(row) for row in X}
    assert all(tuple(center) in rows for center in seeds)


def test_kmeans_plus_plus_never_picks_a_row_at_distance_zero_while_farther_rows_remain() -> None:
    # Nine copies of the origin and one far row: whatever the first pick, D^2 sampling takes the other
    # point next (uniform seeding would take a second origin nine times out of ten).
    X = np.zeros((10, 2))
    X[7] = [5.0, 5.0]
    for seed in range(20):
        seeds = kmeans(np.random.default_rng(seed), X, 2, iterations=0)
        assert {tuple(row) for row in seeds} == {(0.0, 0.0), (5.0, 5.0)}


def test_kmeans_plus_plus_prefers_far_rows_in_proportion_to_squared_distance() -> None:
    # Rows 0 (x3 copies), 0.1 and 0.3 on a line; k = 2 and no Lloyd step. The first pick is uniform; if
    # it is a 0, the second is 0.1 with probability 1 / (1 + 9) and 0.3 with 9 / 10 (D^2 summing to 0.1:
    # any total above zero is a valid distribution).
    X = np.array([[0.0], [0.0], [0.0], [0.1], [0.3]])
    counts = {0.1: 0, 0.3: 0}
    draws = 0
    rng = np.random.default_rng(0)
    for _ in range(1000):
        first, second = kmeans(rng, X, 2, iterations=0)[:, 0]
        if first == 0.0:
            counts[second] += 1
            draws += 1
    share = counts[0.3] / draws
    # ~600 draws: the binomial standard deviation of the share is 0.012; 0.05 is over 4 of them.
    assert draws > 500
    assert share == pytest.approx(0.9, abs=0.05)


def test_more_clusters_than_distinct_rows_repeats_rows_and_keeps_emptied_centers() -> None:
    X = sp.csr_matrix(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 2.0], [1.0, 0.0]]))
    for seed in range(10):
        centers = kmeans(np.random.default_rng(seed), X, 4)
        assert centers.shape == (4, 2) and np.all(np.isfinite(centers))
        assert {tuple(row) for row in centers} == {(1.0, 0.0), (0.0, 2.0)}


def test_one_cluster_is_the_mean_of_all_rows() -> None:
    X, _ = _clusters(8)
    np.testing.assert_allclose(kmeans(np.random.default_rng(9), X, 1), X.mean(axis=0, keepdims=True), rtol=1e-12)


def test_lloyd_stops_when_the_assignment_is_stable_and_otherwise_improves_the_seeds() -> None:
    X, _ = _clusters(10, spread=3.0)

    def cost(centers: np.ndarray) -> float:
        return float(((X[:, None, :] - centers[None]) ** 2).sum(axis=2).min(axis=1).sum())

    seeds = kmeans(np.random.default_rng(11), X, 4, iterations=0)
    one = kmeans(np.random.default_rng(11), X, 4, iterations=1)
    done = kmeans(np.random.default_rng(11), X, 4, iterations=200)
    assert cost(done) <= cost(one) <= cost(seeds)
    assert cost(done) < cost(seeds)
    # At convergence every center is the mean of the rows nearest to it.
    labels = ((X[:, None, :] - done[None]) ** 2).sum(axis=2).argmin(axis=1)
    for j in range(4):
        np.testing.assert_allclose(done[j], X[labels == j].mean(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(kmeans(np.random.default_rng(11), X, 4, iterations=500), done)


def test_a_single_lloyd_step_moves_each_seed_to_its_cluster_mean() -> None:
    X, _ = _clusters(12, spread=2.0)
    seeds = kmeans(np.random.default_rng(13), X, 3, iterations=0)
    labels = ((X[:, None, :] - seeds[None]) ** 2).sum(axis=2).argmin(axis=1)
    expected = np.stack([X[labels == j].mean(axis=0) if np.any(labels == j) else seeds[j] for j in range(3)])
    np.testing.assert_allclose(kmeans(np.random.default_rng(13), X, 3, iterations=1), expected, rtol=1e-12)


@pytest.mark.parametrize(("rows", "k"), [(0, 2), (5, 0), (5, -1)])
def test_no_rows_or_k_below_one_is_refused_naming_the_key(rows, k) -> None:
    with pytest.raises(ConfigError, match=rf"^kmeans\.k: needs k >= 1 and at least one row, got k={k} and {rows} rows$"):
        kmeans(np.random.default_rng(0), np.ones((rows, 3)), k)


def test_k_equal_to_one_row_works() -> None:
    np.testing.assert_array_equal(kmeans(np.random.default_rng(0), np.array([[2.0, 3.0]]), 1), [[2.0, 3.0]])


def reference_lloyd(X: np.ndarray, centers: np.ndarray, iterations: int) -> np.ndarray:
    """Lloyd's iterations written out: nearest center (lowest index on ties), then each non-empty
    cluster's mean; stop when the assignment repeats."""
    centers = centers.copy()
    labels = None
    for _ in range(iterations):
        new = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2).argmin(axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        for j in range(centers.shape[0]):
            if np.any(labels == j):
                centers[j] = X[labels == j].mean(axis=0)
    return centers


@pytest.mark.parametrize("seed", range(8))
def test_lloyd_iterations_from_the_seeds_match_the_definition(seed) -> None:
    rng = np.random.default_rng(100 + seed)
    X = np.round(rng.normal(0, 1, size=(12, 2)) * rng.choice([0.1, 1.0, 5.0], size=(12, 1)), 1)
    for k in (2, 3, 5):
        seeds = kmeans(np.random.default_rng(seed), X, k, iterations=0)
        for iterations in (1, 2, 50):
            np.testing.assert_allclose(
                kmeans(np.random.default_rng(seed), X, k, iterations=iterations), reference_lloyd(X, seeds, iterations),
                rtol=1e-12, atol=1e-12,
            )


def test_lloyd_runs_at_most_50_iterations_by_default() -> None:
    # Quantiles of a Laplace distribution: two-means from these seeds creeps towards its fixed point
    # for about 60 iterations, so the 50th and the 51st iterations differ.
    q = (np.arange(2000) + 0.5) / 2000
    X = np.where(q < 0.5, np.log(2 * q), -np.log(2 - 2 * q))[:, None]
    seeds = kmeans(np.random.default_rng(0), X, 2, iterations=0)
    after_50 = reference_lloyd(X, seeds, 50)
    assert not np.allclose(after_50, reference_lloyd(X, seeds, 51), rtol=1e-12, atol=0)
    np.testing.assert_allclose(kmeans(np.random.default_rng(0), X, 2), after_50, rtol=1e-12, atol=1e-12)
