"""Seed derivation: every random stream of a run is spawned from the run's seed by a stable id.

A stream's generator depends only on ``(seed, stream, ids)``, never on the order in which generators
are created or on which trio task asks first. Nothing in fedrecsim draws from the ``random`` module or
the global ``np.random`` state.

The key of a stream is SHAKE-128 of the little-endian 64-bit words ``(seed, stream, *ids)``: distinct
keys give unrelated PCG64 states and increments (a cryptographic hash is at least as good a mixer as
numpy's `SeedSequence`). Deriving it directly costs a quarter of what a `SeedSequence` does -- which
matters because a run creates one generator per actor and per directed link, hundreds of thousands at
the scale of Hua et al.'s Netflix subset.
"""

from __future__ import annotations

import enum
import hashlib
import struct

import numpy as np
from numpy.random.bit_generator import ISeedSequence


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


class StreamKey:
    """The seed material of one stream: what `numpy.random.PCG64` asks a seed sequence for.

    Implements numpy's `ISeedSequence` interface (``generate_state``): the words are the SHAKE-128 output
    of the packed ``(seed, stream, *ids)``, so equal ids give equal states and any difference gives
    unrelated ones.
    """

    __slots__ = ("_material",)

    def __init__(self, seed: int, stream: int, ids: tuple[int, ...]) -> None:
        words = (int(seed), int(stream), *map(int, ids))
        if any(not 0 <= word < 1 << 64 for word in words):
            raise ValueError(f"seed and stream ids must be integers in [0, 2**64), got {words}")
        self._material = struct.pack(f"<{len(words)}Q", *words)

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
        """``n_words`` words of ``dtype`` (numpy's `ISeedSequence` contract)."""
        width = np.dtype(dtype).itemsize
        return np.frombuffer(hashlib.shake_128(self._material).digest(n_words * width), dtype=f"<u{width}").astype(dtype)


ISeedSequence.register(StreamKey)


def generator(seed: int, stream: Stream, *ids: int) -> np.random.Generator:
    """The generator of one owner: ``stream`` plus non-negative integer ids (e.g. role code and party index)."""
    return np.random.Generator(np.random.PCG64(StreamKey(seed, stream, ids)))
