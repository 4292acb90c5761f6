"""The communication graph: with whom each user shares keys and masks.

Bonawitz et al. 2017 use the complete graph: every user shares with every other, O(n) per user. Bell et
al. 2020 (SecAgg+) replace it by a sparse random graph of degree k = O(log n), so each user's keys,
shares and masks cost O(log n). Choice: a *randomly relabelled Harary graph* H(k, n) -- the users are
placed on a ring in an order drawn by the server, and each is joined to its k/2 nearest on either side
(and, for odd k, to the user opposite it when n is even). It is k-regular and k-connected, so dropping
fewer than k users never disconnects it, which is the property Bell et al. need from their random graph.

Invariants: the graph is undirected (v in N(u) iff u in N(v)), has no self loops, and neighbour lists
are sorted by party; `build` with the same generator state gives the same graph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...network.party import Party


def default_degree(n: int) -> int:
    """SecAgg+'s default degree for n users: the even number 2 * ceil(log2 n), at most n - 1."""
    return min(n - 1, 2 * math.ceil(math.log2(max(n, 2))))


def complete(users: Sequence[Party]) -> dict[Party, tuple[Party, ...]]:
    """Every user's neighbours are all the other users (Bonawitz et al. 2017)."""
    ordered = sorted(users)
    return {party: tuple(other for other in ordered if other != party) for party in ordered}


def harary(users: Sequence[Party], degree: int, rng: np.random.Generator) -> dict[Party, tuple[Party, ...]]:
    """A k-regular Harary graph on ``users`` under a random relabelling (module docstring).

    Args:
        users: the parties (distinct).
        degree: k, at least 1; k >= n - 1 gives the complete graph. Odd k with odd n cannot be regular:
            each user then also gets its opposite on one side, so degrees are k or k + 1.
        rng: the server's generator (the placement on the ring).
    """
    ordered = sorted(users)
    n = len(ordered)
    if degree < 1:
        raise ValueError(f"the degree must be >= 1, got {degree}")
    if degree >= n - 1:
        return complete(ordered)
    ring = rng.permutation(n)  # ring[place]: the position in ``ordered`` of the user placed there
    places = np.arange(n)
    steps = [*range(1, degree // 2 + 1), *range(-(degree // 2), 0)]
    if degree % 2:
        steps += [n // 2, -(n // 2)]  # the user opposite, joined from either side (one user when n is even)
    place_of = np.empty(n, dtype=np.int64)
    place_of[ring] = places
    around = ring[(place_of[:, None] + np.array(steps)[None, :]) % n]  # row i: the users joined to ordered[i]
    around.sort(axis=1)
    return {
        party: tuple(ordered[position] for position in _distinct(row)) for party, row in zip(ordered, around.tolist())
    }


def _distinct(row: list[int]) -> list[int]:
    """A sorted list without its repeats."""
    return [value for place, value in enumerate(row) if place == 0 or value != row[place - 1]]

__all__ = ["complete", "default_degree", "harary"]
