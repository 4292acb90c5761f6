"""Private prototypes: Ribero et al. Algorithm 2 over Balcan et al.'s private k-means subroutines.

One silo holds ``m`` records ``x_i in [0, bound]^n`` with at most ``s`` non-zeros each, so every record
lies in the ball ``B(0, radius)``, ``radius = bound * sqrt(s)``. Neighbouring data sets differ in **one
replaced record** (the silo's size ``m`` is public: Algorithm 2 sets its constants from it). Each trial:

1. `jl_project`: ``Y = X G^T / sqrt(p)``, ``G ~ N(0, 1)^{p x n}`` (data-independent), each row of ``Y``
   then clipped to ``radius`` (a per-record map, so privacy is unaffected; JL does not bound norms).
2. `candidate_centers` (Algorithm 5): ``grids`` randomly shifted cubes ``[-radius, radius]^p + v``,
   ``v`` uniform on ``[-radius, radius]^p``, each refined by `private_partition` (Algorithm 4) with
   ``eps_candidates / grids``. A record outside a grid's shifted cube is **dropped from that grid**: it
   counts in none of its cubes, as in Balcan et al. (the cube is not enlarged to hold every record).
   Along axis ``d`` a record lies in the cube with probability ``1 - |y_d| / (2 radius)``, so one at the
   origin always counts and one near the ball's surface often does not. It stays in the clustering:
   step 4 assigns every record to its nearest chosen center.
3. `local_swap` (Algorithm 6): ``steps`` exponential-mechanism swaps and one final choice of step, each
   with ``eps_localswap / (steps + 1)``; the score is the k-means loss with every record's term clipped
   at ``(2 radius)^2`` (`clipped_loss`), so its sensitivity is exactly ``4 radius^2``.
4. Assignment of every record to its nearest chosen center (post-processing), then `sparse_recovery`
   per cluster (Algorithm 3). A replacement touches at most two clusters, so each cluster gets half of
   ``eps_recovery``.

With ``trials > 1`` every trial spends ``1 / trials`` of the candidate, swap and recovery budgets, and
one exponential mechanism with ``eps_selection`` picks a trial by its clipped loss on the original
records (Algorithm 2 line 8). By basic composition the whole is ``(eps_candidates + eps_localswap +
eps_recovery + eps_selection)``-DP; `PrototypeBudget.total` is that sum.

Private partition (Algorithm 4). A cube's child is kept with probability ``f(m) = P(m + Lap(1/eps') >=
gamma)`` -- exactly the paper's piecewise ``f`` -- a Laplace threshold test on a count of sensitivity 1.
A replacement changes two counts per level and cubes of one level are disjoint, so ``depth`` levels
spend ``2 depth eps'``: ``eps' = eps_grid / (2 depth)`` as in the paper (``eps / (2 log n)``). Every
one of the ``2^p`` children is decided, the empty ones too, so the output distribution is the
algorithm's own (the authors' code skipped empty children). The threshold ``gamma`` only trades
utility, never privacy; we use the authors' code's ``gamma = 2 ln(m) / eps'`` (the paper's ``(20 /
eps') log(m / delta)`` comes from the utility proof and needs a ``delta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from fedrecsim.errors import ConfigError
from fedrecsim.mechanisms.exponential import exponential_probabilities
from fedrecsim.mechanisms.sparse_recovery import RecoveryNoise, sparse_recovery

#: The most projection dimensions a partition enumerates children for (2^p children per cube).
MAX_PROJECTION_DIM = 16

Matrix = np.ndarray | sp.csr_matrix


@dataclass(frozen=True)
class PrototypeBudget:
    """How a silo's epsilon is spent by Algorithm 2 (each entry a total over all trials).

    Attributes:
        candidates: Candidate centers (Algorithm 5), all grids of all trials.
        localswap: Local swaps and the final choice of step (Algorithm 6), all trials.
        recovery: Sparse recovery (Algorithm 3) of all clusters of all trials; split into support,
            values and sizes by ``support_share`` / ``values_share`` / the rest.
        selection: The choice among trials (Algorithm 2 line 8); 0 with one trial.
        support_share: Fraction of ``recovery`` for the Gumbel support selection.
        values_share: Fraction of ``recovery`` for the Laplace values.
    """

    candidates: float
    localswap: float
    recovery: float
    selection: float
    support_share: float = 0.45
    values_share: float = 0.45

    @property
    def total(self) -> float:
        """The silo's epsilon: the sum of the four parts (basic composition)."""
        return self.candidates + self.localswap + self.recovery + self.selection

    @property
    def count_share(self) -> float:
        return 1.0 - self.support_share - self.values_share


@dataclass(frozen=True)
class PrototypeParams:
    """The feasibility constants of Algorithm 2 (the paper's are in the protocol's docstring).

    Attributes:
        k: Prototypes per silo.
        s: Support size: records are truncated to ``s`` non-zeros, centroids reveal ``s`` entries.
        bound: The largest value of a record entry (values lie in ``[0, bound]``).
        projection_dim: ``p``, the JL dimension.
        trials: ``T`` of Algorithm 2.
        grids: Shifted grids of Algorithm 5 per trial.
        swap_steps: Swaps of Algorithm 6 per trial.
    """

    k: int
    s: int
    bound: float
    projection_dim: int
    trials: int
    grids: int
    swap_steps: int

    @property
    def radius(self) -> float:
        """``Lambda``: the L2 bound of a record (``bound * sqrt(s)``)."""
        return self.bound * math.sqrt(self.s)


@dataclass(frozen=True)
class PrototypeResult:
    """A silo's prototypes and what the simulator (not the server) may check about them.

    Attributes:
        prototypes: ``float64[k, n]``, the released matrix.
        candidates: Candidate centers of the chosen trial.
        cluster_sizes: True cluster sizes of the chosen trial (never released).
        trial: The chosen trial.
    """

    prototypes: np.ndarray
    candidates: int
    cluster_sizes: np.ndarray
    trial: int


def partition_depth(m: int) -> int:
    """Levels of Algorithm 4 for ``m`` records: ``max(1, floor(ln m))`` (the paper's ``log n``)."""
    return max(1, math.floor(math.log(max(m, 2))))


def keep_probability(counts: npt.ArrayLike, epsilon_level: float, gamma: float) -> np.ndarray:
    """Algorithm 4's ``f(m)``: ``P(m + Lap(1 / epsilon_level) >= gamma)``."""
    gap = epsilon_level * (np.asarray(counts, dtype=np.float64) - gamma)
    return np.where(gap <= 0, 0.5 * np.exp(np.minimum(gap, 0.0)), 1.0 - 0.5 * np.exp(-np.maximum(gap, 0.0)))


def jl_project(rng: np.random.Generator, X: Matrix, p: int, radius: float) -> np.ndarray:
    """``X G^T / sqrt(p)`` with ``G ~ N(0,1)^{p x n}``, rows then clipped to L2 norm ``radius``."""
    G = rng.standard_normal((p, X.shape[1]))
    Y = np.asarray(X @ G.T) / math.sqrt(p)
    return clip_rows(Y, radius)


def clip_rows(Y: np.ndarray, radius: float) -> np.ndarray:
    """Each row scaled down to L2 norm ``radius`` if it is longer."""
    norms = np.linalg.norm(Y, axis=1)
    scale = np.where(norms > radius, radius / np.maximum(norms, 1e-300), 1.0)
    return Y * scale[:, None]


def private_partition(
    rng: np.random.Generator, Y: np.ndarray, low: np.ndarray, side: float, epsilon: float, depth: int
) -> np.ndarray:
    """Algorithm 4 on the cube ``low + [0, side]^p``: the centers of the root and of every kept child.

    Args:
        rng: The caller's generator.
        Y: ``float64[m, p]``, the projected records.
        low: The cube's lower corner.
        side: The cube's side.
        epsilon: The whole partition's budget (``eps' = epsilon / (2 depth)`` per level).
        depth: Levels of splitting.

    Returns:
        ``float64[c, p]``, the candidate centers.
    """
    m, p = Y.shape
    if not 1 <= p <= MAX_PROJECTION_DIM:
        raise ConfigError("private_partition.p", f"must be in [1, {MAX_PROJECTION_DIM}], got {p}")
    epsilon_level = epsilon / (2 * depth)
    gamma = 2.0 * math.log(max(m, 2)) / epsilon_level
    children = ((np.arange(2**p)[:, None] >> np.arange(p)[None, :]) & 1).astype(np.float64)
    corners = np.asarray(low, dtype=np.float64)[None, :]
    inside = np.all((Y >= corners[0]) & (Y < corners[0] + side), axis=1)
    cube_of = np.where(inside, 0, -1)
    centers = [corners + side / 2]
    for _ in range(depth):
        if not corners.size:
            break
        side /= 2
        # Child code of each record in an active cube: bit d set when it lies in the upper half along d.
        member = cube_of >= 0
        mids = corners[cube_of[member]] + side
        codes = (Y[member] >= mids).astype(np.int64) @ (1 << np.arange(p))
        flat = cube_of[member] * 2**p + codes
        counts = np.bincount(flat, minlength=corners.shape[0] * 2**p)
        kept = rng.random(counts.size) < keep_probability(counts, epsilon_level, gamma)
        kept_flat = np.flatnonzero(kept)
        corners = corners[kept_flat // 2**p] + side * children[kept_flat % 2**p]
        renumber = np.full(counts.size, -1)
        renumber[kept_flat] = np.arange(kept_flat.size)
        new_cube = np.full(m, -1)
        new_cube[member] = renumber[flat]
        cube_of = new_cube
        centers.append(corners + side / 2)
    return np.concatenate(centers)


def candidate_centers(
    rng: np.random.Generator, Y: np.ndarray, radius: float, epsilon: float, grids: int, depth: int
) -> np.ndarray:
    """Algorithm 5: the union of `private_partition` over ``grids`` cubes ``[-radius, radius]^p + v``."""
    p = Y.shape[1]
    found = []
    for _ in range(grids):
        shift = rng.uniform(-radius, radius, size=p)
        found.append(private_partition(rng, Y, shift - radius, 2 * radius, epsilon / grids, depth))
    return np.concatenate(found)


def squared_distances(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``float64[c, m]``: squared distance from each center to each point."""
    cross = centers @ points.T
    return np.maximum((centers**2).sum(1)[:, None] - 2 * cross + (points**2).sum(1)[None, :], 0.0)


def clipped_loss(distances: np.ndarray, chosen: npt.ArrayLike, radius: float) -> float:
    """Eq. (3) with each record's term clipped at ``(2 radius)^2``: sensitivity ``4 radius^2`` exactly."""
    return float(np.minimum(distances[np.asarray(chosen)].min(axis=0), 4 * radius**2).sum())


def local_swap(
    rng: np.random.Generator, Y: np.ndarray, candidates: np.ndarray, k: int, epsilon: float, steps: int, radius: float
) -> np.ndarray:
    """Algorithm 6: ``k`` centers from ``candidates`` by ``steps`` private swaps and a private choice of step.

    Each swap replaces ``x in Z`` by ``y in C \\ Z`` with probability proportional to ``exp(-eps_step
    (L(Z') - L(Z)) / (8 radius^2))``, ``eps_step = epsilon / (steps + 1)``, L the `clipped_loss`; the
    returned ``Z^(t)`` is chosen with probability proportional to ``exp(-eps_step L(Z^(t)) / (8
    radius^2))``. When ``C \\ Z`` is empty a step keeps ``Z`` (and still counts against the budget).

    Returns:
        ``int64[k]``, indices into ``candidates`` (possibly repeated: ``Z^(0)`` is drawn i.i.d.).
    """
    cap = 4 * radius**2
    distances = np.minimum(squared_distances(Y, candidates), cap)
    scale = 8 * radius**2 * (steps + 1) / epsilon
    chosen = rng.integers(0, candidates.shape[0], size=k)
    history, losses = [], []
    for _ in range(steps):
        own = distances[chosen]
        order = np.argsort(own, axis=0, kind="stable")
        best, best_at = own[order[0], np.arange(own.shape[1])], order[0]
        second = own[order[1], np.arange(own.shape[1])] if k > 1 else np.full(own.shape[1], cap)
        outside = np.ones(candidates.shape[0], dtype=bool)
        outside[chosen] = False
        if outside.any():
            # new_loss[x, y]: L(Z - {Z[x]} + {y}); L(Z) is common to all and cancels in the normalization.
            new_loss = np.empty((k, int(outside.sum())))
            pool = distances[outside]
            for position in range(k):
                without = np.where(best_at == position, second, best)
                new_loss[position] = np.minimum(pool, without[None, :]).sum(axis=1)
            probabilities = exponential_probabilities(-new_loss.ravel(), scale)
            flat = int(rng.choice(probabilities.size, p=probabilities))
            chosen = chosen.copy()
            chosen[flat // new_loss.shape[1]] = np.flatnonzero(outside)[flat % new_loss.shape[1]]
        history.append(chosen)
        losses.append(clipped_loss(distances, chosen, radius))
    if not history:
        return chosen
    pick = int(rng.choice(len(history), p=exponential_probabilities(-np.asarray(losses), scale)))
    return history[pick]


def assign(Y: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """The nearest center of each record (lowest index on ties)."""
    return np.argmin(squared_distances(Y, centers), axis=0)


def truncate_records(rng: np.random.Generator, X: sp.csr_matrix, s: int, bound: float) -> sp.csr_matrix:
    """Each row keeps at most ``s`` of its non-zeros (chosen uniformly), values clipped to ``[0, bound]``.

    The support ``s`` counts non-zero *values*, not stored cells: stored zeros (an observed count of 0)
    and values clipped to 0 are dropped before the choice. A zero adds nothing to a cluster's sum, so
    letting it take one of the ``s`` places only discards a non-zero (on count data with half its cells
    zero, half of every long record). The result stores no zero.
    """
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    X.data = np.clip(X.data, 0.0, bound)
    X.eliminate_zeros()
    lengths = np.diff(X.indptr)
    if lengths.size and lengths.max() > s:
        priority = rng.random(X.nnz)
        rows = np.repeat(np.arange(X.shape[0]), lengths)
        order = np.lexsort((priority, rows))
        rank = np.empty(X.nnz, dtype=np.int64)
        rank[order] = np.arange(X.nnz) - X.indptr[rows[order]]
        X.data[rank >= s] = 0.0
        X.eliminate_zeros()
    return X


def record_losses(X: sp.csr_matrix, centroids: np.ndarray, radius: float) -> float:
    """`clipped_loss` of ``centroids`` on the original records (Algorithm 2 line 8's score)."""
    squared = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    cross = np.asarray(X @ centroids.T)
    distances = np.maximum(squared[:, None] - 2 * cross + (centroids**2).sum(1)[None, :], 0.0)
    return float(np.minimum(distances.min(axis=1), 4 * radius**2).sum())


def private_prototypes(
    rng: np.random.Generator, X: sp.csr_matrix, params: PrototypeParams, budget: PrototypeBudget
) -> PrototypeResult:
    """Algorithm 2: ``k`` private prototypes of the records ``X`` (rows), ``budget.total``-DP.

    ``X`` must already be truncated (`truncate_records`): rows with at most ``s`` entries in ``[0,
    bound]``. See the module docstring for the steps and the accounting.
    """
    m, n = X.shape
    if params.trials > 1 and budget.selection <= 0:
        raise ConfigError("private_prototypes.budget", "several trials need a positive selection budget")
    depth = partition_depth(m)
    per_cluster = budget.recovery / params.trials / 2
    noise = RecoveryNoise.calibrate(
        params.s, params.bound, per_cluster * budget.support_share, per_cluster * budget.values_share,
        per_cluster * budget.count_share,
    )
    trials: list[tuple[np.ndarray, int, np.ndarray]] = []
    for _ in range(params.trials):
        Y = jl_project(rng, X, params.projection_dim, params.radius)
        candidates = candidate_centers(rng, Y, params.radius, budget.candidates / params.trials, params.grids, depth)
        chosen = local_swap(
            rng, Y, candidates, params.k, budget.localswap / params.trials, params.swap_steps, params.radius
        )
        labels = assign(Y, candidates[chosen])
        membership = sp.csr_matrix((np.ones(m), (labels, np.arange(m))), shape=(params.k, m))
        sums = np.asarray((membership @ X).todense())
        sizes = np.bincount(labels, minlength=params.k)
        prototypes = np.stack([sparse_recovery(rng, sums[j], int(sizes[j]), params.s, noise) for j in range(params.k)])
        trials.append((prototypes, candidates.shape[0], sizes))
    pick = 0
    if params.trials > 1:
        losses = np.array([record_losses(X, prototypes, params.radius) for prototypes, _, _ in trials])
        pick = int(rng.choice(len(trials), p=exponential_probabilities(-losses, 8 * params.radius**2 / budget.selection)))
    prototypes, n_candidates, sizes = trials[pick]
    return PrototypeResult(prototypes, n_candidates, sizes, pick)


__all__ = [
    "MAX_PROJECTION_DIM",
    "PrototypeBudget",
    "PrototypeParams",
    "PrototypeResult",
    "assign",
    "candidate_centers",
    "clip_rows",
    "clipped_loss",
    "jl_project",
    "keep_probability",
    "local_swap",
    "partition_depth",
    "private_partition",
    "private_prototypes",
    "record_losses",
    "squared_distances",
    "truncate_records",
]
