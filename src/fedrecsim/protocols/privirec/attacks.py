"""Two attacks on PriviRec that the paper does not consider, run on what a party received.

1. **The broadcast decodes profiles** (`decode_profiles`). Every user -- and anyone else who receives
   PriviRec's broadcasts -- holds V and P~, hence P' = V^{1/2} P~ V^{1/2} = sum_u (1/d_u) R^(u)T R^(u).
   Row i of P' is nonzero exactly on the items of the users who hold item i, with value sum 1/d_u over
   those of them who hold the column's item too (d_u^{-2 alpha} for another alpha; the same argument). An item of degree 1 belongs to one user u: row i is
   1/d_u on I_u and 0 elsewhere -- u's whole profile. An item of degree 2 belongs to u and v: the row is
   1/d_u + 1/d_v (= P'_ii) on I_u & I_v, 1/d_u on I_u - I_v and 1/d_v on I_v - I_u, so when d_u != d_v
   (or I_u = I_v) both profiles separate exactly. The attack claims a profile only when the row is
   consistent with it (each profile holds as many items as the degree its value gives); with V and the
   ring's fixed-point error below 1 / (2 m), the values are unambiguous. On the LightGCN splits this
   decodes 9 users of ML-1M, 38 of Gowalla and 326 of Yelp2018 (issue 30).
2. **PriviRec-k's server recovers P~** (`recover_item_item`). In power iteration l the server broadcasts
   X_(l-1) and receives Y_l = P~ X_(l-1) (summed over every user). Stacked over the L iterations,
   [Y_1 .. Y_L] = P~ [X_0 .. X_(L-1)]: when the m x L p matrix of bases has rank m -- possible only when
   L p >= m -- P~ = Y X^+ exactly (up to the fixed-point rounding of the sums), although PriviRec-k never
   sums or broadcasts P~. Below rank m the server knows P~ only on span(X) (and, by symmetry, its
   transpose); the minimum-norm estimate Y X^+ is then no recovery.

Inputs: `broadcast_from_view` reads V and P~ from a user's recorded view (``fedrecsim.run(...,
record_views=[user])``: the envelopes it received); the server's inputs are the bases it sent and the sums
it decoded from its view of each secure-aggregation session (`roles.ServerState`). The protocol runs
both attacks on those copies at the end of every run (``profiles_exposed_by_broadcast``,
``server_recovers_p``: `fedrecsim.protocols.privirec.protocol`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...models.gfcf import normalized_interactions
from . import local
from .messages import Degrees, ItemItem

RowsOf = Callable[[np.ndarray], np.ndarray]
"""Rows of P~ by item index: (b,) -> b x m."""

#: A reconstruction within this (max |entry| error; P~'s entries lie in [0, 1]) counts as recovering P~.
RECOVERY_TOLERANCE = 1e-6
_COLUMNS_PER_BLOCK = 1 << 22


def _degree(weight: np.ndarray | float, alpha: float) -> np.ndarray:
    """The user degrees d whose weight d^{-2 alpha} in P' is ``weight``, rounded."""
    return np.rint(np.power(weight, -1.0 / (2.0 * alpha))).astype(np.int64)


def _separate(row: np.ndarray, item: int, floor: float, alpha: float) -> list[np.ndarray]:
    """The profiles row ``item`` of P' (degree 2) separates exactly, or none (module docstring, 1.)."""
    support = np.flatnonzero(row > floor)
    both = support[np.abs(row[support] - row[item]) < floor]
    single = np.setdiff1d(support, both)
    classes = _degree(row[single], alpha) if single.size else np.empty(0, dtype=np.int64)
    kinds = np.unique(classes)
    if kinds.size == 0:
        degree = int(_degree(row[item] / 2.0, alpha))
        return [both] if both.size == degree else []
    if kinds.size == 1:
        first = int(kinds[0])
        rest = row[item] - float(first) ** (-2.0 * alpha)
        if rest <= floor:
            return []
        second = int(_degree(rest, alpha))
        profiles = [np.union1d(single, both), both]
        return profiles if (profiles[0].size, profiles[1].size) == (first, second) else []
    if kinds.size == 2:
        profiles = [np.union1d(single[classes == kind], both) for kind in kinds]
        expected = float(np.sum(kinds.astype(np.float64) ** (-2.0 * alpha)))
        sizes_match = all(profile.size == kind for profile, kind in zip(profiles, kinds))
        return profiles if sizes_match and abs(expected - row[item]) < floor else []
    return []


def decode_profiles(degrees: np.ndarray, rows_of: RowsOf, alpha: float = 0.5) -> list[tuple[int, ...]]:
    """The profiles (item tuples, ascending, distinct) a holder of V (``degrees``) and P~ (``rows_of``)
    decodes exactly from the items of degree 1 and 2 (module docstring, 1.), P' = V^{1-alpha} P~ V^{1-alpha}
    weighting user u by d_u^{-2 alpha} (1/d_u at alpha = 1/2).

    Entries of P' below m^{-2 alpha} / 2 are taken for zeros and values closer than that for equal: every
    nonzero entry, and every user's weight, is at least m^{-2 alpha}; the attack rounds a weight to the
    integer degree it is the weight of."""
    degrees = np.rint(np.asarray(degrees, dtype=np.float64))
    m = degrees.size
    candidates = np.flatnonzero((degrees == 1) | (degrees == 2))
    if not candidates.size:
        return []
    floor = 0.5 * float(m) ** (-2.0 * alpha)
    scale = np.power(np.maximum(degrees, 0.0), 1.0 - alpha)
    profiles: set[tuple[int, ...]] = set()
    for start in range(0, candidates.size, max(1, _COLUMNS_PER_BLOCK // max(m, 1))):
        block = candidates[start : start + max(1, _COLUMNS_PER_BLOCK // max(m, 1))]
        rows = np.atleast_2d(rows_of(block)) * scale[block, None] * scale[None, :]
        for item, row in zip(block.tolist(), rows):
            if row[item] <= floor:
                continue
            if degrees[item] == 1:
                support = np.flatnonzero(row > floor)
                if support.size == int(_degree(row[item], alpha)):
                    profiles.add(tuple(support.tolist()))
            else:
                profiles.update(tuple(profile.tolist()) for profile in _separate(row, item, floor, alpha))
    return sorted(profiles)


def dense_rows(item_item: np.ndarray) -> RowsOf:
    """`RowsOf` a dense P~."""
    return lambda items: item_item[items]


def exposed_users(profiles: Iterable[tuple[int, ...]], user_items: Sequence[np.ndarray]) -> int:
    """How many users' whole (nonempty) profiles are among ``profiles`` -- the ground-truth check."""
    decoded = set(profiles)
    return sum(1 for items in user_items if items.size and tuple(np.sort(items).tolist()) in decoded)


@dataclass(frozen=True)
class Recovery:
    """PriviRec-k's server's reconstruction of P~ (module docstring, 2.).

    Attributes:
        rank: the rank of [X_0 .. X_(L-1)] (m: P~ is determined).
        items: m.
        pseudo_inverse: X^+ (L p x m); the estimate is Y X^+.
        sums: Y = [Y_1 .. Y_L] (m x L p).
    """

    rank: int
    items: int
    pseudo_inverse: np.ndarray
    sums: np.ndarray

    @property
    def determined(self) -> bool:
        return self.rank == self.items

    def rows(self, items: np.ndarray) -> np.ndarray:
        """Rows ``items`` of the estimate Y X^+ (a `RowsOf`)."""
        return self.sums[items] @ self.pseudo_inverse

    def error(self, R: sp.spmatrix, alpha: float = 0.5, first_block_only: bool = False) -> float:
        """max |Y X^+ - P~| against the true P~ of the interactions ``R``, block of columns by block; with
        ``first_block_only``, over the first block of columns (at least one column; a lower bound of the
        whole error, for an estimate already known not to be a recovery: the whole costs m^2 L p)."""
        Rt = normalized_interactions(R, alpha)
        RtT = sp.csr_matrix(Rt.T)
        width = max(1, _COLUMNS_PER_BLOCK // max(self.items, 1))
        worst = 0.0
        for start in range(0, width if first_block_only else self.items, width):
            columns = np.arange(start, min(start + width, self.items))
            truth = np.asarray((RtT @ Rt[:, columns]).toarray())
            estimate = self.sums @ self.pseudo_inverse[:, columns]
            worst = max(worst, float(np.max(np.abs(estimate - truth), initial=0.0)))
        return worst


def recover_item_item(bases: Sequence[np.ndarray], sums: Sequence[np.ndarray]) -> Recovery:
    """The server's estimate of P~ from the bases it broadcast (X_(l-1), m x p) and the sums it decoded
    (Y_l = P~ X_(l-1), m x p), l = 1..L (module docstring, 2.)."""
    if len(bases) != len(sums) or not bases:
        raise ValueError(f"need as many sums as bases, at least one: got {len(bases)} and {len(sums)}")
    X = np.hstack([np.asarray(basis, dtype=np.float64) for basis in bases])
    Y = np.hstack([np.asarray(total, dtype=np.float64).reshape(basis.shape) for basis, total in zip(bases, sums)])
    u, s, vt = np.linalg.svd(X, full_matrices=False)
    cutoff = s.max(initial=0.0) * max(X.shape) * np.finfo(np.float64).eps
    rank = int(np.count_nonzero(s > cutoff))
    inverse = (vt[:rank].T / s[:rank]) @ u[:, :rank].T
    return Recovery(rank, X.shape[0], inverse, Y)


def broadcast_from_view(view: Iterable[Any], n_items: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(V, P~) from a recorded view (envelopes or bodies): the Degrees and ItemItem broadcasts it holds,
    or None when it holds neither pair (PriviRec-k, or a view that missed one)."""
    degrees = upper = None
    for entry in view:
        body = getattr(entry, "body", entry)
        if isinstance(body, Degrees):
            degrees = body.degrees
        elif isinstance(body, ItemItem):
            upper = body.upper
    if degrees is None or upper is None:
        return None
    return degrees, local.symmetric_from_upper(upper, n_items)


__all__ = [
    "RECOVERY_TOLERANCE",
    "Recovery",
    "broadcast_from_view",
    "decode_profiles",
    "dense_rows",
    "exposed_users",
    "recover_item_item",
]
