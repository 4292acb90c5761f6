"""The server's check of every received gradient, before it can reach SecureFilter.

A gradient is accepted only if it is exactly a gradient of ω: a dense one has P entries; a sparse one
has item indices inside ``[0, I)``, strictly increasing, one W1 row of H entries per index, and the
``P - I H`` entries of the other blocks; every number is finite and each part's L2 norm is at most
`MAX_NORM` (a real gradient is nowhere near; beyond it the server's float32 sums -- Krum's squared
distances, Adam's squared gradient -- could overflow). Anything else is an `InvalidGradient`
(a `ProtocolViolation` naming the party, the round and what was wrong), which the server records and
excludes -- numpy never sees a malformed array, so no shape error or NaN can surface as a traceback or
poison Krum's distances and Adam's moments.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ProtocolViolation
from ...models.multvae import Layout
from ...network.party import Party
from .messages import Gradient, SparseGradient

#: The largest L2 norm a gradient (each of its parts, for a sparse one) may have (module docstring).
MAX_NORM = 1e15


class InvalidGradient(ProtocolViolation):
    """A user's gradient that is not a gradient of ω; the message names the party, the round and the fault."""

    def __init__(self, party: Party, round_index: int, problem: str) -> None:
        self.party = party
        self.round = round_index
        self.problem = problem
        super().__init__(f"server:0 rejected the gradient {party} sent in round {round_index}: {problem}")


def _finite(values: np.ndarray, what: str, party: Party, round_index: int) -> None:
    """Every entry finite and the vector's L2 norm at most `MAX_NORM`: one pass (a dot product, which is
    NaN or Inf if any entry is) in the common case; the entries are looked at only to say what is wrong.

    The dot product is `numpy.vdot`, which gives BLAS's dot the vector whether its elements are aligned or
    not (a received gradient is a misaligned view of its message: `messages`); ``flat @ flat`` calls the
    same BLAS routine for an aligned vector, but runs numpy's own loop, 8 times slower, for a misaligned one.
    """
    flat = values.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        squared = float(np.vdot(flat, flat))
    if math.isfinite(squared) and squared <= MAX_NORM * MAX_NORM:
        return
    bad = np.flatnonzero(~np.isfinite(flat))
    if bad.size:
        raise InvalidGradient(
            party, round_index,
            f"{what} holds {bad.size} NaN or Inf entr{'y' if bad.size == 1 else 'ies'}, the first at flat index {bad[0]}",
        )
    norm = float(np.linalg.norm(flat.astype(np.float64)))
    raise InvalidGradient(party, round_index, f"{what} has an L2 norm of {norm:.3g} > {MAX_NORM:.0e}")


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
        if body.values.shape != (layout.size,):
            raise InvalidGradient(party, round_index, f"expected {layout.size} entries, received {body.values.size}")
        _finite(body.values, "the gradient", party, round_index)
        if out is None:
            return body.values
        out[:] = body.values
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


__all__ = ["MAX_NORM", "InvalidGradient", "validated_gradient"]
