"""The pseudorandom generator that expands a 32-byte seed into a mask in Z_{2^b}.

Choice (Bonawitz et al. 2017 only ask for a secure PRG): the ChaCha20 keystream keyed by the seed, with an
all-zero 16-byte nonce/counter block, read as little-endian unsigned b-bit words. ChaCha20 is a stream
cipher, so the keystream is a PRG; `cryptography` runs it at memory speed, and the same seed gives the
same mask on every platform. A fixed nonce is safe because every seed keys exactly one expansion: self-mask
seeds are fresh per user and session, pairwise seeds are derived per pair and session (`crypto`).

Invariant: ``expand(seed, n, dtype)`` is a pure function of its arguments; its words are uniform on
[0, 2^b) for a uniform seed.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

SEED_BYTES = 32
_NONCE = bytes(16)


def expand(seed: bytes, length: int, dtype: type[np.unsignedinteger]) -> np.ndarray:
    """``length`` pseudorandom words of ``dtype`` (np.uint32 or np.uint64) from a 32-byte ``seed``: a
    read-only view of the keystream where the machine is little-endian (no copy of a mask that may be
    m (m + 1) / 2 words long), a converted copy elsewhere.

    Raises:
        ValueError: a seed that is not 32 bytes, or a negative length.
    """
    if len(seed) != SEED_BYTES:
        raise ValueError(f"a PRG seed is {SEED_BYTES} bytes, got {len(seed)}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    word = np.dtype(dtype).newbyteorder("<")
    encryptor = Cipher(algorithms.ChaCha20(seed, _NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(length * word.itemsize))
    return np.frombuffer(stream, dtype=word).astype(dtype, copy=False)


__all__ = ["SEED_BYTES", "expand"]
