"""Seed derivation: every random stream of a run is spawned from the run's seed by a stable id.

A stream's generator depends only on ``(seed, stream, ids)``, never on the order in which generators
are created or on which trio task asks first. Nothing in fedrecsim draws from the ``random`` module or
the global ``np.random`` state.
"""

from __future__ import annotations

import enum

import numpy as np


class Stream(enum.IntEnum):
    """Owners of random streams. Values are part of the seed derivation: never renumber them."""

    ACTOR = 1
    LINK = 2
    AVAILABILITY = 3
    DROPOUT = 4
    STRAGGLER = 5
    DATA = 6
    PROTOCOL = 7
    EVALUATION = 8


def generator(seed: int, stream: Stream, *ids: int) -> np.random.Generator:
    """The generator of one owner: ``stream`` plus integer ids (e.g. role code and party index)."""
    sequence = np.random.SeedSequence(entropy=seed, spawn_key=(int(stream), *map(int, ids)))
    return np.random.Generator(np.random.PCG64(sequence))
