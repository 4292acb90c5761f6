"""The prototypes message set -- Ribero et al.'s Algorithm 1 as a sequence diagram.

    silo   -> server  prototypes.prototypes    round 1: the silo's k x n private prototypes P_h
    server -> silo    prototypes.item_factors  round 2: the n x l item matrix V learned from all P_h

Nothing else crosses a silo's boundary: each silo then fits its users' factors to V locally. A silo
sends ``k * n`` values and receives ``l * n`` (Table 1's ``knH + ln`` over the H silos), each a float64.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...network.wire import Array, message


@message("prototypes.prototypes")
@dataclass(frozen=True)
class Prototypes:
    """A silo's private prototypes, one row per prototype (entries may be negative: noise)."""

    prototypes: Array("float64", ndim=2)


@message("prototypes.item_factors")
@dataclass(frozen=True)
class ItemFactors:
    """The item matrix V (n x l, non-negative) the server factorized from every silo's prototypes."""

    item_factors: Array("float64", ndim=2)

    def validate(self) -> None:
        if self.item_factors.size and self.item_factors.min() < 0:
            raise ValueError("item factors of a non-negative factorization must be non-negative")


__all__ = ["ItemFactors", "Prototypes"]
