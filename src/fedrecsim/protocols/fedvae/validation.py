"""The server's check of every received gradient, before it can reach SecureFilter.

A gradient is accepted only if it is exactly a gradient of ω: a dense one has P entries; a sparse one
has item indices inside ``[0, I)``, strictly increasing, one W1 row of H entries per index, and the
``P - I H`` entries of the other blocks; every number is finite and each part's L2 norm is at most
`MAX_NORM` (a real gradient is nowhere near; beyond it the server's float32 sums -- Krum's squared
distances, Adam's squared gradient -- could overflow). The norm is checked on the sum, in float64, of
the squared norms of the vector's blocks of `BLOCK` entries (each a BLAS float32 dot): near the bound,
within float32 rounding, the verdict is BLAS's (as a whole-vector dot's would be), and it is the same
whether the vector is checked alone or while the server sums it (`within_bound`). Anything else is an
`InvalidGradient` (a `ProtocolViolation` naming the party, the round and what was wrong), which the
server records and excludes -- numpy never sees a malformed array, so no shape error or NaN can surface as a traceback or
poison Krum's distances and Adam's moments.
"""

from __future__ import annotations

import numpy as np

from ...errors import ProtocolViolation
from ...models.multvae import Layout
from ...network.party import Party
from .messages import Gradient, SparseGradient

#: The largest L2 norm a gradient (each of its parts, for a sparse one) may have (module docstring).
MAX_NORM = 1e15
#: `MAX_NORM` squared, the bound on the sum of a vector's block squares (`within_bound`).
LIMIT = MAX_NORM * MAX_NORM
#: Entries per block of that sum: 65,536 float32 (256 KB), what a core's L2 cache holds with a sum's block.
BLOCK = 1 << 16
#: What a dense gradient is called in a rejection (`values_fault`).
DENSE = "the gradient"


class InvalidGradient(ProtocolViolation):
    """A user's gradient that is not a gradient of ω; the message names the party, the round and the fault."""

    def __init__(self, party: Party, round_index: int, problem: str) -> None:
        self.party = party
        self.round = round_index
        self.problem = problem
        super().__init__(f"server:0 rejected the gradient {party} sent in round {round_index}: {problem}")


def square(piece: np.ndarray) -> float:
    """``piece``'s squared L2 norm as BLAS's float32 dot gives it (NaN or Inf if any entry is, or if it
    overflows), for a sum of them in float64. `numpy.vdot` gives BLAS's dot the vector whether its elements
    are aligned or not (a received gradient is a misaligned view of its message: `messages`); ``piece @
    piece`` calls the same BLAS routine for an aligned vector, but runs numpy's own loop, 8 times slower,
    for a misaligned one. Call it under ``numpy.errstate(over="ignore", invalid="ignore")``."""
    return float(np.vdot(piece, piece))


def within_bound(flat: np.ndarray, block: int = BLOCK) -> bool:
    """Whether every entry of the vector ``flat`` is finite and its L2 norm is at most `MAX_NORM`: the sum,
    in float64, of the `square` of each ``block`` of it, at most `MAX_NORM` squared (module docstring). The
    squares are not negative, so the partial sums only grow: a check that reads the vector block by block
    (`aggregation.OrderedSum` does, while it adds the blocks up) may refuse it at the first block whose
    partial sum is beyond the bound, with the same verdict."""
    squared = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, flat.size, block):
            squared += square(flat[start : start + block])
            if not squared <= LIMIT:
                return False
    return True


def values_fault(party: Party, round_index: int, flat: np.ndarray, what: str) -> InvalidGradient:
    """What is wrong with ``flat``, ``what`` of the gradient ``party`` sent in ``round_index``, which
    `within_bound` refused: its NaN or Inf entries, else its L2 norm (computed in float64)."""
    bad = np.flatnonzero(~np.isfinite(flat))
    if bad.size:
        return InvalidGradient(
            party, round_index,
            f"{what} holds {bad.size} NaN or Inf entr{'y' if bad.size == 1 else 'ies'}, the first at flat index {bad[0]}",
        )
    norm = float(np.linalg.norm(flat.astype(np.float64)))
    return InvalidGradient(party, round_index, f"{what} has an L2 norm of {norm:.3g} > {MAX_NORM:.0e}")


def _finite(values: np.ndarray, what: str, party: Party, round_index: int) -> None:
    """Every entry finite and the L2 norm at most `MAX_NORM` (`within_bound`): one pass in the common case;
    the entries are looked at only to say what is wrong (`values_fault`)."""
    flat = values.reshape(-1)
    if not within_bound(flat):
        raise values_fault(party, round_index, flat, what)


def dense_values(party: Party, round_index: int, body: Gradient, layout: Layout) -> np.ndarray:
    """The values of the dense gradient ``body`` (from ``party`` in ``round_index``) once its length is
    checked; its numbers are not looked at: the caller checks them (`within_bound`) before it uses them.

    Raises:
        InvalidGradient: the gradient does not have ``layout.size`` entries.
    """
    if body.values.shape != (layout.size,):
        raise InvalidGradient(party, round_index, f"expected {layout.size} entries, received {body.values.size}")
    return body.values


def validated_gradient(
    party: Party, round_index: int, body: Gradient | SparseGradient, layout: Layout, out: np.ndarray | None = None
) -> np.ndarray:
    """The dense gradient ``body`` (from ``party`` in ``round_index``) stands for, once it is validated.

    Written into ``out`` (a float32 vector of length ``layout.size``, fully overwritten) if given; else a
    dense message's own array is returned as it is and a sparse one is expanded into a new vector.

    Raises:
        InvalidGradient: the gradient is malformed (module docstring).
    """
    first = layout.first_layer_size
    if isinstance(body, Gradient):
        values = dense_values(party, round_index, body, layout)
        _finite(values, DENSE, party, round_index)
        if out is None:
            return values
        out[:] = values
        return out
    items, rows, rest = body.items, body.rows, body.rest
    if rest.shape != (layout.size - first,):
        raise InvalidGradient(party, round_index, f"expected {layout.size - first} entries after W1, received {rest.size}")
    if rows.shape != (items.size, layout.hidden):
        raise InvalidGradient(
            party, round_index, f"expected {items.size} W1 rows of {layout.hidden} entries, received shape {rows.shape}"
        )
    if items.size and (items[0] < 0 or items[-1] >= layout.n_items or np.any(np.diff(items) <= 0)):
        raise InvalidGradient(
            party, round_index, f"W1 row indices must be strictly increasing within [0, {layout.n_items})"
        )
    _finite(rows, "the W1 rows", party, round_index)
    _finite(rest, "the gradient after W1", party, round_index)
    dense = np.empty(layout.size, dtype=np.float32) if out is None else out
    W1 = dense[:first].reshape(layout.n_items, layout.hidden)
    W1[...] = 0.0
    W1[items] = rows
    dense[first:] = rest
    return dense


__all__ = [
    "BLOCK", "DENSE", "LIMIT", "MAX_NORM", "InvalidGradient", "dense_values", "square", "validated_gradient",
    "values_fault", "within_bound",
]
