"""Balcan et al.'s private k-means subroutines as Ribero et al.'s Algorithm 2 uses them, each against
its definition computed here: the Laplace threshold test and the partition's per-level budget, the
dyadic cubes a partition keeps, the exact output law of the local swaps (chi-square), the clipped
losses, the truncation, and the budget every subroutine of `private_prototypes` is given."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms import private_kmeans as pk
from fedrecsim.mechanisms.private_kmeans import (
    MAX_PROJECTION_DIM,
    PrototypeBudget,
    PrototypeParams,
    assign,
    candidate_centers,
    clip_rows,
    clipped_loss,
    jl_project,
    keep_probability,
    local_swap,
    partition_depth,
    private_partition,
    private_prototypes,
    record_losses,
    squared_distances,
    truncate_records,
)


def laplace_keep(count: float, epsilon_level: float, gamma: float) -> float:
    """P(count + Lap(1 / epsilon_level) >= gamma), from scipy's Laplace law."""
    return float(stats.laplace.sf(gamma - count, scale=1 / epsilon_level))


# ------------------------------------------------------------------ the threshold test and the depth


def test_keep_probability_equals_the_laplace_tail_on_both_sides_of_the_threshold() -> None:
    gamma, eps = 10.0, 0.3
    counts = np.array([0, 8, 9.5, 10, 10.5, 11, 12, 13, 25])  # gaps -3 .. 4.5, three of them in (0, 1)
    expected = [laplace_keep(c, eps, gamma) for c in counts]
    np.testing.assert_allclose(keep_probability(counts, eps, gamma), expected, rtol=1e-12)
    assert keep_probability([10], eps, gamma)[0] == 0.5
    np.testing.assert_allclose(keep_probability([0, 1], 2.0, 0.25), [0.5 * math.exp(-0.5), 1 - 0.5 * math.exp(-1.5)])


@pytest.mark.parametrize(("m", "depth"), [(1, 1), (2, 1), (7, 1), (8, 2), (20, 2), (21, 3), (1000, 6), (1097, 7)])
def test_partition_depth_is_floor_ln_m_and_at_least_one(m, depth) -> None:
    assert partition_depth(m) == depth


# ------------------------------------------------------------------ private partition (Algorithm 4)


def dyadic_centers(Y: np.ndarray, low: np.ndarray, side: float, depth: int) -> set[tuple[float, ...]]:
    """The root's center and the center of every non-empty dyadic sub-cube of ``low + [0, side)^p``."""
    inside = np.all((Y >= low) & (Y < low + side), axis=1)
    centers = {tuple(low + side / 2)}
    for level in range(1, depth + 1):
        width = side / 2**level
        for cell in np.unique(np.floor((Y[inside] - low) / width), axis=0):
            centers.add(tuple(low + (cell + 0.5) * width))
    return centers


@pytest.mark.parametrize("p", [2, 3])
def test_at_a_huge_budget_the_partition_keeps_exactly_the_non_empty_dyadic_cubes(p) -> None:
    rng = np.random.default_rng(p)
    low, side, depth = np.full(p, -4.0), 8.0, 3
    Y = np.concatenate([
        rng.normal(1.0, 0.7, size=(150, p)),
        rng.uniform(-4, 4, size=(40, p)),
        rng.uniform(5, 9, size=(10, p)),  # outside the cube: never counted
        np.full((1, p), -4.0),  # on the lower faces: inside
        np.full((1, p), 4.0),  # on the upper faces: outside
        np.array([[0.0] + [-3.9] * (p - 1)]),  # on a midpoint: the upper half
        np.array([[2.0] + [-1.1] * (p - 1)]),  # on a level-2 midpoint
    ])
    centers = private_partition(rng, Y, low, side, epsilon=1e12, depth=depth)
    assert centers.shape[1] == p
    np.testing.assert_array_equal(centers[0], low + side / 2)
    found = {tuple(row) for row in centers}
    assert len(found) == centers.shape[0]
    assert found == dyadic_centers(Y, low, side, depth)
    assert np.all((centers > low) & (centers < low + side))


def test_the_partition_of_an_empty_cube_keeps_the_root() -> None:
    centers = private_partition(np.random.default_rng(0), np.full((3, 2), 50.0), np.zeros(2), 1.0, 1e12, 2)
    # All records lie outside: every child is empty and kept with P = 0.5 exp(-eps' gamma) = 0.5 / 9.
    assert centers.shape[1] == 2 and tuple(centers[0]) == (0.5, 0.5)


def _child_keeps(Y: np.ndarray, epsilon: float, depth: int, runs: int, seed: int) -> np.ndarray:
    """Over ``runs`` partitions of [0, 1) (p = 1), how often each level-1 child (lower, upper) was kept."""
    rng = np.random.default_rng(seed)
    kept = np.zeros((runs, 2), dtype=bool)
    for run in range(runs):
        centers = private_partition(rng, Y, np.zeros(1), 1.0, epsilon, depth)[:, 0]
        kept[run] = [np.any(centers == 0.25), np.any(centers == 0.75)]
    return kept


@pytest.mark.parametrize("depth", [1, 2])
def test_each_level_spends_epsilon_over_two_depth_with_threshold_two_ln_m_over_it(depth) -> None:
    """20 records, 13 in the lower half and 7 in the upper: each child is kept with the Laplace tail
    probability at eps' = eps / (2 depth) and gamma = 2 ln 20 / eps' (0.97 and 0.21 here)."""
    Y = np.concatenate([np.full(13, 0.1), np.full(7, 0.6)])[:, None]
    epsilon = 2.0 * depth
    level = epsilon / (2 * depth)
    gamma = 2 * math.log(20) / level
    kept = _child_keeps(Y, epsilon, depth, 3000, 10 + depth)
    for child, count in ((0, 13), (1, 7)):
        expected = laplace_keep(count, level, gamma)
        # Binomial sd at most 0.0091 over 3000 runs; 0.04 is over 4 of them.
        assert kept[:, child].mean() == pytest.approx(expected, abs=0.04), (child, expected)


def test_empty_children_are_decided_too_and_independently() -> None:
    """One record (m = 1): gamma = 2 ln 2 / eps', so an empty child is kept with probability
    0.5 exp(-2 ln 2) = 1/8 whatever epsilon, the record's child with the Laplace tail, independently."""
    Y = np.array([[0.3]])
    level = 1.2 / 2  # epsilon 1.2, depth 1
    gamma = 2 * math.log(2) / level
    kept = _child_keeps(Y, 1.2, 1, 4000, 20)
    lower, upper = laplace_keep(1, level, gamma), 0.125
    # sd <= 0.008; tolerances over 4 sd.
    assert kept[:, 0].mean() == pytest.approx(lower, abs=0.035)
    assert kept[:, 1].mean() == pytest.approx(upper, abs=0.025)
    assert (kept[:, 0] & kept[:, 1]).mean() == pytest.approx(lower * upper, abs=0.02)


def test_every_one_of_the_two_to_the_p_children_is_decided() -> None:
    # p = 3, one record, depth 1: 8 children, 7 of them empty, each kept with probability 1/8.
    rng = np.random.default_rng(21)
    level = 0.8 / 2
    expected = 1 + laplace_keep(1, level, 2 * math.log(2) / level) + 7 / 8
    sizes = [private_partition(rng, np.array([[0.1, 0.1, 0.1]]), np.zeros(3), 1.0, 0.8, 1).shape[0] for _ in range(3000)]
    # The number of centers has sd about 0.95; the mean of 3000 has sd 0.017.
    assert np.mean(sizes) == pytest.approx(expected, abs=0.07)


@pytest.mark.parametrize("p", [0, MAX_PROJECTION_DIM + 1])
def test_the_projection_dimension_must_be_between_one_and_the_maximum(p) -> None:
    message = f"private_partition.p: must be in [1, {MAX_PROJECTION_DIM}], got {p}"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        private_partition(np.random.default_rng(0), np.zeros((2, p)), np.zeros(p), 1.0, 1.0, 1)


@pytest.mark.parametrize("p", [1, MAX_PROJECTION_DIM])
def test_the_extreme_projection_dimensions_are_accepted(p) -> None:
    # 5000 records: each of the 2^p - 1 empty children is kept with probability 0.5 / 5000^2 only.
    centers = private_partition(np.random.default_rng(0), np.full((5000, p), 0.2), np.zeros(p), 1.0, 1e12, 1)
    assert {tuple(row) for row in centers} == {(0.5,) * p, (0.25,) * p}


# ------------------------------------------------------------------ candidate centers (Algorithm 5)


def test_candidate_grids_are_randomly_shifted_cubes_of_side_two_radius() -> None:
    rng = np.random.default_rng(30)
    radius = 10.0
    Y = np.zeros((5, 2))
    roots = []
    for _ in range(300):
        centers = candidate_centers(rng, Y, radius, 1e12, 1, 2)
        root = centers[0]
        roots.append(root)
        # The record at 0 lies in the cube [root - radius, root + radius): its level-1 and level-2
        # cubes are kept, centered radius / 2 and radius / 4 from their parents' centers.
        assert centers.shape[0] >= 3
        level1 = root + radius / 2 * np.where(0.0 >= root, 1, -1)
        assert any(np.allclose(row, level1) for row in centers[1:])
        level2 = level1 + radius / 4 * np.where(0.0 >= level1, 1, -1)
        assert any(np.allclose(row, level2) for row in centers[1:])
    roots = np.array(roots)
    assert np.all(np.abs(roots) <= radius)
    # Shifts uniform on [-radius, radius]^p.
    assert roots.min() < -0.9 * radius and roots.max() > 0.9 * radius
    assert stats.kstest(roots[:, 0] / radius, "uniform", args=(-1, 2)).pvalue > 0.001


@pytest.mark.parametrize("y", [(0.8, -0.4), (-0.95, 0.9)])
def test_records_outside_a_grids_shifted_cube_are_dropped_from_it(y) -> None:
    """200 records at one point y (in units of the radius), one grid, depth 1, a huge budget: their child is
    kept exactly when they lie in the shifted cube [v - r, v + r) -- the root's center is v -- and an empty
    child only with probability 0.5 / 200^2. So the grid finds a child iff the records count in it, which
    happens with probability prod_d (1 - |y_d| / 2) for v uniform on [-r, r]^2 (0.48 and 0.29 here)."""
    rng = np.random.default_rng(32)
    radius = 3.0
    point = np.array(y) * radius
    Y = np.tile(point, (200, 1))
    counted, inside = [], []
    for _ in range(1000):
        centers = candidate_centers(rng, Y, radius, 1e12, 1, 1)
        root = centers[0]
        inside.append(bool(np.all((point >= root - radius) & (point < root + radius))))
        counted.append(centers.shape[0] > 1)
    assert counted == inside
    expected = np.prod(1 - np.abs(np.array(y)) / 2)
    # Binomial sd at most 0.016 over 1000 grids; 0.06 is nearly 4 of them.
    assert np.mean(inside) == pytest.approx(expected, abs=0.06)


def test_candidate_centers_split_the_budget_over_the_grids() -> None:
    """Two grids with eps = 2.4 (depth 1): each partition runs at eps 1.2, so eps' = 0.6 and the child
    holding all 6 records is kept with the Laplace tail at gamma = 2 ln 6 / 0.6 (about 0.51 here: 6 is
    just above gamma); an empty child with 0.5 / 6^2. At eps 2.4 per grid it would be kept always."""
    rng = np.random.default_rng(31)
    Y = np.zeros((6, 1))
    level = 2.4 / 2 / 2
    keep = laplace_keep(6, level, 2 * math.log(6) / level)
    assert 0.45 < keep < 0.6
    expected = 2 * (1 + keep + 0.5 / 36)
    sizes = [candidate_centers(rng, Y, 1.0, 2.4, 2, 1).shape[0] for _ in range(2000)]
    # sd of one size about 0.7; of the mean of 2000, 0.016.
    assert np.mean(sizes) == pytest.approx(expected, abs=0.07)


# ------------------------------------------------------------------ distances and losses


def test_squared_distances_and_assignment_by_hand() -> None:
    points = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    centers = np.array([[0.0, 0.0], [3.0, 0.0]])
    expected = np.array([[0.0, 25.0, 2.0], [9.0, 16.0, 5.0]])
    np.testing.assert_allclose(squared_distances(points, centers), expected, atol=1e-12)
    np.testing.assert_array_equal(assign(points, centers), [0, 1, 0])
    # Equal distances go to the lowest index; rounding never gives a negative distance.
    np.testing.assert_array_equal(assign(np.array([[1.5, 0.0]]), centers), [0])
    far = np.array([[1e8, 1e8]])
    assert squared_distances(far, far + 1e-9).min() >= 0.0


def test_clipped_loss_takes_each_records_nearest_chosen_center_capped_at_four_radius_squared() -> None:
    distances = np.array([[1.0, 9.0, 30.0, 0.5], [4.0, 2.0, 50.0, 0.25], [0.0, 0.0, 0.0, 0.0]])
    # Chosen {0, 1}: per record min 1, 2, 30, 0.25; capped at 4 * 2^2 = 16: 1 + 2 + 16 + 0.25.
    assert clipped_loss(distances, [0, 1], 2.0) == pytest.approx(19.25)
    assert clipped_loss(distances, np.array([1]), 2.0) == pytest.approx(4 + 2 + 16 + 0.25)
    assert clipped_loss(distances, [0, 1], 10.0) == pytest.approx(33.25)
    assert clipped_loss(distances, [2, 0], 0.1) == 0.0
    assert clipped_loss(distances, [0], 3.0) == pytest.approx(1 + 9 + 30 + 0.5)  # cap 36, not 4 * 3 * 2


def test_record_losses_are_the_clipped_loss_on_the_original_sparse_records() -> None:
    X = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [4.0, 4.0, 4.0], [0.0, 0.0, 0.0]]))
    centroids = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    dense = X.toarray()
    squared = ((dense[:, None, :] - centroids[None]) ** 2).sum(axis=2)  # [4, 2]
    for radius in (1.0, 2.0, 100.0):
        expected = np.minimum(squared.min(axis=1), 4 * radius**2).sum()
        assert record_losses(X, centroids, radius) == pytest.approx(expected, rel=1e-12)
    # By hand at radius 2 (cap 16): rows 1, 1, min(33, 36) -> 16, min(2, 4) = 2.
    assert record_losses(X, centroids, 2.0) == pytest.approx(1 + 1 + 16 + 2)
    # Records equal to a centroid cost exactly 0.
    assert record_losses(X, dense[[0, 3]], 100.0) == pytest.approx(0 + 9 + 29 + 0)


# ------------------------------------------------------------------ local swap (Algorithm 6)


def swap_law(Y: np.ndarray, C: np.ndarray, k: int, epsilon: float, steps: int, radius: float) -> dict[tuple, float]:
    """The exact law of Algorithm 6's output, by enumeration: Z0 uniform i.i.d., each step a swap
    (x in Z, y in C \\ Z) with weight exp(-eps_t L(Z') / (8 r^2)), then a step t with weight
    exp(-eps_t L(Z_t) / (8 r^2)), eps_t = eps / (steps + 1), L the loss clipped at (2 r)^2 per record."""
    n = C.shape[0]
    d = ((C[:, None, :] - Y[None, :, :]) ** 2).sum(axis=2)

    def loss(Z: tuple) -> float:
        return float(np.minimum(d[list(Z)].min(axis=0), 4 * radius**2).sum())

    eps_t = epsilon / (steps + 1)
    weight = lambda value: math.exp(-eps_t * value / (8 * radius**2))  # noqa: E731

    def moves(Z: tuple) -> list[tuple[tuple, float]]:
        outside = [y for y in range(n) if y not in Z]
        if not outside:
            return [(Z, 1.0)]
        options = [tuple(y if i == x else z for i, z in enumerate(Z)) for x in range(k) for y in outside]
        weights = np.array([weight(loss(option)) for option in options])
        return list(zip(options, weights / weights.sum(), strict=True))

    law: dict[tuple, float] = {}
    paths = [((Z0,), n**-k) for Z0 in itertools.product(range(n), repeat=k)]
    for _ in range(steps):
        paths = [(path + (Z,), p * q) for path, p in paths for Z, q in moves(path[-1])]
    for path, p in paths:
        history = path[1:] if steps else path
        weights = np.array([weight(loss(Z)) for Z in history]) if steps else np.ones(1)
        for Z, w in zip(history, weights / weights.sum(), strict=True):
            law[Z] = law.get(Z, 0.0) + p * w
    return law


def assert_follows(law: dict[tuple, float], draws: list[tuple]) -> None:
    outcomes = sorted(law)
    observed = np.array([sum(1 for draw in draws if draw == outcome) for outcome in outcomes])
    assert observed.sum() == len(draws), "a draw outside the law's support"
    expected = np.array([law[outcome] for outcome in outcomes]) * len(draws)
    keep = expected > 0
    assert observed[~keep].sum() == 0
    assert stats.chisquare(observed[keep], expected[keep]).pvalue > 0.001


# Records in two groups and one far record whose distance is clipped; four candidates on a line.
SWAP_Y = np.array([[0.0], [0.3], [2.0], [2.2], [9.0]])
SWAP_C = np.array([[0.0], [1.0], [2.1], [6.0]])


@pytest.mark.parametrize(("k", "steps", "epsilon", "draws"), [(1, 2, 3.0, 2500), (2, 1, 4.0, 3000), (2, 2, 2.0, 2500), (3, 1, 5.0, 2500)])
def test_local_swap_follows_its_exact_law(k, steps, epsilon, draws) -> None:
    radius = 1.5  # cap (2 r)^2 = 9: the far record (distance^2 >= 9) is clipped
    law = swap_law(SWAP_Y, SWAP_C, k, epsilon, steps, radius)
    assert sum(law.values()) == pytest.approx(1.0)
    rng = np.random.default_rng(40 + 10 * k + steps)
    results = [local_swap(rng, SWAP_Y, SWAP_C, k, epsilon, steps, radius) for _ in range(draws)]
    assert all(result.shape == (k,) and result.dtype.kind == "i" for result in results)
    assert_follows(law, [tuple(int(i) for i in result) for result in results])


def test_local_swap_without_steps_returns_uniform_iid_indices() -> None:
    rng = np.random.default_rng(50)
    draws = [tuple(int(i) for i in local_swap(rng, SWAP_Y, SWAP_C, 2, 1.0, 0, 1.5)) for _ in range(1600)]
    assert_follows({pair: 1 / 16 for pair in itertools.product(range(4), repeat=2)}, draws)


def test_local_swap_keeps_z_when_every_candidate_is_chosen() -> None:
    # Two candidates, k = 2: once both are in Z nothing is outside; Z0 = (0, 0) must swap to (0, 1) or (1, 0).
    C = np.array([[0.0], [5.0]])
    law = swap_law(SWAP_Y, C, 2, 1.0, 2, 1.0)
    rng = np.random.default_rng(51)
    draws = [tuple(int(i) for i in local_swap(rng, SWAP_Y, C, 2, 1.0, 2, 1.0)) for _ in range(1500)]
    assert_follows(law, draws)


def test_at_a_huge_budget_local_swap_is_greedy_and_finds_the_best_pair() -> None:
    """Two well separated groups and distractors: with eps = 1e9 every swap and the final choice take
    the lowest loss, so four steps reach the optimal pair from any start (two are not enough from
    Z0 = (2, 2): (2, 2) -> (0, 2) -> (0, 3) -> (1, 3)); 200 draws."""
    Y = np.concatenate([np.full((10, 2), 0.0), np.full((10, 2), 5.0)]) + np.random.default_rng(52).normal(0, 0.1, (20, 2))
    C = np.array([[2.5, 2.5], [0.0, 0.0], [9.0, 0.0], [5.0, 5.0], [0.0, 9.0], [1.0, 1.0]])
    rng = np.random.default_rng(53)
    for _ in range(200):
        assert set(local_swap(rng, Y, C, 2, 1e9, 4, 10.0).tolist()) == {1, 3}
    # At a tiny budget the choice is close to uniform: the best pair is far from always found.
    found = sum(set(local_swap(rng, Y, C, 2, 1e-6, 4, 10.0).tolist()) == {1, 3} for _ in range(200))
    assert found < 100


# ------------------------------------------------------------------ projection, clipping, truncation


def test_clip_rows_scales_only_the_rows_longer_than_the_radius() -> None:
    Y = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0], [0.06, 0.08], [-6.0, 8.0]])
    expected = np.array([[0.3, 0.4], [0.3, 0.4], [0.0, 0.0], [0.06, 0.08], [-0.3, 0.4]])
    np.testing.assert_allclose(clip_rows(Y, 0.5), expected, rtol=1e-12)
    np.testing.assert_allclose(clip_rows(Y, 0.1), [[0.06, 0.08], [0.06, 0.08], [0, 0], [0.06, 0.08], [-0.06, 0.08]], rtol=1e-12)
    np.testing.assert_array_equal(clip_rows(Y, 100.0), Y)


def test_jl_projection_preserves_squared_norms_on_average_and_clips_to_the_radius() -> None:
    rng = np.random.default_rng(60)
    X = sp.csr_matrix(rng.uniform(0, 1, size=(400, 30)) * (rng.random((400, 30)) < 0.3))
    norms = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    for p in (1, 4, 9):
        Y = jl_project(rng, X, p, 1e6)
        assert Y.shape == (400, p)
        # E ||x G^T||^2 / p = ||x||^2. The ratio of sums over 400 records: well within 15 % for p >= 1
        # (G is shared by the records, so the error is that of p chi-square-ish directions).
        assert (Y**2).sum() / norms.sum() == pytest.approx(1.0, rel=0.6 if p == 1 else 0.35)
    Y = jl_project(rng, X, 16, 0.5)
    assert np.linalg.norm(Y, axis=1).max() <= 0.5 + 1e-12
    assert (Y**2).sum() / norms.sum() < 0.5  # clipped rows are shorter


def test_jl_projection_is_linear_in_the_records() -> None:
    X = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0], [1.0, 1.0, 2.0]]))
    Y = jl_project(np.random.default_rng(61), X, 5, 1e9)
    np.testing.assert_allclose(Y[2], Y[0] + Y[1], atol=1e-12)
    # The scale is 1 / sqrt(p): averaged over many projections, ||x G^T||^2 / p -> ||x||^2 = 5.
    rng = np.random.default_rng(62)
    ratios = [float((jl_project(rng, X[:1], 4, 1e9) ** 2).sum()) / 5.0 for _ in range(2000)]
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.06)  # chi^2_4 / 4: sd 0.71 / sqrt(2000) = 0.016


def test_truncation_keeps_s_uniformly_chosen_entries_clipped_to_zero_and_the_bound() -> None:
    dense = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [0, 0, 12, 0, 0, 0, 0, 0, 0, 1], [0] * 10])
    X = sp.csr_matrix(dense)  # integers: the result holds floats
    rng = np.random.default_rng(70)
    kept = np.zeros(10)
    for _ in range(2000):
        T = truncate_records(rng, X, 3, 2.5)
        assert T.dtype == np.float64 and T.shape == (3, 10)
        row = T.getrow(0).toarray().ravel()
        assert np.count_nonzero(row) == 3 and T.indptr[1] - T.indptr[0] == 3
        assert set(row[row > 0].tolist()) <= {1.0, 2.0, 2.5}
        np.testing.assert_array_equal(T.getrow(1).toarray().ravel(), [0, 0, 2.5, 0, 0, 0, 0, 0, 0, 1])
        kept += row > 0
    np.testing.assert_array_equal(X.toarray(), dense)  # the input is not modified
    # Each entry of row 0 kept with probability 3/10: sd 0.01 over 2000 draws.
    np.testing.assert_allclose(kept / 2000, 0.3, atol=0.045)


def test_truncation_clips_negative_values_to_zero_and_rows_at_s_are_untouched() -> None:
    X = sp.csr_matrix(np.array([[-2.0, 0.5, 7.0], [0.25, 0.0, 3.0]]))
    T = truncate_records(np.random.default_rng(71), X, 3, 5.0)
    np.testing.assert_array_equal(T.toarray(), [[0.0, 0.5, 5.0], [0.25, 0.0, 3.0]])
    exact = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [3.0, 4.0, 0.0]]))
    T = truncate_records(np.random.default_rng(72), exact, 2, 10.0)
    np.testing.assert_array_equal(T.toarray(), exact.toarray())
    assert T.nnz == 4
    empty = truncate_records(np.random.default_rng(73), sp.csr_matrix((0, 4)), 2, 1.0)
    assert empty.shape == (0, 4) and empty.nnz == 0


def test_truncation_counts_non_zeros_not_stored_zeros_of_count_data() -> None:
    """Count data stores its observed zeros. Row 0 holds 3 non-zeros among 7 stored cells, row 1 holds 5
    non-zeros among 9, s = 3: row 0 keeps all three of its non-zeros on every draw (counting stored cells
    would keep 3 of the 7 and lose a non-zero most of the time), row 1 exactly three of its five; no zero
    is stored, and a value clipped to 0 counts as a zero."""
    data = np.array([0, 2, 0, 0, 5, 0, 1, 4, 0, 3, 0, 1, 2, 0, 6, -1], dtype=float)
    indices = np.array([0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    X = sp.csr_matrix((data, indices, np.array([0, 7, 16])), shape=(2, 10))
    assert X.nnz == 16 and np.count_nonzero(X.data) == 9  # the zeros are stored
    rng = np.random.default_rng(74)
    kept = np.zeros(10)
    for _ in range(300):
        T = truncate_records(rng, X, 3, 5.0)
        assert np.all(T.data != 0)
        np.testing.assert_array_equal(T.getrow(0).toarray().ravel(), [0, 2, 0, 0, 5, 0, 1, 0, 0, 0])
        row = T.getrow(1).toarray().ravel()
        assert np.count_nonzero(row) == 3 and T.nnz == 6
        assert set(np.flatnonzero(row).tolist()) <= {0, 2, 4, 5, 7}
        kept += row != 0
    # Each of row 1's five non-zeros kept with probability 3/5: sd 0.028 over 300 draws.
    np.testing.assert_allclose(kept[[0, 2, 4, 5, 7]] / 300, 0.6, atol=0.12)


# ------------------------------------------------------------------ Algorithm 2 and its budget


def test_budget_total_is_the_sum_of_its_parts_and_the_count_share_is_the_rest() -> None:
    budget = PrototypeBudget(candidates=0.1, localswap=0.2, recovery=0.3, selection=0.4, support_share=0.5, values_share=0.3)
    assert budget.total == pytest.approx(1.0)
    assert budget.count_share == pytest.approx(0.2)
    default = PrototypeBudget(0.0, 0.0, 1.0, 0.0)
    assert (default.support_share, default.values_share) == (0.45, 0.45)
    assert default.count_share == pytest.approx(0.1)
    assert PrototypeParams(k=2, s=9, bound=2.0, projection_dim=2, trials=1, grids=1, swap_steps=1).radius == 6.0


def _records(seed: int, m: int = 60, n: int = 12) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    return truncate_records(rng, sp.csr_matrix(rng.poisson(1.0, size=(m, n)).astype(float)), 5, 4.0)


class Spy:
    """Wraps a module function, recording the arguments of every call and the results."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.original = getattr(pk, name)
        self.calls: list[tuple[tuple, dict]] = []
        self.results: list = []
        monkeypatch.setattr(pk, name, self)

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        result = self.original(*args, **kwargs)
        self.results.append(result)
        return result


class NoiseSpy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple] = []
        original = pk.RecoveryNoise

        spy = self

        class Recording:
            @staticmethod
            def calibrate(*args):
                spy.calls.append(args)
                return original.calibrate(*args)

        monkeypatch.setattr(pk, "RecoveryNoise", Recording)


@pytest.mark.parametrize("trials", [1, 3])
def test_every_subroutine_gets_its_share_of_the_budget(monkeypatch, trials) -> None:
    """Candidates and swaps get their totals / trials; each cluster's recovery gets recovery / trials / 2
    (a replaced record touches two clusters), split support / values / sizes by the shares."""
    candidates, swaps, recoveries = Spy(monkeypatch, "candidate_centers"), Spy(monkeypatch, "local_swap"), Spy(monkeypatch, "sparse_recovery")
    noise = NoiseSpy(monkeypatch)
    X = _records(80)
    params = PrototypeParams(k=3, s=5, bound=4.0, projection_dim=2, trials=trials, grids=2, swap_steps=4)
    budget = PrototypeBudget(candidates=40.0, localswap=1.6, recovery=2.4, selection=0.6 if trials > 1 else 0.0,
                             support_share=0.5, values_share=0.3)
    result = private_prototypes(np.random.default_rng(81), X, params, budget)
    per_cluster = 2.4 / trials / 2
    assert len(noise.calls) == 1 and noise.calls[0][:2] == (5, 4.0)
    np.testing.assert_allclose(noise.calls[0][2:], [per_cluster * 0.5, per_cluster * 0.3, per_cluster * 0.2], rtol=1e-12)
    assert len(candidates.calls) == len(swaps.calls) == trials
    radius = 4.0 * math.sqrt(5)
    for (args, _), found in zip(candidates.calls, candidates.results, strict=True):
        _, Y, r, eps, grids, depth = args
        assert (r, grids, depth) == (radius, 2, partition_depth(60))
        assert eps == pytest.approx(40.0 / trials)
        assert Y.shape == (60, 2) and np.linalg.norm(Y, axis=1).max() <= radius + 1e-9
    for (args, _), found in zip(swaps.calls, candidates.results, strict=True):
        _, Y, C, k, eps, steps, r = args
        assert (k, steps, r) == (3, 4, radius) and C is found
        assert eps == pytest.approx(1.6 / trials)
    assert len(recoveries.calls) == 3 * trials
    assert result.trial in range(trials)
    chosen = result.trial
    assert result.candidates == candidates.results[chosen].shape[0] > 2  # more than the two grids' roots
    np.testing.assert_array_equal(result.prototypes, np.stack(recoveries.results[3 * chosen : 3 * chosen + 3]))
    assert result.prototypes.shape == (3, 12) and result.cluster_sizes.sum() == 60
    # The cluster sums handed to the recovery are the sums of the records nearest each chosen center.
    for j in range(3):
        args, _ = recoveries.calls[3 * chosen + j]
        assert args[2] == result.cluster_sizes[j] and args[3] == 5
    total = sum(recoveries.calls[3 * chosen + j][0][1] for j in range(3))
    np.testing.assert_allclose(total, np.asarray(X.sum(axis=0)).ravel(), rtol=1e-12)
    if trials == 1:
        assert result.trial == 0


def test_the_trial_is_chosen_by_the_exponential_mechanism_on_the_clipped_record_losses(monkeypatch) -> None:
    recoveries = Spy(monkeypatch, "sparse_recovery")
    probabilities = Spy(monkeypatch, "exponential_probabilities")
    X = _records(90)
    params = PrototypeParams(k=2, s=5, bound=4.0, projection_dim=2, trials=3, grids=1, swap_steps=0)
    budget = PrototypeBudget(candidates=1.0, localswap=1.0, recovery=1.0, selection=0.25)
    result = private_prototypes(np.random.default_rng(91), X, params, budget)
    # swap_steps = 0: the only exponential mechanism is the trial selection.
    assert len(probabilities.calls) == 1
    (scores, scale), _ = probabilities.calls[0]
    radius = 4.0 * math.sqrt(5)
    assert scale == pytest.approx(8 * radius**2 / 0.25)
    dense = X.toarray()
    expected = []
    for t in range(3):
        prototypes = np.stack(recoveries.results[2 * t : 2 * t + 2])
        squared = ((dense[:, None, :] - prototypes[None]) ** 2).sum(axis=2)
        expected.append(-np.minimum(squared.min(axis=1), 4 * radius**2).sum())
    np.testing.assert_allclose(scores, expected, rtol=1e-9)
    np.testing.assert_array_equal(result.prototypes, np.stack(recoveries.results[2 * result.trial : 2 * result.trial + 2]))


def test_the_selection_favours_the_trial_with_the_lower_loss() -> None:
    """With a huge selection budget the chosen trial always has the lowest clipped loss; every trial
    can be chosen (over seeds) at a tiny one."""
    X = _records(100)
    params = PrototypeParams(k=2, s=5, bound=4.0, projection_dim=2, trials=2, grids=1, swap_steps=1)
    picks = set()
    for seed in range(12):
        budget = PrototypeBudget(candidates=1.0, localswap=1.0, recovery=1.0, selection=1e-9)
        picks.add(private_prototypes(np.random.default_rng(seed), X, params, budget).trial)
    assert picks == {0, 1}


def test_several_trials_need_a_selection_budget_and_one_trial_does_not() -> None:
    X = _records(110, m=20)
    params = PrototypeParams(k=2, s=5, bound=4.0, projection_dim=2, trials=2, grids=1, swap_steps=1)
    message = "private_prototypes.budget: several trials need a positive selection budget"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        private_prototypes(np.random.default_rng(0), X, params, PrototypeBudget(1.0, 1.0, 1.0, 0.0))
    one = PrototypeParams(k=2, s=5, bound=4.0, projection_dim=2, trials=1, grids=1, swap_steps=1)
    result = private_prototypes(np.random.default_rng(0), X, one, PrototypeBudget(1.0, 1.0, 1.0, 0.0))
    assert result.trial == 0 and result.prototypes.shape == (2, 12) and result.candidates >= 1
    assert np.all(np.count_nonzero(result.prototypes, axis=1) == 5)
