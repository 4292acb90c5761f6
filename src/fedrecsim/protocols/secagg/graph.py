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
    return by_party(sorted(users), complete_places(len(users)))


def complete_places(n: int) -> list[list[int]]:
    """`complete`'s graph by places (`harary_places`)."""
    return [[other for other in range(n) if other != place] for place in range(n)]


def by_party(ordered: Sequence[Party], places: Sequence[Sequence[int]]) -> dict[Party, tuple[Party, ...]]:
    """The graph of ``places`` (`harary_places`) over the sorted users ``ordered``: each user's neighbours."""
    return {party: tuple(ordered[place] for place in row) for party, row in zip(ordered, places)}


def harary(users: Sequence[Party], degree: int, rng: np.random.Generator) -> dict[Party, tuple[Party, ...]]:
    """A k-regular Harary graph on ``users`` under a random relabelling (module docstring).

    Args:
        users: the parties (distinct).
        degree: k, at least 1; k >= n - 1 gives the complete graph. Odd k with odd n cannot be regular:
            each user then also gets its opposite on one side, so degrees are k or k + 1.
        rng: the server's generator (the placement on the ring).
    """
    ordered = sorted(users)
    return by_party(ordered, harary_places(len(ordered), degree, rng))


def harary_places(n: int, degree: int, rng: np.random.Generator) -> list[list[int]]:
    """`harary`'s graph by places: row i lists, ascending, the places (in the sorted users) of the i-th
    user's neighbours. The same draw from ``rng`` as `harary`'s."""
    if degree < 1:
        raise ValueError(f"the degree must be >= 1, got {degree}")
    if degree >= n - 1:
        return complete_places(n)
    ring = rng.permutation(n)  # ring[spot]: the place of the user put at that spot of the ring
    steps = [*range(1, degree // 2 + 1), *range(-(degree // 2), 0)]
    if degree % 2:
        steps += [n // 2, -(n // 2)]  # the user opposite, joined from either side (one user when n is even)
    spot = np.empty(n, dtype=np.int64)
    spot[ring] = np.arange(n)
    around = ring[(spot[:, None] + np.array(steps)[None, :]) % n]  # row i: the users joined to the i-th
    around.sort(axis=1)
    if not (around[:, 1:] == around[:, :-1]).any():
        return around.tolist()  # no user joined twice (as the opposite of an even n is, from either side)
    return [_distinct(row) for row in around.tolist()]


def _distinct(row: list[int]) -> list[int]:
    """A sorted list without its repeats."""
    return [value for place, value in enumerate(row) if place == 0 or value != row[place - 1]]


__all__ = ["by_party", "complete", "complete_places", "default_degree", "harary", "harary_places"]
