"""The PriviRec message set -- Appendix C's sequence diagrams (Figs. 4 and 5) in code.

    (secure aggregation, session 1)          V' = SecAgg(R^(u))                       the item degrees
    server -> user    privirec.degrees       V, broadcast
    (secure aggregation, session 2)          P' = SecAgg((1/d_u) R^(u)T R^(u))        PriviRec only
    server -> user    privirec.item_item     P~ = V^-1/2 P' V^-1/2, broadcast         PriviRec only
    per power iteration l = 1..L:
    server -> user    privirec.basis         X_(l-1), broadcast
    (secure aggregation, session 2 + l)      Y_l = SecAgg(A^(u)T A^(u) X_(l-1))
    server -> user    privirec.filters       S_k (and PriviRec-k's diag(T_L)), broadcast

The secure-aggregation sessions are `fedrecsim.protocols.secagg`'s own messages (``secagg.*``). The
symmetric P' and P~ travel as their upper triangles, diagonal included (row-major), m (m + 1) / 2 values.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...network.wire import Array, message


@message("privirec.degrees")
@dataclass(frozen=True)
class Degrees:
    """The item degrees diag(V), decoded from the first secure sum."""

    degrees: Array("float64", ndim=1)


@message("privirec.item_item")
@dataclass(frozen=True)
class ItemItem:
    """P~'s upper triangle, row-major, diagonal included (PriviRec)."""

    upper: Array("float64", ndim=1)


@message("privirec.basis")
@dataclass(frozen=True)
class Basis:
    """Power iteration ``iteration`` (1..L): X_(iteration - 1), m x p with orthonormal columns."""

    iteration: int
    basis: Array("float64", ndim=2)


@message("privirec.filters")
@dataclass(frozen=True)
class Filters:
    """The result: S_k (m x k) and, for PriviRec-k, the spectrum diag(T_L)[:k] (empty for PriviRec)."""

    basis: Array("float64", ndim=2)
    spectrum: Array("float64", ndim=1)


__all__ = ["Basis", "Degrees", "Filters", "ItemItem"]
