"""Float32 screening of low-rank float64 scores, with rigorous bounds on how far the two can differ and on how
high a score can reach.

A low-rank score block is ``s = L B^T`` computed in float64 (one dgemm): L is the block's b x r left factor,
B the m x r item factor. The item factor has the form ``B = [S, Diag(c) S']`` -- S an m x q basis, S' its
first q' columns (q' = 0: B = S), c >= 0 one scale per item -- which is what PriviRec-k's filters give
(`fedrecsim.models.gfcf`). Splitting L = [A1, A2] (b x q, b x q'), an item k's score is

    s_ik = sum_j S_kj (A1_ij + c_k A2_ij)          (A2 padded with zeros to q columns),

so items sharing one scale c form a group whose scores are ONE product of rank q, not r = q + q': items are
permuted so that each group is contiguous and each group large enough to be worth a product of its own
(`MIN_GROUP` items) is scored as ``fl32(A1 + c A2) fl32(S_g)^T``; the remaining items (the tail) as
``fl32(L) fl32(B_tail)^T``, rank r. Both in float32 (sgemm).

`ScaledBasis.screen` gives, of a block's b x m cells, only those that can reach their row's top ``depth``
(`Screen`): the tail first, then the groups by descending scale, each sorted by descending reach; the
first `HEAD` columns in that order (at least the whole tail -- at Gowalla's shape it holds the popular
items whose scores make every row's top 20 -- and 4 depth) are scored whole; tau_i, the depth-th largest
approximation among row i's head cells not excluded, is then reached by depth cells whose s >= tau_i -
E_i, so the row's depth-th largest s, t_i, is >= tau_i - E_i. After the head an item is skipped for the
whole block when its *reach* (below) shows s_ik < tau_i - E_i for every row i -- it cannot be in any row's
top depth, ties included -- and of the items scored only the cells with approx >= tau_i - 2 E_i are kept:
an item with s >= t_i has approx >= t_i - E_i >= tau_i - 2 E_i. Items are sorted by reach inside each
segment, so the items scored are a prefix of it: one product, no gather.

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

The reach. With ||.|| the Euclidean norm, an item k's reach is n_k >= ||B_k|| (tail) or >= ||S_k|| (group),
a row's is rho_i >= ||L_i|| (1 + gamma^64_r) (tail) or, for a group of scale c, rho_i(c) >= ||x_i|| +
gamma^64_{r+2} (1 + c) (||A1_i|| + ||A2_i||) with x_i = A1_i + c A2_i; then s_ik <= rho_i n_k whatever the
dgemm's order: |L_i B_k| <= ||L_i|| ||B_k|| (Cauchy-Schwarz), the dgemm errs by at most gamma^64_r
sum_j |L_ij| |B_kj| <= gamma^64_r ||L_i|| ||B_k||, and for a group item B_k = [S_k, fl64(c S'_k)] with
||B_k|| <= (1 + c (1 + u_64)) ||S_k|| and L_i B_k = x_i S_k + A2_i (fl64(c S'_k) - c S'_k), the last within
u_64 c ||A2_i|| ||S_k||. Computed norms: nu = fl(sqrt(fl(sum v_j^2))) errs by gamma^64_{n+1} relative and
n 2^-1074 absolute (squares that underflow) inside the root, so ||v|| <= nu (1 + 2^-30) + 2^-500 for n <=
2^12 (`_norm_ceiling`). ||x_i|| is not formed per group: with n1 = sum A1^2, n2 = sum A2^2, p = sum A1 A2
computed once per block, y(c) = fl(n1 + c (2 p + c n2)) is within gamma^64_{q+6} (||A1|| + c ||A2||)^2 +
(1 + c)^2 2^-1059 of ||x_i||^2, so ||x_i|| <= sqrt(max(y, 0)) + 2^-20 (||A1|| + c ||A2||) + (1 + c) 2^-529,
and rho_i(c) = (sqrt(max(y, 0)) + 2^-19 (1 + c) (N1 + N2) + (1 + c) 2^-529) (1 + 2^-40), N1, N2 the norm
ceilings of A1, A2 (the last factor covers the float64 rounding of this expression's ~8 operations on
non-negative terms). An item is skipped when n_k < min_i theta_i with theta_i = fl(fl(tau_i - E_i) /
rho_i) (1 - 2^-40) <= (tau_i - E_i) / rho_i; then s_ik <= rho_i n_k < tau_i - E_i <= t_i in every row.

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
#: with every item in the tail; issue 32, measured before items were skipped).
MIN_GROUP = 128

#: Columns scored whole, in the plan's order, before any item is skipped (and at least the tail and 4 depth
#: columns): enough for every row's depth-th largest approximation among them to be close to its final one.
HEAD = 2048

#: Scores are screened only while r 4 max|L| (1 + c_max) max(1, max|S|), above every float32 partial sum's
#: magnitude, stays below 2^110 (float32 overflows at 2^128).
_MAGNITUDE = 2.0**110


def gamma(n: int, unit: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of n roundings with unit roundoff u."""
    return n * unit / (1.0 - n * unit)


@dataclass(frozen=True, eq=False)
class Screen:
    """The cells of a b x m block of float64 scores s = ``left @ right.T`` that can reach their row's top
    ``depth`` (module docstring), with float32 approximations.

    Every cell not excluded whose s is at least its row's depth-th largest s (every cell not excluded, in a
    row with fewer) is one of them, and no excluded cell is.

    Attributes:
        rows, items: the cells (int64, in no particular order).
        approx: their float32 approximations.
        bound: b float64: |approx - s| <= bound_i over row i.
        left: the b x r float64 left factor.
        right: the m x r float64 item factor (row k: item k).
        error: b float64: any float64 evaluation of ``left[i] . right[k]`` is within error_i of s_ik.
        scored: how many of the block's b m cells were scored in float32 (the others were skipped by their
            reach).
    """

    rows: np.ndarray
    items: np.ndarray
    approx: np.ndarray
    bound: np.ndarray
    left: np.ndarray
    right: np.ndarray
    error: np.ndarray
    scored: int


@dataclass(frozen=True)
class _Segment:
    """Columns [start, stop) of the plan scored by one product: the tail's (``scale`` None, rank r) or a
    group's (one float64 scale c, rank q)."""

    start: int
    stop: int
    scale: float | None


@dataclass(frozen=True)
class _Plan:
    """The item side prepared for screening: items permuted into the tail (columns up to ``tail_stop``) and
    the groups (module docstring), one `_Segment` each; float32 copies in that order (the tail's rank-r
    rows, the groups' rank-q rows); each column's reach; the magnitudes the bounds use; ``finite``: every
    scale, and every item factor row's sum of squares, is finite."""

    columns: np.ndarray
    positions: np.ndarray
    segments: tuple[_Segment, ...]
    tail_stop: int
    tail32: np.ndarray
    basis32: np.ndarray
    reach: np.ndarray
    finite: bool
    basis_colmax: np.ndarray
    basis_norm: float
    scaled_norm: float
    basis_max: float
    scale_max: float
    right_colmax: np.ndarray
    right_norm: float


def _norm_ceiling(squares: np.ndarray) -> np.ndarray:
    """An upper bound of the Euclidean norm of each vector (at most 2^12 entries) from its sum of squares
    as computed in float64, in any order, with one more rounding at most (module docstring)."""
    return np.sqrt(squares) * (1.0 + 2.0**-30) + 2.0**-500


def _column_maxima(matrix: np.ndarray) -> np.ndarray:
    """max_k |matrix_kj| of each column (0 without rows), NaN where a column holds one."""
    return np.maximum(matrix.max(axis=0, initial=0.0), -matrix.min(axis=0, initial=0.0))


def _below32(values: np.ndarray) -> np.ndarray:
    """The largest float32 at or below each float64 value (-inf stays -inf)."""
    rounded = values.astype(np.float32)
    above = rounded > values
    rounded[above] = np.nextafter(rounded[above], np.float32(-np.inf))
    return rounded


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
        right = self.right
        with np.errstate(over="ignore", invalid="ignore"):  # a plan of huge or non-finite factors is never used
            squares = np.einsum("ij,ij->i", self.basis, self.basis)
            right_squares = np.einsum("ij,ij->i", right, right)
            reach = _norm_ceiling(np.where(grouped, squares, right_squares))
            tail, members = np.flatnonzero(~grouped), np.flatnonzero(grouped)
            columns = np.concatenate([
                tail[np.argsort(-reach[tail], kind="stable")],
                members[np.lexsort((-reach[members], -scale[members]))],
            ])
            positions = np.empty(m, dtype=np.int64)
            positions[columns] = np.arange(m)
            tail_stop = tail.size
            cuts = np.unique(np.concatenate([
                [0, tail_stop, m], tail_stop + np.flatnonzero(np.diff(scale[columns[tail_stop:]])) + 1,
            ]))
            segments = tuple(
                _Segment(int(a), int(b), None if a < tail_stop else float(scale[columns[a]]))
                for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a
            )
            scaled = self.basis[:, : self.scaled]
            basis_colmax = _column_maxima(self.basis)
            return _Plan(
                columns=columns, positions=positions, segments=segments, tail_stop=tail_stop,
                tail32=right[columns[:tail_stop]].astype(np.float32), basis32=self.basis[columns[tail_stop:]].astype(np.float32),
                reach=reach[columns], finite=bool(np.isfinite(right_squares).all() and np.isfinite(scale).all()),
                basis_colmax=basis_colmax, basis_norm=float(np.sqrt(squares.max(initial=0.0))),
                scaled_norm=float(np.sqrt(np.einsum("ij,ij->i", scaled, scaled).max(initial=0.0))),
                basis_max=float(basis_colmax.max(initial=0.0)), scale_max=float(scale.max(initial=0.0)),
                right_colmax=_column_maxima(right), right_norm=float(np.sqrt(right_squares.max(initial=0.0))),
            )

    def screen(self, left: np.ndarray, excluded: tuple[np.ndarray, np.ndarray], depth: int) -> Screen | None:
        """The `Screen` of the scores ``left @ right.T`` (left: b x (q + q') float64) without the cells
        ``excluded`` (rows, items) for each row's top ``depth``, or None where no bound holds (non-finite
        factors, float32 overflow possible)."""
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
        bound = kappa * sums + underflow
        rescored = np.minimum(absolute @ plan.right_colmax, np.linalg.norm(left, axis=1) * plan.right_norm)
        error = 2.0 * gamma(r, UNIT64) * rescored * (1.0 + 2.0**-20) + r * 2.0**-1068
        rows, columns, approx, scored = _Block(self, plan, left, excluded).cells(min(depth, plan.columns.size), bound)
        return Screen(
            rows=rows, items=plan.columns[columns], approx=approx, bound=bound, left=left, right=self.right, error=error,
            scored=scored,
        )

    def row_reach(self, left: np.ndarray) -> _RowReach:
        """The rows' reach (module docstring) of ``left`` (b x (q + q') float64)."""
        return _RowReach(left, self.basis.shape[1], self.scaled)


@dataclass(frozen=True, eq=False)
class _RowReach:
    """rho_i of the tail and rho_i(c) of each group scale (module docstring) of a block's left factor."""

    left: np.ndarray
    q: int
    scaled: int

    @cached_property
    def _sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sum A1^2, sum A1 A2, sum A2^2) per row."""
        a1, a2 = self.left[:, : self.q], self.left[:, self.q :]
        return (np.einsum("ij,ij->i", a1, a1), np.einsum("ij,ij->i", a1[:, : self.scaled], a2), np.einsum("ij,ij->i", a2, a2))

    @cached_property
    def _norms(self) -> np.ndarray:
        """N1 + N2: the norm ceilings of A1 and A2 added."""
        squares, _, scaled = self._sums
        return _norm_ceiling(squares) + _norm_ceiling(scaled)

    @cached_property
    def tail(self) -> np.ndarray:
        """rho_i: s_ik <= rho_i n_k for every tail item k."""
        squares, _, scaled = self._sums
        return _norm_ceiling(squares + scaled) * (1.0 + 2.0**-30) * (1.0 + 2.0**-40)

    def group(self, scale: float) -> np.ndarray:
        """rho_i(c): s_ik <= rho_i(c) n_k for every item k of the group of scale c."""
        squares, products, scaled = self._sums
        square = np.maximum(squares + scale * (2.0 * products + scale * scaled), 0.0)
        return (np.sqrt(square) + 2.0**-19 * (1.0 + scale) * self._norms + (1.0 + scale) * 2.0**-529) * (1.0 + 2.0**-40)


class _Block:
    """One block's float32 products, segment by segment (module docstring): `cells`."""

    def __init__(self, side: ScaledBasis, plan: _Plan, left: np.ndarray, excluded: tuple[np.ndarray, np.ndarray]) -> None:
        self.side, self.plan = side, plan
        self.left32 = left.astype(np.float32)
        q, scaled = side.basis.shape[1], side.scaled
        self.mixed = np.array(self.left32[:, :q])
        self.reach = side.row_reach(left)
        columns = plan.positions[excluded[1]]
        order = np.argsort(columns, kind="stable")
        self.excluded_rows, self.excluded_columns = excluded[0][order], columns[order]
        self.buffer = np.empty(left.shape[0] * max((s.stop - s.start for s in plan.segments), default=0), dtype=np.float32)
        self._scaled = scaled

    def cells(self, depth: int, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(rows, plan columns, approximations) of the cells that can reach their row's top ``depth``, and
        how many cells were scored."""
        plan = self.plan
        b, m = self.left32.shape[0], plan.columns.size
        width = min(m, max(plan.tail_stop, HEAD, 4 * depth))
        head = np.empty((b, width), dtype=np.float32)
        for segment in plan.segments:
            if segment.start < width:
                self._product(segment, segment.start, min(segment.stop, width), head[:, segment.start : min(segment.stop, width)])
        low, high = np.searchsorted(self.excluded_columns, [0, width])
        head[self.excluded_rows[low:high], self.excluded_columns[low:high]] = -np.inf
        tau = np.full(b, -np.inf)
        if 0 < depth <= width:
            tau = np.partition(head, width - depth, axis=1)[:, width - depth].astype(np.float64)
        floor = _below32(tau - 2.0 * bound)
        found = [self._reaching(head, floor, 0)]
        threshold = tau - bound
        scored = head.size
        for segment in plan.segments:
            start = max(segment.start, width)
            if start >= segment.stop:
                continue
            rho = self.reach.tail if segment.scale is None else self.reach.group(segment.scale)
            with np.errstate(divide="ignore", invalid="ignore"):
                theta = float(np.min(threshold / rho, initial=np.inf)) * (1.0 - 2.0**-40)
            reach = plan.reach[start : segment.stop]
            stop = start + int(np.searchsorted(-reach, -theta, side="right")) if theta > 0 else segment.stop
            if stop > start:
                scores = self.buffer[: b * (stop - start)].reshape(b, stop - start)
                self._product(segment, start, stop, scores)
                found.append(self._reaching(scores, floor, start))
                scored += scores.size
        rows, columns, approx = (np.concatenate(parts) for parts in zip(*found, strict=True))
        return rows, columns, approx, scored

    def _product(self, segment: _Segment, start: int, stop: int, out: np.ndarray) -> None:
        """The float32 scores of the columns [start, stop) of ``segment`` into ``out`` (b x (stop - start))."""
        plan = self.plan
        if segment.scale is None:
            np.matmul(self.left32, plan.tail32[start:stop].T, out=out)
            return
        if self._scaled:
            q = self.side.basis.shape[1]
            head = self.mixed[:, : self._scaled]
            np.multiply(self.left32[:, q:], np.float32(segment.scale), out=head)
            head += self.left32[:, : self._scaled]
        np.matmul(self.mixed, plan.basis32[start - plan.tail_stop : stop - plan.tail_stop].T, out=out)

    def _reaching(self, scores: np.ndarray, floor: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, start + columns, values) of the cells of ``scores`` (the columns [start, start + width)) at
        or above their row's ``floor`` (float32) that are not excluded. Only the rows whose maximum reaches
        the floor are looked into (a few in a group's product), and only their excluded cells are set to
        -inf (in ``scores``)."""
        hot = np.flatnonzero(scores.max(axis=1, initial=-np.inf) >= floor)
        if not hot.size:
            return hot, hot, np.empty(0, dtype=np.float32)
        low, high = np.searchsorted(self.excluded_columns, [start, start + scores.shape[1]])
        rows, columns = self.excluded_rows[low:high], self.excluded_columns[low:high] - start
        inside = hot[np.minimum(np.searchsorted(hot, rows), hot.size - 1)] == rows
        scores[rows[inside], columns[inside]] = -np.inf
        block = scores if hot.size == scores.shape[0] else scores[hot]
        cells = np.flatnonzero(block >= floor[hot, None])  # np.nonzero of a 2-D mask is ~20 times slower
        values = block.ravel()[cells]
        keep = values > -np.inf
        rows, columns = np.divmod(cells[keep], block.shape[1])
        return hot[rows], columns + start, values[keep]


__all__ = ["HEAD", "MIN_GROUP", "UNIT32", "UNIT64", "Screen", "ScaledBasis", "gamma"]
