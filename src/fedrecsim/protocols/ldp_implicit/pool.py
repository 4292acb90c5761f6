"""A proxy's pool: the single reports it holds for one epoch until it shuffles and forwards them.

The pool is where unlinkability is made (Minto et al. Sec. 3.1.2). Users' messages are split into
single reports as they arrive (the pool keeps flat arrays, not messages), and on release the whole pool
is permuted with the proxy's own generator before it is cut into batches. A uniformly random
permutation makes the server's view of a pool -- the sequence of reports over all its batches --
independent of which user sent which report and of the order in which the users' messages arrived:
every arrangement of the pool's reports is equally likely whatever the arrival order.

What a pool does not hide is the pool itself: the server can tell which batches came from one pool,
hence roughly when their senders reported. The pool, not the epoch, is the anonymity set; its number
of distinct users is what the shuffle-amplification bound may count (`accounting`). That is why a
proxy never releases a pool of fewer than ``min_users`` distinct users (`roles.ShuffleProxy`): a pool
that reaches its deadline short of them is held or dropped, never sent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ...network.party import Party


class Underfull(enum.Enum):
    """What a proxy does with a pool still short of ``min_users`` distinct users at its deadline."""

    HOLD = "hold"
    """Keep it: later reports of its epoch join it until it reaches ``min_users`` or its epoch ends."""
    DROP = "drop"
    """Discard its reports unreleased."""


class Fate(enum.Enum):
    """How a pool left its proxy."""

    RELEASED = "released"
    DROPPED = "dropped"


@dataclass(frozen=True)
class ClosedPool:
    """A pool that left its proxy: what the simulator records (the server never sees it).

    Attributes:
        epoch: The pool's epoch.
        users: Its distinct users; ``>= min_users`` whenever ``fate`` is `Fate.RELEASED`.
        reports: Its single reports.
        fate: Released to the server, or dropped unreleased.
        held: Whether it passed its deadline short of ``min_users`` and was held (`Underfull.HOLD`).
    """

    epoch: int
    users: int
    reports: int
    fate: Fate
    held: bool


class ReportPool:
    """The reports of one epoch held by one proxy, and the distinct users they came from.

    Args:
        epoch: The epoch every report in the pool belongs to (pools never mix epochs).
        deadline: The virtual time at which the proxy decides what to do with a pool that is still
            short of its ``min_users``: hold it or drop it.

    Attributes:
        held: Whether the pool passed its deadline short of ``min_users`` and was kept waiting.
    """

    __slots__ = ("epoch", "deadline", "held", "_indices", "_signs", "_senders", "_size")

    def __init__(self, epoch: int, deadline: float) -> None:
        self.epoch = epoch
        self.deadline = deadline
        self.held = False
        self._indices: list[np.ndarray] = []
        self._signs: list[np.ndarray] = []
        self._senders: set[Party] = set()
        self._size = 0

    @property
    def users(self) -> int:
        """How many distinct users' reports the pool holds."""
        return len(self._senders)

    @property
    def reports(self) -> int:
        return self._size

    def add(self, sender: Party, indices: np.ndarray, signs: np.ndarray) -> None:
        """Take one user's message apart into its single reports (``indices[r]``, ``signs[r]``)."""
        if indices.shape != signs.shape or indices.ndim != 1:
            raise ValueError(
                f"indices and signs must be equally long 1-D arrays, got {indices.shape} and {signs.shape}"
            )
        self._indices.append(indices)
        self._signs.append(signs)
        self._senders.add(sender)
        self._size += indices.size

    def release(self, rng: np.random.Generator, batch_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Shuffle every held report with ``rng`` and cut the result into batches of ``batch_size``.

        Returns:
            ``[(int32 indices, int8 signs), ...]``: consecutive slices of one uniformly random
            permutation of the pool; every batch but the last holds exactly ``batch_size`` reports.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not self._size:
            return []
        order = rng.permutation(self._size)
        indices = np.concatenate(self._indices).astype(np.int32, copy=False)[order]
        signs = np.concatenate(self._signs).astype(np.int8, copy=False)[order]
        return [
            (indices[start : start + batch_size], signs[start : start + batch_size])
            for start in range(0, self._size, batch_size)
        ]


__all__ = ["ClosedPool", "Fate", "ReportPool", "Underfull"]
