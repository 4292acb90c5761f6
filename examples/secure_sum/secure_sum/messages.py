"""The secure-sum message set -- the protocol's sequence diagram in code.

    server -> user    secure_sum.request  each round, to every member: the round's cohort
    user   -> server  secure_sum.masked   the user's item counts plus its pairwise masks, mod 2**64
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrecsim.sim import Array, message


@message("secure_sum.request")
@dataclass(frozen=True)
class SumRequest:
    """Round ``round``: mask your counts with every other user of ``cohort`` (user indices, ascending)."""

    round: int
    cohort: Array("int64", ndim=1)


@message("secure_sum.masked")
@dataclass(frozen=True)
class MaskedCounts:
    """Round ``round``: the user's counts plus its masks, as uint64 that wrap around at 2**64."""

    round: int
    values: Array("uint64", ndim=1)
