"""Float32 screening of low-rank float64 scores, with a rigorous bound on how far the two can differ.

A low-rank score block is ``s = L B^T`` computed in float64 (one dgemm): L is the block's b x r left factor,
B the m x r item factor. The item factor has the form ``B = [S, Diag(c) S']`` -- S an m x q basis, S' its
first q' columns (q' = 0: B = S), c >= 0 one scale per item -- which is what PriviRec-k's filters give
(`fedrecsim.models.gfcf`). Splitting L = [A1, A2] (b x q, b x q'), an item k's score is

    s_ik = sum_j S_kj (A1_ij + c_k A2_ij)          (A2 padded with zeros to q columns),

so items sharing one scale c form a group whose scores are ONE product of rank q, not r = q + q': items are
permuted so that each group is contiguous and each group large enough to be worth a product of its own
(`MIN_GROUP` items) is scored as ``fl32(A1 + c A2) fl32(S_g)^T``; the remaining items (the tail) as
``fl32(L) fl32(B_tail)^T``, rank r. Both in float32 (sgemm).

The bound (`Screen.bound`). Write u = 2^-24 (float32's unit roundoff), gamma_n = n u / (1 - n u), and
y_ij = |A1_ij| + c_k |A2_ij| (>= 0). For every cell, whatever order or fusing (FMA) the BLAS uses,

    |approx_ik - s_ik| <= kappa sum_j y_ij |S_kj| + zeta_i,        kappa = gamma_{r+6} (1 + 2^-20) + 2^-40.

Derivation, group items (x = A1 + c A2 in exact arithmetic, X its float32 formation fl(fl(c) fl(A2)) +
fl(A1): four roundings on the path of A2, two on A1's, so |X - x| <= gamma_4 y; S^ = fl32(S), |S^ - S|
<= u |S|): the float32 dot product of length q errs by at most gamma_q sum |X| |S^| <= gamma_q (1 +
gamma_5) sum y |S| from sum X S^, which is within (gamma_4 (1 + u) + u) sum y |S| <= gamma_5 sum y |S| of
sum x S; that is within u_64 sum y |S| of the exact product of the float64 factors L B_k (B holds fl64(c
S'), not c S'), and today's dgemm value s is within gamma^64_r sum |L||B_k| <= gamma^64_r (1 + u_64) sum y
|S| of that product. gamma_q (1 + gamma_5) + gamma_5 <= gamma_{q+5}, and the float64 terms are below
2^-40 for r <= 2^12. Tail items: fl32(L) and fl32(fl64(c S')) are within u and u + u_64 of L and B, the
float32 dot product of length r adds gamma_r: within gamma_{r+3} of L B_k. The factor (1 + 2^-20) covers
the float64 rounding in computing the bound itself and in subtracting it from a score (`evaluate`'s
threshold): those err by less than 2^-40 relative, while every score is below 2^25 times the bound.

The sum sum_j y_ij |S_kj| is bounded per row by max_k of it: <= p1_i + c_max p2_i with p1_i = min(|A1_i|
M, ||A1_i||_2 N) -- M_j = max_k |S_kj|, N = max_k ||S_k||_2 (Cauchy-Schwarz) -- and p2_i the same of A2
against S'. zeta_i = 2^-140 (r (1 + max|S| (1 + c_max)) + ||A1_i||_1 + c_max ||A2_i||_1) covers gradual
underflow (each float32 rounding that underflows errs by at most 2^-150 absolutely, each float64 one by
2^-1075). So ``bound_i = kappa (p1_i + c_max p2_i) + zeta_i`` holds for every item of row i.

The re-scoring error (`Screen.error`): any float64 evaluation v of L_i . B_k (any order, `evaluate` takes
a gathered dot product) and today's dgemm value are both within gamma^64_r sum_j |L_ij| |B_kj| of the
exact product, so |v - s_ik| <= error_i = 2 gamma^64_r min(|L_i| M_B, ||L_i||_2 N_B) (1 + 2^-20) + r 2^-1068,
M_B, N_B as above of B.

No screen is offered (None) where a bound could fail: a non-finite factor, or magnitudes at which float32
could overflow (the float64 path then decides, as before).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: float32's and float64's unit roundoff.
UNIT32, UNIT64 = 2.0**-24, 2.0**-53

#: Items sharing one scale c are scored by a product of their own (rank q) when there are at least this
#: many; fewer go to the tail's rank-r product. Forming fl(A1 + c A2) and a narrow product's own overhead
#: outweigh the rank saved on small groups: at Gowalla's shape 46 groups of >= 128 items hold 36,828 of
#: the 40,981 items, and the screen's products took 12.7 s CPU against 13.8 at 64 and 15.2 at 512 (20.4
#: with every item in the tail; issue 32).
MIN_GROUP = 128

#: Scores are screened only while r 4 max|L| (1 + c_max) max(1, max|S|), above every float32 partial sum's
#: magnitude, stays below 2^110 (float32 overflows at 2^128).
_MAGNITUDE = 2.0**110


def gamma(n: int, unit: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of n roundings with unit roundoff u."""
    return n * unit / (1.0 - n * unit)


@dataclass(frozen=True, eq=False)
class Screen:
    """Float32 approximations of a b x m block of float64 scores s = ``left @ right.T`` (module docstring).

    Attributes:
        approx: b x m float32 (writable, the caller's): column j holds item ``columns[j]``'s approximations.
        columns: the item of each column (a permutation of 0..m-1); ``positions`` its inverse.
        positions: the column of each item.
        bound: b float64: |approx - s| <= bound_i over row i (cells mapped through ``columns``).
        left: the b x r float64 left factor.
        right: the m x r float64 item factor (row k: item k).
        error: b float64: any float64 evaluation of ``left[i] . right[k]`` is within error_i of s_ik.
    """

    approx: np.ndarray
    columns: np.ndarray
    positions: np.ndarray
    bound: np.ndarray
    left: np.ndarray
    right: np.ndarray
    error: np.ndarray


@dataclass(frozen=True)
class _Plan:
    """The item side prepared for screening: items permuted into groups (contiguous, one scale each: (start,
    stop, fl32(c))) followed by the tail from column ``tail_start``, float32 copies in that order, and the
    magnitudes the bounds use."""

    columns: np.ndarray
    positions: np.ndarray
    groups: tuple[tuple[int, int, np.float32], ...]
    tail_start: int
    basis32: np.ndarray
    tail32: np.ndarray
    finite: bool
    basis_colmax: np.ndarray
    basis_norm: float
    scaled_norm: float
    basis_max: float
    scale_max: float
    right_colmax: np.ndarray
    right_norm: float


@dataclass(frozen=True, eq=False)
class ScaledBasis:
    """The item factor ``right = [S, Diag(c) S[:, :q']]`` (m x (q + q')) of a low-rank score, and its
    screening (module docstring). ``right`` is computed here, and is the float64 item factor the exact
    path multiplies by: one definition of the arithmetic for both.

    Attributes:
        basis: S, m x q float64.
        scale: c (m, >= 0), or None when ``scaled`` is 0.
        scaled: q', the leading columns of S that also appear scaled.
    """

    basis: np.ndarray
    scale: np.ndarray | None = None
    scaled: int = 0

    @cached_property
    def right(self) -> np.ndarray:
        """[S, Diag(c) S[:, :q']] (S itself when q' = 0)."""
        if not self.scaled:
            return self.basis
        return np.hstack([self.basis, self.basis[:, : self.scaled] * self.scale[:, None]])

    @cached_property
    def _plan(self) -> _Plan:
        m = self.basis.shape[0]
        scale = np.zeros(m) if self.scale is None or not self.scaled else np.asarray(self.scale, dtype=np.float64)
        _, inverse, counts = np.unique(scale, return_inverse=True, return_counts=True)
        grouped = counts[inverse] >= MIN_GROUP if self.scaled else np.ones(m, dtype=bool)
        by_scale = np.flatnonzero(grouped)[np.argsort(inverse[grouped], kind="stable")]
        columns = np.concatenate([by_scale, np.flatnonzero(~grouped)])
        positions = np.empty(m, dtype=np.int64)
        positions[columns] = np.arange(m)
        split = int(grouped.sum())
        cuts = np.flatnonzero(np.diff(scale[columns[:split]])) + 1
        starts, stops = np.concatenate([[0], cuts]), np.concatenate([cuts, [split]])
        groups = tuple((int(a), int(b), np.float32(scale[columns[a]])) for a, b in zip(starts, stops, strict=True) if b > a)
        right = self.right
        with np.errstate(over="ignore", invalid="ignore"):  # a plan of huge or non-finite factors is never used
            absolute = np.abs(self.basis)
            return _Plan(
                columns=columns, positions=positions, groups=groups, tail_start=split,
                basis32=self.basis[columns[:split]].astype(np.float32), tail32=right[columns[split:]].astype(np.float32),
                finite=bool(np.isfinite(right).all() and np.isfinite(scale).all()),
                basis_colmax=absolute.max(axis=0, initial=0.0),
                basis_norm=float(np.linalg.norm(self.basis, axis=1).max(initial=0.0)),
                scaled_norm=float(np.linalg.norm(self.basis[:, : self.scaled], axis=1).max(initial=0.0)),
                basis_max=float(absolute.max(initial=0.0)), scale_max=float(scale.max(initial=0.0)),
                right_colmax=np.abs(right).max(axis=0, initial=0.0),
                right_norm=float(np.linalg.norm(right, axis=1).max(initial=0.0)),
            )

    def screen(self, left: np.ndarray) -> Screen | None:
        """The `Screen` of the scores ``left @ right.T`` (left: b x (q + q') float64), or None where no bound
        holds (non-finite factors, float32 overflow possible)."""
        plan = self._plan
        b, r = left.shape
        q = self.basis.shape[1]
        if not plan.finite or not np.isfinite(left).all() or (r + 6) * UNIT32 >= 0.5:
            return None
        absolute = np.abs(left)
        a1, a2 = absolute[:, :q], absolute[:, q:]
        if float(absolute.max(initial=0.0)) * 4 * r * max(plan.basis_max, 1.0) * (1.0 + plan.scale_max) >= _MAGNITUDE:
            return None
        sums = np.minimum(a1 @ plan.basis_colmax, np.linalg.norm(left[:, :q], axis=1) * plan.basis_norm)
        scaled = np.minimum(a2 @ plan.basis_colmax[: self.scaled], np.linalg.norm(left[:, q:], axis=1) * plan.scaled_norm)
        sums += plan.scale_max * scaled
        magnitudes = r * (1.0 + plan.basis_max * (1.0 + plan.scale_max)) + a1.sum(axis=1) + plan.scale_max * a2.sum(axis=1)
        underflow = 2.0**-140 * magnitudes
        kappa = gamma(r + 6, UNIT32) * (1.0 + 2.0**-20) + 2.0**-40
        rescored = np.minimum(absolute @ plan.right_colmax, np.linalg.norm(left, axis=1) * plan.right_norm)
        error = 2.0 * gamma(r, UNIT64) * rescored * (1.0 + 2.0**-20) + r * 2.0**-1068
        return Screen(
            approx=self._approximations(left.astype(np.float32)), columns=plan.columns, positions=plan.positions,
            bound=kappa * sums + underflow, left=left, right=self.right, error=error,
        )

    def _approximations(self, left32: np.ndarray) -> np.ndarray:
        """The float32 scores of ``left32`` (b x r), columns in the plan's order: each group's rank-q product
        of fl(A1 + c A2), the tail's rank-r product."""
        plan = self._plan
        b = left32.shape[0]
        q = self.basis.shape[1]
        approx = np.empty((b, plan.columns.size), dtype=np.float32)
        mixed = np.array(left32[:, :q])
        head, scaled32 = mixed[:, : self.scaled], left32[:, q:]
        for start, stop, scale in plan.groups:
            if self.scaled:
                np.multiply(scaled32, scale, out=head)
                head += left32[:, : self.scaled]
            np.matmul(mixed, plan.basis32[start:stop].T, out=approx[:, start:stop])
        np.matmul(left32, plan.tail32.T, out=approx[:, plan.tail_start :])
        return approx


__all__ = ["MIN_GROUP", "UNIT32", "UNIT64", "Screen", "ScaledBasis", "gamma"]
